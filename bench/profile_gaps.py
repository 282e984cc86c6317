"""Where the time goes for the targets B2 and B5 miss: pyinstrument over in-process API searches
(Django test client, same request as B2) and over the relay (same events as B5). Needs B1's
corpus. `python -m bench.profile_gaps` writes bench/results/profile-*.txt."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from typing import Any

from bench import common


def _api_stages(kb: Any, key: str, body: str, client: Any, n: int) -> dict[str, float]:
    """p50 of each step of an API search, run on its own in process, n times: what the request
    spends where (the rest of the whole request is Django's and DRF's handling)."""
    from django.db import connection

    import embeddings
    from bench.b2_search import QUERY
    from retrieval.api import serializers
    from retrieval.api.errors import ApiJSONRenderer
    from retrieval.principals import principal_from_key
    from retrieval.search.engine import search
    from retrieval.search.visibility import knowledge_base_for

    version = kb.active_index_version
    provider = embeddings.get_provider(
        provider=version.provider, model=version.model, dimensions=version.dimensions
    )
    principal = principal_from_key(key)
    result = search(principal=principal, kb=kb, query=QUERY, top_k=10, mode="vector")
    steps: dict[str, Callable[[], Any]] = {
        "whole request (test client)": lambda: client.post(
            "/api/v1/search", body, content_type="application/json"
        ),
        "API key -> principal (1 statement)": lambda: principal_from_key(key),
        "knowledge base lookup (1 statement)": lambda: knowledge_base_for(
            principal=principal, kb_ref=kb.slug
        ),
        "query embedding": lambda: provider.embed([QUERY]),
        "search selector (embedding included)": lambda: search(
            principal=principal, kb=kb, query=QUERY, top_k=10, mode="vector"
        ),
        "input validation (fast path)": lambda: serializers.search_input_fast(json.loads(body)),
        "response: dict + JSON": lambda: ApiJSONRenderer().render(serializers.search_body(result)),
        "a round trip (SELECT 1)": lambda: connection.cursor().execute("SELECT 1"),
    }
    out = {}
    for name, step in steps.items():
        for _ in range(10):
            step()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = round(common.percentile(times, 50), 3)
    return out


def _relay_profile(events: int) -> float:
    """Relay `events` outbox events under the profiler (profile-relay.txt); events/s."""
    import redis
    from django.db import transaction
    from pyinstrument import Profiler

    from config.celery import app as celery_app
    from ingestion.relay import outbox_relay_batch
    from kb.models import Document
    from work.models import IngestionTask
    from work.outbox import task_create

    queue = f"bench-profile-{os.getpid()}"
    celery_app.conf.task_default_queue = queue
    relay_kb = common.tenant_kb("relay")
    document, _ = Document.objects.get_or_create(
        kb=relay_kb, key="relay", defaults={"title": "relay"}
    )
    with transaction.atomic():
        tasks = [
            task_create(kind=IngestionTask.Kind.GC, kb_id=relay_kb.pk, document_id=document.pk)
            for _ in range(events)
        ]
    profiler = Profiler(interval=0.0005)
    with profiler:
        t0 = time.perf_counter()
        sent = 0
        while sent < events and time.perf_counter() - t0 < 120:
            sent += outbox_relay_batch()
        relay_s = time.perf_counter() - t0
    (common.RESULTS / "profile-relay.txt").write_text(profiler.output_text(show_all=False))
    IngestionTask.objects.filter(pk__in=[t.pk for t in tasks]).delete()
    redis.Redis.from_url(os.environ["REDIS_URL"]).delete(queue)
    return events / relay_s


def main() -> None:
    a = common.args(__doc__ or "", requests=60, events=2000)
    os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
    common.setup()
    from django.db import connection
    from django.test import Client
    from pyinstrument import Profiler

    from bench.b2_search import QUERY
    from retrieval.principals import api_key_create

    kb = common.tenant_kb(common.CORPUS_SLUG)
    _, key = api_key_create(
        tenant=kb.tenant, name=f"profile-{time.time()}", access_groups=["g1", "g10", "rest"]
    )
    # The host B2's server answers to, over plain HTTP as behind a TLS proxy.
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_HOST="127.0.0.1")
    body = json.dumps({"kb": kb.slug, "query": QUERY, "top_k": 10, "mode": "vector"})
    client.post("/api/v1/search", body, content_type="application/json")
    profiler = Profiler(interval=0.0005)
    queries: list[str] = []
    with profiler:
        t0 = time.perf_counter()
        for _ in range(a.requests):
            r = client.post("/api/v1/search", body, content_type="application/json")
            assert r.status_code == 200, r.content
        api_ms = (time.perf_counter() - t0) * 1000 / a.requests
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    (common.RESULTS / "profile-api.txt").write_text(profiler.output_text(show_all=False))
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.post("/api/v1/search", body, content_type="application/json")
    queries = [q["sql"][:160] for q in captured.captured_queries]

    stages = _api_stages(kb, key, body, client, a.requests)

    relay_rate = _relay_profile(a.events) if a.events else None  # --events 0: the API only
    # EXPLAIN ANALYZE of the selector's vector statement, as the API runs it.
    import embeddings
    from retrieval.principals import Principal
    from retrieval.search.vector import vector_query
    from retrieval.search.visibility import search_params

    version = kb.active_index_version
    vector = embeddings.get_provider(
        provider=version.provider, model=version.model, dimensions=version.dimensions
    ).embed([QUERY])[0]
    for label, groups in (("all", ["g1", "g10", "rest"]), ("1pct", ["g1"]), ("none", [])):
        principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(groups))
        params = search_params(principal=principal, kb=kb)
        sql, sql_params = vector_query(params, version, vector, 10)
        with connection.cursor() as cursor:  # the session's scan settings, as search runs
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, sql_params)
            plan = "\n".join(r[0] for r in cursor.fetchall())
        plan = re.sub(r"'\[[^']*\]'", "'[...]'", plan)
        (common.RESULTS / f"profile-explain-{label}.txt").write_text(plan + "\n")
    common.report(
        "profile",
        {
            "api_in_process_ms_per_request": round(api_ms, 2),
            "api_stages_p50_ms": stages,
            "loadavg": tuple(round(x, 2) for x in os.getloadavg()),
            "api_queries_per_request": len(queries),
            "api_queries": queries,
            "relay_events_per_s_under_profiler": relay_rate and round(relay_rate, 1),
        },
        [
            ("what", "value"),
            ("API in-process ms/request (profiled)", round(api_ms, 2)),
            ("SQL statements per API request", len(queries)),
            *((f"  stage p50 ms: {name}", ms) for name, ms in stages.items()),
            ("relay events/s (profiled)", relay_rate and round(relay_rate, 1)),
        ],
    )


if __name__ == "__main__":
    main()
