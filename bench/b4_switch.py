"""B4 switch: latency of the publish switch (build_publish with approval) and of
document_rollback for a small and a large document; the switch must not grow with size."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import common


def main() -> None:
    a = common.args(__doc__ or "", small=10, large=10000, repeats=10)
    common.setup()
    from django.contrib.auth.models import User

    from kb.models import Build, Document
    from kb.services.publication import build_publish, document_rollback

    kb = common.tenant_kb("switch", require_approval=True)
    version = kb.active_index_version
    actor, _ = User.objects.get_or_create(username="bench-admin")
    sizes = {"small": a.small, "large": a.large}
    texts: dict[str, list[str]] = {}
    for name, n in sizes.items():
        base = common.document_paragraphs(seed=10_000 + n, n=n)
        edited = list(base)
        edited[0] = common.paragraph(__import__("random").Random(n))
        texts[name] = [common.join(base), common.join(edited)]
    common.cache_fill(
        common.precompute([t for pair in texts.values() for t in pair], version), version
    )
    results: dict[str, Any] = {}
    with common.worker(concurrency=2):
        for name in sizes:
            key = f"switch-{name}-{time.time_ns()}"
            builds = []
            for rev in (0, 1):
                common.upload(kb, key, texts[name][rev])
                common.wait_settled(kb)
                document = Document.objects.get(kb=kb, key=key)
                build = Build.objects.filter(document=document).order_by("-pk").first()
                assert build is not None and build.state == Build.State.READY, build
                t0 = time.perf_counter()
                build_publish(build_id=build.pk, actor=actor, approve=True)
                publish_ms = (time.perf_counter() - t0) * 1000
                builds.append(build.pk)
            rollbacks = []
            for i in range(a.repeats):
                target = builds[i % 2]
                t0 = time.perf_counter()
                document_rollback(document_id=document.pk, build_id=target, actor=actor)
                rollbacks.append((time.perf_counter() - t0) * 1000)
            chunks = Build.objects.get(pk=builds[1]).chunks.count()
            results[name] = {
                "chunks": chunks,
                "publish_ms": round(publish_ms, 2),
                "rollback_ms_median": round(statistics.median(rollbacks), 2),
                "rollback_ms_all": [round(x, 2) for x in rollbacks],
            }
    s, large = results["small"], results["large"]
    results["large_over_small_publish"] = common.ratio(large["publish_ms"], s["publish_ms"])
    results["large_over_small_rollback"] = common.ratio(
        large["rollback_ms_median"], s["rollback_ms_median"]
    )
    common.report(
        "B4",
        results,
        [
            ("document", "chunks", "publish ms", "rollback ms (median)"),
            ("small", s["chunks"], s["publish_ms"], s["rollback_ms_median"]),
            ("large", large["chunks"], large["publish_ms"], large["rollback_ms_median"]),
            (
                "large/small",
                "",
                results["large_over_small_publish"],
                results["large_over_small_rollback"],
            ),
        ],
    )


if __name__ == "__main__":
    main()
