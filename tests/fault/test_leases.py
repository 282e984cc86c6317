"""Fault matrix rows F-L1, F-P1 and F-P2: a worker frozen or silent past its lease, database
connections killed under a worker and under a relay, and a poison file. Real worker and relay
processes, a concurrent searcher, the fault asserted to have happened, convergence, kb_verify."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.db import connection, transaction
from django.db.models.functions import Now

from ingestion.models import StageResult
from kb.models import Build, Chunk, Document, KnowledgeBase, Publication, PublicationEvent
from tests.conftest import Worker, wait_for
from tests.fault.harness import (
    FAULT_LEASE_TTL,
    Searcher,
    assert_verified,
    beat_once,
    converge,
    live_revision,
    manage_subprocess,
    paragraphs,
    resume,
    run_with_searcher,
    terminate_backends,
    upload,
    wait_for_marker,
)
from work import outbox
from work.models import AuditEvent, IngestionTask, OutboxEvent

pytestmark = pytest.mark.integration

WORKER_ENV = {"CANON_LEASE_TTL_SECONDS": FAULT_LEASE_TTL, "CANON_CHUNK_WRITE_BATCH": "5"}
QUERIES = ["alpha paragraph 2", "beta paragraph 2", "paragraph"]


# --- helpers -------------------------------------------------------------------------------


def publish_first_revision(worker_factory: Any, kb: KnowledgeBase, key: str = "policy") -> Document:
    """Given: revision 1 of `key` is live, built by a healthy worker that is then stopped."""
    healthy = worker_factory(pool="solo", **WORKER_ENV)
    document = upload(kb, key, paragraphs("alpha"))
    converge(lambda: live_revision(document) == 1, what=f"{key} revision 1 live")
    healthy.stop()
    return document


@contextlib.contextmanager
def searching(kb: KnowledgeBase, queries: list[str] = QUERIES) -> Iterator[Searcher]:
    """A concurrent searcher that is stopped (and its connection closed) however the block ends."""
    searcher = run_with_searcher(kb, queries)
    try:
        yield searcher
    finally:
        searcher.stop()


def is_frozen(worker: Worker) -> bool:
    return psutil.Process(worker.pid).status() == psutil.STATUS_STOPPED


def wait_frozen(worker: Worker) -> None:
    """The pause switch writes its marker just before SIGSTOP lands: wait for the stop itself."""
    wait_for(lambda: is_frozen(worker), relay=False, timeout=10, what="the worker to freeze")


def continue_if_frozen(worker: Worker) -> bool:
    """Resume a worker that paused again at its (still armed) pause point: only the first pass
    through the point is faulted. Always True, to chain in a condition."""
    if is_frozen(worker):
        resume(worker.pid)
    return True


@contextlib.contextmanager
def never_left_frozen(worker: Worker) -> Iterator[None]:
    """Whatever happens in the block, the worker's process group is not left stopped."""
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGCONT)


def wait_for_file(directory: Path, pattern: str, what: str) -> None:
    """Like `wait_for_marker`, but relaying only: never sweeping, because a sweep of an expired
    lease would wait for the row locks a frozen switch holds."""
    wait_for(lambda: any(directory.glob(pattern)) if directory.exists() else False, what=what)


def backend_states(application_name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state FROM pg_stat_activity WHERE application_name = %s ORDER BY pid",
            [application_name],
        )
        return [row[0] for row in cursor.fetchall()]


def rows_of(document: Document, task: IngestionTask) -> dict[str, list[Any]]:
    """Every row a worker building `task` could write, to compare before and after."""
    return {
        "publications": list(
            Publication.objects.filter(document=document).order_by("pk").values_list()
        ),
        "publication_events": list(
            PublicationEvent.objects.filter(document=document).order_by("pk").values_list()
        ),
        "builds": list(Build.objects.filter(document=document).order_by("pk").values_list()),
        "chunks": list(
            Chunk.objects.filter(document_id=document.pk)
            .order_by("pk")
            .values_list("pk", "build_id", "ordinal", "chunk_key", "content_hash", "created_at")
        ),
        "task": list(IngestionTask.objects.filter(pk=task.pk).values_list()),
        "stage_results": list(StageResult.objects.filter(task=task).order_by("pk").values_list()),
        "outbox": list(OutboxEvent.objects.filter(task=task).order_by("pk").values_list()),
        "audit": list(AuditEvent.objects.order_by("pk").values_list()),
    }


def lease_expired(task: IngestionTask) -> bool:
    """On the database clock, as the sweeper sees it."""
    return IngestionTask.objects.filter(pk=task.pk, lease_expires_at__lt=Now()).exists()


def live_build_id(document: Document) -> int | None:
    return Publication.objects.filter(document=document).values_list("build_id", flat=True).first()


# --- F-L1: a worker frozen or silent past its lease ----------------------------------------


def test_f_l1_worker_frozen_past_its_lease_changes_nothing_when_resumed(
    worker_factory: Any, kb: KnowledgeBase, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    document = publish_first_revision(worker_factory, kb)

    # given worker A, which freezes itself (SIGSTOP) after writing the candidate of revision 2
    frozen = worker_factory(
        pool="solo",
        CANON_FAULT_PAUSE_AT="before_switch",
        CANON_FAULT_MARKER_DIR=str(markers),
        **WORKER_ENV,
    )
    with searching(kb) as searcher, never_left_frozen(frozen):
        upload(kb, "policy", paragraphs("beta"))
        candidate = Build.objects.get(document=document, revision__number=2)
        task = IngestionTask.objects.get(build=candidate)
        wait_for_marker(markers, "paused_before_switch")
        wait_frozen(frozen)
        task.refresh_from_db()
        candidate.refresh_from_db()
        owner_a = task.lease_owner
        assert (task.status, task.attempt) == (IngestionTask.Status.RUNNING, 1)
        assert f":{frozen.pid}:" in owner_a
        assert candidate.chunks.count() == candidate.expected_chunk_count
        assert live_revision(document) == 1

        # when its lease expires while it is frozen, the sweeper requeues the task
        wait_for(lambda: lease_expired(task), relay=False, what="A's lease to expire")
        beat_once()
        expiry = AuditEvent.objects.get(kind="lease_expired", subject_id=task.pk)
        assert (expiry.action, expiry.attempts) == ("requeued", 1)
        assert expiry.details["lease_owner"] == owner_a

        # and worker B claims it (attempt 2, a new owner) and publishes revision 2
        second = worker_factory(pool="solo", **WORKER_ENV)
        converge(lambda: live_revision(document) == 2, what="revision 2 live through B")
        task.refresh_from_db()
        assert (task.status, task.attempt) == (IngestionTask.Status.SUCCEEDED, 2)
        assert f":{second.pid}:" in task.lease_owner
        assert is_frozen(frozen), "A must still be frozen while B publishes"
        before = rows_of(document, task)

        # when A is resumed, it reaches the fenced switch without its lease and gives up
        resume(frozen.pid)
        wait_for(
            lambda: "'lease_lost'" in frozen.log(),
            relay=False,
            timeout=30,
            what="the resumed worker A to finish its task",
        )
        wait_for(lambda: 2 in searcher.seen["policy"], relay=False, what="a search to see r2")

    # then A changed 0 rows: B's publication, task outcome and chunks stand as they were
    assert "lease lost; stopping without writing" in frozen.log()
    assert rows_of(document, task) == before
    assert PublicationEvent.objects.filter(document=document).count() == 2
    candidate.refresh_from_db()
    assert candidate.state == Build.State.LIVE
    assert candidate.chunks.count() == candidate.expected_chunk_count
    searcher.assert_clean()
    assert searcher.seen["policy"] == {1, 2}
    assert_verified()


# About 360 chunks. A healthy worker publishes them as revision 1, filling the embedding cache,
# so that for revision 2 (a small edit) every stage before the write takes a fraction of a lease,
# while writing it one chunk per fenced transaction takes many lease lengths.
SLOW_DOCUMENT_PARAGRAPHS = 120
FAST_WRITES = {"CANON_LEASE_TTL_SECONDS": FAULT_LEASE_TTL, "CANON_CHUNK_WRITE_BATCH": "200"}
# One chunk per fenced transaction, 20 ms apart: writing outlasts the lease on any machine.
SLOW_WRITES = {
    "CANON_LEASE_TTL_SECONDS": FAULT_LEASE_TTL,
    "CANON_CHUNK_WRITE_BATCH": "1",
    "CANON_FAULT_CHUNK_BATCH_DELAY": "0.02",
}


def publish_big_first_revision(worker_factory: Any, kb: KnowledgeBase) -> tuple[Document, str]:
    """Given: a big revision 1 is live; returns the document and revision 2's text."""
    healthy = worker_factory(pool="solo", **FAST_WRITES)
    big = paragraphs("alpha", n=SLOW_DOCUMENT_PARAGRAPHS)
    document = upload(kb, "policy", big)
    converge(lambda: live_revision(document) == 1, what="revision 1 live")
    healthy.stop()
    return document, big + "\n\nbeta paragraph 2. A short paragraph added at the end."


def test_f_l1_worker_that_drops_its_heartbeats_loses_its_lease_mid_write(
    worker_factory: Any, kb: KnowledgeBase
) -> None:
    document, edited = publish_big_first_revision(worker_factory, kb)

    # given worker A, which never renews its lease (TTL 2 s) and writes revision 2 one chunk per
    # fenced transaction, so that writing outlasts the lease
    silent = worker_factory(pool="solo", CANON_FAULT_DROP_HEARTBEATS="1", **SLOW_WRITES)
    with searching(kb) as searcher:
        upload(kb, "policy", edited)
        candidate = Build.objects.get(document=document, revision__number=2)
        task = IngestionTask.objects.get(build=candidate)

        # when its lease runs out (no sweeper runs meanwhile), A's next fenced write fails
        wait_for(
            lambda: "'lease_lost'" in silent.log(),
            timeout=60,
            what="worker A to lose its lease while writing",
        )
        silent.stop()
        assert "lease lost; stopping without writing" in silent.log()
        task.refresh_from_db()
        candidate.refresh_from_db()
        assert (task.status, task.attempt) == (IngestionTask.Status.RUNNING, 1)
        assert f":{silent.pid}:" in task.lease_owner
        assert task.lease_expires_at is not None
        assert candidate.expected_chunk_count is not None
        written = candidate.chunks.count()
        assert 0 < written < candidate.expected_chunk_count
        assert candidate.chunks_written == written
        # every chunk A wrote committed while its lease was held (both on the database clock)
        assert not candidate.chunks.filter(created_at__gte=task.lease_expires_at).exists()
        assert live_revision(document) == 1
        written_by_a = dict(candidate.chunks.values_list("ordinal", "pk"))

        # and when the sweeper requeues it, worker B owns the lease and publishes revision 2
        second = worker_factory(pool="solo", **FAST_WRITES)
        converge(lambda: live_revision(document) == 2, what="revision 2 live through B")
        wait_for(lambda: 2 in searcher.seen["policy"], relay=False, what="a search to see r2")

    task.refresh_from_db()
    assert (task.status, task.attempt) == (IngestionTask.Status.SUCCEEDED, 2)
    assert f":{second.pid}:" in task.lease_owner
    expiry = AuditEvent.objects.get(kind="lease_expired", subject_id=task.pk)
    assert (expiry.action, expiry.attempts) == ("requeued", 1)
    assert f":{silent.pid}:" in expiry.details["lease_owner"]
    candidate.refresh_from_db()
    assert candidate.state == Build.State.LIVE
    assert candidate.chunks.count() == candidate.expected_chunk_count
    # B upserted over A's rows: the same ids for what A had written, no duplicates
    rewritten = dict(candidate.chunks.filter(ordinal__in=written_by_a).values_list("ordinal", "pk"))
    assert rewritten == written_by_a
    stages = {s.stage: s.attempts for s in task.stage_results.all()}
    assert stages == {"parse": 1, "chunk": 1, "embed": 1, "write": 2}
    searcher.assert_clean()
    assert searcher.seen["policy"] == {1, 2}
    assert_verified()


# --- F-P1: PostgreSQL connections killed ---------------------------------------------------

# Far longer than a pause lasts here, so that the worker itself, not the sweeper, records what
# happened to its attempt.
P1_LEASE_TTL = "10"


@pytest.mark.parametrize(
    ("point", "open_transaction"),
    [("before_switch", False), ("in_switch", True)],
    ids=["mid-stage", "mid-switch"],
)
def test_f_p1_connection_killed_under_a_worker(
    worker_factory: Any, kb: KnowledgeBase, tmp_path: Path, point: str, open_transaction: bool
) -> None:
    markers = tmp_path / "markers"
    application_name = f"canon-f-p1-{uuid.uuid4().hex[:8]}"
    document = publish_first_revision(worker_factory, kb)
    live_before = live_build_id(document)

    # given a worker frozen at `point`: between stages (its connections idle), or inside the
    # switch transaction (holding the document, build and task row locks)
    worker = worker_factory(
        pool="solo",
        CANON_FAULT_PAUSE_AT=point,
        CANON_FAULT_MARKER_DIR=str(markers),
        CANON_DB_APPLICATION_NAME=application_name,
        CANON_LEASE_TTL_SECONDS=P1_LEASE_TTL,
        CANON_RETRY_BASE_SECONDS="0.2",
        CANON_CHUNK_WRITE_BATCH="5",
    )
    with searching(kb) as searcher, never_left_frozen(worker):
        upload(kb, "policy", paragraphs("beta"))
        candidate = Build.objects.get(document=document, revision__number=2)
        task = IngestionTask.objects.get(build=candidate)
        wait_for_file(markers, f"paused_{point}.*", what=f"the worker to pause at {point}")
        wait_frozen(worker)
        states = backend_states(application_name)
        assert ("idle in transaction" in states) is open_transaction, states
        assert live_revision(document) == 1
        # and search goes on meanwhile, unblocked by any row lock the frozen worker holds
        searches = searcher.searches
        wait_for(lambda: searcher.searches > searches + 3, relay=False, what="searches to go on")
        assert searcher.seen["policy"] == {1}

        # when PostgreSQL terminates every connection of the worker
        assert terminate_backends(application_name) == len(states) >= 1
        wait_for(
            lambda: not backend_states(application_name),
            relay=False,
            what="the worker's backends to go",
        )

        # then whatever it had begun rolled back: the pointer has not moved, nothing is published
        candidate.refresh_from_db()
        assert candidate.state == Build.State.BUILDING
        assert live_build_id(document) == live_before
        assert not PublicationEvent.objects.filter(build=candidate).exists()
        task.refresh_from_db()
        assert (task.status, task.attempt) == (IngestionTask.Status.RUNNING, 1)

        # when it resumes, its next statement fails; it reconnects and records a retry itself
        # (the error stays on the task until an attempt succeeds, and the next attempt cannot
        # succeed before this test resumes it from its pause point)
        resume(worker.pid)
        wait_for(
            lambda: IngestionTask.objects.filter(pk=task.pk).exclude(last_error_code="").exists(),
            relay=False,
            timeout=30,
            what="the resumed worker to record a retry",
        )
        task.refresh_from_db()
        assert task.last_error_code == "OperationalError"
        # the server's notice, or psycopg's when it saw the socket closed before sending
        assert any(
            sign in task.last_error
            for sign in (
                "terminating connection due to administrator command",
                "connection is closed",
            )
        ), task.last_error
        assert "task will be retried" in worker.log()
        assert live_revision(document) == 1

        # and the retry (the pause point passed without a fault this time) publishes revision 2
        converge(
            lambda: continue_if_frozen(worker) and live_revision(document) == 2,
            what="revision 2 live after the retry",
        )
        wait_for(lambda: 2 in searcher.seen["policy"], relay=False, what="a search to see r2")

    task.refresh_from_db()
    assert (task.status, task.attempt) == (IngestionTask.Status.SUCCEEDED, 2)
    assert not AuditEvent.objects.filter(kind="lease_expired", subject_id=task.pk).exists()
    candidate.refresh_from_db()
    assert candidate.state == Build.State.LIVE
    assert candidate.chunks.count() == candidate.expected_chunk_count
    assert PublicationEvent.objects.filter(build=candidate).count() == 1
    stages = {s.stage: s.attempts for s in task.stage_results.all()}
    assert stages == {"parse": 1, "chunk": 1, "embed": 1, "write": 1}
    searcher.assert_clean()
    assert searcher.seen["policy"] == {1, 2}
    assert_verified()


HEARTBEAT_RENEWAL = "%SET lease_expires_at = now()%"


def test_f_p1_heartbeat_connection_killed_mid_write_does_not_cost_the_lease(
    worker_factory: Any, kb: KnowledgeBase
) -> None:
    document, edited = publish_big_first_revision(worker_factory, kb)
    application_name = f"canon-f-p1-hb-{uuid.uuid4().hex[:8]}"

    # given a healthy worker writing a big candidate, its heartbeat renewing the 2 s lease on
    # its own connection
    worker = worker_factory(pool="solo", CANON_DB_APPLICATION_NAME=application_name, **SLOW_WRITES)
    with searching(kb) as searcher:
        upload(kb, "policy", edited)
        candidate = Build.objects.get(document=document, revision__number=2)
        task = IngestionTask.objects.get(build=candidate)

        def heartbeat_backends() -> list[int]:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                    "AND query LIKE %s",
                    [application_name, HEARTBEAT_RENEWAL],
                )
                return [row[0] for row in cursor.fetchall()]

        wait_for(
            lambda: (
                heartbeat_backends()
                and Build.objects.filter(pk=candidate.pk, chunks_written__gt=0).exists()
            ),
            what="the write stage to run with a heartbeat",
        )

        # when PostgreSQL terminates the heartbeat's connection (only that one) mid-write
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND query LIKE %s",
                [application_name, HEARTBEAT_RENEWAL],
            )
            assert cursor.fetchone() == (1,)
        candidate.refresh_from_db()
        assert candidate.expected_chunk_count is not None
        assert candidate.chunks_written < candidate.expected_chunk_count, "killed too late"

        converge(lambda: live_revision(document) == 2, what="revision 2 live")
        wait_for(lambda: 2 in searcher.seen["policy"], relay=False, what="a search to see r2")

    # then the heartbeat reconnected and kept the lease: the first attempt published revision 2
    assert "lease renewal failed" in worker.log()
    task.refresh_from_db()
    expiries = list(
        AuditEvent.objects.filter(kind="lease_expired", subject_id=task.pk).values_list(
            "action", "attempts"
        )
    )
    assert (task.status, task.attempt, expiries) == (IngestionTask.Status.SUCCEEDED, 1, []), (
        "a healthy worker lost its lease because its heartbeat never reconnected"
    )
    candidate.refresh_from_db()
    assert candidate.state == Build.State.LIVE
    assert candidate.chunks.count() == candidate.expected_chunk_count
    searcher.assert_clean()
    assert searcher.seen["policy"] == {1, 2}
    assert_verified()


def test_f_p1_connection_killed_under_the_relay_mid_batch(
    worker_factory: Any, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The relay process under test is the only relay until the fault is over: uploads do not
    # nudge a worker to relay, and nothing else runs the beat's relay.
    monkeypatch.setattr(outbox, "relay_nudge", lambda: None)
    worker = worker_factory(pool="solo", **WORKER_ENV)
    application_name = f"canon-f-p1-relay-{uuid.uuid4().hex[:8]}"
    markers = tmp_path / "markers"

    with searching(kb, ["batch paragraph 1", "paragraph"]) as searcher:
        # given a batch of uploads committed at once
        with transaction.atomic():
            documents = [upload(kb, f"doc{i}", paragraphs(f"batch{i}", n=2)) for i in range(8)]
        tasks = IngestionTask.objects.filter(document__in=documents)
        events = OutboxEvent.objects.filter(task__in=tasks)
        # and a relay process that freezes once it has sent the batch, before marking it
        relay = manage_subprocess(
            "canon_relay",
            "--loop",
            "--interval",
            "0.1",
            env={
                "CANON_DB_APPLICATION_NAME": application_name,
                "CANON_QUEUE": worker.queue,
                "CANON_FAULT_PAUSE_AT": "relay_after_send",
                "CANON_FAULT_MARKER_DIR": str(markers),
            },
        )
        try:
            wait_for(
                lambda: any(markers.glob("paused_relay_after_send.*")),
                relay=False,
                what="the relay to send the batch",
            )
            wait_for(
                lambda: tasks.filter(attempt__gte=1).exists(),
                relay=False,
                what="a worker to claim a task of the sent batch",
            )
            # when its database connection is killed in the middle of its transaction
            assert "idle in transaction" in backend_states(application_name)
            assert terminate_backends(application_name) >= 1
            os.kill(relay.pid, signal.SIGCONT)
            # then the relay's mark never committed: every event of the batch is unpublished,
            # though the worker is running what was sent
            assert events.filter(published_at__isnull=False).count() == 0

            # the relay process either dies of its lost connection or recovers by itself (and
            # then freezes after each send again: keep it going)
            deadline = time.monotonic() + 15
            while relay.poll() is None and events.filter(published_at__isnull=True).exists():
                assert time.monotonic() < deadline, "the relay neither died nor recovered"
                time.sleep(0.2)
                os.kill(relay.pid, signal.SIGCONT)
            if relay.poll() is not None:
                assert relay.stdout is not None
                output = relay.stdout.read().decode(errors="replace")
                assert relay.returncode != 0
                assert "terminating connection due to administrator command" in output, output

            # and with the beat's relay running again, every document goes live exactly once
            converge(
                lambda: all(live_revision(d) == 1 for d in documents),
                what="every document of the batch live",
            )
        finally:
            if relay.poll() is None:
                relay.kill()
            relay.wait(10)
        wait_for(lambda: "'not_claimed'" in worker.log(), what="a duplicate delivery")

    assert set(tasks.values_list("status", "attempt")) == {(IngestionTask.Status.SUCCEEDED, 1)}
    assert events.filter(published_at__isnull=True).count() == 0
    assert not events.filter(dead_at__isnull=False).exists()
    for document in documents:
        build = Build.objects.get(document=document)
        assert build.state == Build.State.LIVE
        assert build.chunks.count() == build.expected_chunk_count
        assert PublicationEvent.objects.filter(document=document).count() == 1
    searcher.assert_clean()
    assert_verified()


# --- F-P2: poison input --------------------------------------------------------------------


def test_f_p2_poison_file_that_kills_the_parser_is_dead_lettered_at_the_cap(
    worker_factory: Any, kb: KnowledgeBase, tmp_path: Path, settings: Any
) -> None:
    # The cap is stored on the task row by the process that creates it: this one.
    settings.TASK_MAX_ATTEMPTS = 3
    markers = tmp_path / "markers"
    worker = worker_factory(
        pool="prefork",
        CANON_FAULT_POISON="POISON-PILL",
        CANON_FAULT_MARKER_DIR=str(markers),
        CANON_TASK_MAX_ATTEMPTS="3",
        **WORKER_ENV,
    )
    document = upload(kb, "policy", paragraphs("alpha"))
    converge(lambda: live_revision(document) == 1, what="revision 1 live")

    with searching(kb) as searcher:
        # when revision 2 contains text that kills the parsing process on every attempt
        upload(kb, "policy", paragraphs("beta") + "\n\nPOISON-PILL\n")
        candidate = Build.objects.get(document=document, revision__number=2)
        task = IngestionTask.objects.get(build=candidate)
        assert task.max_attempts == 3
        converge(
            lambda: IngestionTask.objects.filter(pk=task.pk, status="dead").exists(),
            what="the poison task dead-lettered",
        )

        # then each attempt killed one pool child, which the worker replaced
        deaths = sorted(markers.glob("poison.*"))
        assert len(deaths) == 3
        child_pids = {int(path.suffix[1:]) for path in deaths}
        assert len(child_pids) == 3 and worker.pid not in child_pids
        assert worker.proc.poll() is None

        # and the sweeper dead-lettered it when the lease of the third attempt expired (an
        # earlier attempt may also have been claimed by Celery's redelivery of the lost message)
        expiries = AuditEvent.objects.filter(kind="lease_expired", subject_id=task.pk)
        *requeues, last = expiries.order_by("pk").values_list("action", "attempts", "escalated")
        assert last == ("dead-lettered", 3, True)
        assert all(action == "requeued" and n < 3 for action, n, _ in requeues), requeues
        task.refresh_from_db()
        assert (task.status, task.attempt, task.last_error_code) == ("dead", 3, "lease_expired")
        assert "on all 3 attempts; giving up" in task.last_error
        candidate.refresh_from_db()
        assert candidate.state == Build.State.FAILED
        assert candidate.error == task.last_error
        assert live_revision(document) == 1

        # and no crash loop: sweeping on for three more lease lengths starts nothing
        quiet_until = time.monotonic() + 3 * float(FAULT_LEASE_TTL)
        while time.monotonic() < quiet_until:
            beat_once()
            time.sleep(0.2)
        task.refresh_from_db()
        assert (task.status, task.attempt) == ("dead", 3)
        assert len(list(markers.glob("poison.*"))) == 3
        assert expiries.count() == len(requeues) + 1
        assert not OutboxEvent.objects.filter(task=task, published_at__isnull=True).exists()

        # and the same worker still builds the next clean revision
        upload(kb, "policy", paragraphs("gamma"))
        converge(lambda: live_revision(document) == 3, what="revision 3 live")

    searcher.assert_clean()
    assert searcher.seen["policy"] <= {1, 3}
    assert 1 in searcher.seen["policy"]
    assert_verified()


def test_f_p2_file_that_makes_the_parser_raise_is_retried_to_the_cap_then_dead(
    worker_factory: Any, kb: KnowledgeBase, settings: Any
) -> None:
    settings.TASK_MAX_ATTEMPTS = 3
    worker_factory(
        pool="solo",
        CANON_TASK_MAX_ATTEMPTS="3",
        CANON_RETRY_BASE_SECONDS="0.2",
        CANON_FAULT_PARSER_RAISES="CRYPT-FILTER",
        **WORKER_ENV,
    )
    document = upload(kb, "policy", paragraphs("alpha"))
    converge(lambda: live_revision(document) == 1, what="revision 1 live")

    with searching(kb) as searcher:
        # when revision 2 is a file the parser raises an unexpected exception on, every time
        # (a real one was a PDF with a named Crypt filter, before PDFium read those)
        upload(kb, "policy", paragraphs("beta") + "\n\nCRYPT-FILTER\n")
        candidate = Build.objects.get(document=document, revision__number=2)
        task = IngestionTask.objects.get(build=candidate)
        converge(
            lambda: IngestionTask.objects.filter(pk=task.pk, status="dead").exists(),
            what="the task dead-lettered",
        )

    # then it was retried by the worker itself up to the cap, then dead-lettered, readably
    task.refresh_from_db()
    assert (task.status, task.attempt, task.last_error_code) == ("dead", 3, "NotImplementedError")
    assert task.last_error.startswith("gave up after 3 attempts: NotImplementedError: ")
    assert "CRYPT-FILTER" in task.last_error
    assert not AuditEvent.objects.filter(kind="lease_expired", subject_id=task.pk).exists()
    parse = task.stage_results.get(stage="parse")
    assert (parse.status, parse.attempts) == (StageResult.Status.RUNNING, 3)
    candidate.refresh_from_db()
    assert candidate.state == Build.State.FAILED
    assert candidate.error == task.last_error
    assert live_revision(document) == 1
    assert not OutboxEvent.objects.filter(task=task, published_at__isnull=True).exists()
    searcher.assert_clean()
    assert searcher.seen["policy"] == {1}
    assert_verified()
