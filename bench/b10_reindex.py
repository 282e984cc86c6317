"""B10 re-index: a knowledge base of N chunks (default 100,000) re-indexed into a new index
version, end to end, three ways in one run, against langchain-postgres add_embeddings of the
same vectors and raw binary COPY + CREATE INDEX:

- bulk (the product now): `index_version_create` -> every build through outbox, relay and a real
  Celery worker (parse and chunk results of the first version's tasks reused, postings copied
  from its builds, embeddings from the EmbeddingCache: the hash provider's vectors, computed
  once before the clock starts) written with no HNSW index -> the
  version's index built by the `build_ann_index` task (CONCURRENTLY, parallel maintenance
  workers) -> the version swappable (`index_version_status`). "End to end" is exactly that: from
  the create call until the status says the swap is offered. Embedding is excluded.
- index first (the product before bulk builds, with today's reuse): the same, with the
  version's HNSW index created with the version, so every chunk is a graph insert.
- langchain-postgres `add_embeddings` of the same texts and vectors, one call per document,
  creating no index (as in B1); and the same followed by the HNSW index its rows need to be
  searched as fast (same settings), since the bulk path's time includes that index.
- raw COPY (binary vectors) into an unindexed table, then CREATE INDEX with the same parallel
  maintenance settings: the physical floor of the bulk path.

A separate process searches the active version (vector mode, through
`retrieval.search.engine.search`, one at a time) from before the first path to the end of the last,
so every path shares the cores with the same searcher; its p50/p95 during the bulk re-index (and
during its index build alone) is compared with the same searcher idle before it.

Own database: CANON_BENCH_REINDEX_DB, default <CANON_BENCH_DB>_reindex (canon_bench_reindex).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import common

QUERIES = [
    "kalo miten rasovu eldor anis quka tenra",
    "soka vudor elan istenra",
    "quka lomi kaso ranis",
    "tendor elvu miso kalora",
]


def _searcher(stop_file: Path, out_file: Path) -> None:
    """Search the active version of the corpus until `stop_file` exists; write (t, ms) lines."""
    common.setup()
    from django.db import connection, transaction

    from kb.models import KnowledgeBase
    from retrieval.principals import Principal
    from retrieval.search.engine import search

    kb = KnowledgeBase.objects.get(slug=common.CORPUS_SLUG)
    principal = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    with out_file.open("w") as out:
        i = 0
        while not stop_file.exists():
            t0 = time.perf_counter()
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                search(principal=principal, kb=kb, query=QUERIES[i % len(QUERIES)], mode="vector")
            out.write(f"{time.time():.4f} {(time.perf_counter() - t0) * 1000:.3f}\n")
            out.flush()
            i += 1


class Searcher:
    def __init__(self, tag: str) -> None:
        self.stop_file = common.RESULTS / f"b10_stop_{tag}"
        self.out_file = common.RESULTS / f"b10_search_{tag}.txt"
        self.stop_file.unlink(missing_ok=True)
        self.out_file.unlink(missing_ok=True)  # an earlier run's samples are not this run's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.b10_reindex", "--searcher", tag],
            cwd=common.ROOT,
            env=dict(os.environ),
        )
        while not (self.out_file.exists() and self.out_file.read_text().count("\n") > 20):
            time.sleep(0.2)

    def samples(self, start: float = 0.0, end: float = float("inf")) -> list[float]:
        rows = [line.split() for line in self.out_file.read_text().splitlines() if line]
        return [float(ms) for t, ms in rows if start <= float(t) <= end]

    def stop(self) -> None:
        self.stop_file.touch()
        self.proc.wait(60)


def _new_version(kb: Any, *, index_first: bool) -> tuple[Any, dict[str, float]]:
    """Re-index `kb` into a new version; times of each phase (wall clock, seconds)."""
    from django.db import transaction

    from kb import ann
    from kb.selectors.index_versions import index_version_progress, index_version_status
    from kb.services.index_versions import index_version_create

    active = kb.active_index_version
    marks: dict[str, float] = {"start": time.time()}
    with transaction.atomic():
        version = index_version_create(
            kb_id=kb.pk,
            provider=active.provider,
            model=active.model,
            dimensions=active.dimensions,
            chunk_size=active.chunk_size,
            chunk_overlap=active.chunk_overlap,
        )
        if index_first:
            # Before any build can run (they are sent after this commit): the old behaviour.
            ann.ann_index_ensure(version_id=version.pk)
    common.wait_settled(kb)
    marks["written"] = time.time()
    while not ann.ann_index_ready(version.pk):
        time.sleep(0.2)
    marks["indexed"] = time.time()
    while True:
        kb.refresh_from_db()
        progress = index_version_progress(version=version)
        if index_version_status(version=version, progress=progress, kb=kb).swappable:
            break
        time.sleep(0.2)
    marks["swappable"] = time.time()
    return version, marks


def _copy_then_index(docs: list[list[dict[str, Any]]]) -> dict[str, float]:
    import numpy as np
    import psycopg
    from django.conf import settings
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(common.database_url(), autocommit=True)
    register_vector(conn)
    conn.execute("DROP TABLE IF EXISTS bench_reindex_copy")
    conn.execute(
        "CREATE TABLE bench_reindex_copy (id bigserial PRIMARY KEY, doc int NOT NULL, "
        f"ordinal int NOT NULL, text text NOT NULL, embedding vector({common.DIMS}))"
    )
    t0 = time.perf_counter()
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY bench_reindex_copy (doc, ordinal, text, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy,
    ):
        copy.set_types(["int4", "int4", "text", "vector"])
        for d, doc in enumerate(docs):
            for c in doc:
                copy.write_row(
                    (d, c["ordinal"], c["text"], np.asarray(c["vector"], dtype=np.float32))
                )
    t1 = time.perf_counter()
    conn.execute(f"SET maintenance_work_mem = '{settings.ANN_BUILD_MAINTENANCE_WORK_MEM}'")
    conn.execute(f"SET max_parallel_maintenance_workers = {settings.ANN_BUILD_PARALLEL_WORKERS}")
    conn.execute(
        "CREATE INDEX bench_reindex_copy_hnsw ON bench_reindex_copy "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
    t2 = time.perf_counter()
    conn.execute("DROP TABLE bench_reindex_copy")
    conn.close()
    return {"copy_s": t1 - t0, "index_s": t2 - t1, "total_s": t2 - t0}


def _langchain_index() -> float:
    import psycopg
    from django.conf import settings

    with psycopg.connect(common.database_url(), autocommit=True) as conn:
        conn.execute(f"SET maintenance_work_mem = '{settings.ANN_BUILD_MAINTENANCE_WORK_MEM}'")
        conn.execute(
            f"SET max_parallel_maintenance_workers = {settings.ANN_BUILD_PARALLEL_WORKERS}"
        )
        t0 = time.perf_counter()
        conn.execute(
            "CREATE INDEX bench_langchain_hnsw ON langchain_pg_embedding USING hnsw "
            f"((embedding::vector({common.DIMS})) vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64)"
        )
        elapsed = time.perf_counter() - t0
        conn.execute("DROP INDEX bench_langchain_hnsw")
    return elapsed


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(common.percentile(values, 50), 2),
        "p95_ms": round(common.percentile(values, 95), 2),
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--searcher":
        # The run's database, as its setup() put it in the environment this process inherited.
        common.DB_NAME = urlsplit(os.environ["DATABASE_URL"]).path.lstrip("/")
        tag = sys.argv[2]
        _searcher(common.RESULTS / f"b10_stop_{tag}", common.RESULTS / f"b10_search_{tag}.txt")
        return
    a = common.args(__doc__ or "", idle_seconds=15.0)
    # Its own database: a fresh one per run, so B1's corpus (which B2..B7 search) survives.
    common.DB_NAME = os.environ.get("CANON_BENCH_REINDEX_DB", f"{common.DB_NAME}_reindex")
    common.setup(fresh=True)
    from bench.b1_ingest import LangchainContender
    from kb import ann
    from kb.models import Chunk

    load: dict[str, Any] = {"start": os.getloadavg()}
    n_docs = max(1, a.chunks // common.CHUNKS_PER_DOC)
    kb = common.tenant_kb(common.CORPUS_SLUG)
    v1 = kb.active_index_version
    texts = [common.join(common.document_paragraphs(seed=i)) for i in range(n_docs)]
    docs = common.precompute(texts, v1)
    total = sum(len(d) for d in docs)
    common.cache_fill(docs, v1)
    print(f"corpus: {n_docs} documents, {total} chunks", flush=True)

    figures: dict[str, Any] = {}
    with common.worker(concurrency=2):
        # The corpus, served by v1 (set-up, not timed; the active version keeps its index).
        for i, text in enumerate(texts):
            common.upload(kb, f"doc-{i:05d}", text, common.access_groups(i))
        common.wait_settled(kb)
        assert ann.ann_index_ready(v1.pk)
        kb.refresh_from_db()
        print("corpus live in v1", flush=True)

        searcher = Searcher("run")
        time.sleep(a.idle_seconds)
        idle_end = time.time()
        load["before_bulk"] = os.getloadavg()
        bulk, marks = _new_version(kb, index_first=False)
        load["after_bulk"] = os.getloadavg()
        idle = searcher.samples(end=idle_end)
        during = searcher.samples(marks["start"], marks["swappable"])
        during_index = searcher.samples(marks["written"], marks["indexed"])
        figures["bulk"] = {
            "written_s": round(marks["written"] - marks["start"], 1),
            "index_build_s": round(marks["indexed"] - marks["written"], 1),
            "end_to_end_s": round(marks["swappable"] - marks["start"], 1),
        }
        assert Chunk.objects.filter(index_version=bulk).count() == total
        print("bulk", figures["bulk"], flush=True)

        _, marks = _new_version(kb, index_first=True)
        load["after_index_first"] = os.getloadavg()
        figures["index_first"] = {
            "written_s": round(marks["written"] - marks["start"], 1),
            "end_to_end_s": round(marks["swappable"] - marks["start"], 1),
        }
        print("index first", figures["index_first"], flush=True)

    contender = LangchainContender()
    langchain_s = contender(list(enumerate(docs)))
    figures["langchain"] = {"end_to_end_s": round(langchain_s, 1)}
    load["after_langchain"] = os.getloadavg()
    print("langchain", figures["langchain"], flush=True)
    # The same rows made searchable as Canon's are: an HNSW index over them, built with the
    # same maintenance settings (langchain-postgres creates none by itself).
    index_s = _langchain_index()
    figures["langchain_indexed"] = {
        "index_s": round(index_s, 1),
        "end_to_end_s": round(langchain_s + index_s, 1),
    }
    print("langchain + HNSW index", figures["langchain_indexed"], flush=True)
    copy = _copy_then_index(docs)
    figures["copy_then_index"] = {k: round(v, 1) for k, v in copy.items()}
    figures["copy_then_index"]["end_to_end_s"] = round(copy["total_s"], 1)
    load["end"] = os.getloadavg()
    # The searcher ran through every path, so each shares the cores with the same load.
    searcher.stop()

    cps = {k: round(total / v["end_to_end_s"], 1) for k, v in figures.items()}
    search_figures = {
        "idle": _summary(idle),
        "during_reindex": _summary(during),
        "during_index_build": _summary(during_index),
    }
    summary = {
        "documents": n_docs,
        "chunks": total,
        "dims": common.DIMS,
        "figures": figures,
        "chunks_per_s": cps,
        "bulk_over_langchain": common.ratio(cps["bulk"], cps["langchain"]),
        "bulk_over_langchain_indexed": common.ratio(cps["bulk"], cps["langchain_indexed"]),
        "bulk_over_index_first": common.ratio(cps["bulk"], cps["index_first"]),
        "bulk_over_copy_then_index": common.ratio(cps["bulk"], cps["copy_then_index"]),
        "active_search": search_figures,
        "load": load,
        "notes": "end to end: index_version_create -> all builds written (outbox, relay, a "
        "real worker, concurrency 2) -> the version's HNSW index built -> the swap offered. "
        "Embedding excluded (vectors in the EmbeddingCache). langchain: add_embeddings per "
        "document, no index; langchain_indexed: then the same HNSW index built over its rows. "
        "Searcher: one process, vector mode, selectors.search, running through every path.",
    }
    common.report(
        "B10",
        summary,
        [
            ("path", "seconds", "chunks/s", "bulk ratio"),
            *[
                (name, v["end_to_end_s"], cps[name], common.ratio(cps["bulk"], cps[name]))
                for name, v in figures.items()
            ],
            ("active search", "p50 ms", "p95 ms", "n"),
            *[(k, v["p50_ms"], v["p95_ms"], v["n"]) for k, v in search_figures.items()],
        ],
    )
    print(json.dumps(load))


if __name__ == "__main__":
    main()
