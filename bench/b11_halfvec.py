"""B11 halfvec against vector with the real model: index size, build time, search latency and
recall@10 against exact search, on real chunks embedded by `use` (512 dimensions).

The chunks: the Python 3.11 documentation (Debian's `python3.11-doc`, part of B8's corpus; the
package is fetched with `apt-get download` into `.data/b11/` unless it is in apt's cache), each
HTML page through Canon's own extractor and chunker (800/100), the first N chunks in file order
(--chunks, default 20,000). Embedded once with `use` (the embedding rate is reported: it decides
N on this machine) and cached in `.data/b11/`. The queries: B8's 140 questions (English and
Chinese), embedded the same way. Exact top 10: numpy over the float32 vectors.

Then in its own database (CANON_BENCH_DB, default canon_bench_b11): the vectors by binary COPY
into a plain table, and one after the other each index with Canon's parameters (m 16,
ef_construction 64, parallel maintenance workers) — `vector_cosine_ops` over `embedding`, and
`halfvec_cosine_ops` over `embedding::halfvec(512)`, what a `vector_storage = halfvec` version
builds — with build time, pg_relation_size and, at ef_search 40 and 100, latency (one connection)
and recall@10. Plus the per-row sizes the 50M-chunk arithmetic in docs/BENCHMARKS.md uses: the
heap's bytes per vector and per halfvec (pg_column_size), and the keyword postings per chunk.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import common

DATA = common.ROOT / ".data" / "b11"
PACKAGE = "python3.11-doc"
DIMS = 512


def _package_root() -> Path:
    root = DATA / "unpacked"
    if (root / "usr").exists():
        return root
    DATA.mkdir(parents=True, exist_ok=True)
    debs = sorted(Path("/var/cache/apt/archives").glob(f"{PACKAGE}_*.deb"))
    if not debs:
        subprocess.run(["apt-get", "download", PACKAGE], cwd=DATA, check=True)
        debs = sorted(DATA.glob(f"{PACKAGE}_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(root)], check=True)
    return root


def real_chunks(n: int) -> list[str]:
    """The embedding inputs of the first n chunks of the Python docs, as Canon chunks them."""
    from textkit import chunker
    from textkit import extract as extractors

    pages = sorted((_package_root() / "usr/share/doc/python3.11/html").rglob("*.html"))
    out: list[str] = []
    for page in pages:
        try:
            extracted = extractors.extract(page, "text/html")
        except extractors.ParseError:  # a page Canon would refuse is not in the corpus
            continue
        for piece in chunker.chunk_blocks(extracted.blocks, size=800, overlap=100):
            out.append(chunker.embedding_input(piece.heading_path, piece.text))
            if len(out) >= n:
                return out
    return out


def embed(texts: list[str], name: str) -> tuple[np.ndarray, float]:
    """`use` vectors of `texts` (cached in .data/b11/<name>.npy); and texts per second."""
    path = DATA / f"{name}_{len(texts)}.npy"
    if path.exists():
        return np.load(path), float("nan")
    from embeddings import USE_MODEL, get_provider

    provider = get_provider(provider="use", model=USE_MODEL, dimensions=DIMS)
    vectors: list[list[float]] = []
    t0 = time.perf_counter()
    for start in range(0, len(texts), 64):
        vectors.extend(provider.embed(texts[start : start + 64]))
        if start and start % 2048 == 0:
            rate = len(vectors) / (time.perf_counter() - t0)
            print(f"  embedded {len(vectors)} ({rate:.0f}/s, load {os.getloadavg()[0]:.1f})")
    rate = len(texts) / (time.perf_counter() - t0)
    array = np.asarray(vectors, dtype=np.float32)
    np.save(path, array)
    return array, rate


def measure(conn: Any, vectors: np.ndarray, queries: np.ndarray, workers: int) -> dict[str, Any]:
    n = len(vectors)
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    conn.execute("DROP TABLE IF EXISTS real_chunks")
    conn.execute(f"CREATE TABLE real_chunks (id bigint PRIMARY KEY, embedding vector({DIMS}))")
    with (
        conn.cursor() as cur,
        cur.copy("COPY real_chunks (id, embedding) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.set_types(["int8", "vector"])
        for i, v in enumerate(vectors):
            copy.write_row((i, v))
    conn.execute("VACUUM ANALYZE real_chunks")
    out: dict[str, Any] = {
        "rows": n,
        "heap_bytes": conn.execute("SELECT pg_table_size('real_chunks')").fetchone()[0],
        "vector_column_bytes": float(
            conn.execute("SELECT avg(pg_column_size(embedding)) FROM real_chunks").fetchone()[0]
        ),
        "halfvec_column_bytes": float(
            conn.execute(
                f"SELECT avg(pg_column_size(embedding::halfvec({DIMS}))) FROM real_chunks"  # noqa: S608
            ).fetchone()[0]
        ),
    }
    variants = {
        "vector": ("embedding", "vector_cosine_ops", f"embedding <=> {{q}}::vector({DIMS})"),
        "halfvec": (
            f"(embedding::halfvec({DIMS}))",
            "halfvec_cosine_ops",
            f"embedding::halfvec({DIMS}) <=> {{q}}::halfvec({DIMS})",
        ),
    }
    for name, (expression, opclass, order) in variants.items():
        conn.execute("DROP INDEX IF EXISTS real_chunks_hnsw")
        conn.execute("SET maintenance_work_mem = '2GB'")
        conn.execute(f"SET max_parallel_maintenance_workers = {workers}")
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        conn.execute(
            f"CREATE INDEX real_chunks_hnsw ON real_chunks USING hnsw ({expression} {opclass}) "
            "WITH (m = 16, ef_construction = 64)"
        )
        build_s = time.perf_counter() - t0
        size = conn.execute("SELECT pg_relation_size('real_chunks_hnsw')").fetchone()[0]
        figures: dict[str, Any] = {
            "build_s": round(build_s, 2),
            "index_bytes": size,
            "index_bytes_per_row": round(size / n, 1),
            "load_at_build": round(load, 1),
        }
        for ef in (40, 100):
            conn.execute(f"SET hnsw.ef_search = {ef}")
            latencies: list[float] = []
            recalls: list[float] = []
            for _round in range(2):  # the first round warms the index's pages
                latencies, recalls = [], []
                for q, truth in zip(queries, exact, strict=True):
                    literal = "'[" + ",".join(f"{v:.7g}" for v in q) + "]'"
                    sql = f"SELECT id FROM real_chunks ORDER BY {order.format(q=literal)} LIMIT 10"  # noqa: S608
                    t1 = time.perf_counter()
                    ids = [r[0] for r in conn.execute(sql, prepare=False).fetchall()]
                    latencies.append((time.perf_counter() - t1) * 1000)
                    recalls.append(len(set(ids) & set(truth.tolist())) / 10)
            summary = common.latency_summary(latencies, sum(latencies) / 1000)
            figures[f"ef{ef}"] = {
                "p50_ms": summary["p50_ms"],
                "p95_ms": summary["p95_ms"],
                "recall_at_10": round(float(np.mean(recalls)), 4),
                "load": round(os.getloadavg()[0], 1),
            }
        out[name] = figures
        print(name, json.dumps(figures), flush=True)
    conn.execute("DROP TABLE real_chunks")
    return out


def postings_per_chunk(texts: list[str]) -> float:
    from textkit import analysis

    sample = texts[:: max(1, len(texts) // 2000)]
    return float(np.mean([len(analysis.term_frequencies(t)[0]) for t in sample]))


def main() -> None:
    import django
    import psycopg
    from pgvector.psycopg import register_vector

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    texts = real_chunks(a.chunks)
    print(f"{len(texts)} real chunks", flush=True)
    vectors, rate = embed(texts, "chunks")
    questions = [
        json.loads(line)["question"]
        for line in (common.ROOT / "bench/quality/questions.jsonl").read_text().splitlines()
        if line.strip()
    ]
    queries, _ = embed(questions, "questions")
    db = os.environ.get("CANON_BENCH_DB", "canon_bench_b11")
    base = os.environ.get("CANON_PG_URL", "postgresql://postgres@127.0.0.1:54329/postgres")
    with psycopg.connect(base, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db]).fetchone():
            admin.execute(f"CREATE DATABASE {db}")
    conn = psycopg.connect(base.rsplit("/", 1)[0] + "/" + db, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    result = {
        "chunks": len(texts),
        "queries": len(questions),
        "use_texts_per_s": round(rate, 1),
        "postings_per_chunk": round(postings_per_chunk(texts), 1),
        "load_start": os.getloadavg(),
        **measure(conn, vectors, queries, a.workers),
        "load_end": os.getloadavg(),
    }
    vec, half = result["vector"], result["halfvec"]
    rows: list[tuple[Any, ...]] = [
        ("storage", "index MB", "B/row", "build s", "ef", "p50 ms", "p95 ms", "recall@10"),
    ]
    for name, f in (("vector", vec), ("halfvec", half)):
        for ef in (40, 100):
            rows.append(
                (
                    name,
                    round(f["index_bytes"] / 2**20, 1),
                    f["index_bytes_per_row"],
                    f["build_s"],
                    ef,
                    f[f"ef{ef}"]["p50_ms"],
                    f[f"ef{ef}"]["p95_ms"],
                    f[f"ef{ef}"]["recall_at_10"],
                )
            )
    result["halfvec_over_vector_index_bytes"] = common.ratio(
        half["index_bytes"], vec["index_bytes"]
    )
    common.report("B11", result, rows)


if __name__ == "__main__":
    main()
