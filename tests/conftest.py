"""Shared fixtures. Integration tests run real Celery worker processes against the same
PostgreSQL test database and Redis the test process uses, on a queue of their own."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import translation

from config.celery import app as celery_app
from devtools.devstack import celery_worker_argv
from ingestion.relay import outbox_relay_batch
from kb.models import KnowledgeBase, Tenant, TenantMembership
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def _redis_database_per_xdist_worker() -> None:
    """Under pytest-xdist (`make test` runs two workers), each worker uses a Redis database of
    its own, as pytest-django gives it a test database of its own: caches, rate limits, breakers
    and beat's locks key on ids that both workers' databases reuse. The settings are read before
    this module is imported but not used yet (Celery and the cache connect on first use), and
    the processes the tests start inherit the environment."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    url = urlsplit(settings.REDIS_URL)
    if not worker or url.scheme not in ("redis", "rediss"):  # a socket URL names its db apart
        return
    url = url._replace(path=f"/{1 + int(worker.removeprefix('gw'))}")
    settings.REDIS_URL = settings.CELERY_BROKER_URL = os.environ["REDIS_URL"] = urlunsplit(url)
    if "CANON_CACHE_URL" not in os.environ:
        settings.CACHES["default"]["LOCATION"] = settings.REDIS_URL


_redis_database_per_xdist_worker()


@pytest.fixture(autouse=True)
def _storage(settings: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each test session stores files under its own temporary root."""
    settings.STORAGE_ROOT = tmp_path_factory.getbasetemp() / "storage"
    # Pages render without collectstatic's manifest (Django's advice for tests); the manifest
    # storage itself is exercised by tests/test_production.py against a real server.
    settings.STATIC_ROOT = tmp_path_factory.getbasetemp() / "static"
    settings.STATIC_ROOT.mkdir(exist_ok=True)
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@contextmanager
def shared_data(
    django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory, build: Callable[[], T]
) -> Iterator[T]:
    """For a module- or package-scoped fixture: `build()` the data its tests share, once, outside
    any test's transaction (so it is committed and servers' own connections see it, as with
    transactional_db; files under the session's storage root, as `_storage` puts them). The
    tests must only read it; mark them `django_db`, so that their own writes roll back. When
    the scope ends the tables are flushed and what they held before is put back (the roles the
    migrations made, say), as a serialized_rollback test does: the tests that follow find the
    database as they would have."""
    with django_db_blocker.unblock():
        before = connection.creation.serialize_db_to_string()
    try:
        with (
            django_db_blocker.unblock(),
            override_settings(STORAGE_ROOT=tmp_path_factory.getbasetemp() / "storage"),
        ):
            data = build()
        yield data
    finally:
        with django_db_blocker.unblock():
            # Sequences go on (as a transactional test's flush leaves them): an id is never
            # reused, so what lives outside the tables and is named by an id (a version's
            # HNSW index, kb/ann.py) can never be taken for a later test's.
            call_command(
                "flush",
                verbosity=0,
                interactive=False,
                inhibit_post_migrate=True,
                reset_sequences=False,
            )
            connection.creation.deserialize_db_from_string(before)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's, and before its test databases are dropped, search's snapshot readers'
    connections closed (`retrieval.search.shared_snapshot`): open, they would keep them."""
    yield
    from retrieval.search.shared_snapshot import close_readers

    close_readers()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """One moto S3 server for the session (tests/s3server.py)."""
    from tests.s3server import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3_storage(s3_server: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Store this test's files in a new bucket of the moto server: the settings of this process
    and the environment its worker and command subprocesses inherit. Returns that environment."""
    env = s3_server.environment(s3_server.new_bucket())
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings.STORAGE_URL = env["CANON_STORAGE_URL"]
    settings.S3_ADDRESSING_STYLE = "path"
    settings.S3_CONNECT_TIMEOUT_SECONDS = 1.0
    settings.S3_READ_TIMEOUT_SECONDS = 5.0
    settings.S3_MAX_ATTEMPTS = 2
    return env


@pytest.fixture(params=["local", "s3"])
def storage_backend(request: pytest.FixtureRequest) -> str:
    """Run a test on both storage backends: the directory and a moto bucket."""
    if request.param == "s3":
        request.getfixturevalue("s3_storage")
    return str(request.param)


@pytest.fixture(autouse=True)
def _language_reset() -> Iterator[None]:
    """Each test starts and ends in the default language: the admin's locale middleware leaves
    the language of a request in Chinese active in the thread after it (as Django's does), and
    a later test of the same worker would read Chinese words where it expects English."""
    translation.activate(settings.LANGUAGE_CODE)
    yield
    translation.activate(settings.LANGUAGE_CODE)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """Users made in tests get cheap password hashes (tests/helpers.py)."""
    settings.PASSWORD_HASHERS = [
        "tests.helpers.FastPBKDF2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


@pytest.fixture
def tenant(db: None) -> Tenant:
    return Tenant.objects.create(name="Acme", slug="acme")


@pytest.fixture
def kb(tenant: Tenant) -> KnowledgeBase:
    return knowledge_base_create(tenant=tenant, name="Handbook", slug="handbook")


@pytest.fixture
def approval_kb(kb: KnowledgeBase) -> KnowledgeBase:
    """The knowledge base, its new builds waiting for an index admin's approval."""
    kb.require_approval = True
    kb.save()
    return kb


@pytest.fixture
def admin_user(tenant: Tenant) -> User:
    user = User.objects.create_superuser("root", "", "a-long-test-password")
    TenantMembership.objects.create(user=user, tenant=tenant)
    return user


@pytest.fixture
def api_key(tenant: Tenant) -> str:
    _, plaintext = api_key_create(tenant=tenant, name="test key")
    return plaintext


def database_url() -> str:
    """The URL of the database this test process uses (the test database)."""
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgresql://{auth}@{s['HOST']}:{s['PORT'] or 5432}/{s['NAME']}"


class Worker:
    """A real `celery worker` process on a private queue."""

    def __init__(self, queue: str, log_path: Path, env: dict[str, str], pool: str) -> None:
        self.queue = queue
        self.log_path = log_path
        self.proc = subprocess.Popen(
            celery_worker_argv(queue=queue, pool=pool),
            cwd=ROOT,
            env=env,
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while "ready." not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group: the worker and its pool children."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def wait_exit(self, timeout: float = 60.0) -> int:
        """Wait for the worker to die on its own (a crash switch); return its exit code."""
        return self.proc.wait(timeout)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def worker_factory(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start real worker processes; every message this test sends goes to their queue."""
    queue = f"test-{uuid.uuid4().hex[:10]}"
    previous_queue = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = queue
    workers: list[Worker] = []

    def start(pool: str = "prefork", **extra_env: str) -> Worker:
        """`pool="solo"` runs tasks in the worker process itself, so a crash switch kills the
        whole worker (as a lost machine would); prefork restarts a crashed child."""
        env = dict(os.environ)
        env.update(
            DATABASE_URL=database_url(),
            REDIS_URL=settings.CELERY_BROKER_URL,
            CANON_QUEUE=queue,
            CANON_STORAGE_ROOT=str(settings.STORAGE_ROOT),
            CANON_LEASE_TTL_SECONDS=str(settings.LEASE_TTL_SECONDS),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra_env)
        worker = Worker(queue, tmp_path / f"worker-{len(workers)}.log", env, pool)
        workers.append(worker)
        return worker

    yield start
    # The test is over: SIGKILL, at once. A warm shutdown would first finish whatever task a
    # worker still runs and then linger about a second in Celery's shutdown, for nothing the
    # test asserts; killed, its connections end and its transactions roll back before the
    # tables are flushed. (Tests that look at how a worker stops call `stop` themselves.)
    for worker in workers:
        worker.kill()
    celery_app.conf.task_default_queue = previous_queue
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue)


def wait_for(
    condition: Callable[[], Any], *, timeout: float = 60.0, relay: bool = True, what: str = ""
) -> Any:
    """Poll until `condition()` is truthy, running the outbox relay in between (the beat's job
    in production); fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        if relay:
            outbox_relay_batch()
        time.sleep(0.2)


@pytest.fixture
def steady_rate_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read and write budgets count in fixed windows (a minute for "1/min"): requests
    either side of a window's end would each get a budget of their own. A test that spends a
    budget asks for this to make every request of it fall 10 s into one window."""
    from types import SimpleNamespace

    from retrieval.api import throttling

    monkeypatch.setattr(throttling, "time", SimpleNamespace(time=lambda: 60 * 16_667 + 10.0))
