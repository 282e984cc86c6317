"""B13 reconciliation at scale: the reconciler's and `kb_verify`'s cost over a generated database of
--chunks chunks (1,000,000 by default) in many knowledge bases, documents and builds.

The corpus is written by SQL (`INSERT … SELECT generate_series`), not by the pipeline: every row
satisfies the invariants `kb_verify` checks (a live build per document with its publication, its
manifest hash, one posting per chunk and its BM25 statistics; one document in ten also keeps a
superseded, verified build of an older revision). Vectors have 8 dimensions and the versions' HNSW
indexes are dropped while loading and not rebuilt: no check reads the vector index, and the
completeness check reads only the embedding's null bit and dimensions (a 384-dimension vector would
make the chunk heap, which the full scan reads, about 1.5 kB a row larger). Chunk text is ~600
characters, like the real chunker's.

Then, side by side in one run: the full audit (`verify()`, every chunk of every build) against the
three levels (`kb.audit`): sealing every build once, a shard-summary pass, the reconciler's pass
before and after (the pass as it was — `git show BASE:ingestion/reconciler.py` — and the pass
now); `kb_verify` whole against `kb_verify --slice-size N --resume` slice by slice, each a
subprocess with its peak RSS. Last, a few anomalies are injected (a chunk deleted from a sealed live
build, a content hash changed in a retained superseded build, a chunk moved into a neighbour
build) and the summaries must find exactly their windows, whose deep checks page only those
builds; the rows are put back afterwards.

    .venv/bin/python -m bench.b13_reconcile --db canon_bench_f --redis-db 9 [--chunks N] [--fresh]

One file over 500 lines on purpose: its phases share one generated database and one report, and
a reader follows a run from top to bottom (generate, audit, slice, inject, put back).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import types
from collections.abc import Sequence
from typing import Any

from bench import common

DB_NAME = "canon_reconcile"
REDIS_DB = 12
DIMS = 8
KBS = 20
MEAN_CHUNKS = 200  # per build, uniform in 50..350
OLD_REVISION_EVERY = 10  # one document in ten keeps a superseded build of revision 1
BASE = "754bd75"  # the reconciler before the three levels


def _slug(chunks: int) -> str:
    return f"rc{chunks}"


def _sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def generate(chunks: int) -> dict[str, Any]:
    """Write the corpus; returns counts and how long each step took."""
    from django.db import connection, transaction

    from kb import ann, storage
    from kb.models import IndexVersion, Tenant
    from kb.services.index_versions import knowledge_base_create

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    tenant, _ = Tenant.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    stored = storage.store_bytes(b"B13: every revision names this one stored file.\n")
    kbs = []
    for i in range(KBS):
        with transaction.atomic():
            kb = knowledge_base_create(
                tenant=tenant, name=f"reconcile {i}", slug=f"{_slug(chunks)}-{i}", dimensions=DIMS
            )
        kbs.append(kb)
    for version in IndexVersion.objects.filter(kb__in=kbs):
        ann.ann_index_drop(version_id=version.pk)  # no vector index: the checks never read it
    kb_ids = [kb.pk for kb in kbs]
    # Documents: chunks / (MEAN_CHUNKS * 1.1) of them (one in ten has a second, retained build).
    n_docs = max(KBS, round(chunks / (MEAN_CHUNKS * (1 + 1 / OLD_REVISION_EVERY))))
    vector = "[" + ",".join(["0.125"] * DIMS) + "]"
    steps = [
        (
            "documents",
            """
            INSERT INTO kb_document (kb_id, key, title, access_groups, metadata, desired_revision,
                                     created_at, updated_at)
            SELECT (%(kbs)s::bigint[])[1 + i %% %(n_kbs)s], 'doc-' || i, 'Document ' || i,
                   ARRAY['rest'], '{}',
                   CASE WHEN i %% %(every)s = 0 THEN 2 ELSE 1 END, now(), now()
            FROM generate_series(0, %(n_docs)s - 1) AS i
            """,
        ),
        (
            "revisions",
            """
            INSERT INTO kb_revision (document_id, extracted_title, number, storage_path, sha256,
                                     size, media_type, original_name, created_at)
            SELECT d.id, '', r, %(path)s, %(sha)s, %(size)s, 'text/plain', d.key || '.txt', now()
            FROM kb_document d CROSS JOIN LATERAL generate_series(1, d.desired_revision) AS r
            WHERE d.kb_id = ANY(%(kbs)s)
            """,
        ),
        (
            "builds",
            """
            INSERT INTO kb_build (kb_id, document_id, revision_id, index_version_id, state,
                                  expected_chunk_count, chunks_written, chunks_embedded,
                                  dimensions, manifest_sha256, verified_at, error, created_at,
                                  updated_at, finished_at)
            SELECT d.kb_id, d.id, r.id, k.active_index_version_id,
                   CASE WHEN r.number = d.desired_revision THEN 'live' ELSE 'superseded' END,
                   n, n, n, %(dims)s, '', now(), '', now(), now(), now()
            FROM kb_document d
            JOIN kb_knowledgebase k ON k.id = d.kb_id
            JOIN kb_revision r ON r.document_id = d.id
            CROSS JOIN LATERAL (SELECT 50 + (hashint8(r.id) & 2147483647) %% 301 AS n) AS x
            WHERE d.kb_id = ANY(%(kbs)s)
            ORDER BY d.id, r.number
            """,
        ),
        (
            "publications",
            """
            INSERT INTO kb_publication (kb_id, document_id, index_version_id, build_id,
                                        published_at)
            SELECT b.kb_id, b.document_id, b.index_version_id, b.id, now()
            FROM kb_build b WHERE b.kb_id = ANY(%(kbs)s) AND b.state = 'live'
            """,
        ),
        (
            "chunks",
            """
            INSERT INTO kb_chunk (kb_id, build_id, document_id, index_version_id, ordinal,
                                  chunk_key, text, content_hash, token_count, embedding,
                                  lexical_length, heading_path, created_at)
            SELECT b.kb_id, b.id, b.document_id, b.index_version_id, o,
                   encode(sha256(convert_to(b.id || ':' || o, 'UTF8')), 'hex'),
                   t, encode(sha256(convert_to(t, 'UTF8')), 'hex'), 120, %(vector)s::vector,
                   1, '', now()
            FROM kb_build b
            CROSS JOIN LATERAL generate_series(0, b.expected_chunk_count - 1) AS o
            CROSS JOIN LATERAL (SELECT repeat(md5(b.revision_id || ':' || o), 19) AS t) AS x
            WHERE b.kb_id = ANY(%(kbs)s)
            ORDER BY b.id, o
            """,
        ),
        (
            "manifests",
            """
            UPDATE kb_build b SET manifest_sha256 = m.sha FROM (
                SELECT c.build_id, encode(sha256(convert_to(
                    string_agg(c.content_hash, ',' ORDER BY c.ordinal), 'UTF8')), 'hex') AS sha
                FROM kb_chunk c WHERE c.kb_id = ANY(%(kbs)s) GROUP BY c.build_id) m
            WHERE m.build_id = b.id
            """,
        ),
        (
            "postings",
            """
            INSERT INTO kb_posting (chunk_id, index_version_id, term, tf, impact)
            SELECT c.id, c.index_version_id, 'w' || (c.ordinal %% 997), 1, 1.0
            FROM kb_chunk c WHERE c.kb_id = ANY(%(kbs)s)
            """,
        ),
        (
            "statistics",
            """
            INSERT INTO kb_lexicalstat (build_id, index_version_id, term, chunks, length)
            SELECT b.id, b.index_version_id, '', b.expected_chunk_count, b.expected_chunk_count
            FROM kb_build b WHERE b.kb_id = ANY(%(kbs)s)
            """,
        ),
    ]
    params: dict[str, Any] = {
        "kbs": kb_ids,
        "n_kbs": KBS,
        "n_docs": n_docs,
        "every": OLD_REVISION_EVERY,
        "path": stored.path,
        "sha": stored.sha256,
        "size": stored.size,
        "dims": DIMS,
        "vector": vector,
    }
    for name, statement in steps:
        t = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
            cursor.execute(statement, params)
        timings[name] = round(time.perf_counter() - t, 1)
        print(f"[B13] {name}: {timings[name]} s", flush=True)
    t = time.perf_counter()
    with connection.cursor() as cursor:
        for table in ("kb_document", "kb_revision", "kb_build", "kb_publication", "kb_chunk",
                      "kb_posting", "kb_lexicalstat"):  # fmt: skip
            cursor.execute(f"VACUUM (ANALYZE) {table}")  # visibility map: index-only scans
    timings["vacuum_analyze"] = round(time.perf_counter() - t, 1)
    timings["total"] = round(time.perf_counter() - t0, 1)
    return {"documents": n_docs, "kbs": KBS, "timings_s": timings}


def _rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn()
    return result, round(time.perf_counter() - t0, 3)


def _manage(*args: str) -> tuple[int, float, float, str]:
    """Run manage.py in a subprocess: (exit code, seconds, peak RSS MB, last output line)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=common.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ),
    )
    assert proc.stdout is not None
    output = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = output.strip().splitlines() or [""]
    return proc.returncode, time.perf_counter() - t0, usage.ru_maxrss / 1024, lines[-1]


def _old_module(path: str, name: str) -> types.ModuleType | None:
    """The file as it was at BASE, loaded as a module (None when git cannot show it)."""
    shown = subprocess.run(
        ["git", "show", f"{BASE}:{path}"], cwd=common.ROOT, capture_output=True, text=True
    )
    if shown.returncode:
        return None
    module = types.ModuleType(name)
    module.__file__ = f"<{BASE}:{path}>"
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(shown.stdout, module.__file__, "exec"), module.__dict__)  # noqa: S102 (our own file at BASE)
    return module


def _temp_bytes() -> int:
    return int(
        _sql("SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()")[0][0]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--slice-size", type=int, default=500, help="documents per audit slice")
    parser.add_argument("--db", default=DB_NAME)
    parser.add_argument("--redis-db", type=int, default=REDIS_DB)
    parser.add_argument("--fresh", action="store_true", help="generate the corpus again")
    a = parser.parse_args(argv)
    if a.db in ("canon", "canon_bench") or a.db.startswith("test_"):
        parser.error(f"--db {a.db} belongs to someone else")
    os.environ["REDIS_URL"] = common.redis_url(a.redis_db)
    common.DB_NAME = a.db  # setup() creates and migrates exactly this database
    common.setup(fresh=a.fresh)
    from kb.models import KnowledgeBase

    results: dict[str, Any] = {"chunks_requested": a.chunks}
    if not KnowledgeBase.objects.filter(slug=f"{_slug(a.chunks)}-0").exists():
        results["generated"] = generate(a.chunks)
    else:
        print(f"[B13] reusing {a.db}", flush=True)
    results.update(measure(a))
    results["loadavg"] = os.getloadavg()
    common.report("B13", results, _rows(results))
    return 0


def _py(code: str) -> tuple[float, float, str]:
    """Run Python in a Django shell subprocess: (seconds, peak RSS MB, its last output line)."""
    status, seconds, rss, last = _manage("shell", "-c", code)
    assert status == 0, last
    return round(seconds, 2), round(rss, 1), last


def _explain(statement: str, params: Any) -> dict[str, Any]:
    import json

    ((plan,),) = _sql(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params)
    plan = plan if isinstance(plan, list) else json.loads(plan)
    nodes: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            nodes.append(
                f"{node['Node Type']} on {node['Relation Name']}"
                + (f" using {node['Index Name']}" if "Index Name" in node else "")
            )
        for child in node.get("Plans", []):
            walk(child)

    top = plan[0]
    walk(top["Plan"])
    return {
        "ms": round(top["Execution Time"], 1),
        "scans": nodes,
        "shared_buffers_read_or_hit": top["Plan"].get("Shared Hit Blocks", 0)
        + top["Plan"].get("Shared Read Blocks", 0),
    }


def measure(a: argparse.Namespace) -> dict[str, Any]:
    from django.conf import settings

    from kb import audit, verify
    from kb.models import AuditCursor, BuildSeal
    from work.models import AuditEvent

    out: dict[str, Any] = {}
    ((chunks, builds, documents),) = _sql(
        "SELECT (SELECT count(*) FROM kb_chunk), (SELECT count(*) FROM kb_build), "
        "(SELECT count(*) FROM kb_document)"
    )
    out.update(chunks=chunks, builds=builds, documents=documents)
    print(f"[B13] {chunks} chunks, {builds} builds, {documents} documents", flush=True)
    BuildSeal.objects.all().delete()
    AuditCursor.objects.all().delete()  # and their slices
    AuditEvent.objects.filter(kind__startswith="anomaly:").delete()
    _sql("VACUUM (ANALYZE) kb_buildseal")
    _, base_rss, _ = _py("pass")
    out["shell_baseline_rss_mb"] = base_rss

    # The full audit: every invariant, every chunk, one statement per check.
    temp0 = _temp_bytes()
    violations, seconds = _timed(verify.verify)
    assert violations == [], violations[:5]
    out["verify_full_s"] = seconds
    out["verify_full_temp_mb"] = round((_temp_bytes() - temp0) / 2**20, 1)
    old_verify = _old_module("kb/verify.py", "old_verify")
    if old_verify is not None:  # the same audit as it was at BASE (one statement per check)
        temp0 = _temp_bytes()
        violations, seconds = _timed(old_verify.verify)
        assert violations == [], violations[:5]
        out["verify_full_at_base_s"] = seconds
        out["verify_full_at_base_temp_mb"] = round((_temp_bytes() - temp0) / 2**20, 1)
    code, seconds, rss, last = _manage("kb_verify")
    assert code == 0, last
    out["kb_verify_full_process"] = {"s": round(seconds, 2), "peak_rss_mb": round(rss, 1)}
    print(f"[B13] verify() {out['verify_full_s']} s; kb_verify {seconds:.1f} s", flush=True)

    # The same audit in slices, each its own process, as cron would run them.
    slice_s: list[float] = []
    slice_rss: list[float] = []
    t0 = time.perf_counter()
    first = True
    while True:
        flags = ["--slice-size", str(a.slice_size)] + ([] if first else ["--resume"])
        code, seconds, rss, last = _manage("kb_verify", *flags)
        assert code == 0, last
        first = False
        slice_s.append(seconds)
        slice_rss.append(rss)
        if (
            "the pass is complete"
            in _sql(
                "SELECT CASE WHEN last_of_pass THEN 'the pass is complete' ELSE '' END "
                "FROM kb_auditslice WHERE cursor_id = 'kb_verify' ORDER BY id DESC LIMIT 1"
            )[0][0]
        ):
            break
    in_slice = [
        float(x)
        for (x,) in _sql(
            "SELECT seconds FROM kb_auditslice WHERE cursor_id = 'kb_verify' ORDER BY id"
        )
    ]
    out["kb_verify_sliced"] = {
        "slice_size_documents": a.slice_size,
        "slices": len(slice_s),
        "wall_s": round(time.perf_counter() - t0, 1),
        "in_slice_s_sum": round(sum(in_slice), 2),
        "in_slice_s_p50": round(common.percentile(in_slice, 50), 3),
        "in_slice_s_max": round(max(in_slice), 3),
        "process_s_max": round(max(slice_s), 2),
        "peak_rss_mb_max": round(max(slice_rss), 1),
    }
    print(f"[B13] sliced: {out['kb_verify_sliced']}", flush=True)

    # Document level: every build read once and sealed, as the reconciler does it pass by pass.
    budget = settings.RECONCILER_SEAL_CHUNKS
    seal_s: list[float] = []
    while True:
        (damaged, sealed), seconds = _timed(lambda: audit.seal_pending(chunk_budget=budget))
        assert damaged == [], damaged[:3]
        if not sealed:
            break
        seal_s.append(seconds)
    out["seal_all"] = {
        "chunk_budget": budget,
        "passes": len(seal_s),
        "s_sum": round(sum(seal_s), 2),
        "s_per_pass_max": round(max(seal_s), 3),
    }
    _sql("VACUUM (ANALYZE) kb_buildseal")
    print(f"[B13] sealing: {out['seal_all']}", flush=True)

    # Shard level: the summaries of every build, in the reconciler's slices.
    step = settings.RECONCILER_SHARD_BUILDS
    last_build = _sql("SELECT max(id) FROM kb_build")[0][0]
    shard_s: list[float] = []
    windows = 0
    for after in range(0, last_build, step):
        summaries, seconds = _timed(
            lambda after=after: audit.shard_summaries(after_build=after, through_build=after + step)
        )
        assert all(s.agrees for s in summaries), [str(s) for s in summaries if not s.agrees][:3]
        windows += len(summaries)
        shard_s.append(seconds)
    out["summaries_all"] = {
        "builds_per_slice": step,
        "slices": len(shard_s),
        "windows": windows,
        "s_sum": round(sum(shard_s), 2),
        "s_per_slice_max": round(max(shard_s), 3),
    }
    out["summary_explain"] = _explain(
        _SUMMARY_FOR_EXPLAIN, {"after": 0, "through": step, "width": audit.window_builds()}
    )
    print(f"[B13] summaries: {out['summaries_all']} {out['summary_explain']}", flush=True)

    # The reconciler's pass: as it was at BASE, and now (steady state: everything sealed).
    old = _old_module("ingestion/reconciler.py", "old_reconciler")
    if old is not None:
        _sql("DELETE FROM ingestion_auditevent")
        old_runs = [_timed(old.reconcile)[1] for _ in range(3)]
        out["reconciler_old_pass_s"] = {"min": min(old_runs), "max": max(old_runs)}
        _, rss, _ = _py(
            "from bench.b13_reconcile import _old_module as m; "
            "m('ingestion/reconciler.py', 'old').reconcile()"
        )
        out["reconciler_old_peak_rss_mb"] = rss
    from ingestion.reconciler.runner import reconcile

    _sql("DELETE FROM ingestion_auditevent")
    runs = []
    for _ in range(3):
        counts, seconds = _timed(reconcile)
        assert not counts, counts
        runs.append(seconds)
    levels = AuditEvent.objects.filter(kind="reconciler_pass").latest("id").details["levels"]
    out["reconciler_new_pass_s"] = {"min": min(runs), "max": max(runs)}
    out["reconciler_new_levels_ms"] = {k: v.get("ms") for k, v in levels.items()}
    _, rss, _ = _py("from ingestion.reconciler.runner import reconcile; reconcile()")
    out["reconciler_new_peak_rss_mb"] = rss
    out["reconciler_passes_for_full_coverage"] = {
        "shard": -(-last_build // step),
        "document_walk": -(-documents // settings.RECONCILER_SLICE_DOCUMENTS),
    }
    print(f"[B13] reconciler: {out.get('reconciler_old_pass_s')} -> {runs} {levels}", flush=True)

    out["anomalies"] = inject_and_find()
    return out


_SUMMARY_FOR_EXPLAIN = """
WITH b AS MATERIALIZED (
    SELECT b.id, b.kb_id, b.index_version_id, b.expected_chunk_count AS expected,
           s.digest AS sealed
    FROM kb_build b
    LEFT JOIN kb_buildseal s ON s.build_id = b.id AND s.verified_at = b.verified_at
    WHERE b.id > %(after)s AND b.id <= %(through)s
      AND b.verified_at IS NOT NULL AND b.collected_at IS NULL AND s.ok IS DISTINCT FROM false
), c AS (
    SELECT c.build_id, count(*) AS n,
           sum(hashtextextended(c.content_hash || ':' || c.ordinal, c.build_id)) AS digest
    FROM kb_chunk c WHERE c.build_id > %(after)s AND c.build_id <= %(through)s
    GROUP BY c.build_id
)
SELECT b.kb_id, b.index_version_id, b.id / %(width)s, count(*), sum(b.expected), sum(c.n),
       sum(b.sealed), sum(c.digest) FILTER (WHERE b.sealed IS NOT NULL)
FROM b LEFT JOIN c ON c.build_id = b.id GROUP BY 1, 2, 3
"""


class _Rollback(Exception):
    pass


def inject_and_find() -> dict[str, Any]:
    """Damage three places, find them by the summaries and deep-check only the disagreeing
    windows, all in one transaction that is rolled back (the corpus stays whole)."""
    from django.db import transaction

    result: dict[str, Any] = {}
    try:
        with transaction.atomic():
            result = _inject_and_find()
            raise _Rollback
    except _Rollback:
        pass
    return result


def _inject_and_find() -> dict[str, Any]:
    from django.conf import settings

    from kb import audit

    width = audit.window_builds()
    live = _sql("SELECT build_id FROM kb_publication ORDER BY build_id LIMIT 1 OFFSET 1234")[0][0]
    superseded = _sql(
        "SELECT id FROM kb_build WHERE state = 'superseded' ORDER BY id LIMIT 1 OFFSET 123"
    )[0][0]
    donor, taker = _sql(
        "SELECT a.id, b.id FROM kb_build a JOIN kb_build b ON b.kb_id = a.kb_id AND b.id > a.id "
        "AND b.id / %s = a.id / %s WHERE a.id > 3000 ORDER BY a.id, b.id LIMIT 1",
        [width, width],
    )[0]
    _sql(
        "DELETE FROM kb_posting WHERE chunk_id IN "
        "(SELECT id FROM kb_chunk WHERE build_id = %s AND ordinal = 7)",
        [live],
    )
    _sql("DELETE FROM kb_chunk WHERE build_id = %s AND ordinal = 7", [live])
    _sql(
        "UPDATE kb_chunk SET content_hash = %s WHERE build_id = %s AND ordinal = 3",
        ["f" * 64, superseded],
    )
    _sql(  # the donor's last chunk becomes the taker's next one: the window's count is unchanged
        "UPDATE kb_chunk SET build_id = %s, ordinal = (SELECT expected_chunk_count FROM kb_build "
        "WHERE id = %s) WHERE build_id = %s AND ordinal = (SELECT expected_chunk_count - 1 "
        "FROM kb_build WHERE id = %s)",
        [taker, taker, donor, donor],
    )
    step = settings.RECONCILER_SHARD_BUILDS
    last_build = _sql("SELECT max(id) FROM kb_build")[0][0]
    t0 = time.perf_counter()
    disagreeing = []
    for after in range(0, last_build, step):
        disagreeing += [
            s
            for s in audit.shard_summaries(after_build=after, through_build=after + step)
            if not s.agrees
        ]
    summaries_s = time.perf_counter() - t0
    read: list[int] = []
    original = audit.builds_check

    def spy(build_ids: Sequence[int]) -> list[audit.BuildCheck]:
        read.extend(build_ids)
        return original(build_ids)

    audit.builds_check = spy
    t0 = time.perf_counter()
    try:
        damaged = [c for s in disagreeing for c in audit.window_deep_check(s)]
    finally:
        audit.builds_check = original
    deep_s = time.perf_counter() - t0
    found = sorted(c.build_id for c in damaged)
    expected = sorted([live, superseded, donor, taker])
    chunks_read = sum(c.chunk_count for c in original(read))
    return {
        "injected": {
            "lost_chunk_of_live_build": live,
            "altered_hash_of_superseded_build": superseded,
            "chunk_moved_within_a_window": [donor, taker],
        },
        "windows_disagreeing": [str(s) for s in disagreeing],
        "summaries_s": round(summaries_s, 2),
        "deep_check_s": round(deep_s, 3),
        "builds_read_by_deep_checks": len(read),
        "chunks_read_by_deep_checks": chunks_read,
        "damaged_found": found,
        "all_found": found == expected,
    }


def _rows(results: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [("what", "value"), *((k, v) for k, v in results.items() if not isinstance(v, dict))]


if __name__ == "__main__":
    sys.exit(main())
