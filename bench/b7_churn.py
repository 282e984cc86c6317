"""B7 visibility under churn: vector search latency and correctness while documents are
continuously republished (a real worker builds and switches them), against no churn. Every
result set is checked in its own snapshot: each document's hits come from one build, and that
build is live and complete. Needs B1's corpus."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from bench import common

QUERIES = ["kalo miten rasovu", "eldor anis quka tenra", "sovu kadorel mila", "quis tenan ralo"]


def main() -> None:
    a = common.args(__doc__ or "", churn_docs=5)
    common.setup()
    from django.db import connection, transaction

    from kb.models import Build, Publication
    from retrieval.principals import Principal
    from retrieval.search.engine import search

    kb = common.tenant_kb(common.CORPUS_SLUG)
    principal = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    versions = {}
    for i in range(a.churn_docs):
        base = common.document_paragraphs(seed=i)
        edited = list(base)
        edited[-1] = edited[-1] + " Churned."
        versions[i] = [common.join(base), common.join(edited)]
    common.cache_fill(
        common.precompute([t for v in versions.values() for t in v], kb.active_index_version),
        kb.active_index_version,
    )

    def check_once(violations: list[str]) -> None:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            result = search(principal=principal, kb=kb, query=QUERIES[0], top_k=50, mode="vector")
            by_doc: dict[str, set[int]] = defaultdict(set)
            for hit in result.hits:
                by_doc[hit.document_key].add(hit.build_id)
            for key, builds in by_doc.items():
                if len(builds) > 1:
                    violations.append(f"{key}: mixes builds {builds}")
                for build_id in builds:
                    build = Build.objects.get(pk=build_id)
                    live = Publication.objects.filter(
                        document_id=build.document_id, build_id=build_id
                    ).exists()
                    if not live or build.state != Build.State.LIVE:
                        violations.append(f"{key}: build {build_id} is not live")
                    if build.chunks.count() != build.expected_chunk_count:
                        violations.append(f"{key}: build {build_id} is incomplete")

    def measure(seconds: float) -> tuple[dict[str, float], list[str], int]:
        violations: list[str] = []
        checked = 0
        latencies: list[float] = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            query = QUERIES[len(latencies) % len(QUERIES)]
            t0 = time.perf_counter()
            search(principal=principal, kb=kb, query=query, top_k=10, mode="vector")
            latencies.append((time.perf_counter() - t0) * 1000)
            if len(latencies) % 5 == 0:  # and check a top-50 result set in one snapshot
                check_once(violations)
                checked += 1
        return common.latency_summary(latencies, time.perf_counter() - start), violations, checked

    results: dict[str, Any] = {}
    with common.worker(concurrency=1):
        quiet, quiet_violations, quiet_checked = measure(a.seconds)
        stop = threading.Event()
        republished = [0]

        def churn() -> None:
            try:
                rev = 1
                while not stop.is_set():
                    for i, texts in versions.items():
                        common.upload(kb, f"doc-{i:05d}", texts[rev % 2])
                    common.wait_settled(kb, timeout=300)
                    republished[0] += len(versions)
                    rev += 1
            finally:
                connection.close()

        thread = threading.Thread(target=churn, daemon=True)
        thread.start()
        busy, busy_violations, busy_checked = measure(a.seconds)
        stop.set()
        thread.join(300)
    results = {
        "no_churn": quiet,
        "churn": busy,
        "republished_documents": republished[0],
        "checked_result_sets": quiet_checked + busy_checked,
        "violations": quiet_violations + busy_violations,
        "p50_ratio": common.ratio(busy["p50_ms"], quiet["p50_ms"]),
        "qps_ratio": common.ratio(busy["qps"], quiet["qps"]),
    }
    common.report(
        "B7",
        results,
        [
            ("phase", "p50 ms", "p95 ms", "QPS", "violations"),
            ("no churn", quiet["p50_ms"], quiet["p95_ms"], quiet["qps"], len(quiet_violations)),
            ("churn", busy["p50_ms"], busy["p95_ms"], busy["qps"], len(busy_violations)),
            ("churn/quiet", results["p50_ratio"], "", results["qps_ratio"], ""),
        ],
    )
    print(f"republished {republished[0]} documents; checked {results['checked_result_sets']}")


if __name__ == "__main__":
    main()
