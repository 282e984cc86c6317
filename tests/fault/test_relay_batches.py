"""The relay's pipelined round trips when the broker refuses one midway: real `canon_relay`
processes, a Redis of the test's own that runs out of memory (noeviction: writes are refused),
and a real worker that runs what was sent, duplicates included."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from django.utils import timezone

from config.celery import app as celery_app
from kb.models import Document, KnowledgeBase
from tests.conftest import wait_for
from tests.fault.harness import (
    assert_verified,
    live_revision,
    paragraphs,
    pending_tasks,
    resume,
    upload,
)
from tests.fault.test_delivery import (  # noqa: F401 (fixtures)
    PROCESS_BOUND,
    WORKER_ENV,
    Child,
    RedisServer,
    broker_env,
    no_nudge,
    private_redis,
    queued_run_tasks,
    run_task_outcomes,
    spawn,
)
from work.models import IngestionTask, OutboxEvent

pytestmark = pytest.mark.integration

EVENTS = 30
ROUND_TRIP = 5


def test_a_round_trip_refused_midway_marks_only_what_was_sent_and_the_rest_goes_again(
    private_redis: RedisServer,  # noqa: F811
    no_nudge: None,  # noqa: F811
    worker_factory: Any,
    spawn: Callable[..., Child],  # noqa: F811
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    broker = redis.Redis.from_url(private_redis.url)
    queue = str(celery_app.conf.task_default_queue)  # worker_factory's queue
    env = {**broker_env(private_redis.url), "CANON_RELAY_MAX_ATTEMPTS": "1"}
    # given 30 uploads whose events nobody has sent
    for i in range(EVENTS):
        upload(kb, f"rt-{i:02d}", paragraphs(f"rt-{i:02d}", n=2, words=20))
    claim_order = list(
        OutboxEvent.objects.order_by("available_at", "id").values_list("pk", "task_id")
    )
    assert len(claim_order) == EVENTS

    # when a relay pass sending five per round trip stops after its first round trip, the broker
    # is left room for about two more messages (~1.2 kB each; noeviction refuses writes past
    # maxmemory), and the relay goes on
    markers = tmp_path / "markers"
    relay = spawn(
        "canon_relay",
        "--round-trip",
        str(ROUND_TRIP),
        name="relay",
        env={
            **env,
            "CANON_FAULT_PAUSE_AT": "relay_after_round_trip",
            "CANON_FAULT_MARKER_DIR": str(markers),
        },
    )
    wait_for(
        lambda: list(markers.glob("paused_relay_after_round_trip.*")),
        relay=False,
        timeout=PROCESS_BOUND,
        what="the relay to stop after its first round trip",
    )
    broker.config_set("maxmemory", broker.info("memory")["used_memory"] + 2 * 1300)
    resume(relay.proc.pid)
    assert relay.finish() == 0, relay.output

    # then exactly the first round trip's events are published, their messages are in the
    # broker, and the refused round trip's events back off, not dead-lettered (even at one
    # attempt: a refused round trip says nothing about its events); the rest keep their turn
    published = set(
        OutboxEvent.objects.filter(published_at__isnull=False).values_list("pk", flat=True)
    )
    sent = len(published)
    assert sent == ROUND_TRIP, relay.output
    assert published == {pk for pk, _ in claim_order[:sent]}
    queued = queued_run_tasks(private_redis.url, queue)
    assert {task_id for _, task_id in claim_order[:sent]} <= set(queued)
    refused = [pk for pk, _ in claim_order[sent : sent + ROUND_TRIP]]
    for event in OutboxEvent.objects.filter(pk__in=refused):
        assert (event.published_at, event.dead_at, event.attempts) == (None, None, 1)
        assert "BatchPublishError" in event.last_error, event.last_error
    untouched = OutboxEvent.objects.filter(
        pk__in=[pk for pk, _ in claim_order[sent + ROUND_TRIP :]]
    )
    assert list(untouched.values_list("attempts", "last_error").distinct()) == [(0, "")]
    stored_of_refused = sum(queued[task_id] for _, task_id in claim_order[sent : sent + ROUND_TRIP])

    # and when the broker has room again and the relay runs once more, every event is published,
    # the refused round trip's messages a second time if they had been stored
    broker.config_set("maxmemory", 0)
    OutboxEvent.objects.update(available_at=timezone.now())
    again = spawn("canon_relay", name="relay again", env=env)
    assert again.finish() == 0, again.output
    assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()
    queued = queued_run_tasks(private_redis.url, queue)
    assert set(queued) == {task_id for _, task_id in claim_order}
    assert sum(queued.values()) == EVENTS + stored_of_refused

    # then a worker runs each task once; a duplicate message finds its task done
    worker = worker_factory(pool="solo", REDIS_URL=private_redis.url, **WORKER_ENV)
    wait_for(
        lambda: (
            pending_tasks() == 0 and len(run_task_outcomes(worker)) == EVENTS + stored_of_refused
        ),
        relay=False,
        timeout=PROCESS_BOUND * 2,
        what="the worker to run every task and see every duplicate",
    )
    assert Counter(run_task_outcomes(worker)) == Counter(
        {"published": EVENTS, "not_claimed": stored_of_refused}
    )
    assert list(IngestionTask.objects.values_list("status", "attempt").distinct()) == [
        (IngestionTask.Status.SUCCEEDED, 1)
    ]
    for document in Document.objects.filter(kb=kb):
        assert live_revision(document) == 1
    assert_verified()


def test_a_broker_refusing_every_write_stops_the_pass_and_dead_letters_nothing(
    private_redis: RedisServer,  # noqa: F811
    no_nudge: None,  # noqa: F811
    worker_factory: Any,
    spawn: Callable[..., Child],  # noqa: F811
    kb: KnowledgeBase,
) -> None:
    # given three unsent events and a broker out of memory (it refuses even the queue's
    # declaration, before any message is buffered)
    for i in range(3):
        upload(kb, f"oom-{i}", paragraphs(f"oom-{i}", n=1, words=10))
    redis.Redis.from_url(private_redis.url).config_set("maxmemory", 1)

    # when a relay pass runs, each event allowed a single attempt
    env = {**broker_env(private_redis.url), "CANON_RELAY_MAX_ATTEMPTS": "1"}
    relay = spawn("canon_relay", name="relay", env=env)
    assert relay.finish() == 0, relay.output

    # then the pass stopped at the first refusal: one event backs off, the others keep their
    # turn, and none is dead-lettered, since the refusal was the broker's, not the event's
    events = list(OutboxEvent.objects.order_by("available_at", "id"))
    assert [(e.published_at, e.dead_at) for e in events] == [(None, None)] * 3
    assert sorted(e.attempts for e in events) == [0, 0, 1]
    refused = next(e for e in events if e.attempts)
    assert "OperationalError" in refused.last_error and "maxmemory" in refused.last_error
