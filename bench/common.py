"""Shared plumbing for the benchmarks: the `canon_bench` database (or CANON_BENCH_DB), the
corpus, a real worker, timing helpers and the JSON + table output. See docs/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# CANON_BENCH_DB: another database name, so runs side by side (two checkouts, two people)
# never drop each other's corpus.
DB_NAME = os.environ.get("CANON_BENCH_DB", "canon_bench")
CORPUS_SLUG = "corpus"
DIMS = 384
CHUNKS_PER_DOC = 200
DEFAULT_CHUNKS = int(os.environ.get("BENCH_CHUNKS", "100000"))

_WORDS: list[str] = []


def args(description: str, **extra: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS, help="corpus size")
    parser.add_argument("--seconds", type=float, default=8.0, help="per timed phase")
    for name, default in extra.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    return parser.parse_args()


# --- database -------------------------------------------------------------------------------
def redis_url(db: int) -> str:
    """The stack's Redis (REDIS_URL, else the one on :6379, else an embedded one started for this
    run, as setup() would find it), database `db`."""
    url = os.environ.get("REDIS_URL")
    if not url:
        from devtools.devstack import ensure_redis

        stops: list[Callable[[], None]] = []
        url = ensure_redis(stops)
        for stop in stops:
            atexit.register(stop)
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def setup(*, fresh: bool = False) -> None:
    """Start (or reuse) the dev stack, create + migrate `canon_bench`, and set up Django on it."""
    import psycopg

    from devtools.devstack import stack

    ctx = stack()
    current = ctx.__enter__()
    atexit.register(ctx.__exit__, None, None, None)
    admin_url = current.database_url
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if fresh:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [DB_NAME],
            )
            conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {DB_NAME}")
    os.environ.update(
        DATABASE_URL=_with_db(admin_url, DB_NAME),
        REDIS_URL=current.redis_url,
        CANON_STORAGE_ROOT=str(ROOT / ".data" / "bench-storage"),
        CANON_QUEUE=f"bench-{uuid.uuid4().hex[:8]}",
        CANON_API_RATE="1000000/min",
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONUNBUFFERED="1",
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, check=True
    )
    import django

    django.setup()


def database_url() -> str:
    return os.environ["DATABASE_URL"]


# --- corpus ---------------------------------------------------------------------------------


def _words() -> list[str]:
    if not _WORDS:
        rng = random.Random(7)
        syllables = ["ka", "lo", "mi", "ten", "ra", "so", "vu", "el", "dor", "an", "is", "qu"]
        _WORDS.extend(
            "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(5000)
        )
    return _WORDS


def paragraph(rng: random.Random, chars: int = 620) -> str:
    words = _words()
    sentences: list[str] = []
    length = 0
    while length < chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 16)))
        sentence = sentence.capitalize() + "."
        sentences.append(sentence)
        length += len(sentence) + 1
    return " ".join(sentences)


def document_paragraphs(seed: int, n: int = CHUNKS_PER_DOC) -> list[str]:
    rng = random.Random(seed)
    return [paragraph(rng) for _ in range(n)]


def join(paragraphs: Sequence[str]) -> str:
    return "\n\n".join(paragraphs) + "\n"


def access_groups(i: int) -> list[str]:
    """Document i's groups: 1 % carry g1, 10 % carry g10, the rest only `rest`."""
    if i % 100 == 0:
        return ["g1", "g10"]
    if i % 10 == 0:
        return ["g10"]
    return ["rest"]


def precompute(texts: Sequence[str], version: Any) -> list[list[dict[str, Any]]]:
    """Chunk each text as the pipeline will, and embed each chunk (hash provider) once: the
    precomputed vectors every contender uses."""
    import embeddings
    from textkit import chunker

    provider = embeddings.get_provider(
        provider=version.provider, model=version.model, dimensions=version.dimensions
    )
    out = []
    for text in texts:
        pieces = chunker.chunk_text(text, size=version.chunk_size, overlap=version.chunk_overlap)
        vectors = provider.embed([p.text for p in pieces])
        out.append(
            [
                {"ordinal": p.ordinal, "text": p.text, "hash": p.content_hash, "vector": v}
                for p, v in zip(pieces, vectors, strict=True)
            ]
        )
    return out


def cache_fill(docs: Sequence[Sequence[dict[str, Any]]], version: Any) -> int:
    """Put the precomputed vectors into the EmbeddingCache, so Canon's embed stage is a lookup."""

    from ingestion.pipeline.embed import cache_model

    rows = [c for doc in docs for c in doc]
    for start in range(0, len(rows), 2000):
        batch = rows[start : start + 2000]
        cache_put(
            cache_model(version),
            version.dimensions,
            [c["hash"] for c in batch],
            [c["vector"] for c in batch],
        )
    return len(rows)


def cache_put(
    model: str, dimensions: int, hashes: Sequence[str], vectors: Sequence[Sequence[float]]
) -> None:
    """Vectors into the EmbeddingCache under `model` (its cache key) and their content hashes;
    ones already there are kept."""
    from django.db import connection

    from ingestion.pipeline.embed import vector_literal

    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO ingestion_embeddingcache (model, dimensions, content_hash, embedding,
                                                  created_at)
            SELECT %s, %s, h, v::vector, now() FROM unnest(%s::text[], %s::text[]) AS x(h, v)
            ON CONFLICT (model, dimensions, content_hash) DO NOTHING
            """,
            [model, dimensions, list(hashes), [vector_literal(list(v)) for v in vectors]],
        )


def tenant_kb(slug: str, *, require_approval: bool = False, english_list: bool = False) -> Any:
    """The bench tenant's knowledge base `slug` (hash vectors of DIMS dimensions; with the
    English list when `english_list`), made when missing."""
    from kb.models import KnowledgeBase, Tenant
    from kb.services.index_versions import knowledge_base_create

    tenant, _ = Tenant.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    existing = KnowledgeBase.objects.filter(tenant=tenant, slug=slug).first()
    if existing is not None:
        return existing
    return knowledge_base_create(
        tenant=tenant,
        name=slug,
        slug=slug,
        require_approval=require_approval,
        dimensions=DIMS,
        english_list=english_list,
    )


def upload(kb: Any, key: str, text: str, groups: Sequence[str] = ()) -> Any:
    """A new document (or a new revision of an existing one), as the admin upload does."""
    from kb import storage
    from kb.models import Document
    from kb.services.documents import document_create, revision_create

    stored = storage.store_bytes(text.encode("utf-8"))
    existing = Document.objects.filter(kb=kb, key=key).first()
    if existing is None:
        return document_create(
            kb=kb,
            key=key,
            title=key,
            stored=stored,
            media_type="text/plain",
            original_name=f"{key}.txt",
            access_groups=groups,
        )
    return revision_create(
        document=existing, stored=stored, media_type="text/plain", original_name=f"{key}.txt"
    )


def wait_settled(kb: Any, *, timeout: float = 3600.0, relay: bool = True) -> None:
    """Run the relay (beat's job) until no build of `kb` is pending or building."""
    from ingestion.relay import outbox_relay_batch
    from kb.models import Build

    deadline = time.monotonic() + timeout
    while True:
        open_builds = Build.objects.filter(
            kb=kb, state__in=[Build.State.PENDING, Build.State.BUILDING]
        ).count()
        if not open_builds:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{open_builds} builds still open after {timeout}s")
        if relay:
            outbox_relay_batch()
        time.sleep(0.05)
    failed = Build.objects.filter(kb=kb, state=Build.State.FAILED).count()
    if failed:
        raise RuntimeError(f"{failed} builds failed")


# --- worker ---------------------------------------------------------------------------------


class Worker:
    """A real `celery worker` on the bench queue."""

    def __init__(self, concurrency: int = 2) -> None:
        from config.celery import app as celery_app
        from devtools.devstack import celery_worker_argv

        queue = os.environ["CANON_QUEUE"]
        celery_app.conf.task_default_queue = queue
        self.log_path = ROOT / ".data" / f"bench-worker-{os.getpid()}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            celery_worker_argv(queue=queue, concurrency=concurrency),
            cwd=ROOT,
            env=dict(os.environ),
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while "ready." not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {self.log_path}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@contextlib.contextmanager
def worker(concurrency: int = 2) -> Iterator[Worker]:
    w = Worker(concurrency)
    try:
        yield w
    finally:
        w.stop()


# --- timing and output ----------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def latency_summary(latencies_ms: Sequence[float], wall_s: float) -> dict[str, float]:
    return {
        "n": len(latencies_ms),
        "p50_ms": round(percentile(latencies_ms, 50), 3),
        "p90_ms": round(percentile(latencies_ms, 90), 3),
        "p95_ms": round(percentile(latencies_ms, 95), 3),
        "p99_ms": round(percentile(latencies_ms, 99), 3),
        "mean_ms": round(statistics.fmean(latencies_ms), 3) if latencies_ms else float("nan"),
        "qps": round(len(latencies_ms) / wall_s, 1) if wall_s else float("nan"),
    }


def timed_loop(fn: Callable[[], Any], seconds: float) -> tuple[list[float], float]:
    latencies = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies, time.perf_counter() - start


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def report(bench_id: str, summary: dict[str, Any], rows: Sequence[Sequence[Any]]) -> None:
    """Write bench/results/<id>.json and print a short table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    summary = {"id": bench_id, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **summary}
    (RESULTS / f"{bench_id}.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    print(f"\n== {bench_id} ==")
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    sys.stdout.flush()
