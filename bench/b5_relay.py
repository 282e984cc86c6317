"""B5 relay: events/s through outbox_relay_batch to Redis (Celery messages on a queue nobody
consumes), side by side in one run with

- the previous relay path (`Task.apply_async` per message inside the same kombu batch),
- the relay's database work alone (claim FOR UPDATE SKIP LOCKED + mark, nothing published),
- publishing alone, no database: the relay's `RunTaskBatch`, `apply_async` in a kombu batch,
  and a raw redis-py LPUSH pipeline of same-sized payloads to the same Redis,
- the relay at larger batch sizes (`--limits`);

then a cProfile of one relay pass of `--events` events, its time split by phase; then the outbox
lag (event committed -> published) under a steady rate of task-creating commits, with the
product's delivery: the on-commit nudge to a real worker, and a relay every
RELAY_INTERVAL_SECONDS as beat runs it. Rounds interleave the contenders, best of rounds."""

from __future__ import annotations

import cProfile
import functools
import io
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import common

# Where a relay pass spends its time: cumulative seconds of these functions in the profile.
PHASES = {
    "claim (SELECT ... FOR UPDATE SKIP LOCKED)": ("django/db/models/query.py", "__iter__"),
    "mark sent (UPDATE ... = ANY)": ("ingestion/relay.py", "_outbox_mark_sent"),
    "route (app.amqp.router.route)": ("celery/app/routes.py", "route"),
    "build message (app.amqp.create_task_message)": ("celery/app/amqp.py", "as_task_v2"),
    "kombu publish: serialise, envelope, buffer": ("kombu/messaging.py", "publish"),
    "Redis round trips (pipeline execute)": ("kombu/transport/redis.py", "flush"),
}


def main() -> None:
    a = common.args(
        __doc__ or "",
        events=5000,
        rounds=3,
        limits="1000,5000",
        lag_rate=20.0,
        lag_seconds=10.0,
        db=os.environ.get("BENCH_DB", common.DB_NAME),
    )
    common.DB_NAME = a.db
    common.setup()
    import redis

    from config.celery import app as celery_app
    from ingestion.relay import outbox_relay_batch
    from kb.models import Document
    from work import broker

    queue = f"bench-relay-{os.getpid()}"
    celery_app.conf.task_default_queue = queue
    kb = common.tenant_kb("relay")
    document, _ = Document.objects.get_or_create(kb=kb, key="relay", defaults={"title": "relay"})
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    limits = [int(x) for x in a.limits.split(",") if x]
    n = a.events

    def relay_pass(limit: int | None = None, **kw: Any) -> Clock:
        """Seconds to relay n fresh events to an empty queue, with `limit` events per batch."""
        ids = make_events(kb.pk, document.pk, n)
        try:
            t0 = Clock.now()
            sent = 0
            while sent < n:
                got = outbox_relay_batch(limit=limit, **kw)
                assert got, f"relay stalled at {sent}/{n}"
                sent += got
            return Clock.now() - t0
        finally:
            drop_events(ids)
            client.delete(queue)

    def previous_pass() -> Clock:
        """The previous relay: apply_async per event inside one kombu batch per relay pass."""
        from ingestion.tasks import run_task as task

        run_task: Any = task

        def one_pass() -> int:
            with broker.producer(celery_app) as producer, producer.batch(max_size=n + 1):
                first = [True]

                def send(event: Any) -> None:
                    task_id = int(event.payload["task_id"])
                    options: dict[str, Any] = {"argsrepr": f"({task_id},)", "kwargsrepr": "{}"}
                    if not first[0]:
                        options["declare"] = []
                    run_task.apply_async(args=(task_id,), producer=producer, retry=False, **options)
                    first[0] = False

                return outbox_relay_batch(send=send)

        ids = make_events(kb.pk, document.pk, n)
        try:
            t0 = Clock.now()
            sent = 0
            while sent < n:
                sent += one_pass()
            elapsed = Clock.now() - t0
            assert client.llen(queue) == n, client.llen(queue)
            return elapsed
        finally:
            drop_events(ids)
            client.delete(queue)

    def publish_only(kind: str) -> Clock:
        """Seconds to publish n run_task messages with no database work."""
        from ingestion.tasks import run_task as task

        run_task: Any = task

        t0 = Clock.now()
        if kind == "relay":
            for start in range(0, n, broker.ROUND_TRIP_SIZE):
                with broker.run_task_batch(max_size=broker.ROUND_TRIP_SIZE + 1) as batch:
                    for task_id in range(start, min(n, start + broker.ROUND_TRIP_SIZE)):
                        batch.add(task_id)
        elif kind == "apply_async":
            for start in range(0, n, broker.ROUND_TRIP_SIZE):
                with (
                    broker.producer(celery_app) as producer,
                    producer.batch(max_size=broker.ROUND_TRIP_SIZE + 1),
                ):
                    for task_id in range(start, min(n, start + broker.ROUND_TRIP_SIZE)):
                        run_task.apply_async(
                            args=(task_id,),
                            producer=producer,
                            retry=False,
                            argsrepr=f"({task_id},)",
                            kwargsrepr="{}",
                            declare=[] if task_id else None,
                        )
        else:
            payload = client.lindex(queue, 0) or b"x" * 1000
            for start in range(0, n, broker.ROUND_TRIP_SIZE):
                pipe = client.pipeline(transaction=False)
                for _ in range(min(broker.ROUND_TRIP_SIZE, n - start)):
                    pipe.lpush(queue + "-raw", payload)
                pipe.execute()
        elapsed = Clock.now() - t0
        if kind != "raw":
            assert client.llen(queue) == n, client.llen(queue)
        return elapsed

    contenders: dict[str, Callable[[], Clock]] = {
        "relay": relay_pass,
        "relay, apply_async per message (previous)": previous_pass,
        "relay, database only (claim + mark)": lambda: relay_pass(send=_nothing),
        "publish only: relay's RunTaskBatch": lambda: publish_only("relay"),
        "publish only: apply_async in a kombu batch": lambda: publish_only("apply_async"),
        "publish only: raw LPUSH pipeline": lambda: publish_only("raw"),
    }
    for limit in limits:
        contenders[f"relay, {limit} events per batch"] = functools.partial(relay_pass, limit)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    cpu_rates: dict[str, list[float]] = {name: [] for name in contenders}
    payload_bytes = 0
    try:
        for _ in range(a.rounds):
            for name, run in contenders.items():
                if name == "publish only: raw LPUSH pipeline":
                    publish_only("relay")  # a real message to copy the size of
                    payload_bytes = len(client.lindex(queue, 0) or b"")
                elapsed = run()
                client.delete(queue, queue + "-raw")
                rates[name].append(n / elapsed.wall)
                cpu_rates[name].append(n / elapsed.cpu)
            print(
                "round:",
                {k: round(v[-1]) for k, v in rates.items()},
                "load",
                os.getloadavg(),
                flush=True,
            )
    finally:
        client.delete(queue, queue + "-raw")
    best = {name: max(values) for name, values in rates.items()}
    best_cpu = {name: max(values) for name, values in cpu_rates.items()}
    raw = best["publish only: raw LPUSH pipeline"]
    previous = best["relay, apply_async per message (previous)"]
    profile = profile_pass(kb.pk, document.pk, n, lambda: client.delete(queue))
    lag = outbox_lag(kb, document, rate=a.lag_rate, seconds=a.lag_seconds)
    load = os.getloadavg()
    results: dict[str, Any] = {
        "events": n,
        "rounds": a.rounds,
        "payload_bytes": payload_bytes,
        "events_per_s": {k: round(v, 1) for k, v in best.items()},
        "all_rounds": {k: [round(x) for x in v] for k, v in rates.items()},
        "events_per_cpu_s": {k: round(v, 1) for k, v in best_cpu.items()},
        "ours_events_per_s": round(best["relay"], 1),
        "raw_events_per_s": round(raw, 1),
        "ours_over_raw": common.ratio(best["relay"], raw),
        "ours_over_previous": common.ratio(best["relay"], previous),
        "profile": profile,
        "outbox_lag": lag,
        "loadavg": [round(x, 2) for x in load],
    }
    rows: list[tuple[Any, ...]] = [
        (
            "contender",
            "events/s (best of rounds)",
            "ratio to raw",
            "ratio to previous",
            "events per CPU-s of this process",
        )
    ]
    for name, rate in best.items():
        rows.append(
            (
                name,
                round(rate),
                common.ratio(rate, raw),
                common.ratio(rate, previous),
                round(best_cpu[name]),
            )
        )
    rows.append(
        (
            f"outbox lag at {a.lag_rate:g} commits/s, ms",
            f"p50 {lag['p50_ms']}, p95 {lag['p95_ms']}, max {lag['max_ms']}",
            f"{lag['events']} events",
            "",
            "",
        )
    )
    rows.append(("profile of one pass (cProfile)", f"{profile['seconds']} s", "share", "", ""))
    for phase, share in profile["shares"].items():
        rows.append((f"  {phase}", "", share, "", ""))
    rows.append(("load average", " ".join(f"{x:.2f}" for x in load), "", "", ""))
    common.report("B5", results, rows)


@dataclass(frozen=True)
class Clock:
    """Wall time and this process's CPU time: on a loaded machine the CPU time still says what
    the relay's own Python costs (PostgreSQL and Redis work in their own processes)."""

    wall: float
    cpu: float

    @staticmethod
    def now() -> Clock:
        return Clock(time.perf_counter(), time.process_time())

    def __sub__(self, other: Clock) -> Clock:
        return Clock(self.wall - other.wall, self.cpu - other.cpu)


def _nothing(event: Any) -> None:
    """A send that sends nothing: the relay's database work alone."""


def make_events(kb_id: int, document_id: int, n: int) -> list[int]:
    """n queued GC tasks with their unpublished events, bulk-inserted (no on-commit nudges)."""
    from django.conf import settings
    from django.db import transaction
    from django.utils import timezone

    from work.models import IngestionTask, OutboxEvent

    now = timezone.now()
    with transaction.atomic():
        tasks = IngestionTask.objects.bulk_create(
            IngestionTask(
                kind=IngestionTask.Kind.GC,
                kb_id=kb_id,
                document_id=document_id,
                max_attempts=settings.TASK_MAX_ATTEMPTS,
                available_at=now,
            )
            for _ in range(n)
        )
        OutboxEvent.objects.bulk_create(
            OutboxEvent(task=t, payload={"task_id": t.pk}, available_at=now) for t in tasks
        )
    return [t.pk for t in tasks]


def drop_events(task_ids: list[int]) -> None:
    from work.models import IngestionTask, OutboxEvent

    OutboxEvent.objects.filter(task_id__in=task_ids).delete()
    IngestionTask.objects.filter(pk__in=task_ids).delete()


def profile_pass(
    kb_id: int, document_id: int, n: int, queue_cleanup: Callable[[], Any]
) -> dict[str, Any]:
    """cProfile one relay pass of n events (one batch); the share of each phase in PHASES."""
    from ingestion.relay import outbox_relay_batch

    ids = make_events(kb_id, document_id, n)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        sent = outbox_relay_batch(limit=n)
        profiler.disable()
        assert sent == n, (sent, n)
    finally:
        drop_events(ids)
        queue_cleanup()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    entries: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]

    def cumulative(suffix: str, func: str) -> float:
        # the outermost call of that function: the largest cumulative time
        return max(
            (v[3] for (file, _, f), v in entries.items() if f == func and file.endswith(suffix)),
            default=0.0,
        )

    top = cumulative("ingestion/relay.py", "outbox_relay_batch")
    shares = {phase: round(cumulative(*where) / top, 3) for phase, where in PHASES.items()}
    stats.sort_stats("tottime").print_stats(15)
    return {"seconds": round(top, 3), "events": n, "shares": shares, "top_tottime": text.getvalue()}


def outbox_lag(kb: Any, document: Any, *, rate: float, seconds: float) -> dict[str, Any]:
    """Commit one task (and its outbox event) every 1/rate s for `seconds`, delivered as in
    production: the commit's nudge makes a real worker run the relay, and a relay loop stands
    in for beat's schedule. Lag = published_at - created_at, both on the database clock."""
    from django.conf import settings
    from django.db import transaction

    from work.models import IngestionTask, OutboxEvent
    from work.outbox import task_create

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
