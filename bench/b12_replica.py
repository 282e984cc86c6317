"""B12 search on a read replica: a streaming standby of the bench's server is copied and started
for the run (devtools/standby.py; `pg_basebackup -R`, hot standby on a free port, stopped after).

Measured in one run: publish-to-visible, the time from a publish on the primary (its
PublicationEvent's timestamp, taken inside the switch's transaction just before it commits)
until a search on the replica returns that revision, polled back to back; the same from the
moment the publishing call returned (a lower bound); the standby's replay lag as the primary
reports it (pg_stat_replication.replay_lag, sampled every 50 ms); and search latency on the
replica against the primary, alternating, same queries. The rounds start once the standby has
replayed the WAL the primary wrote during the copy (that catch-up is reported apart). Publishes
run the real pipeline in this process (parse, chunk, embed, write, switch), one at a time; a
second round does the same while two threads keep searching the replica."""

from __future__ import annotations

import copy
import os
import random
import threading
import time
from typing import Any

from bench import common

KEYS = [f"doc-{i}" for i in range(5)]
QUERIES = ["kalo miten rasovu", "eldor anis quka tenra", "sovu kadorel mila", "quis tenan ralo"]


def main() -> None:
    a = common.args(__doc__ or "", publishes=40, searches=300)
    common.setup()
    import psycopg
    from django.db import DEFAULT_DB_ALIAS, connections

    from devtools.standby import primary_lsn, replication_lag, start_standby
    from ingestion.pipeline.run import task_execute
    from kb.models import Build, PublicationEvent
    from retrieval.principals import Principal
    from retrieval.routing import REPLICA
    from retrieval.search.engine import search
    from retrieval.search.hits import SearchFilters
    from work.models import IngestionTask

    kb = common.tenant_kb("replica")
    rng = random.Random(12)
    principal = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )

    def publish(key: str) -> tuple[int, float, float]:
        """One revision of `key` through the pipeline; (revision, event time, return time)."""
        text = "\n\n".join(common.paragraph(rng) for _ in range(3))
        revision = common.upload(kb, key, text)
        task = IngestionTask.objects.get(build__revision=revision)
        IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
        outcome = task_execute(task_id=task.pk, worker_id="bench")
        returned = time.time()
        assert outcome == "published", outcome
        build = Build.objects.get(revision=revision)
        event = PublicationEvent.objects.get(build=build, action="publish")
        return revision.number, event.created_at.timestamp(), returned

    def revision_on(alias: str, key: str) -> int:
        result = search(
            principal=principal,
            kb=kb,
            query="x",
            top_k=3,
            mode="vector",
            filters=SearchFilters(document_keys=(key,)),
            using=alias,
        )
        return max((h.revision for h in result.hits), default=0)

    for key in KEYS:  # every document exists before the timed publishes
        publish(key)

    standby = start_standby(primary_url=common.database_url())
    try:
        connections.settings[REPLICA] = {
            **copy.deepcopy(connections.settings[DEFAULT_DB_ALIAS]),
            "HOST": "127.0.0.1",
            "PORT": standby.port,
        }
        # The copy's WAL backlog (what the primary wrote during the copy) is replayed first;
        # its time is reported apart, and the timed rounds start once it is done.
        catch_up_started = time.perf_counter()
        caught_up_to = primary_lsn(common.database_url())
        with psycopg.connect(standby.url(os.environ["DATABASE_URL"].rsplit("/", 1)[1])) as conn:
            while not conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [caught_up_to]
            ).fetchone()[0]:  # type: ignore[index]
                time.sleep(0.01)
        catch_up_s = time.perf_counter() - catch_up_started
        lag_samples: list[float] = []
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(0.05):
                value = replication_lag(common.database_url(), standby.application_name)
                if value["replay_lag"] is not None:
                    lag_samples.append(value["replay_lag"] * 1000)

        def round_of_publishes(n: int) -> dict[str, list[float]]:
            since_event: list[float] = []
            since_return: list[float] = []
            polls: list[float] = []
            for i in range(n):
                key = KEYS[i % len(KEYS)]
                number, event_at, returned = publish(key)
                while True:
                    t0 = time.perf_counter()
                    seen = revision_on(REPLICA, key)
                    polls.append((time.perf_counter() - t0) * 1000)
                    if seen >= number:
                        break
                visible = time.time()
                since_event.append((visible - event_at) * 1000)
                since_return.append((visible - returned) * 1000)
            return {"event": since_event, "return": since_return, "poll": polls}

        def searching_load(halt: threading.Event, done: list[int]) -> None:
            local = random.Random(threading.get_ident())
            try:
                while not halt.is_set():
                    search(
                        principal=principal,
                        kb=kb,
                        query=local.choice(QUERIES),
                        top_k=10,
                        mode="hybrid",
                        using=REPLICA,
                    )
                    done[0] += 1
            finally:
                connections.close_all()

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        idle = round_of_publishes(a.publishes)
        halt, done = threading.Event(), [0]
        loaders = [threading.Thread(target=searching_load, args=(halt, done)) for _ in range(2)]
        for thread in loaders:
            thread.start()
        loaded_started = time.perf_counter()
        loaded = round_of_publishes(a.publishes)
        loaded_wall = time.perf_counter() - loaded_started
        halt.set()
        for thread in loaders:
            thread.join(60)
        sampling.set()
        sampler.join(5)

        latencies: dict[str, list[float]] = {DEFAULT_DB_ALIAS: [], REPLICA: []}
        for i in range(a.searches):
            for alias in (DEFAULT_DB_ALIAS, REPLICA) if i % 2 else (REPLICA, DEFAULT_DB_ALIAS):
                t0 = time.perf_counter()
                search(
                    principal=principal,
                    kb=kb,
                    query=QUERIES[i % len(QUERIES)],
                    top_k=10,
                    mode="hybrid",
                    using=alias,
                )
                latencies[alias].append((time.perf_counter() - t0) * 1000)
        connections[REPLICA].close()
    finally:
        standby.stop()

    def summary(values: list[float]) -> dict[str, float]:
        return {
            "n": len(values),
            "p50_ms": round(common.percentile(values, 50), 2),
            "p95_ms": round(common.percentile(values, 95), 2),
            "max_ms": round(max(values), 2) if values else float("nan"),
        }

    load = os.getloadavg()
    results: dict[str, Any] = {
        "publishes_per_round": a.publishes,
        "publish_to_visible_idle": summary(idle["event"]),
        "publish_to_visible_idle_from_return": summary(idle["return"]),
        "publish_to_visible_under_search_load": summary(loaded["event"]),
        "replica_searches_per_s_during_load": round(done[0] / loaded_wall, 1),
        "poll_search_ms": summary(idle["poll"] + loaded["poll"]),
        "replay_lag_ms": summary(lag_samples),
        "search_primary": common.latency_summary(latencies[DEFAULT_DB_ALIAS], 1.0),
        "search_replica": common.latency_summary(latencies[REPLICA], 1.0),
        "replica_over_primary_p50": common.ratio(
            common.percentile(latencies[REPLICA], 50),
            common.percentile(latencies[DEFAULT_DB_ALIAS], 50),
        ),
        "standby_catch_up_after_start_s": round(catch_up_s, 2),
        "loadavg": [round(x, 2) for x in load],
    }
    rows: list[list[Any]] = [["measure", "n", "p50 ms", "p95 ms", "max ms"]]
    for label, key in [
        ("publish-to-visible (idle replica)", "publish_to_visible_idle"),
        ("  from the publish call's return", "publish_to_visible_idle_from_return"),
        ("publish-to-visible (2 searchers on replica)", "publish_to_visible_under_search_load"),
        ("replay_lag (pg_stat_replication)", "replay_lag_ms"),
        ("one poll (search on replica)", "poll_search_ms"),
    ]:
        s = results[key]
        rows.append([label, s["n"], s["p50_ms"], s["p95_ms"], s["max_ms"]])
    for label, key in [
        ("search on primary", "search_primary"),
        ("search on replica", "search_replica"),
    ]:
        s = results[key]
        rows.append([label, s["n"], s["p50_ms"], s["p95_ms"], ""])
    rows.append(["replica / primary p50", "", results["replica_over_primary_p50"], "", ""])
    rows.append(["standby catch-up after start (s)", "", round(catch_up_s, 2), "", ""])
    rows.append(["load average", "", " ".join(f"{x:.2f}" for x in load), "", ""])
    common.report("B12", results, rows)


if __name__ == "__main__":
    main()
