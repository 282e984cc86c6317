"""Fixtures of the multi-host test: two hosts (network namespaces h1 and h2 on veth links), the
primary's own PostgreSQL and Redis listening on the links, and per test a fresh database, a
Redis database, a beat on the primary and real Celery workers inside the hosts.

Everything is torn down by finalizers in reverse order however a test ends: processes (by
process group), the links put back up, the servers stopped, the namespaces and links removed.
The test skips, saying why, where namespaces cannot be made (not root, no iproute2, a container
without CAP_SYS_ADMIN / CAP_NET_ADMIN).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.devstack import procfile_commands
from tests.conftest import ROOT
from tests.multihost.cluster import IDLE_IN_TRANSACTION_SECONDS, Cluster
from tests.multihost.network import Host, Network, unavailable

TEMPLATE_DB = "canon_multihost_template"
# Short leases so that expiry, the sweep and the takeover happen within seconds.
LEASE_TTL = "2"
_databases = itertools.count(1)


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    reason = unavailable()
    if reason:
        pytest.skip(f"multi-host test: {reason}")
    net = Network.create(["h1", "h2"])
    try:
        yield net
    finally:
        net.close()


@pytest.fixture(scope="module")
def cluster(network: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """PostgreSQL and Redis on loopback and on the primary's end of each link, and a migrated
    template database that each test copies. PostgreSQL's log is kept in a `multihost-logs`
    directory of the session's temporary directory."""
    servers = Cluster(
        addresses=network.server_addresses(), log_dir=tmp_path_factory.mktemp("multihost-logs")
    )
    try:
        servers.start()
        servers.psql(f'CREATE DATABASE "{TEMPLATE_DB}"')
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v", "0"],
            cwd=ROOT,
            env=_env(DATABASE_URL=servers.database_url(TEMPLATE_DB)),
            check=True,
            timeout=300,
        )
        yield servers
    finally:
        servers.close()


def _env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="config.settings")
    env.update(overrides)
    return env


class Process:
    """A Procfile process (worker or beat), on the primary or inside a host, logging to a file;
    in its own process group so that stopping it stops its pool children too."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, ready: str) -> None:
        self.log_path = log_path
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.ready = ready

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while self.ready not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.log_path.name} did not start:\n{self.log()[-4000:]}")
            time.sleep(0.1)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int, *, group: bool = True) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if group:
                    os.killpg(self.proc.pid, sig)
                else:
                    os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 8.0) -> None:
        stop_all([self], timeout)


def stop_all(processes: list[Process], timeout: float = 8.0) -> None:
    """Stop processes together: SIGCONT to each process group (a paused pool child must be able
    to finish), SIGTERM to each main process (Celery's warm shutdown stops its own children),
    and SIGKILL to the groups still running after `timeout` seconds."""
    for proc in processes:
        proc.signal(signal.SIGCONT)
        proc.signal(signal.SIGTERM, group=False)
    deadline = time.monotonic() + timeout
    for proc in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.proc.wait(max(0.1, deadline - time.monotonic()))
        if proc.proc.poll() is None:
            proc.signal(signal.SIGKILL)
            proc.proc.wait(10)


@dataclass
class Site:
    """One test's world: its database and Redis database on the cluster, its processes."""

    cluster: Cluster
    network: Network
    database: str
    redis_db: int
    tmp_path: Path
    processes: list[Process] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    bucket: dict[str, str] = field(default_factory=dict)  # the S3 environment, at 127.0.0.1

    def note(self, message: str) -> None:
        """A timestamped step, in the test's captured output (shown when it fails)."""
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)

    @property
    def hosts(self) -> dict[str, Host]:
        return self.network.hosts

    @property
    def storage_root(self) -> Path:
        return self.cluster.storage_root / self.database

    def env(self, address: str = "127.0.0.1", **extra: str) -> dict[str, str]:
        """The environment of a Canon process that reaches the servers at `address`."""
        return _env(
            DATABASE_URL=self.cluster.database_url(self.database, address),
            REDIS_URL=self.cluster.redis_url(self.redis_db, address),
            CANON_STORAGE_ROOT=str(self.storage_root),
            CANON_QUEUE="canon",
            CANON_LEASE_TTL_SECONDS=LEASE_TTL,
            # Canon sets the idle-in-transaction timeout on each session (it overrides the
            # cluster's): the test's, so a host cut off inside the switch is ended in seconds.
            CANON_DB_IDLE_IN_TRANSACTION_SECONDS=IDLE_IN_TRANSACTION_SECONDS,
            CANON_WORKER_CONCURRENCY="1",
            CANON_RELAY_INTERVAL_SECONDS="0.5",
            CANON_SWEEP_INTERVAL_SECONDS="1",
            # Beat runs these once at its start, then not again during a test.
            CANON_RECONCILE_INTERVAL_SECONDS="3600",
            CANON_GC_INTERVAL_SECONDS="3600",
            # with a bucket, the hosts reach the S3 server through their link, as the others
            **{k: v.replace("127.0.0.1", address) for k, v in self.bucket.items()},
            **extra,
        )

    def beat(self) -> Process:
        """Beat on the primary (the Procfile's command): it schedules the relay and the sweeper,
        which the hosts' workers run."""
        proc = Process(
            procfile_commands()["beat"],
            self.env(),
            self.tmp_path / "beat.log",
            ready="beat: Starting",
        )
        self.processes.append(proc)
        return proc

    def worker(self, host: Host, **extra_env: str) -> Process:
        """The Procfile's worker command inside `host`, reaching PostgreSQL and Redis at the
        primary's end of the host's link."""
        proc = Process(
            host.argv(procfile_commands()["worker"]),
            self.env(host.server_address, **extra_env),
            self.tmp_path / f"worker-{host.name}.log",
            ready=" ready.",
        )
        self.processes.append(proc)
        return proc

    def driver(self, *args: str) -> Any:
        """Run tests.multihost.driver on the primary; its JSON answer."""
        done = subprocess.run(
            [sys.executable, "-m", "tests.multihost.driver", *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"driver {args} failed:\n{done.stdout}\n{done.stderr}")
        return json.loads(done.stdout)

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def query(
        self, sql: str, params: list[Any] | dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """A read on the primary, outside Django (the test process's Django is on another
        database)."""
        import psycopg

        with psycopg.connect(self.cluster.database_url(self.database), autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def wait(self, condition: Callable[[], Any], *, what: str, timeout: float = 45.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                self.note(what)
                return value
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.log_path.name}\n{p.log()[-3000:]}" for p in self.processes
                )
                pytest.fail(f"timed out after {timeout}s waiting for {what}\n{logs}")
            time.sleep(0.1)

    def close(self) -> None:
        """The test is over: its processes are killed (SIGKILL to each process group, a paused
        child with them) rather than stopped gently, which only made the test wait."""
        for proc in self.processes:
            proc.signal(signal.SIGKILL)
        for proc in self.processes:
            with contextlib.suppress(Exception):
                proc.proc.wait(10)
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                host.restore()


@pytest.fixture(scope="module")
def bucket_server() -> Iterator[Any]:
    """A moto S3 server listening on every address, so the hosts reach it over their links."""
    from tests.s3server import S3Server

    server = S3Server(ip_address="0.0.0.0")  # noqa: S104 (the test's own namespaces)
    yield server
    server.stop()


@pytest.fixture(params=["local", "s3"])
def site(
    cluster: Cluster,
    network: Network,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Site]:
    """One test's world; its stored files in a directory every host shares, or in a bucket."""
    number = next(_databases)
    database = f"canon_multihost_{number}"
    cluster.psql(f'CREATE DATABASE "{database}" TEMPLATE "{TEMPLATE_DB}"')
    world = Site(
        cluster=cluster, network=network, database=database, redis_db=number, tmp_path=tmp_path
    )
    world.storage_root.mkdir()
    if request.param == "s3":
        server = request.getfixturevalue("bucket_server")
        world.bucket = server.environment(server.new_bucket())
    try:
        yield world
    finally:
        world.close()
