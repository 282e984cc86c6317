"""Event-level checks, every pass: waiting tasks whose outbox event died or whose message was
never claimed, a lagging outbox, and the event figures."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ingestion.reconciler.findings import (
    BATCH,
    Finding,
    fetch_rows,
)
from ingestion.relay import outbox_relay_batch
from work import broker
from work.models import IngestionTask, OutboxEvent
from work.outbox import outbox_add


def find_queued_without_event() -> Iterator[Finding]:
    for task_id, kb_id, status in fetch_rows(
        """
        SELECT t.id, t.kb_id, t.status FROM ingestion_ingestiontask t
        WHERE t.status IN ('queued', 'retry_wait')
          AND NOT EXISTS (
              SELECT 1 FROM ingestion_outboxevent e
              WHERE e.task_id = t.id AND e.dead_at IS NULL
                AND (e.published_at IS NULL OR e.published_at >= t.updated_at))
        ORDER BY t.id LIMIT %s
        """,
        [BATCH],
    ):
        yield Finding(
            "queued_without_event",
            "task",
            int(task_id),
            int(kb_id),
            f"{status} task has no pending outbox event",
        )


def _send_again(finding: Finding) -> bool:
    """A new outbox event for the finding's task, if it still waits to run (under its lock)."""
    with transaction.atomic():
        task = IngestionTask.objects.select_for_update().get(pk=finding.subject_id)
        if task.status not in ("queued", "retry_wait"):
            return False
        outbox_add(task=task)
    return True


def repair_queued_without_event(finding: Finding) -> str:
    return "added an outbox event" if _send_again(finding) else "no longer queued"


def find_sent_never_claimed() -> Iterator[Finding]:
    """A queued task whose message went out RECONCILER_UNCLAIMED_SECONDS ago and was never
    claimed, while the broker's queue is empty: its message is nowhere a worker will look soon. A
    worker that took it died before claiming (Redis keeps such a message unacked for the
    visibility timeout, 40 minutes), or Redis lost it. While the queue holds messages, a backlog
    explains the wait and nothing is found. Sending again is harmless: claiming a task that is
    no longer queued does nothing."""
    threshold = timezone.now() - timedelta(seconds=settings.RECONCILER_UNCLAIMED_SECONDS)
    rows = fetch_rows(
        """
        SELECT t.id, t.kb_id, max(e.published_at) FROM ingestion_ingestiontask t
        JOIN ingestion_outboxevent e ON e.task_id = t.id AND e.published_at >= t.updated_at
        WHERE t.status IN ('queued', 'retry_wait') AND t.updated_at < %s
          AND NOT EXISTS (
              SELECT 1 FROM ingestion_outboxevent u
              WHERE u.task_id = t.id AND u.published_at IS NULL AND u.dead_at IS NULL)
        GROUP BY t.id, t.kb_id HAVING max(e.published_at) < %s
        ORDER BY t.id LIMIT %s
        """,
        [threshold, threshold, BATCH],
    )
    if not rows or broker.queue_length() != 0:
        return
    for task_id, kb_id, sent_at in rows:
        yield Finding(
            "sent_never_claimed",
            "task",
            int(task_id),
            int(kb_id),
            f"sent at {sent_at:%H:%M:%S}, never claimed, and the task queue is empty",
        )


def repair_sent_never_claimed(finding: Finding) -> str:
    return "sent again (added an outbox event)" if _send_again(finding) else "claimed meanwhile"


def find_outbox_lagging() -> Iterator[Finding]:
    threshold = timezone.now() - timedelta(seconds=settings.RECONCILER_OUTBOX_LAG_SECONDS)
    for event in (
        OutboxEvent.objects.filter(
            published_at__isnull=True, dead_at__isnull=True, available_at__lt=threshold
        )
        .select_related("task")
        .order_by("available_at", "id")[:BATCH]
    ):
        yield Finding(
            "outbox_lagging",
            "outbox_event",
            event.pk,
            event.task.kb_id if event.task else None,
            f"unpublished since {event.available_at:%H:%M:%S}: {event.last_error[:200]}",
        )


def repair_outbox_lagging(finding: Finding) -> str:
    sent = outbox_relay_batch()
    return f"ran the relay: {sent} sent"


def event_figures() -> dict[str, Any]:
    """The event level's numbers, from indexed reads: events waiting to be sent and the age of
    the oldest, and dead letters whose task still waits (queued_without_event sends those
    again)."""
    ((pending, oldest),) = fetch_rows(
        """
        SELECT count(*), extract(epoch FROM now() - min(available_at)) FROM ingestion_outboxevent
        WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now()
        """,
        [],
    )
    ((dead,),) = fetch_rows(
        """
        SELECT count(*) FROM ingestion_ingestiontask t
        JOIN ingestion_outboxevent e ON e.task_id = t.id
        WHERE t.status IN ('queued', 'retry_wait') AND e.dead_at IS NOT NULL
        """,
        [],
    )
    return {
        "outbox_pending": int(pending),
        "outbox_oldest_seconds": round(float(oldest), 1) if oldest is not None else 0.0,
        "dead_letters_of_waiting_tasks": int(dead),
    }
