"""B5 relay: events/s through outbox_relay_batch to Redis (Celery messages on a queue nobody
consumes), against a raw redis-py LPUSH pipeline of same-sized payloads to the same Redis; then
the outbox lag (event committed -> published) under a steady rate of task-creating commits, with
the product's delivery: the on-commit nudge to a real worker, and a relay every
RELAY_INTERVAL_SECONDS as beat runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from bench import common


def main() -> None:
    a = common.args(__doc__ or "", events=5000, rounds=2, lag_rate=20.0, lag_seconds=10.0)
    common.setup()
    import redis
    from django.db import transaction

    from config.celery import app as celery_app
    from ingestion.models import IngestionTask, OutboxEvent
    from ingestion.services import outbox_relay_batch, task_create
    from kb.models import Document

    queue = f"bench-relay-{os.getpid()}"
    celery_app.conf.task_default_queue = queue
    kb = common.tenant_kb("relay")
    document, _ = Document.objects.get_or_create(kb=kb, key="relay", defaults={"title": "relay"})
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    results: dict[str, Any] = {"ours": [], "raw": []}
    try:
        for _ in range(a.rounds):
            with transaction.atomic():
                tasks = [
                    task_create(kind=IngestionTask.Kind.GC, kb_id=kb.pk, document_id=document.pk)
                    for _ in range(a.events)
                ]
            t0 = time.perf_counter()
            sent = 0
            while True:
                n = outbox_relay_batch()
                if not n:
                    break
                sent += n
            ours_s = time.perf_counter() - t0
            assert sent == a.events, (sent, a.events)
            payload = client.lindex(queue, 0) or b"x" * 1000
            t0 = time.perf_counter()
            for start in range(0, a.events, 500):
                pipe = client.pipeline(transaction=False)
                for _ in range(min(500, a.events - start)):
                    pipe.lpush(queue + "-raw", payload)
                pipe.execute()
            raw_s = time.perf_counter() - t0
            results["ours"].append(a.events / ours_s)
            results["raw"].append(a.events / raw_s)
            OutboxEvent.objects.filter(task__in=tasks).delete()
            IngestionTask.objects.filter(pk__in=[t.pk for t in tasks]).delete()
            client.delete(queue, queue + "-raw")
        results["payload_bytes"] = len(payload)
    finally:
        client.delete(queue, queue + "-raw")
    ours, raw = max(results["ours"]), max(results["raw"])
    lag = outbox_lag(kb, document, rate=a.lag_rate, seconds=a.lag_seconds)
    results.update(
        events=a.events,
        ours_events_per_s=round(ours, 1),
        raw_events_per_s=round(raw, 1),
        ours_over_raw=common.ratio(ours, raw),
        outbox_lag=lag,
    )
    common.report(
        "B5",
        results,
        [
            ("contender", "events/s (best of rounds)", "ratio"),
            ("relay", round(ours), common.ratio(ours, raw)),
            ("raw LPUSH pipeline", round(raw), 1.0),
            (
                f"outbox lag at {a.lag_rate:g} commits/s, ms",
                f"p50 {lag['p50_ms']}, p95 {lag['p95_ms']}, max {lag['max_ms']}",
                f"{lag['events']} events",
            ),
        ],
    )


def outbox_lag(kb: Any, document: Any, *, rate: float, seconds: float) -> dict[str, Any]:
    """Commit one task (and its outbox event) every 1/rate s for `seconds`, delivered as in
    production: the commit's nudge makes a real worker run the relay, and a relay loop stands
    in for beat's schedule. Lag = published_at - created_at, both on the database clock."""
    from django.conf import settings
    from django.db import transaction

    from ingestion.models import IngestionTask, OutboxEvent
    from ingestion.services import task_create

    interval = str(settings.RELAY_INTERVAL_SECONDS)
    beat = subprocess.Popen(
        [sys.executable, "manage.py", "canon_relay", "--loop", "--interval", interval],
        cwd=common.ROOT,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
    )
    ids: list[int] = []
    try:
        with common.worker(concurrency=2):
            start = next_at = time.monotonic()
            while time.monotonic() - start < seconds:
                with transaction.atomic():
                    task = task_create(
                        kind=IngestionTask.Kind.GC, kb_id=kb.pk, document_id=document.pk
                    )
                ids.append(task.pk)
                next_at += 1 / rate
                time.sleep(max(0.0, next_at - time.monotonic()))
            events = OutboxEvent.objects.filter(task_id__in=ids)
            deadline = time.monotonic() + 60
            while events.filter(published_at__isnull=True).exists():
                assert time.monotonic() < deadline, "the outbox did not drain in 60 s"
                time.sleep(0.1)
            lags = [
                (published - created).total_seconds() * 1000
                for created, published in events.values_list("created_at", "published_at")
                if published is not None
            ]
    finally:
        beat.terminate()
        beat.wait(10)
        OutboxEvent.objects.filter(task_id__in=ids).delete()
        IngestionTask.objects.filter(pk__in=ids).delete()
    return {
        "rate_per_s": rate,
        "events": len(lags),
        "relay_interval_s": settings.RELAY_INTERVAL_SECONDS,
        "p50_ms": round(common.percentile(lags, 50), 1),
        "p95_ms": round(common.percentile(lags, 95), 1),
        "max_ms": round(max(lags), 1),
    }


if __name__ == "__main__":
    main()
