"""B5 relay: events/s through outbox_relay_batch to Redis (Celery messages on a queue nobody
consumes), against a raw redis-py LPUSH pipeline of same-sized payloads to the same Redis."""

from __future__ import annotations

import os
import time
from typing import Any

from bench import common


def main() -> None:
    a = common.args(__doc__ or "", events=5000, rounds=2)
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
    results.update(
        events=a.events,
        ours_events_per_s=round(ours, 1),
        raw_events_per_s=round(raw, 1),
        ours_over_raw=common.ratio(ours, raw),
        outbox_lag="not measured (steady-upload lag is not built)",
    )
    common.report(
        "B5",
        results,
        [
            ("contender", "events/s (best of rounds)", "ratio"),
            ("relay", round(ours), common.ratio(ours, raw)),
            ("raw LPUSH pipeline", round(raw), 1.0),
        ],
    )


if __name__ == "__main__":
    main()
