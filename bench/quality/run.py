"""B8 retrieval quality: hit@1/5/10 and MRR@10 per language (en, zh, all) of Canon's search in
vector, keyword and hybrid mode, against contenders on exactly the same chunks (the live builds'
`kb_chunk` rows of the active index version: their text and stored embedding):

- `bm25s`: PyStemmer English stemming and English stop words, Chinese as character bigrams
  (a single character for a one-character run); `bm25s+jieba`: the same with jieba's words;
- PostgreSQL `websearch_to_tsquery('english', q)` ranked by `ts_rank_cd` (own table, GIN index);
- exact dense retrieval in numpy over the stored vectors, the query embedded by the same provider;
- langchain-postgres `PGVector` (`add_embeddings` of the stored vectors,
  `similarity_search_by_vector`).

The documents go through Canon's real path: `retrieval.api.uploads.document_upload` (the API's
upload service) -> outbox -> relay -> a real Celery worker -> switch, in a database of its own
(`canon_quality`, dropped and recreated) and a Redis database other than 0.

    python -m bench.quality [--provider use --model use-multilingual-v3 --dimensions 512 (default)]
                            [--limit-docs N] [--limit-questions N] [--corpus DIR] [--questions F]

Writes bench/results/quality.json (metrics, latency, ingest, targets) and
bench/results/quality-details.json (per question: the top-10 document keys of every system).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.quality.contenders import (
    PgFts,
    Ranker,
    Tokenizer,
    bm25s_ranker,
    canon_ranker,
    langchain_ranker,
    numpy_ranker,
)
from bench.quality.corpus import CORPUS, ensure_corpus, load_corpus
from bench.quality.ingest import (
    DB_NAME,
    KB_SLUG,
    REDIS_DB,
    ingest,
    live_chunks,
    setup,
)
from bench.quality.metrics import (
    TOP_K,
    reciprocal_rank,
    summarize,
)
from bench.quality.report import DETAILS, RESULTS, _count, print_report, targets

QUESTIONS = common.ROOT / "bench" / "quality" / "questions.jsonl"


CANON_MODES = ("vector", "keyword", "hybrid")


def run_queries(
    systems: dict[str, Ranker], questions: Sequence[dict[str, Any]], *, warmup: int = 3
) -> tuple[dict[str, list[list[str]]], dict[str, list[float]]]:
    """Every question through every system, the order of the systems rotating per question so
    that drift on a shared machine hits them all alike. Returns ranked keys and latencies."""
    names = list(systems)
    for q in questions[:warmup]:
        for name in names:
            systems[name](q["question"])
    ranked: dict[str, list[list[str]]] = {n: [] for n in names}
    latency: dict[str, list[float]] = {n: [] for n in names}
    for i, q in enumerate(questions):
        order = names[i % len(names) :] + names[: i % len(names)]
        got: dict[str, list[str]] = {}
        for name in order:
            t0 = time.perf_counter()
            got[name] = systems[name](q["question"])
            latency[name].append((time.perf_counter() - t0) * 1000)
        for name in names:
            ranked[name].append(got[name])
    return ranked, latency


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    # The embedding `make run` serves with; `--provider hash --model canon-hash-v1
    # --dimensions 384` measures the lexical-only baseline.
    parser.add_argument("--provider", default="use")
    parser.add_argument("--model", default="use-multilingual-v3")
    parser.add_argument("--dimensions", type=int, default=512)
    parser.add_argument("--limit-docs", type=int, default=None)
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--db", default=DB_NAME, help="its own database, dropped and recreated")
    parser.add_argument("--redis-db", type=int, default=REDIS_DB)
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=3600.0, help="ingest timeout, seconds")
    parser.add_argument("--no-jieba", action="store_true", help="skip the bm25s+jieba contender")
    parser.add_argument("--no-langchain", action="store_true")
    a = parser.parse_args(argv)
    if a.db in ("canon", "canon_bench") or a.db.startswith("test_"):
        parser.error(f"--db {a.db} belongs to someone else")

    wall = time.perf_counter()
    ensure_corpus(a.corpus)
    if not a.questions.exists():
        raise SystemExit(f"no questions file {a.questions}")
    corpus = load_corpus(
        a.corpus, a.questions, limit_docs=a.limit_docs, limit_questions=a.limit_questions
    )
    print(
        f"[B8] {len(corpus.documents)} documents, {len(corpus.questions)} questions "
        f"({corpus.dropped_questions} dropped: no answer document ingested)",
        flush=True,
    )
    setup(a.db, a.redis_db)
    logging.getLogger("langchain_postgres").setLevel(logging.ERROR)
    import embeddings
    from kb.models import Tenant
    from kb.services.index_versions import knowledge_base_create

    tenant = Tenant.objects.create(slug="quality", name="Quality")
    kb = knowledge_base_create(
        tenant=tenant,
        name="quality",
        slug=KB_SLUG,
        provider=a.provider,
        model=a.model,
        dimensions=a.dimensions,
    )
    kb.refresh_from_db()
    with common.worker(concurrency=a.concurrency) as w:
        ingest_summary = ingest(
            corpus, kb, timeout=a.timeout, worker_alive=lambda: w.proc.poll() is None
        )
    print(
        f"[B8] ingest: {ingest_summary['live']}/{ingest_summary['documents']} live, "
        f"{ingest_summary['failed']} failed, {ingest_summary['chunks']} chunks in "
        f"{ingest_summary['ingest_s']}s ({ingest_summary['chunks_per_s']} chunks/s)",
        flush=True,
    )
    for key, reason in list(ingest_summary["failures"].items())[:20]:
        print(f"[B8]   failed {key}: {reason[:300]}", flush=True)

    kb.refresh_from_db()
    version = kb.active_index_version
    assert version is not None
    provider = embeddings.get_provider(
        provider=version.provider, model=version.model, dimensions=version.dimensions
    )

    def embed(query: str) -> list[float]:
        return provider.embed([query])[0]

    chunks = live_chunks(kb)
    # Score only what is searchable: answers whose documents failed are reported as failures
    # above and left out here (a question with no live answer document is not asked).
    live_keys = set(chunks.keys)
    asked = [
        {**q, "answers": [k for k in q["answers"] if k in live_keys]}
        for q in corpus.questions
        if any(k in live_keys for k in q["answers"])
    ]
    not_live = len(corpus.questions) - len(asked)
    if not_live:
        print(f"[B8] {not_live} questions left out: no answer document is live", flush=True)
    corpus.questions = asked
    canon_hits: dict[str, dict[str, list[list[Any]]]] = {m: {} for m in CANON_MODES}
    systems: dict[str, Ranker] = {
        f"canon {m}": canon_ranker(kb, m, canon_hits[m]) for m in CANON_MODES
    }
    setup_s: dict[str, float] = {}
    builders: list[tuple[str, Callable[[], Ranker]]] = [
        ("bm25s", lambda: bm25s_ranker(chunks, Tokenizer("bigrams"))),
        ("pg websearch+ts_rank_cd", lambda: PgFts(chunks)),
        ("numpy exact", lambda: numpy_ranker(chunks, embed)),
    ]
    if not a.no_jieba:
        builders.insert(1, ("bm25s+jieba", lambda: bm25s_ranker(chunks, Tokenizer("jieba"))))
    if not a.no_langchain:
        builders.append(("langchain PGVector", lambda: langchain_ranker(chunks, embed)))
    for name, build in builders:
        t0 = time.perf_counter()
        systems[name] = build()
        setup_s[name] = round(time.perf_counter() - t0, 2)
    print(f"[B8] contenders indexed {len(chunks.ids)} chunks: {setup_s}", flush=True)

    ranked, latency = run_queries(systems, corpus.questions)
    metrics = {
        name: summarize(
            [(q["lang"], q["answers"], r) for q, r in zip(corpus.questions, lists, strict=True)]
        )
        for name, lists in ranked.items()
    }
    lat = {
        name: {
            "p50_ms": round(common.percentile(v, 50), 2),
            "p95_ms": round(common.percentile(v, 95), 2),
        }
        for name, v in latency.items()
    }
    verdicts = targets(metrics)
    summary = {
        "id": "B8",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "provider": {"provider": a.provider, "model": a.model, "dimensions": a.dimensions},
        "corpus": {
            "directory": str(a.corpus),
            "questions_file": str(a.questions),
            "documents": len(corpus.documents),
            "documents_by_lang": _count(d.get("lang", "?") for d in corpus.documents),
            "questions": len(corpus.questions),
            "questions_by_lang": _count(q["lang"] for q in corpus.questions),
            "questions_dropped": corpus.dropped_questions,
            "questions_without_live_answer": not_live,
            "notes": corpus.notes,
        },
        "ingest": ingest_summary,
        "contender_setup_s": setup_s,
        "top_k": TOP_K,
        "metrics": metrics,
        "latency": lat,
        "targets": verdicts,
        "run_s": round(time.perf_counter() - wall, 1),
        "notes": "hit@k: an answer document among the first k distinct documents of the top-10 "
        "hits; MRR@10 over the distinct documents of the top-10 hits. Every contender ranks "
        "the same live chunks (text + stored vector). Latency per query, in this process: Canon "
        "and the dense contenders include embedding the query.",
    }
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=2, ensure_ascii=False, default=str) + "\n")
    details = [
        {
            "id": q.get("id"),
            "lang": q["lang"],
            "question": q["question"],
            "answers": q["answers"],
            "where": q.get("where"),
            "ranked": {name: ranked[name][i] for name in ranked},
            "canon_hits": {m: canon_hits[m].get(q["question"], []) for m in CANON_MODES},
            "rr": {
                name: round(reciprocal_rank(ranked[name][i], q["answers"]), 4) for name in ranked
            },
        }
        for i, q in enumerate(corpus.questions)
    ]
    DETAILS.write_text(json.dumps(details, indent=1, ensure_ascii=False) + "\n")
    print_report(summary)
    return 0
