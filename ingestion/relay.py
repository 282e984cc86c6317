"""The outbox relay: claims unpublished events and hands their messages to the broker
(`work.broker`), marking what the broker surely has."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from work import broker, faults
from work.backoff import backoff_seconds
from work.models import OutboxEvent

logger = logging.getLogger(__name__)


def outbox_relay_batch(
    *,
    limit: int | None = None,
    send: Callable[[OutboxEvent], object] | None = None,
    round_trip: int = broker.ROUND_TRIP_SIZE,
) -> int:
    """Deliver up to `limit` unpublished, available outbox events; return how many were sent.

    Claims rows with FOR UPDATE SKIP LOCKED, so several relays can run at once without sending
    an event twice in one pass, and publishes the claimed events' `run_task` messages in
    pipelined round trips of `round_trip` messages (`work.broker`), or through `send`, one
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
    batch: broker.RunTaskBatch | None = None
    try:
        with (
            contextlib.nullcontext()
            if send is not None
            else broker.run_task_batch(max_size=round_trip + 1)
        ) as batch:
            for event in events:
                try:
                    if batch is None:
                        send(event)  # type: ignore[misc]
                    else:
                        batch.add(int(event.payload["task_id"]))
                except Exception as exc:
                    _outbox_send_failed(event, exc)
                    if broker.broker_unreachable(exc):
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
    if event.attempts >= settings.RELAY_MAX_ATTEMPTS and not broker.broker_unreachable(exc):
        event.dead_at = timezone.now()
        logger.error("outbox event %s dead-lettered after %s attempts", event.pk, event.attempts)
    event.save(update_fields=["attempts", "last_error", "available_at", "dead_at"])
