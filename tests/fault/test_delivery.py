"""Fault matrix rows F-A2, F-S1 and F-R1: the path from the outbox to the broker.

Real processes throughout: Celery workers, `canon_relay` and `canon_sweep` in their own
processes, a Redis server the test stops and starts again. A concurrent searcher checks every
result set; every experiment ends converged, with kb_verify clean.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from django.db.models.functions import Now
from psycopg import sql

from config.celery import app as celery_app
from devtools.devstack import start_redis
from ingestion.relay import outbox_relay_batch
from ingestion.sweeper import lease_sweep
from kb.models import Build, Chunk, Document, KnowledgeBase, PublicationEvent
from tests.conftest import Worker, database_url, wait_for
from tests.fault.harness import (
    FAULT_LEASE_TTL,
    Searcher,
    assert_verified,
    converge,
    live_revision,
    manage_subprocess,
    paragraphs,
    pending_tasks,
    run_with_searcher,
    upload,
)
from work import outbox
from work.leases import task_claim
from work.models import AuditEvent, IngestionTask, OutboxEvent

pytestmark = pytest.mark.integration

WORKER_ENV = {"CANON_LEASE_TTL_SECONDS": FAULT_LEASE_TTL, "CANON_CHUNK_WRITE_BATCH": "5"}

# How long a child process may take to start Django and finish a short job on a loaded 2-core
# machine. Reaching it means the process is stuck, not slow.
PROCESS_BOUND = 90.0
# How long a started process may take for a handful of uploads or sends. Each takes
# milliseconds; a send that waits on a dead broker instead of failing blows through this.
WORK_BOUND = 20.0

RECEIVED = re.compile(r"Task ingestion\.tasks\.run_task\[([0-9a-f-]+)\] received")
OUTCOME = re.compile(r"Task ingestion\.tasks\.run_task\[([0-9a-f-]+)\] succeeded in \S+: '(\w+)'")


# --- processes -----------------------------------------------------------------------------


class Child:
    """A `manage.py` process of this test whose output is read while it runs."""

    def __init__(self, proc: subprocess.Popen[bytes], name: str) -> None:
        self.proc = proc
        self.name = name
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"read-{name}")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._lock:
                self._lines.append(raw.decode(errors="replace"))

    @property
    def output(self) -> str:
        with self._lock:
            return "".join(self._lines)

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def sent(self) -> int:
        """How many events a `canon_relay` process reported sending so far."""
        return sum(int(n) for n in re.findall(r"^sent (\d+)$", self.output, flags=re.MULTILINE))

    def wait_output(self, text: str, *, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{what}: no {text!r} from {self.name} after {timeout}s\n{self.output}")
            time.sleep(0.05)

    def finish(self, timeout: float = PROCESS_BOUND) -> int:
        """Wait for the process to exit on its own; kill it and fail if it does not."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.name} was still running after {timeout}s\n{self.output}")
        self._reader.join(10)
        return code

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.finish()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)


@pytest.fixture
def spawn(transactional_db: None) -> Iterator[Callable[..., Child]]:
    """Start `manage.py` processes; any still running when the test ends is killed (before the
    test database is flushed)."""
    children: list[Child] = []

    def start(*args: str, name: str, env: dict[str, str], code: str | None = None) -> Child:
        child = Child(manage_subprocess(*args, env=env, code=code), name)
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()


@pytest.fixture
def searching(transactional_db: None) -> Iterator[Callable[[KnowledgeBase, list[str]], Searcher]]:
    """Start concurrent searchers; they stop when the test ends, even when it fails."""
    searchers: list[Searcher] = []

    def start(kb: KnowledgeBase, queries: list[str]) -> Searcher:
        searcher = run_with_searcher(kb, queries)
        searchers.append(searcher)
        return searcher

    yield start
    for searcher in searchers:
        searcher.stop()


@pytest.fixture
def no_nudge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Uploads in the test process send nothing on commit: only the relays under test send."""
    monkeypatch.setattr(outbox, "relay_nudge", lambda: None)


def broker_env(broker_url: str) -> dict[str, str]:
    """What a child process needs to publish to this test's workers: their broker and their
    private queue (`worker_factory` sets it on the test process's Celery app)."""
    return {"REDIS_URL": broker_url, "CANON_QUEUE": str(celery_app.conf.task_default_queue)}


# --- observations --------------------------------------------------------------------------


def run_task_outcomes(worker: Worker) -> list[str]:
    """What each `run_task` delivery returned, in order ('published', 'not_claimed', ...)."""
    return [outcome for _, outcome in OUTCOME.findall(worker.log())]


def run_task_deliveries(worker: Worker) -> int:
    return len(RECEIVED.findall(worker.log()))


def queued_run_tasks(broker_url: str, queue: str) -> Counter[int]:
    """Task ids of the `run_task` messages waiting in a queue (kombu's Redis message format)."""
    found: Counter[int] = Counter()
    for raw in redis.Redis.from_url(broker_url).lrange(queue, 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] != "ingestion.tasks.run_task":
            continue
        assert message["properties"]["body_encoding"] == "base64"
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        found[args[0]] += 1
    return found


@contextlib.contextmanager
def start_line(table: str) -> Iterator[None]:
    """Hold an ACCESS EXCLUSIVE lock on `table` from a connection of its own. Processes that
    reach their first statement on the table wait there, and all go at once on release."""
    with psycopg.connect(database_url()) as conn:
        conn.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table))
        )
        yield
        conn.rollback()


def waiting_on(table: str) -> int:
    """Sessions of the test database waiting for a lock in a statement on `table`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            [f"%{table}%"],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def settle(condition: Callable[[], Any], *, what: str) -> None:
    """`converge` (beat's relay and sweeper in this process); a failure also shows failed sends."""
    try:
        converge(condition, what=what)
    except pytest.fail.Exception as failure:
        failed = list(
            OutboxEvent.objects.exclude(last_error="").values_list("pk", "attempts", "last_error")
        )
        pytest.fail(f"{failure}\nfailed sends: {failed[:5]}")


def build_of(document: Document, revision: int) -> Build:
    builds = list(Build.objects.filter(document=document, revision__number=revision))
    assert len(builds) == 1, f"{document.key} r{revision} has builds {builds}"
    return builds[0]


def assert_one_complete_live_set(document: Document, revision: int) -> Build:
    """The revision has one build; it is live with exactly its expected chunks, published once."""
    build = build_of(document, revision)
    assert build.state == Build.State.LIVE
    assert build.expected_chunk_count
    assert Chunk.objects.filter(build=build).count() == build.expected_chunk_count
    assert PublicationEvent.objects.filter(build=build).count() == 1
    return build


# --- a Redis of the test's own ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A Redis server the test may stop and start again on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = start_redis(self.port, self.workdir)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def answers(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url, socket_connect_timeout=1).ping())
        except redis.ConnectionError:
            return False


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


# --- F-A2 ----------------------------------------------------------------------------------


def test_f_a2_relay_dies_after_the_send_before_marking_it(
    no_nudge: None,
    worker_factory: Any,
    spawn: Callable[..., Child],
    searching: Callable[[KnowledgeBase, list[str]], Searcher],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    markers = tmp_path / "markers"
    worker = worker_factory(pool="solo", **WORKER_ENV)
    document = upload(kb, "a2", paragraphs("alpha"))
    settle(lambda: live_revision(document) == 1, what="revision 1 live")
    searcher = searching(kb, ["alpha paragraph 2", "beta paragraph 2", "paragraph"])

    # given revision 2, whose event only the relay process under test sends
    upload(kb, "a2", paragraphs("beta"))
    task = IngestionTask.objects.get(build=build_of(document, 2))
    event = OutboxEvent.objects.get(task=task)
    assert event.published_at is None

    # when the relay process dies right after the broker accepted the message
    relay = spawn(
        "canon_relay",
        name="relay with the crash switch",
        env={
            "CANON_FAULT_RELAY_AFTER_SEND": "1",
            "CANON_FAULT_MARKER_DIR": str(markers),
            **broker_env(settings.CELERY_BROKER_URL),
        },
    )
    assert relay.finish() == 137, relay.output
    assert list(markers.glob("relay_after_send.*")), relay.output

    # then the worker still gets that message and revision 2 goes live, while the event stays
    # unpublished: its mark died with the relay (no relay has run since)
    wait_for(
        lambda: live_revision(document) == 2 and pending_tasks() == 0,
        relay=False,
        what="the crashed relay's message to make revision 2 live",
    )
    event.refresh_from_db()
    assert (event.published_at, event.attempts) == (None, 0)
    assert run_task_outcomes(worker) == ["published", "published"]

    # and when the normal relay runs, it sends the event again; the second delivery is a no-op
    settle(
        lambda: (
            OutboxEvent.objects.filter(pk=event.pk, published_at__isnull=False).exists()
            and len(run_task_outcomes(worker)) == 3
        ),
        what="the event sent again and its second delivery handled",
    )
    searcher.stop()
    searcher.assert_clean()
    assert searcher.seen["a2"] == {1, 2}
    assert run_task_deliveries(worker) == 3
    assert run_task_outcomes(worker) == ["published", "published", "not_claimed"]
    event.refresh_from_db()
    assert (event.attempts, event.dead_at) == (1, None)
    assert OutboxEvent.objects.filter(task=task).count() == 1
    task.refresh_from_db()
    assert (task.status, task.attempt) == (IngestionTask.Status.SUCCEEDED, 1)
    stages = {s.stage: s.attempts for s in task.stage_results.all()}
    assert stages == {"parse": 1, "chunk": 1, "embed": 1, "write": 1}
    assert live_revision(document) == 2
    live = assert_one_complete_live_set(document, 2)
    old = build_of(document, 1)
    assert old.state == Build.State.SUPERSEDED
    assert live.expected_chunk_count and old.expected_chunk_count
    assert Chunk.objects.filter(document=document).count() == (
        live.expected_chunk_count + old.expected_chunk_count
    )
    assert_verified()


# --- F-S1 ----------------------------------------------------------------------------------


def test_f_s1_two_relays_at_once_publish_every_event_exactly_once(
    no_nudge: None,
    worker_factory: Any,
    spawn: Callable[..., Child],
    searching: Callable[[KnowledgeBase, list[str]], Searcher],
    kb: KnowledgeBase,
) -> None:
    queue = str(celery_app.conf.task_default_queue)
    broker = settings.CELERY_BROKER_URL
    # given 40 uploads whose events nobody has sent
    for i in range(40):
        upload(kb, f"s1-{i:02d}", paragraphs(f"s1-{i:02d}", n=2, words=20))
    task_ids = set(IngestionTask.objects.values_list("id", flat=True))
    assert len(task_ids) == 40
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == 40

    # when two relay processes, two events per pass, start sending at the same moment
    env = {**broker_env(broker), "CANON_RELAY_BATCH_SIZE": "2"}
    with start_line("ingestion_outboxevent"):
        relays = [
            spawn("canon_relay", "--loop", "--interval", "0.01", name=f"relay {i}", env=env)
            for i in range(2)
        ]
        wait_for(
            lambda: waiting_on("ingestion_outboxevent") == 2,
            relay=False,
            timeout=PROCESS_BOUND,
            what="both relays at the start line",
        )
    wait_for(
        lambda: sum(r.sent() for r in relays) >= 40,
        relay=False,
        timeout=WORK_BOUND,
        what="the two relays to send every event",
    )
    for relay in relays:
        relay.terminate()

    # then both relays sent, together exactly once per event, and the broker holds exactly one
    # message per task
    assert [r.sent() > 0 for r in relays] == [True, True], [r.output for r in relays]
    assert sum(r.sent() for r in relays) == 40
    assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()
    assert list(OutboxEvent.objects.values_list("attempts", flat=True).distinct()) == [1]
    assert queued_run_tasks(broker, queue) == Counter(dict.fromkeys(task_ids, 1))

    # and when a worker consumes them, each task runs once and every document goes live
    searcher = searching(kb, ["s1-01 paragraph 1", "paragraph", "s1-39word0x3"])
    worker = worker_factory(pool="solo", **WORKER_ENV)
    wait_for(lambda: pending_tasks() == 0, relay=False, what="the worker to run all 40 tasks")
    searcher.stop()
    searcher.assert_clean()
    assert run_task_deliveries(worker) == 40
    assert run_task_outcomes(worker) == ["published"] * 40
    assert list(IngestionTask.objects.values_list("status", "attempt").distinct()) == [
        (IngestionTask.Status.SUCCEEDED, 1)
    ]
    for document in Document.objects.filter(kb=kb):
        assert live_revision(document) == 1
        assert_one_complete_live_set(document, 1)
    assert OutboxEvent.objects.count() == 40
    assert_verified()


def test_f_s1_two_sweepers_at_once_requeue_each_expired_task_once(
    no_nudge: None,
    worker_factory: Any,
    spawn: Callable[..., Child],
    searching: Callable[[KnowledgeBase, list[str]], Searcher],
    kb: KnowledgeBase,
) -> None:
    keys = ["sw-0", "sw-1", "sw-2", "sw-3"]
    # The worker keeps the default (long) lease, so only the simulated crashes expire.
    worker = worker_factory(pool="solo", CANON_CHUNK_WRITE_BATCH="5")
    for key in keys:
        upload(kb, key, paragraphs(f"alpha {key}", n=4))
    settle(
        lambda: Build.objects.filter(state=Build.State.LIVE).count() == 4, what="revision 1 live"
    )
    searcher = searching(kb, ["alpha paragraph 1", "beta paragraph 1", "paragraph"])

    # given revision 2 of each document, delivered to workers that claimed it and died: the tasks
    # are running and their leases have run out
    for key in keys:
        upload(kb, key, paragraphs(f"beta {key}", n=4))
    delivered: list[int] = []
    assert outbox_relay_batch(send=lambda e: delivered.append(e.payload["task_id"])) == 4
    crashed = list(IngestionTask.objects.filter(status=IngestionTask.Status.QUEUED))
    assert sorted(delivered) == sorted(t.pk for t in crashed) and len(crashed) == 4
    for task in crashed:
        assert task_claim(task_id=task.pk, owner=f"crashed-{task.pk}", ttl=0.5) is not None
    wait_for(
        lambda: (
            IngestionTask.objects.filter(
                status=IngestionTask.Status.RUNNING, lease_expires_at__lt=Now()
            ).count()
            == 4
        ),
        relay=False,
        what="the crashed workers' leases to run out",
    )

    # when two sweeper processes run at once: both start, and go on together from the point where
    # at least one is mid-sweep (stopped at the start line) and the other is there too or done
    env = broker_env(settings.CELERY_BROKER_URL)
    with start_line("ingestion_ingestiontask"):
        sweepers = [spawn("canon_sweep", name=f"sweeper {i}", env=env) for i in range(2)]

        def both_in() -> bool:
            waiting = waiting_on("ingestion_ingestiontask")
            done = sum(s.returncode is not None for s in sweepers)
            return waiting >= 1 and waiting + done == 2

        wait_for(
            both_in,
            relay=False,
            timeout=PROCESS_BOUND,
            what="one sweeper mid-sweep at the start line while the other is there or done",
        )
    assert [s.finish() for s in sweepers] == [0, 0], [s.output for s in sweepers]

    # then the two together handled each task once (the sweeper's singleton lock gives all four
    # to one of them): per task one new outbox event and one audit event
    handled = [int(n) for s in sweepers for n in re.findall(r"handled (\d+)", s.output)]
    assert len(handled) == 2 and sum(handled) == 4, [s.output for s in sweepers]
    for task in crashed:
        assert OutboxEvent.objects.filter(task=task).count() == 2
        audits = list(AuditEvent.objects.filter(kind="lease_expired", subject_id=task.pk))
        assert [(a.action, a.attempts, a.details["lease_owner"]) for a in audits] == [
            ("requeued", 1, f"crashed-{task.pk}")
        ]

    # and a third sweep changes nothing
    counts = (OutboxEvent.objects.count(), AuditEvent.objects.count())
    assert lease_sweep() == 0
    assert (OutboxEvent.objects.count(), AuditEvent.objects.count()) == counts

    # and the requeued tasks run once more, and revision 2 goes live everywhere
    settle(
        lambda: all(live_revision(d) == 2 for d in Document.objects.filter(kb=kb)),
        what="revision 2 live everywhere",
    )
    searcher.stop()
    searcher.assert_clean()
    for document in Document.objects.filter(kb=kb):
        assert {1} <= searcher.seen[document.key]
        assert_one_complete_live_set(document, 2)
    for task in crashed:
        task.refresh_from_db()
        assert (task.status, task.attempt) == (IngestionTask.Status.SUCCEEDED, 2)
        assert OutboxEvent.objects.filter(task=task).count() == 2
    assert AuditEvent.objects.filter(kind="lease_expired").count() == 4
    assert run_task_outcomes(worker) == ["published"] * 8
    assert_verified()


# --- F-R1 ----------------------------------------------------------------------------------


def test_f_r1_redis_down_during_uploads(
    private_redis: RedisServer,
    no_nudge: None,
    worker_factory: Any,
    spawn: Callable[..., Child],
    searching: Callable[[KnowledgeBase, list[str]], Searcher],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    env = broker_env(private_redis.url)
    old_keys, new_keys = ["r1-0", "r1-1"], ["r1-2", "r1-3", "r1-4", "r1-5"]
    go = tmp_path / "go"
    # A relay that runs through the whole experiment, and an uploader that waits for `go`; both
    # publish to the private Redis, as the web process and a relay would in production.
    relay = spawn("canon_relay", "--loop", "--interval", "0.2", name="relay loop", env=env)
    uploader = spawn(
        name="uploader",
        env=env,
        code="\n".join(
            [
                "import time",
                "from pathlib import Path",
                "from kb.models import KnowledgeBase",
                "from tests.fault.harness import paragraphs, upload",
                f"kb = KnowledgeBase.objects.get(pk={kb.pk})",
                "print('ready', flush=True)",
                f"while not Path({str(go)!r}).exists():",
                "    time.sleep(0.05)",
                f"for key in {old_keys + new_keys!r}:",
                "    upload(kb, key, paragraphs(f'beta {key}', n=4))",
                "print('uploads done', flush=True)",
            ]
        ),
    )
    worker = worker_factory(pool="solo", REDIS_URL=private_redis.url, **WORKER_ENV)
    for key in old_keys:
        upload(kb, key, paragraphs(f"alpha {key}", n=4))
    wait_for(
        lambda: Build.objects.filter(state=Build.State.LIVE).count() == 2,
        relay=False,
        timeout=PROCESS_BOUND,
        what="revision 1 of both documents live through the private Redis",
    )
    searcher = searching(kb, ["alpha paragraph 1", "beta paragraph 1", "paragraph"])
    events_before = set(OutboxEvent.objects.values_list("pk", flat=True))

    # given Redis is down
    private_redis.stop()
    assert not private_redis.answers()

    # when two revisions and four new documents are uploaded by a process whose broker it is
    uploader.wait_output("ready", timeout=PROCESS_BOUND, what="the uploader to start")
    go.touch()
    uploader.wait_output(
        "uploads done",
        timeout=WORK_BOUND,
        what="six uploads while Redis is down (does each upload's on_commit relay nudge wait "
        "on the dead broker instead of failing at once?)",
    )

    # then every upload succeeded; its nudge failed, and the outbox holds the intent
    assert uploader.finish() == 0, uploader.output
    assert uploader.output.count("relay nudge not sent") == 6, uploader.output
    documents = {d.key: d for d in Document.objects.filter(kb=kb)}
    assert sorted(documents) == old_keys + new_keys
    outage_ids = list(
        OutboxEvent.objects.exclude(pk__in=events_before).values_list("pk", flat=True)
    )
    assert len(outage_ids) == 6

    def outage_events() -> QuerySet[OutboxEvent]:
        return OutboxEvent.objects.filter(pk__in=outage_ids)

    # and the relay records each failed send and backs off; nothing is dead-lettered
    wait_for(
        lambda: not outage_events().filter(attempts__lt=2).exists(),
        relay=False,
        timeout=WORK_BOUND,
        what="two failed sends of every event while Redis is down (does a send wait on the "
        "dead broker instead of failing at once?)",
    )
    for event in outage_events():
        assert (event.published_at, event.dead_at) == (None, None)
        assert 2 <= event.attempts < settings.RELAY_MAX_ATTEMPTS
        assert f"127.0.0.1:{private_redis.port}" in event.last_error, event.last_error
    assert {key: live_revision(d) for key, d in documents.items()} == {
        "r1-0": 1,
        "r1-1": 1,
        "r1-2": None,
        "r1-3": None,
        "r1-4": None,
        "r1-5": None,
    }
    waiting = IngestionTask.objects.filter(events__in=outage_events())
    assert list(waiting.values_list("status", "attempt").distinct()) == [
        (IngestionTask.Status.QUEUED, 0)
    ]

    # when Redis comes back on the same port, the same relay and worker catch up
    private_redis.start()
    wait_for(
        lambda: (
            not outage_events().filter(published_at__isnull=True).exists() and pending_tasks() == 0
        ),
        relay=False,
        timeout=PROCESS_BOUND,
        what="delivery to catch up after Redis returned",
    )
    wait_for(lambda: relay.sent() == 8, relay=False, timeout=10, what="the relay's report")
    relay.terminate()
    searcher.stop()

    # then every document is live at its desired revision, built once, and nothing was lost
    searcher.assert_clean()
    assert {1} <= searcher.seen["r1-0"]
    assert worker.log().count("Connected to redis://") >= 2, "the worker never lost Redis"
    for event in outage_events():
        assert event.published_at is not None
        assert event.dead_at is None
    assert {key: live_revision(d) for key, d in documents.items()} == {
        "r1-0": 2,
        "r1-1": 2,
        "r1-2": 1,
        "r1-3": 1,
        "r1-4": 1,
        "r1-5": 1,
    }
    for document in documents.values():
        document.refresh_from_db()
        assert document.desired_revision is not None
        assert_one_complete_live_set(document, document.desired_revision)
    assert list(IngestionTask.objects.values_list("status", "attempt").distinct()) == [
        (IngestionTask.Status.SUCCEEDED, 1)
    ]
    assert run_task_deliveries(worker) == 8
    assert run_task_outcomes(worker) == ["published"] * 8
    assert_verified()
