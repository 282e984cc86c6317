"""B8 retrieval quality: hit@1/5/10 and MRR@10 of Canon's search in vector, keyword and hybrid
mode, against contenders on exactly the same chunks (the live builds' `kb_chunk` rows of the
active index version: their text and stored embedding), on two question sets in one run:

- the keyword-style set (`questions.jsonl`), per language (en, zh, all);
- the natural set (`natural.jsonl`, issue 24), per split (`splits.json`: the tuning half, on
  which every choice is made, and the held-out half, the figure that counts) x kind
  (en-paraphrase, en-fact, zh-paraphrase, zh-to-en, en-to-zh), and per language and overall.

The contenders:

- `bm25s`: PyStemmer English stemming and English stop words, Chinese as character bigrams
  (a single character for a one-character run); `bm25s+jieba`: the same with jieba's words;
- PostgreSQL `websearch_to_tsquery('english', q)` ranked by `ts_rank_cd` (own table, GIN index);
- exact dense retrieval in numpy over the stored vectors, the query embedded by the same provider;
- reciprocal rank fusion (k = 60) of the first 100 chunks of `bm25s+jieba` and of exact dense;
- langchain-postgres `PGVector` (`add_embeddings` of the stored vectors,
  `similarity_search_by_vector`).

The documents go through Canon's real path: `retrieval.api.uploads.document_upload` (the API's
upload service) -> outbox -> relay -> a real Celery worker -> switch, in a database of its own
(`canon_quality`, dropped and recreated unless `--reuse`) and a Redis database other than 0.

    python -m bench.quality [--provider use --model use-multilingual-v3 --dimensions 512 (default)]
                            [--limit-docs N] [--limit-questions N] [--corpus DIR]
                            [--questions F] [--natural F] [--splits F] [--no-keyword]
                            [--results NAME] [--reuse] [--no-legs]

Writes bench/results/quality.json (metrics, latency, ingest, targets),
bench/results/quality-details.json (per question: the top-10 document keys of every system) and
bench/results/quality-legs.json (per question: Canon's two legs 100 deep with what a fusion could
use, `bench.quality.legs`), then checks that `python -m bench.quality.offline` reproduces the
hybrid's figures from that dump. `--results NAME` writes NAME.json, NAME-details.json and
NAME-legs.json instead; `python -m bench.quality2` runs this on the second corpus that way.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common
from bench.quality import splits
from bench.quality.contenders import (
    PgFts,
    Ranker,
    Search,
    Tokenizer,
    bm25s_search,
    canon_ranker,
    documents,
    langchain_ranker,
    numpy_search,
    rrf_ranker,
)
from bench.quality.corpus import CORPUS, ensure_corpus, load_corpus
from bench.quality.ingest import (
    DB_NAME,
    KB_SLUG,
    REDIS_DB,
    Chunks,
    ingest,
    live_chunks,
    settled_summary,
    setup,
)
from bench.quality.metrics import (
    TOP_K,
    reciprocal_rank,
    summarize,
    summarize_natural,
)
from bench.quality.report import (
    DETAILS,
    LEGS,
    RESULTS,
    _count,
    natural_targets,
    print_report,
    targets,
)

QUESTIONS = common.ROOT / "bench" / "quality" / "questions.jsonl"
NATURAL = splits.NATURAL


CANON_MODES = ("vector", "keyword", "hybrid")
# Hybrid without the English list, on a version that has one (`search(english_list=False)`).
TWO_LEGS = "hybrid, two legs"


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


def tag_natural(questions: list[dict[str, Any]], assignment: dict[str, str]) -> None:
    """Each natural question's split, from the committed assignment (splits.json)."""
    missing = [q["id"] for q in questions if q["set"] == "natural" and q["id"] not in assignment]
    if missing:
        raise SystemExit(
            f"{len(missing)} natural questions have no split ({missing[:5]}): regenerate the "
            "splits file (`python -m bench.quality.splits`, or bench.quality2.splits for the "
            "second corpus) and commit it"
        )
    for q in questions:
        q["split"] = assignment[q["id"]] if q["set"] == "natural" else None
        q.setdefault("kind", None)


def contenders(
    chunks: Chunks, embed: Callable[[str], list[float]], a: argparse.Namespace
) -> tuple[dict[str, Ranker], dict[str, float]]:
    """The contenders' rankers on the live chunks, and how long each took to set up."""
    setup_s: dict[str, float] = {}
    searches: dict[str, Search] = {}

    def timed(name: str, build: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        built = build()
        setup_s[name] = round(time.perf_counter() - t0, 2)
        return built

    searches["bm25s"] = timed("bm25s", lambda: bm25s_search(chunks, Tokenizer("bigrams")))
    if not a.no_jieba:
        searches["bm25s+jieba"] = timed(
            "bm25s+jieba", lambda: bm25s_search(chunks, Tokenizer("jieba"))
        )
    fts = timed("pg websearch+ts_rank_cd", lambda: PgFts(chunks))
    searches["numpy exact"] = timed("numpy exact", lambda: numpy_search(chunks, embed))
    rankers: dict[str, Ranker] = {name: documents(chunks, s) for name, s in searches.items()}
    rankers["pg websearch+ts_rank_cd"] = fts
    lexical = "bm25s+jieba" if "bm25s+jieba" in searches else "bm25s"
    rankers[f"rrf({lexical}, numpy exact)"] = rrf_ranker(
        chunks, [searches[lexical], searches["numpy exact"]]
    )
    if not a.no_langchain:
        rankers["langchain PGVector"] = timed(
            "langchain PGVector", lambda: langchain_ranker(chunks, embed)
        )
    return rankers, setup_s


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    # The embedding `make run` serves with; `--provider hash --model canon-hash-v1
    # --dimensions 384` measures the lexical-only baseline.
    parser.add_argument("--provider", default="use")
    parser.add_argument("--model", default="use-multilingual-v3")
    parser.add_argument("--dimensions", type=int, default=512)
    parser.add_argument("--limit-docs", type=int, default=None)
    parser.add_argument("--limit-questions", type=int, default=None, help="per question set")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="keyword-style set")
    parser.add_argument("--natural", type=Path, default=NATURAL, help="natural set (issue 24)")
    parser.add_argument("--no-natural", action="store_true", help="the keyword-style set only")
    parser.add_argument("--no-keyword", action="store_true", help="the natural set only")
    parser.add_argument(
        "--splits", type=Path, default=splits.SPLITS, help="the natural set's split"
    )
    parser.add_argument(
        "--results",
        default=RESULTS.stem,
        help="bench/results/NAME.json, NAME-details.json and NAME-legs.json",
    )
    parser.add_argument("--db", default=DB_NAME, help="its own database, dropped and recreated")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the database of an earlier run with the same corpus and provider and skip "
        "the ingest (for iterating on the measurement; the ingest figures are then not timed)",
    )
    parser.add_argument("--redis-db", type=int, default=REDIS_DB)
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=3600.0, help="ingest timeout, seconds")
    parser.add_argument("--no-jieba", action="store_true", help="skip the bm25s+jieba contender")
    parser.add_argument("--no-langchain", action="store_true")
    parser.add_argument("--no-legs", action="store_true", help="skip the per-leg dump")
    a = parser.parse_args(argv)
    if a.db in ("canon", "canon_bench") or a.db.startswith("test_"):
        parser.error(f"--db {a.db} belongs to someone else")
    if a.no_natural and a.no_keyword:
        parser.error("--no-natural and --no-keyword leave no question to ask")
    outputs = Outputs.named(a.results)

    wall = time.perf_counter()
    ensure_corpus(a.corpus)
    sets = {} if a.no_keyword else {"keyword": a.questions}
    if not a.no_natural:
        sets["natural"] = a.natural
    for path in sets.values():
        if not path.exists():
            raise SystemExit(f"no questions file {path}")
    corpus = load_corpus(a.corpus, sets, limit_docs=a.limit_docs, limit_questions=a.limit_questions)
    split_doc = json.loads(a.splits.read_text(encoding="utf-8")) if "natural" in sets else {}
    tag_natural(corpus.questions, splits.load(a.splits) if "natural" in sets else {})
    print(
        f"[B8] {len(corpus.documents)} documents, {len(corpus.questions)} questions "
        f"{_count(q['set'] for q in corpus.questions)} "
        f"({corpus.dropped_questions} dropped: no answer document ingested)",
        flush=True,
    )
    setup(a.db, a.redis_db, fresh=not a.reuse)
    logging.getLogger("langchain_postgres").setLevel(logging.ERROR)
    import embeddings
    from kb.models import KnowledgeBase, Tenant
    from kb.services.index_versions import knowledge_base_create

    kb = KnowledgeBase.objects.filter(slug=KB_SLUG).first() if a.reuse else None
    if kb is not None and kb.active_index_version is not None:
        existing = kb.active_index_version
        wanted = (a.provider, a.model, a.dimensions)
        if (existing.provider, existing.model, existing.dimensions) != wanted:
            raise SystemExit(f"--reuse: {a.db} was ingested with another provider, not {wanted}")
        ingest_summary = settled_summary(corpus, kb)
        print(f"[B8] --reuse: {a.db} as an earlier run left it", flush=True)
    else:
        if a.reuse:
            print(f"[B8] --reuse: nothing to reuse in {a.db}; ingesting", flush=True)
            setup(a.db, a.redis_db, fresh=True)
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
    if version.english_list:  # the default with and without its third list, side by side
        canon_hits[TWO_LEGS] = {}
        systems[f"canon {TWO_LEGS}"] = canon_ranker(
            kb, "hybrid", canon_hits[TWO_LEGS], english_list=False
        )
    others, setup_s = contenders(chunks, embed, a)
    systems.update(others)
    print(f"[B8] contenders indexed {len(chunks.ids)} chunks: {setup_s}", flush=True)

    t0 = time.perf_counter()
    ranked, latency = run_queries(systems, corpus.questions)
    queries_s = round(time.perf_counter() - t0, 1)
    print(f"[B8] {len(corpus.questions)} questions x {len(systems)} systems in {queries_s}s")
    rows = list(enumerate(corpus.questions))
    metrics = {
        name: summarize(
            [(q["lang"], q["answers"], lists[i]) for i, q in rows if q["set"] == "keyword"]
        )
        for name, lists in ranked.items()
    }
    natural = {
        name: summarize_natural(
            [
                (q["split"], q["kind"], q["lang"], q["answers"], lists[i])
                for i, q in rows
                if q["set"] == "natural"
            ]
        )
        for name, lists in ranked.items()
    }
    has_natural = any(q["set"] == "natural" for q in corpus.questions)
    lat = {
        name: {
            "p50_ms": round(common.percentile(v, 50), 2),
            "p95_ms": round(common.percentile(v, 95), 2),
        }
        for name, v in latency.items()
    }

    common.RESULTS.mkdir(parents=True, exist_ok=True)
    legs_summary: dict[str, Any] = {}
    if not a.no_legs:
        legs_summary = write_legs(kb, chunks, embed, corpus.questions, canon_hits, outputs.legs)

    summary = {
        "id": "B8",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "provider": {"provider": a.provider, "model": a.model, "dimensions": a.dimensions},
        "corpus": {
            "directory": str(a.corpus),
            "questions_files": {name: str(path) for name, path in sets.items()},
            "splits_file": str(a.splits),
            "split_seed": split_doc.get("seed"),
            "documents": len(corpus.documents),
            "documents_by_lang": _count(d.get("lang", "?") for d in corpus.documents),
            "questions": len(corpus.questions),
            "questions_by_set": _count(q["set"] for q in corpus.questions),
            "questions_by_lang": _count(
                q["lang"] for q in corpus.questions if q["set"] == "keyword"
            ),
            "natural_by_split_kind": _count(
                f"{q['split']} {q['kind']}" for q in corpus.questions if q["set"] == "natural"
            ),
            "questions_dropped": corpus.dropped_questions,
            "questions_without_live_answer": not_live,
            "notes": corpus.notes,
        },
        "ingest": ingest_summary,
        "contender_setup_s": setup_s,
        "top_k": TOP_K,
        "metrics": metrics,
        "natural": natural if has_natural else {},
        "latency": lat,
        "targets": targets(metrics),
        "natural_targets": natural_targets(natural) if has_natural else {},
        "legs": legs_summary,
        "queries_s": queries_s,
        "run_s": round(time.perf_counter() - wall, 1),
        "notes": "hit@k: an answer document among the first k distinct documents of the top-10 "
        "hits; MRR@10 over the distinct documents of the top-10 hits. `metrics`: the "
        "keyword-style set per language; `natural`: the natural set per split (tuning, heldout) "
        "x kind, language and all. Every contender ranks the same live chunks (text + stored "
        "vector). Latency per query over both sets, in this process: Canon and the dense "
        "contenders include embedding the query (rrf embeds and runs bm25s+jieba itself).",
    }
    outputs.results.write_text(
        json.dumps(summary, indent=2, ensure_ascii=False, default=str) + "\n"
    )
    details = [
        {
            "id": q.get("id"),
            "set": q["set"],
            "kind": q.get("kind"),
            "split": q.get("split"),
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
        for i, q in rows
    ]
    outputs.details.write_text(json.dumps(details, indent=1, ensure_ascii=False) + "\n")
    print_report(summary, written=(outputs.results, outputs.details, outputs.legs))
    return 0


@dataclass(frozen=True)
class Outputs:
    """The three files a run writes."""

    results: Path
    details: Path
    legs: Path

    @classmethod
    def named(cls, name: str) -> Outputs:
        if name == RESULTS.stem:
            return cls(RESULTS, DETAILS, LEGS)
        if not name or "/" in name or name.startswith("."):
            raise SystemExit(f"--results {name!r}: a plain file name, please")
        return cls(
            common.RESULTS / f"{name}.json",
            common.RESULTS / f"{name}-details.json",
            common.RESULTS / f"{name}-legs.json",
        )


def write_legs(
    kb: Any,
    chunks: Chunks,
    embed: Callable[[str], list[float]],
    questions: Sequence[dict[str, Any]],
    canon_hits: dict[str, dict[str, list[list[Any]]]],
    path: Path = LEGS,
) -> dict[str, Any]:
    """The per-leg dump (bench.quality.legs) of every question, written to `path`, then the
    offline evaluator's reproduction of Canon's hybrid from it (bench.quality.offline.check)."""
    from django.conf import settings

    from bench.quality import offline
    from bench.quality.legs import LEG_DEPTH, Legs
    from retrieval.search.fusion import depth

    t0 = time.perf_counter()
    legs = Legs(kb=kb, chunks=chunks, embed=embed)
    records = []
    for q in questions:
        records.append(
            {
                "id": q.get("id"),
                "set": q["set"],
                "kind": q.get("kind"),
                "split": q.get("split"),
                "lang": q["lang"],
                "question": q["question"],
                "answers": q["answers"],
                **legs.question(q["question"]),
                "canon": {m: canon_hits[m].get(q["question"], []) for m in CANON_MODES},
            }
        )
    data = {
        "about": {
            "what": "Canon's vector and keyword legs per question, LEG_DEPTH deep, with each "
            "hit's features; `canon`: Canon's own top 10 per mode in the timed run, as [chunk "
            "id, document key, score]. See bench/quality/legs.py and offline.py.",
            "leg_depth": LEG_DEPTH,
            "top_k": TOP_K,
            "settings": {
                "HYBRID_FUSION": settings.HYBRID_FUSION,
                "HYBRID_VECTOR_WEIGHT": settings.HYBRID_VECTOR_WEIGHT,
                "hybrid_depth": depth(TOP_K),
                "KEYWORD_CANDIDATES": settings.KEYWORD_CANDIDATES,
            },
            "index_version": kb.active_index_version_id,
            "chunks": len(chunks.ids),
        },
        "questions": records,
    }
    path.write_text(json.dumps(data, ensure_ascii=False) + "\n")
    dump_s = round(time.perf_counter() - t0, 1)
    try:
        ok, lines = offline.check(data)
    except Exception as exc:  # a fusion method the built-in `canon` cannot rebuild from the dump
        ok, lines = False, [f"could not run the check: {exc!r}"]
    print(f"[B8] per-leg dump: {len(records)} questions in {dump_s}s -> {path}", flush=True)
    for line in lines:
        print(f"[B8] offline check: {line}", flush=True)
    return {"file": str(path), "dump_s": dump_s, "reproduced": ok, "check": lines}
