"""Tasks and the outbox events that announce them, written in the caller's transaction.

The relay (`ingestion.relay`) delivers the events; a worker runs the task named by its message.
Nothing here imports a task: messages name tasks (`RELAY_TASK`), so this floor sits below every
app that creates work.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from work import broker, faults
from work.models import IngestionTask, OutboxEvent

logger = logging.getLogger(__name__)

# The task that runs the relay (`ingestion.tasks.relay_outbox`), by the name its message carries.
RELAY_TASK = "ingestion.tasks.relay_outbox"


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
    faults.after_outbox_commit()
    try:
        broker.publish(RELAY_TASK, expires=30)
    except Exception as exc:  # the broker is down; the outbox keeps the intent
        logger.warning("relay nudge not sent: %s", exc)
