"""Writes of the ingestion side: tasks and their outbox events, the relay, task outcomes."""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from ingestion import faults, relay
from ingestion.leases import Lease, lease_check
from ingestion.models import AuditEvent, IngestionTask, OutboxEvent
from kb import locks
from kb.models import Build

logger = logging.getLogger(__name__)


def backoff_seconds(attempt: int, *, base: float, cap: float) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0, min(cap, base * (2 ** max(attempt - 1, 0))))


def task_create(
    *,
    kind: str,
    kb_id: int,
    document_id: int | None = None,
    build_id: int | None = None,
    delay: float = 0.0,
) -> IngestionTask:
    """Create a queued task and its outbox event. Call inside the transaction that writes the fact
    the task acts on, so both commit or neither does."""
    task = IngestionTask.objects.create(
        kind=kind,
        kb_id=kb_id,
        document_id=document_id,
        build_id=build_id,
        max_attempts=settings.TASK_MAX_ATTEMPTS,
        available_at=timezone.now() + timedelta(seconds=delay),
    )
    outbox_add(task=task, delay=delay)
    return task


def outbox_add(*, task: IngestionTask, delay: float = 0.0) -> OutboxEvent:
    event = OutboxEvent.objects.create(
        task=task,
        kind=OutboxEvent.Kind.RUN_TASK,
        payload={"task_id": task.pk},
        available_at=timezone.now() + timedelta(seconds=delay),
    )
    transaction.on_commit(relay_nudge, robust=True)
    return event


def relay_nudge() -> None:
    """Ask a worker to run the relay now instead of at the next beat. Best effort: when the broker
    is down the beat relay delivers the events later."""
    from ingestion.tasks import relay_outbox

    faults.after_outbox_commit()
    try:
        relay.publish(relay_outbox, expires=30)
    except Exception as exc:  # the broker is down; the outbox keeps the intent
        logger.warning("relay nudge not sent: %s", exc)


def outbox_relay_batch(
    *,
    limit: int | None = None,
    send: Callable[[OutboxEvent], object] | None = None,
    round_trip: int = relay.ROUND_TRIP_SIZE,
) -> int:
    """Deliver up to `limit` unpublished, available outbox events; return how many were sent.

    Claims rows with FOR UPDATE SKIP LOCKED, so several relays can run at once without sending
    an event twice in one pass, and publishes the claimed events' `run_task` messages in
    pipelined round trips of `round_trip` messages (`ingestion.relay`), or through `send`, one
    event at a time. Only events whose round trip the broker acknowledged are marked
    `published_at`, in one UPDATE in the claim's transaction. A round trip that failed leaves its
    events unpublished (some of their messages may be in Redis: they are sent again, and
    consumers are idempotent), and the events after it keep their turn. A send that succeeded
    but whose mark did not commit (crash) is likewise sent again. A failing send backs off; after
    RELAY_MAX_ATTEMPTS the event is dead-lettered (`dead_at`), visibly — but never because the
    broker was unreachable or a round trip failed, which says nothing about the event.
    """
    limit = limit or settings.RELAY_BATCH_SIZE
    with transaction.atomic():
        events = list(
            OutboxEvent.objects.select_for_update(skip_locked=True)
            .filter(published_at__isnull=True, dead_at__isnull=True, available_at__lte=Now())
            .order_by("available_at", "id")
            .only("id", "payload", "attempts")[:limit]
        )
        if not events:
            return 0
        sent = _outbox_send(events, send, round_trip=max(1, round_trip))
        faults.relay_after_send()
        return _outbox_mark_sent([event.pk for event in sent])


def _outbox_send(
    events: list[OutboxEvent], send: Callable[[OutboxEvent], object] | None, *, round_trip: int
) -> list[OutboxEvent]:
    """Send `events` in order; return those the broker surely has. Records each failure."""
    sent: list[OutboxEvent] = []
    added: list[OutboxEvent] = []  # in the open round trip
    batch: relay.RunTaskBatch | None = None
    try:
        with (
            contextlib.nullcontext()
            if send is not None
            else relay.run_task_batch(max_size=round_trip + 1)
        ) as batch:
            for event in events:
                try:
                    if batch is None:
                        send(event)  # type: ignore[misc]
                    else:
                        batch.add(int(event.payload["task_id"]))
                except Exception as exc:
                    _outbox_send_failed(event, exc)
                    if relay.broker_unreachable(exc):
                        # The rest would wait on the same dead broker; they keep their turn.
                        break
                    continue
                added.append(event)
                if len(added) >= round_trip and batch is not None:
                    batch.flush()
                    sent += added
                    added = []
                    faults.pause_point("relay_after_round_trip")
            if batch is not None:
                batch.flush()
            sent += added
            added = []
    except Exception as exc:
        # The connection could not be made, or a round trip failed: delivery of its messages is
        # uncertain, so they go again after a backoff; the events after them keep their turn.
        for event in added or ([] if sent else events[:1]):
            _outbox_send_failed(event, exc)
    return sent


def _outbox_mark_sent(ids: list[int]) -> int:
    """Mark the events `ids` published, in one statement (one array parameter, not len(ids))."""
    if not ids:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ingestion_outboxevent SET published_at = now(), attempts = attempts + 1"
            " WHERE id = ANY(%s)",
            [ids],
        )
        return cursor.rowcount


def _outbox_send_failed(event: OutboxEvent, exc: Exception) -> None:
    """Back off; dead-letter after RELAY_MAX_ATTEMPTS — unless the broker was unreachable, which
    says nothing about the event: an outage must not dead-letter everything pending."""
    event.attempts += 1
    event.last_error = f"{type(exc).__name__}: {exc}"[:2000]
    delay = backoff_seconds(event.attempts, base=1.0, cap=60.0)
    event.available_at = timezone.now() + timedelta(seconds=delay)
    if event.attempts >= settings.RELAY_MAX_ATTEMPTS and not relay.broker_unreachable(exc):
        event.dead_at = timezone.now()
        logger.error("outbox event %s dead-lettered after %s attempts", event.pk, event.attempts)
    event.save(update_fields=["attempts", "last_error", "available_at", "dead_at"])


def task_succeed(*, lease: Lease) -> None:
    """Mark the task succeeded. Must run inside a `fenced(lease)` transaction."""
    IngestionTask.objects.filter(pk=lease.task_id, lease_owner=lease.owner).update(
        status=IngestionTask.Status.SUCCEEDED,
        finished_at=Now(),
        lease_expires_at=None,
        last_error_code="",
        last_error="",
        updated_at=Now(),
    )


def task_fail(*, lease: Lease, code: str, message: str) -> None:
    """Terminal failure: the task fails and its build fails with a readable reason; whatever is
    live keeps serving. Fenced: a worker that lost its lease changes nothing."""
    with transaction.atomic():
        task = _lock_build_then_task(lease)
        _task_close(task, status=IngestionTask.Status.FAILED, code=code, message=message)


def task_retry_later(*, lease: Lease, code: str, message: str) -> None:
    """Retryable failure: back off with jitter and try again, or dead-letter past the cap."""
    with transaction.atomic():
        task = _lock_build_then_task(lease)
        if task.attempt >= task.max_attempts:
            _task_close(
                task,
                status=IngestionTask.Status.DEAD,
                code=code,
                message=f"gave up after {task.attempt} attempts: {message}",
            )
            return
        delay = backoff_seconds(
            task.attempt, base=settings.RETRY_BASE_SECONDS, cap=settings.RETRY_MAX_SECONDS
        )
        _task_requeue(task, status=IngestionTask.Status.RETRY_WAIT, delay=delay)
        task.last_error_code = code
        task.last_error = message[:4000]
        task.save(update_fields=["last_error_code", "last_error"])


PROVIDER_UNAVAILABLE = "provider_unavailable"


def task_wait_for_provider(*, lease: Lease, until: datetime, message: str) -> None:
    """The embedding provider is unavailable (its circuit breaker is open, or every attempt within
    the budget failed): wait in `retry_wait` until `until` with reason `provider_unavailable`.

    The provider's outage is not the task's fault, so the attempt the claim counted is given back:
    waiting never brings a task closer to `dead`, and its build keeps building. Fenced like
    `task_retry_later` (build, then task, then the lease check).
    """
    with transaction.atomic():
        task = _lock_build_then_task(lease)
        task.attempt = max(task.attempt - 1, 0)
        task.last_error_code = PROVIDER_UNAVAILABLE
        task.last_error = message[:4000]
        task.save(update_fields=["attempt", "last_error_code", "last_error"])
        delay = max(0.0, (until - timezone.now()).total_seconds())
        _task_requeue(task, status=IngestionTask.Status.RETRY_WAIT, delay=delay)


def _lock_build_then_task(lease: Lease) -> IngestionTask:
    """Lock in the one order (build, then task) and check the lease; raises LeaseLost."""
    build_id = IngestionTask.objects.values_list("build_id", flat=True).get(pk=lease.task_id)
    if build_id is not None:
        locks.lock_build(build_id)
    lease_check(lease)
    return IngestionTask.objects.get(pk=lease.task_id)


def _task_requeue(task: IngestionTask, *, status: str, delay: float = 0.0) -> None:
    task.status = status
    task.available_at = timezone.now() + timedelta(seconds=delay)
    task.lease_owner = ""
    task.lease_expires_at = None
    task.save(
        update_fields=["status", "available_at", "lease_owner", "lease_expires_at", "updated_at"]
    )
    outbox_add(task=task, delay=delay)


def _task_close(task: IngestionTask, *, status: str, code: str, message: str) -> None:
    """Close a task; its build, unless already decided, fails. Caller holds build and task."""
    task.status = status
    task.last_error_code = code
    task.last_error = message[:4000]
    task.lease_expires_at = None
    task.finished_at = timezone.now()
    task.save()
    if task.build_id:
        Build.objects.filter(pk=task.build_id).exclude(
            state__in=[Build.State.LIVE, Build.State.SUPERSEDED, Build.State.READY]
        ).update(state=Build.State.FAILED, error=message[:4000], finished_at=Now())


SWEEPER_LOCK_KEY = 0x43616E6F6E01  # "Canon" 1


def lease_sweep(*, limit: int = 200) -> int:
    """Return tasks whose lease expired to the queue (new outbox event, AuditEvent
    `lease_expired`), or dead-letter them past the attempt cap (the build fails with the reason;
    the live version keeps serving). Returns how many tasks it handled.

    Singleton: holds an advisory lock, so a second sweeper (a second beat) does nothing. Each task
    is handled in its own short transaction that locks build then task and re-checks expiry, so a
    worker renewing at the last moment wins. A build another transaction holds is skipped for
    this pass rather than waited for: a host cut off inside the switch holds it until PostgreSQL
    ends its idle transaction, and no other lease should wait for that.
    """
    handled = 0
    with locks.singleton(SWEEPER_LOCK_KEY) as held:
        if not held:
            return 0
        expired = list(
            IngestionTask.objects.filter(
                status=IngestionTask.Status.RUNNING, lease_expires_at__lt=Now()
            )
            .order_by("lease_expires_at")
            .values_list("pk", "build_id")[:limit]
        )
        for task_id, build_id in expired:
            with transaction.atomic():
                if build_id is not None and locks.try_lock_build(build_id) is None:
                    continue
                task = (
                    IngestionTask.objects.select_for_update(skip_locked=True)
                    .filter(
                        pk=task_id, status=IngestionTask.Status.RUNNING, lease_expires_at__lt=Now()
                    )
                    .first()
                )
                if task is None:
                    continue
                _lease_expired(task)
                handled += 1
    return handled


def _lease_expired(task: IngestionTask) -> None:
    dead = task.attempt >= task.max_attempts
    AuditEvent.objects.create(
        kind="lease_expired",
        kb_id=task.kb_id,
        subject_type="task",
        subject_id=task.pk,
        action="dead-lettered" if dead else "requeued",
        attempts=task.attempt,
        escalated=dead,
        details={"lease_owner": task.lease_owner, "build_id": task.build_id},
    )
    if dead:
        _task_close(
            task,
            status=IngestionTask.Status.DEAD,
            code="lease_expired",
            message=(
                f"The worker stopped (crash, kill or timeout) on all {task.attempt} attempts; "
                "giving up."
            ),
        )
    else:
        _task_requeue(task, status=IngestionTask.Status.QUEUED)
