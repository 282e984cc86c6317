"""The relay's failed sends (`ingestion.relay`): a message the broker refuses backs off and is
dead-lettered visibly after RELAY_MAX_ATTEMPTS; a broker that cannot be reached backs off but
never dead-letters. The message itself and batched round trips: tests/ingestion/test_relay.py."""

from __future__ import annotations

import pytest
from django.utils import timezone

from ingestion.relay import outbox_relay_batch
from kb.models import KnowledgeBase
from tests.helpers import upload_task
from work.models import OutboxEvent

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failing_send_backs_off_and_dead_letters_visibly(kb: KnowledgeBase, settings) -> None:
    settings.RELAY_MAX_ATTEMPTS = 3
    upload_task(kb, "doc", "text")

    def broken(event: OutboxEvent) -> None:
        raise ValueError("message rejected by the broker")

    for _ in range(3):
        OutboxEvent.objects.update(available_at=timezone.now())
        assert outbox_relay_batch(send=broken) == 0
    event = OutboxEvent.objects.get()
    assert event.attempts == 3
    assert event.dead_at is not None and event.published_at is None
    assert "message rejected" in event.last_error
    # a dead event is not retried
    assert outbox_relay_batch(send=broken) == 0
    assert OutboxEvent.objects.get().attempts == 3


def test_a_broker_outage_backs_off_but_never_dead_letters(kb: KnowledgeBase, settings) -> None:
    settings.RELAY_MAX_ATTEMPTS = 2
    upload_task(kb, "a", "text")
    upload_task(kb, "b", "text")
    sends: list[int] = []

    def unreachable(event: OutboxEvent) -> None:
        sends.append(event.pk)
        raise ConnectionError("connection refused")

    for _ in range(4):
        OutboxEvent.objects.update(available_at=timezone.now())
        assert outbox_relay_batch(send=unreachable) == 0
    # one failed send per pass (the rest keep their turn), and nothing is dead
    assert len(sends) == 4
    assert not OutboxEvent.objects.filter(dead_at__isnull=False).exists()
    OutboxEvent.objects.update(available_at=timezone.now())
    assert outbox_relay_batch(send=lambda event: None) == 2
