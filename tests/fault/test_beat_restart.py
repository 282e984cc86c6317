"""Fault matrix row F-T1 (and F-S1 for beat): beat killed and restarted repeatedly, and two beats
at once.

Real `celery beat` processes (config.beat:Scheduler) against the test database, a real worker
that runs what they send, and tasks whose worker "crashed" (claimed by an owner that never
renews, its message already delivered) so that only the sweeper can bring them back. Timing is
judged on beat-alive time only: between two sweeps, a beat may have been alive for at most the
sweeper's interval (plus slack for a loaded machine), however often it was restarted in between.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django_celery_beat.models import PeriodicTask

from config.celery import app as celery_app
from kb.models import KnowledgeBase
from tests.conftest import ROOT, Worker, database_url, wait_for
from tests.fault.harness import assert_verified, live_revision, paragraphs, pending_tasks, upload
from work import outbox
from work.leases import task_claim
from work.models import AuditEvent, IngestionTask, OutboxEvent

pytestmark = pytest.mark.integration

# The intervals are the test's own (the env the beats get), as short as the slack allows.
SWEEP = 4.0
RECONCILE = 8.0
# F-T1's beat lifetime: a little over half the sweeper's interval, so no beat lives a whole one.
BEAT_LIFE = 2.3
# Beat-alive time a job may run late: the scheduler's setup after "beat: Starting...", a tick,
# and a loaded 2-core machine.
SLACK = 3.0
# The sweep itself runs on the worker, behind whatever it is busy with.
WORKER_SLACK = 6.0
SENT = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO celery\.beat Scheduler: Sending due task (\S+)",
    re.MULTILINE,
)
STARTED_AT = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO celery\.beat beat: Starting", re.MULTILINE
)


def log_time(stamp: str) -> float:
    """A log line's time (local clock, like time.time())."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


class Beat:
    """A real `celery beat` process on this test's queue and database."""

    def __init__(self, log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "info",
             "--scheduler", "config.beat:Scheduler", "-s", str(log_path.with_suffix(".db"))],
            cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while not (found := STARTED_AT.search(self.log())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait(10)
                raise RuntimeError(f"beat did not start:\n{self.log()}")
            time.sleep(0.05)
        self.started_at = log_time(found.group(1))
        self.stopped_at: float | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        if self.stopped_at is None:
            self.stopped_at = time.time()

    def sends(self) -> list[tuple[float, str]]:
        return [(log_time(stamp), name) for stamp, name in SENT.findall(self.log())]


@dataclass
class BeatRun:
    """Every beat of one test: when each was alive, and what they sent."""

    env: dict[str, str]
    logs: Path
    beats: list[Beat]

    def start(self) -> Beat:
        beat = Beat(self.logs / f"beat-{len(self.beats)}.log", self.env)
        self.beats.append(beat)
        return beat

    def alive(self, start: float, end: float) -> float:
        """Seconds within [start, end] during which at least one beat was running."""
        spans = sorted(
            (max(b.started_at, start), min(b.stopped_at or time.time(), end)) for b in self.beats
        )
        total, reached = 0.0, start
        for lo, hi in spans:
            lo = max(lo, reached)
            if hi > lo:
                total += hi - lo
                reached = hi
        return total

    def sends(self, job: str) -> list[float]:
        return sorted(t for b in self.beats for t, name in b.sends() if name == job)

    def first_start(self) -> float:
        return min(b.started_at for b in self.beats)

    def last_stop(self) -> float:
        return max(b.stopped_at or time.time() for b in self.beats)

    def assert_on_time(self, job: str, interval: float) -> list[float]:
        """Between the first start, each send and the last stop, a beat was alive for at most
        `interval` (+ slack) without sending `job`. A job that never ran is due at once."""
        sends = self.sends(job)
        assert sends, f"{job} was never sent"
        assert self.alive(self.first_start(), sends[0]) <= SLACK, (job, "first send late")
        late = [
            (round(a, 1), round(b, 1), round(self.alive(a, b), 1))
            for a, b in itertools.pairwise([*sends, self.last_stop()])
            if self.alive(a, b) > interval + SLACK
        ]
        assert late == [], f"{job}: (from, to, beat-alive seconds) over {interval}s: {late}"
        return sends

    def assert_clean_logs(self) -> None:
        for beat in self.beats:
            log = beat.log()
            assert "Traceback" not in log and " ERROR " not in log, log[-3000:]

    def stop_all(self) -> None:
        for beat in self.beats:
            beat.stop()


@pytest.fixture
def beats(
    worker_factory: Callable[..., Worker], tmp_path: Path
) -> Iterator[Callable[..., BeatRun]]:
    """Beat processes on the queue of `worker_factory`'s workers; all killed when the test ends."""
    runs: list[BeatRun] = []

    def make(**intervals: float) -> BeatRun:
        env = dict(os.environ)
        env.update(
            DATABASE_URL=database_url(),
            REDIS_URL=settings.CELERY_BROKER_URL,
            CANON_QUEUE=str(celery_app.conf.task_default_queue),
            LOG_FORMAT="plain",
            PYTHONUNBUFFERED="1",
            CANON_RELAY_INTERVAL_SECONDS=str(intervals.get("relay", 1.0)),
            CANON_SWEEP_INTERVAL_SECONDS=str(intervals.get("sweep", SWEEP)),
            CANON_RECONCILE_INTERVAL_SECONDS=str(intervals.get("reconcile", RECONCILE)),
            CANON_GC_INTERVAL_SECONDS="3600",
        )
        logs = tmp_path / f"beats-{len(runs)}"
        logs.mkdir()
        run = BeatRun(env=env, logs=logs, beats=[])
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.stop_all()


@pytest.fixture
def no_nudge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Uploads in the test process send nothing on commit: only beat's jobs move work."""
    monkeypatch.setattr(outbox, "relay_nudge", lambda: None)


@dataclass
class Crashed:
    task_id: int
    key: str
    lease_expires_at: float


def plant_crashed_task(kb: KnowledgeBase, key: str) -> Crashed:
    """A new document whose task a worker claimed (lease 1 s, never renewed) and then died with:
    its message was delivered, so nothing but the sweeper will ever run it again."""
    with transaction.atomic():
        document = upload(kb, key, paragraphs(key, n=2, words=10))
        task = IngestionTask.objects.get(document=document)
        OutboxEvent.objects.filter(task=task).update(published_at=Now())
    assert task_claim(task_id=task.pk, owner=f"crashed-{key}", ttl=1.0) is not None
    task.refresh_from_db()
    assert task.lease_expires_at is not None
    return Crashed(task.pk, key, task.lease_expires_at.timestamp())


def requeued_at(crashed: Crashed) -> float:
    audits = list(AuditEvent.objects.filter(kind="lease_expired", subject_id=crashed.task_id))
    assert [a.action for a in audits] == ["requeued"], (crashed, audits)
    return audits[0].detected_at.timestamp()


def sweeps_run(worker: Worker) -> int:
    return len(re.findall(r"Task ingestion\.tasks\.sweep_leases\[\S+\] succeeded", worker.log()))


def assert_crashed_tasks_swept_on_time(run: BeatRun, planted: list[Crashed]) -> None:
    late = []
    for crashed in planted:
        at = requeued_at(crashed)
        alive = run.alive(crashed.lease_expires_at, at)
        if alive > SWEEP + SLACK + WORKER_SLACK:
            late.append((crashed.key, round(at - crashed.lease_expires_at, 1), round(alive, 1)))
    assert late == [], f"(task, seconds expired, beat-alive seconds) requeued late: {late}"


def converge_with(run: BeatRun, kb: KnowledgeBase, keys: list[str]) -> None:
    """With a beat running (relay and sweeper), every planted document goes live."""
    from kb.models import Document

    wait_for(
        lambda: (
            pending_tasks() == 0
            and all(live_revision(Document.objects.get(kb=kb, key=k)) == 1 for k in keys)
        ),
        relay=False,
        timeout=120,
        what="every crashed task requeued by the sweeper and run by the worker",
    )


def test_f_t1_beat_restarted_faster_than_the_sweeper_interval_still_sweeps_on_time(
    no_nudge: None,
    worker_factory: Callable[..., Worker],
    beats: Callable[..., BeatRun],
    kb: KnowledgeBase,
) -> None:
    worker = worker_factory()
    run = beats()
    planted: list[Crashed] = []

    # given a beat that lives 2.3 s, about half the sweeper's interval, killed (SIGKILL, or
    # SIGTERM every third time) and started again ten times in a row; while it is down, a worker
    # "crashes" holding a task every other time
    for i in range(10):
        beat = run.start()
        time.sleep(BEAT_LIFE)
        beat.stop(signal.SIGTERM if i % 3 == 2 else signal.SIGKILL)
        if i % 2 == 0:
            planted.append(plant_crashed_task(kb, f"t1-{i}"))

    # then the sweeper, the reconciler and the relay were sent on time across all the restarts:
    # never more than one interval of beat-alive time without a send (with the stock scheduler,
    # each start reset the clock and a beat living half an interval never swept)
    sweeps = run.assert_on_time("lease-sweeper", SWEEP)
    run.assert_on_time("reconciler", RECONCILE)
    run.assert_on_time("outbox-relay", 1.0)
    assert len(sweeps) >= run.alive(run.first_start(), run.last_stop()) / SWEEP - 1
    # and each send was recorded in its row, once (a claim made the instant before a kill is
    # recorded and never sent)
    recorded = PeriodicTask.objects.get(name="lease-sweeper").total_run_count
    assert len(sweeps) <= recorded <= len(sweeps) + 1

    # when one more beat runs until everything is done
    run.start()
    converge_with(run, kb, [c.key for c in planted])
    run.stop_all()

    # then the worker ran every sweep that was sent, each crashed task was requeued once and on
    # time, and every document is live with nothing left inconsistent
    sweeps = run.assert_on_time("lease-sweeper", SWEEP)
    wait_for(  # generous: on a loaded CI machine the last sweeps queue behind other work
        lambda: sweeps_run(worker) == len(sweeps),
        timeout=180,
        relay=False,
        what="the worker to run the sweeps",
    )
    assert_crashed_tasks_swept_on_time(run, planted)
    run.assert_clean_logs()
    assert_verified()


def test_f_s1_two_beats_at_once_send_each_job_once_per_interval_and_survive_each_other(
    no_nudge: None,
    worker_factory: Callable[..., Worker],
    beats: Callable[..., BeatRun],
    kb: KnowledgeBase,
) -> None:
    sweep = 3.0
    worker = worker_factory()
    run = beats(sweep=sweep, reconcile=6.0)

    # given two beats running at once on the same schedule
    first, second = run.start(), run.start()
    planted = [plant_crashed_task(kb, "s1-0")]
    time.sleep(2 * sweep)
    planted.append(plant_crashed_task(kb, "s1-1"))
    time.sleep(2 * sweep)
    both_until = time.time()

    # then each job was sent once per interval, not once per beat: no two sweeps closer than
    # half the interval, and no more relay passes than seconds
    sweeps = [t for t in run.sends("lease-sweeper") if t <= both_until]
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(sweeps)]
    assert gaps and min(gaps) >= sweep / 2, gaps
    both = run.alive(max(first.started_at, second.started_at), both_until)
    relays = [t for t in run.sends("outbox-relay") if t >= max(first.started_at, second.started_at)]
    assert len([t for t in relays if t <= both_until]) <= both + 2

    # when the beat that sends is killed, the other carries on without a gap
    sender = max(run.beats, key=lambda b: len(b.sends()))
    sender.stop()
    planted.append(plant_crashed_task(kb, "s1-2"))
    time.sleep(2.5 * sweep)
    survivor = second if sender is first else first
    assert survivor.proc.poll() is None, survivor.log()[-3000:]
    converge_with(run, kb, [c.key for c in planted])
    run.stop_all()

    # then, over the whole experiment, the sweeper never waited longer than its interval, each
    # crashed task was requeued exactly once (the sweeps are single-flight), and each send was
    # recorded once in its row (a claim the other beat had already made changes nothing)
    sweeps = run.assert_on_time("lease-sweeper", sweep)
    assert PeriodicTask.objects.get(name="lease-sweeper").total_run_count in (
        len(sweeps),
        len(sweeps) + 1,  # a claim made the instant before the kill, never sent
    )
    assert survivor.sends(), "the surviving beat never sent anything"
    wait_for(  # generous: on a loaded CI machine the last sweeps queue behind other work
        lambda: sweeps_run(worker) == len(sweeps),
        timeout=180,
        relay=False,
        what="the worker to run the sweeps",
    )
    assert_crashed_tasks_swept_on_time(run, planted)
    run.assert_clean_logs()
    assert_verified()
