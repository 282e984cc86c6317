"""The relay's broker side (`work.broker`) on the test Redis: the message it builds is the
one `apply_async` sends, and a pass of several round trips sends every event once, in order.
The round trip that fails midway, and the duplicate it leaves, run with real processes in
tests/fault/test_relay_batches.py."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import transaction

from config.celery import app as celery_app
from ingestion.relay import outbox_relay_batch
from ingestion.tasks import run_task
from kb.models import KnowledgeBase
from work import broker, outbox
from work.models import IngestionTask, OutboxEvent
from work.outbox import task_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A queue of this test's own, which only the code under test sends to (no nudges)."""
    monkeypatch.setattr(outbox, "relay_nudge", lambda: None)
    name = f"test-relay-{uuid.uuid4().hex[:10]}"
    previous = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = name
    yield name
    celery_app.conf.task_default_queue = previous
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(name)


def sent_messages(queue: str) -> list[dict[str, Any]]:
    """The queue's messages in the order they were sent (kombu LPUSHes, workers BRPOP)."""
    raw = redis.Redis.from_url(settings.CELERY_BROKER_URL).lrange(queue, 0, -1)
    return [json.loads(m) for m in reversed(raw)]


def body(message: dict[str, Any]) -> Any:
    assert message["properties"]["body_encoding"] == "base64"
    return json.loads(base64.b64decode(message["body"]))


def without_ids(message: dict[str, Any]) -> dict[str, Any]:
    """The message with its per-message ids (task id, root id = task id, delivery tag) blanked."""
    headers = dict(message["headers"])
    assert headers["root_id"] == headers["id"]
    headers.update(id="-", root_id="-")
    properties = dict(message["properties"])
    assert properties["correlation_id"] == message["headers"]["id"]
    properties.update(correlation_id="-", delivery_tag="-")
    return {**message, "headers": headers, "properties": properties}


def test_the_relay_sends_the_message_apply_async_sends(queue: str) -> None:
    # given the same task sent once by Celery's apply_async and once by the relay's batch
    broker.publish(run_task.name, args=(42,))
    with broker.run_task_batch(max_size=10) as batch:
        batch.add(42)

    # then both are in the default queue and differ only in their ids
    by_apply_async, by_relay = sent_messages(queue)
    assert body(by_relay) == [[42], {}, {"callbacks": None, "errbacks": None, "chain": None,
                                         "chord": None}]  # fmt: skip
    assert by_relay["headers"]["task"] == "ingestion.tasks.run_task"
    assert by_relay["headers"]["ignore_result"] is True
    assert by_relay["headers"]["timelimit"] == [
        settings.CELERY_TASK_TIME_LIMIT,
        settings.CELERY_TASK_SOFT_TIME_LIMIT,
    ]
    assert by_relay["properties"]["delivery_info"]["routing_key"] == queue
    assert by_relay["headers"]["id"] != by_apply_async["headers"]["id"]
    assert without_ids(by_relay) == without_ids(by_apply_async)


def test_a_pass_of_several_round_trips_sends_every_event_once_in_order(
    queue: str, kb: KnowledgeBase
) -> None:
    # given 12 unpublished events
    with transaction.atomic():
        tasks = [task_create(kind=IngestionTask.Kind.BUILD, kb_id=kb.pk) for _ in range(12)]

    # when one pass sends them five messages per round trip
    assert outbox_relay_batch(round_trip=5) == 12

    # then the broker holds one message per event, in the claim order, and each is marked once
    assert [body(m)[0] for m in sent_messages(queue)] == [[t.pk] for t in tasks]
    assert list(OutboxEvent.objects.values_list("attempts", "last_error").distinct()) == [(1, "")]
    assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()
    assert outbox_relay_batch(round_trip=5) == 0


def test_a_send_refused_for_one_event_leaves_the_others_sent(
    queue: str, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given three events, the second of which cannot be turned into a message
    with transaction.atomic():
        tasks = [task_create(kind=IngestionTask.Kind.BUILD, kb_id=kb.pk) for _ in range(3)]
    broken = OutboxEvent.objects.get(task=tasks[1])
    broken.payload = {"task_id": "not a number"}
    broken.save()

    # when one pass sends them
    assert outbox_relay_batch(round_trip=5) == 2

    # then the other two are in the broker and marked; the broken one backs off, unpublished
    assert [body(m)[0] for m in sent_messages(queue)] == [[tasks[0].pk], [tasks[2].pk]]
    broken.refresh_from_db()
    assert (broken.published_at, broken.attempts) == (None, 1)
    assert "ValueError" in broken.last_error and broken.dead_at is None


def test_task_routes_that_look_at_the_arguments_route_each_message(
    queue: str, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a router that sends the run_task messages of odd task ids to another queue
    odd_queue = f"{queue}-odd"

    def by_parity(name: str, args: Any, kwargs: Any, options: Any, **_: Any) -> Any:
        if name == run_task.name and args[0] % 2:
            return {"queue": odd_queue}
        return None

    with transaction.atomic():
        tasks = [task_create(kind=IngestionTask.Kind.BUILD, kb_id=kb.pk) for _ in range(6)]
    previous_routes = celery_app.conf.task_routes
    celery_app.conf.task_routes = (by_parity,)
    monkeypatch.setattr(celery_app.amqp, "_rtable", None)  # Celery re-reads task_routes
    monkeypatch.setattr(celery_app.amqp, "router", celery_app.amqp.Router())

    # when one pass sends them
    try:
        assert outbox_relay_batch(round_trip=4) == 6
        odd = sent_messages(odd_queue)
    finally:
        celery_app.conf.task_routes = previous_routes
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(odd_queue)

    # then each went where the router said
    assert [body(m)[0] for m in odd] == [[t.pk] for t in tasks if t.pk % 2]
    assert [body(m)[0] for m in sent_messages(queue)] == [[t.pk] for t in tasks if not t.pk % 2]
