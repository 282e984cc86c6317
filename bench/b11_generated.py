"""B11 at 1M chunks: `vector` against `halfvec` HNSW indexes over a generated corpus.

A clustered corpus of unit vectors of the `use` model's dimension (512) — 2,000 random centres,
each point a centre plus Gaussian noise, normalised — written by binary COPY into a plain table of
its own database (CANON_BENCH_1M_DB, default canon_bench_1m). Then, one after the other, each with
Canon's parameters (m 16, ef_construction 64) and parallel maintenance workers:

    CREATE INDEX ... USING hnsw (embedding vector_cosine_ops)
    CREATE INDEX ... USING hnsw ((embedding::halfvec(512)) halfvec_cosine_ops)

(the second is what an index version with `vector_storage = halfvec` builds), with build time,
`pg_relation_size` and, for queries drawn from the same clusters, latency (ef_search 100, one
connection) and recall@10 against the exact top 10 computed in numpy while the rows are generated.
The table is plain (no Canon visibility joins): this measures the index, not the API.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from bench import common

DIMS = 512
CENTRES = 2000
BATCH = 50_000


def _url(name: str) -> str:
    base = os.environ.get("CANON_PG_URL", "postgresql://postgres@127.0.0.1:54329/postgres")
    return base.rsplit("/", 1)[0] + "/" + name


def _points(rng: np.random.Generator, centres: np.ndarray, n: int, noise: float) -> np.ndarray:
    picks = rng.integers(0, len(centres), n)
    x = centres[picks] + rng.normal(0, noise, (n, DIMS)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def generate(conn: Any, n: int, queries: np.ndarray, noise: float, seed: int) -> np.ndarray:
    """COPY n clustered vectors into `gen`; returns the exact top-10 ids of each query."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, (CENTRES, DIMS)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    conn.execute("DROP TABLE IF EXISTS gen")
    conn.execute(f"CREATE TABLE gen (id bigint PRIMARY KEY, embedding vector({DIMS}))")
    conn.commit()
    best_s = np.full((len(queries), 10), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 10), dtype=np.int64)
    for start in range(0, n, BATCH):
        x = _points(rng, centres, min(BATCH, n - start), noise)
        with (
            conn.cursor() as cur,
            cur.copy("COPY gen (id, embedding) FROM STDIN (FORMAT BINARY)") as cp,
        ):
            cp.set_types(["int8", "vector"])
            for i, v in enumerate(x):
                cp.write_row((start + i, v))
        conn.commit()
        sims = queries @ x.T
        ids = np.arange(start, start + len(x))
        all_s = np.concatenate([best_s, sims], axis=1)
        all_i = np.concatenate([best_i, np.broadcast_to(ids, sims.shape)], axis=1)
        top = np.argsort(-all_s, axis=1)[:, :10]
        best_s = np.take_along_axis(all_s, top, axis=1)
        best_i = np.take_along_axis(all_i, top, axis=1)
        print(f"  generated {start + len(x)}", flush=True)
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE gen")
    conn.autocommit = False
    return best_i


def build(conn: Any, name: str, expression: str, opclass: str, workers: int, mem: str) -> float:
    conn.execute(f"DROP INDEX IF EXISTS {name}")
    conn.execute(f"SET maintenance_work_mem = '{mem}'")
    conn.execute(f"SET max_parallel_maintenance_workers = {workers}")
    t0 = time.perf_counter()
    conn.execute(
        f"CREATE INDEX {name} ON gen USING hnsw ({expression} {opclass}) "
        "WITH (m = 16, ef_construction = 64)"
    )
    return time.perf_counter() - t0


def search(conn: Any, order: str, queries: np.ndarray, exact: np.ndarray) -> dict[str, Any]:
    latencies, recalls = [], []
    conn.execute("SET hnsw.ef_search = 100")
    for q, truth in zip(queries, exact, strict=True):
        literal = "[" + ",".join(f"{v:.7g}" for v in q) + "]"
        t0 = time.perf_counter()
        rows = conn.execute(order.format(q=f"'{literal}'"), prepare=False).fetchall()
        latencies.append((time.perf_counter() - t0) * 1000)
        recalls.append(len({r[0] for r in rows} & set(truth.tolist())) / 10)
    return {
        **common.latency_summary(latencies, sum(latencies) / 1000),
        "recall_at_10": float(np.mean(recalls)),
    }


def _scalar(conn: Any, sql: str, params: list[Any] | None = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def main() -> None:
    import psycopg
    from pgvector.psycopg import register_vector

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--mem", default="5GB")
    p.add_argument("--skip-generate", action="store_true")
    a = p.parse_args()
    db = os.environ.get("CANON_BENCH_1M_DB", "canon_bench_1m")
    with psycopg.connect(_url("postgres"), autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db]).fetchone():
            admin.execute(f"CREATE DATABASE {db}")
    conn = psycopg.connect(_url(db))
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    qrng = np.random.default_rng(99)
    crng = np.random.default_rng(a.rows)  # the generator's centres, redrawn for the queries
    centres = crng.normal(0, 1, (CENTRES, DIMS)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    queries = _points(qrng, centres, a.queries, a.noise)
    truth_path = common.RESULTS / f"b11_truth_{a.rows}.npy"
    t0 = time.perf_counter()
    if a.skip_generate and truth_path.exists():
        exact = np.load(truth_path)
    else:
        exact = generate(conn, a.rows, queries, a.noise, seed=a.rows)
        common.RESULTS.mkdir(parents=True, exist_ok=True)
        np.save(truth_path, exact)
    generate_s = time.perf_counter() - t0
    conn.autocommit = True
    out: dict[str, Any] = {
        "rows": a.rows,
        "dims": DIMS,
        "generate_and_copy_s": round(generate_s, 1),
    }
    out["heap_bytes"] = _scalar(conn, "SELECT pg_table_size('gen')")
    variants = {
        "vector": (
            "gen_hnsw_vector",
            "embedding",
            "vector_cosine_ops",
            "SELECT id FROM gen ORDER BY embedding <=> {q}::vector(512) LIMIT 10",
        ),
        "halfvec": (
            "gen_hnsw_halfvec",
            f"(embedding::halfvec({DIMS}))",
            "halfvec_cosine_ops",
            "SELECT id FROM gen ORDER BY embedding::halfvec(512) <=> {q}::halfvec(512) LIMIT 10",
        ),
    }
    for name, (index, expression, opclass, order) in variants.items():
        print(f"building {name} index, load {os.getloadavg()}", flush=True)
        seconds = build(conn, index, expression, opclass, a.workers, a.mem)
        size = _scalar(conn, "SELECT pg_relation_size(%s)", [index])
        # Only this variant's index may serve the query.
        other = [v[0] for k, v in variants.items() if k != name]
        for o in other:
            conn.execute(f"DROP INDEX IF EXISTS {o}")
        search(conn, order, queries[:20], exact[:20])  # warm the index's pages
        figures = search(conn, order, queries, exact)
        out[name] = {
            "build_s": round(seconds, 1),
            "index_bytes": size,
            "index_bytes_per_row": round(size / a.rows, 1),
            **figures,
            "load": os.getloadavg(),
        }
        print(name, json.dumps(out[name]), flush=True)
    out["load_end"] = os.getloadavg()
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    (common.RESULTS / f"B11_generated_{a.rows}.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
