"""Writes of the ingestion side: tasks and their outbox events, the relay, task outcomes."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from ingestion import faults
from ingestion.leases import Lease, lease_check
from ingestion.models import IngestionTask, OutboxEvent
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
) -> IngestionTask:
    """Create a queued task and its outbox event. Call inside the transaction that writes the fact
    the task acts on, so both commit or neither does."""
    task = IngestionTask.objects.create(
        kind=kind,
        kb_id=kb_id,
        document_id=document_id,
        build_id=build_id,
        max_attempts=settings.TASK_MAX_ATTEMPTS,
        available_at=timezone.now(),
    )
    outbox_add(task=task)
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

    try:
        relay_outbox.apply_async(retry=False, expires=30)
    except Exception as exc:  # the broker is down; the outbox keeps the intent
        logger.warning("relay nudge not sent: %s", exc)


def send_run_task(event: OutboxEvent) -> None:
    from ingestion.tasks import run_task

    run_task.apply_async(args=(event.payload["task_id"],), retry=False)


def outbox_relay_batch(
    *, limit: int | None = None, send: Callable[[OutboxEvent], None] = send_run_task
) -> int:
    """Deliver up to `limit` unpublished, available outbox events; return how many were sent.

    Claims rows with FOR UPDATE SKIP LOCKED, so several relays can run at once without sending
    an event twice in one pass. A send that succeeded but whose mark did not commit (crash) is sent
    again later: consumers are idempotent. A failing send backs off; after RELAY_MAX_ATTEMPTS the
    event is dead-lettered (`dead_at`), visibly.
    """
    limit = limit or settings.RELAY_BATCH_SIZE
    sent = 0
    with transaction.atomic():
        events = list(
            OutboxEvent.objects.select_for_update(skip_locked=True)
            .filter(published_at__isnull=True, dead_at__isnull=True, available_at__lte=Now())
            .order_by("available_at", "id")[:limit]
        )
        published_ids = []
        for event in events:
            try:
                send(event)
            except Exception as exc:
                _outbox_send_failed(event, exc)
                continue
            faults.relay_after_send()
            published_ids.append(event.pk)
        if published_ids:
            sent = OutboxEvent.objects.filter(pk__in=published_ids).update(
                published_at=Now(), attempts=F("attempts") + 1
            )
    return sent


def _outbox_send_failed(event: OutboxEvent, exc: Exception) -> None:
    event.attempts += 1
    event.last_error = f"{type(exc).__name__}: {exc}"[:2000]
    delay = backoff_seconds(event.attempts, base=1.0, cap=60.0)
    event.available_at = timezone.now() + timedelta(seconds=delay)
    if event.attempts >= settings.RELAY_MAX_ATTEMPTS:
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
        lease_check(lease)
        task = IngestionTask.objects.get(pk=lease.task_id)
        _task_close(task, status=IngestionTask.Status.FAILED, code=code, message=message)


def task_retry_later(*, lease: Lease, code: str, message: str) -> None:
    """Retryable failure: back off with jitter and try again, or dead-letter past the cap."""
    with transaction.atomic():
        lease_check(lease)
        task = IngestionTask.objects.get(pk=lease.task_id)
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
        task.status = IngestionTask.Status.RETRY_WAIT
        task.available_at = timezone.now() + timedelta(seconds=delay)
        task.lease_owner = ""
        task.lease_expires_at = None
        task.last_error_code = code
        task.last_error = message[:4000]
        task.save()
        outbox_add(task=task, delay=delay)


def _task_close(task: IngestionTask, *, status: str, code: str, message: str) -> None:
    task.status = status
    task.last_error_code = code
    task.last_error = message[:4000]
    task.lease_expires_at = None
    task.finished_at = timezone.now()
    task.save()
    if task.build_id:
        Build.objects.filter(pk=task.build_id).exclude(
            state__in=[Build.State.LIVE, Build.State.SUPERSEDED]
        ).update(state=Build.State.FAILED, error=message[:4000], finished_at=Now())
