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
import os
import re
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common

CORPUS_DIR = common.ROOT / ".data" / "quality" / "corpus"
QUESTIONS = common.ROOT / "bench" / "quality" / "questions.jsonl"
RESULTS = common.RESULTS / "quality.json"
DETAILS = common.RESULTS / "quality-details.json"
DB_NAME = "canon_quality"
REDIS_DB = 2
KB_SLUG = "quality"
TOP_K = 10
LANGS = ("en", "zh", "all")
CANON_MODES = ("vector", "keyword", "hybrid")
EXTENSIONS = {
    "text/html": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
}


# --- metrics ----------------------------------------------------------------------------------


def distinct_documents(keys: Iterable[str]) -> list[str]:
    """The document keys of ranked hits, each document once, at its best (first) rank."""
    return list(dict.fromkeys(keys))


def hit_at(ranked: Sequence[str], answers: Iterable[str], k: int, *, depth: int = TOP_K) -> bool:
    """Whether an answer document is among the first `k` distinct documents of the first
    `depth` hits (`ranked` holds one document key per hit, best first)."""
    wanted = set(answers)
    return any(key in wanted for key in distinct_documents(ranked[:depth])[:k])


def reciprocal_rank(ranked: Sequence[str], answers: Iterable[str], *, depth: int = TOP_K) -> float:
    """1 / the rank of the first answer document among the distinct documents of the first
    `depth` hits; 0 when none is there."""
    wanted = set(answers)
    for rank, key in enumerate(distinct_documents(ranked[:depth]), start=1):
        if key in wanted:
            return 1.0 / rank
    return 0.0


def summarize(rows: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> dict[str, Any]:
    """hit@1, hit@5, hit@10 and MRR@10 per language and over all, from (lang, answers, ranked)
    rows; a language with no question is reported with n = 0 and no figures."""
    out: dict[str, Any] = {}
    for lang in LANGS:
        chosen = [r for r in rows if lang == "all" or r[0] == lang]
        n = len(chosen)
        if not n:
            out[lang] = {"n": 0}
            continue
        out[lang] = {
            "n": n,
            "hit@1": round(sum(hit_at(r[2], r[1], 1) for r in chosen) / n, 4),
            "hit@5": round(sum(hit_at(r[2], r[1], 5) for r in chosen) / n, 4),
            "hit@10": round(sum(hit_at(r[2], r[1], 10) for r in chosen) / n, 4),
            "mrr@10": round(sum(reciprocal_rank(r[2], r[1]) for r in chosen) / n, 4),
        }
    return out


# --- tokenisation for the bm25s contenders ------------------------------------------------------

_CJK = (
    "\u3005\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uac00-\ud7af\U00020000-\U0003134f"
)
_TOKEN_RE = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")


class Tokenizer:
    """English: lower-cased words, English stop words dropped, Snowball (PyStemmer) stems.
    Chinese: overlapping character bigrams of each CJK run (the run itself when it is one
    character), or jieba's words of the run with `chinese="jieba"`."""

    def __init__(self, chinese: str = "bigrams") -> None:
        import Stemmer
        from bm25s.stopwords import STOPWORDS_EN

        self.stemmer = Stemmer.Stemmer("english")
        self.stopwords = frozenset(STOPWORDS_EN)
        self.chinese = chinese
        if chinese == "jieba":
            import jieba

            jieba.setLogLevel(logging.WARNING)
            self._cut: Callable[[str], list[str]] = jieba.lcut
        elif chinese != "bigrams":
            raise ValueError(f"unknown Chinese tokenisation {chinese!r}")

    def __call__(self, text: str) -> list[str]:
        folded = unicodedata.normalize("NFKC", text).lower()
        words: list[str] = []
        tokens: list[str] = []
        for cjk, word in _TOKEN_RE.findall(folded):
            if word:
                if word not in self.stopwords:
                    words.append(word)
                continue
            if words:
                tokens.extend(self.stemmer.stemWords(words))
                words = []
            if self.chinese == "jieba":
                tokens.extend(t for t in self._cut(cjk) if t.strip())
            elif len(cjk) == 1:
                tokens.append(cjk)
            else:
                tokens.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
        if words:
            tokens.extend(self.stemmer.stemWords(words))
        return tokens


# --- inputs -----------------------------------------------------------------------------------


@dataclass
class Corpus:
    directory: Path
    documents: list[dict[str, Any]]
    questions: list[dict[str, Any]]
    dropped_questions: int = 0
    notes: list[str] = field(default_factory=list)


def ensure_corpus(directory: Path) -> None:
    """Build the Debian corpus (`python -m bench.quality.corpus`) when its manifest is missing."""
    if (directory / "manifest.json").exists():
        return
    if directory.resolve() != CORPUS_DIR.resolve():
        raise SystemExit(f"no manifest.json in {directory}")
    print("[B8] corpus missing: running python -m bench.quality.corpus", flush=True)
    subprocess.run([sys.executable, "-m", "bench.quality.corpus"], cwd=common.ROOT, check=True)
    if not (directory / "manifest.json").exists():
        raise SystemExit(f"bench.quality.corpus wrote no {directory / 'manifest.json'}")


def load_corpus(
    directory: Path, questions_path: Path, *, limit_docs: int | None, limit_questions: int | None
) -> Corpus:
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    questions = [
        json.loads(line)
        for line in questions_path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    by_key = {d["key"]: d for d in manifest}
    notes: list[str] = []
    unknown = sorted({a for q in questions for a in q["answers"] if a not in by_key})
    if unknown:
        notes.append(f"{len(unknown)} answer keys not in the manifest: {unknown[:5]}")
    if limit_questions:
        questions = _interleave_languages(questions)[:limit_questions]
    if limit_docs and limit_docs < len(manifest):
        # The questions' answer documents first (languages interleaved), then the rest.
        chosen: dict[str, None] = {}
        for q in _interleave_languages(questions):
            for a in q["answers"]:
                if a in by_key and len(chosen) < limit_docs:
                    chosen.setdefault(a)
        for d in manifest:
            if len(chosen) >= limit_docs:
                break
            chosen.setdefault(d["key"])
        manifest = [by_key[k] for k in chosen]
    keys = {d["key"] for d in manifest}
    kept = []
    for q in questions:
        answers = [a for a in q["answers"] if a in keys]
        if answers:
            kept.append({**q, "answers": answers})
    return Corpus(
        directory=directory,
        documents=manifest,
        questions=kept,
        dropped_questions=len(questions) - len(kept),
        notes=notes,
    )


def _interleave_languages(questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_lang: dict[str, list[dict[str, Any]]] = {}
    for q in questions:
        by_lang.setdefault(q["lang"], []).append(q)
    out: list[dict[str, Any]] = []
    for i in range(max((len(v) for v in by_lang.values()), default=0)):
        out.extend(v[i] for v in by_lang.values() if i < len(v))
    return out


# --- setup and ingest -------------------------------------------------------------------------


def setup(db_name: str, redis_db: int) -> None:
    """common.setup() on a database and Redis db of B8's own (so runs of B1..B7 in
    `canon_bench` and the dev stack's Redis db 0 are never touched)."""
    os.environ["REDIS_URL"] = common.redis_url(redis_db)
    common.DB_NAME = db_name  # setup() creates, drops and migrates exactly this database
    common.setup(fresh=True)


def principal_for(kb: Any) -> Any:
    from retrieval.principals import Principal

    return Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )


def upload_name(doc: dict[str, Any]) -> str:
    """The file name the upload carries: the key's last part, with an extension for its media
    type when it has none Canon recognises."""
    name = Path(doc["key"]).name
    suffix = EXTENSIONS.get(doc.get("media_type", ""), "")
    if suffix and not name.lower().endswith((*EXTENSIONS.values(), ".htm", ".text")):
        name += suffix
    return name


def ingest(
    corpus: Corpus, kb: Any, *, timeout: float, worker_alive: Callable[[], bool]
) -> dict[str, Any]:
    """Upload every document through the API's upload service and wait (running the relay, as
    beat would) until each one is live or failed. The caller runs the worker."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from ingestion.relay import outbox_relay_batch
    from kb.models import Build, Chunk, Document, Publication
    from kb.uploads import UploadRejected
    from retrieval.api.uploads import Refused, document_upload

    principal = principal_for(kb)
    rejected: dict[str, str] = {}
    started = time.perf_counter()
    for i, doc in enumerate(corpus.documents):
        data = (corpus.directory / doc["key"]).read_bytes()
        try:
            document_upload(
                principal=principal,
                kb=kb,
                idempotency_key=f"b8-{i}",
                key=doc["key"],
                upload=SimpleUploadedFile(upload_name(doc), data),
                title=doc["key"],
            )
        except (UploadRejected, Refused) as exc:
            rejected[doc["key"]] = f"upload refused: {exc}"
    uploaded_s = time.perf_counter() - started
    open_states = [Build.State.PENDING, Build.State.BUILDING]
    deadline = time.monotonic() + timeout
    last_print = 0.0
    while True:
        outbox_relay_batch()
        counts = dict.fromkeys(Build.State.values, 0)
        for state in Build.objects.filter(kb=kb).values_list("state", flat=True):
            counts[state] += 1
        waiting = counts[Build.State.PENDING] + counts[Build.State.BUILDING]
        if time.monotonic() - last_print > 15:
            print(f"[B8] builds: {counts}", flush=True)
            last_print = time.monotonic()
        if not waiting or time.monotonic() > deadline:
            break
        if not worker_alive():
            raise RuntimeError(f"the worker died; see {common.ROOT / '.data'}/bench-worker-*.log")
        time.sleep(0.1)
    settled_s = time.perf_counter() - started
    version = kb.active_index_version
    failures = dict(rejected)
    for key, state, error in Build.objects.filter(kb=kb).values_list(
        "document__key", "state", "error"
    ):
        if state == Build.State.FAILED:
            failures[key] = error or "failed (no reason recorded)"
        elif state in open_states:
            failures[key] = f"still {state} after {timeout:.0f}s"
    live = Publication.objects.filter(kb=kb, index_version=version).count()
    chunks = Chunk.objects.filter(
        kb=kb,
        index_version=version,
        build__in=Publication.objects.filter(kb=kb, index_version=version).values("build"),
    ).count()
    return {
        "documents": len(corpus.documents),
        "uploaded": Document.objects.filter(kb=kb).count(),
        "live": live,
        "failed": len(failures),
        "failures": failures,
        "chunks": chunks,
        "upload_s": round(uploaded_s, 2),
        "ingest_s": round(settled_s, 2),
        "chunks_per_s": round(chunks / settled_s, 1) if settled_s else None,
        "build_states": {k: v for k, v in counts.items() if v},
    }


# --- the chunks every contender gets ----------------------------------------------------------


@dataclass
class Chunks:
    ids: list[int]
    keys: list[str]
    texts: list[str]
    vectors: Any  # numpy float32 (n, dims), as stored


def live_chunks(kb: Any) -> Chunks:
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    iv = kb.active_index_version_id
    with psycopg.connect(common.database_url()) as conn:
        register_vector(conn)
        rows = conn.execute(
            """
            SELECT c.id, d.key, c.text, c.embedding
            FROM kb_chunk c
            JOIN kb_publication p ON p.build_id = c.build_id AND p.index_version_id = %(iv)s
            JOIN kb_document d ON d.id = p.document_id
            WHERE c.index_version_id = %(iv)s AND c.kb_id = %(kb)s AND d.deleted_at IS NULL
            ORDER BY c.id
            """,
            {"iv": iv, "kb": kb.pk},
        ).fetchall()
    vectors = (
        np.stack([np.asarray(_floats(r[3]), dtype=np.float32) for r in rows])
        if rows
        else np.zeros((0, 1), dtype=np.float32)
    )
    return Chunks(
        ids=[r[0] for r in rows],
        keys=[r[1] for r in rows],
        texts=[r[2] for r in rows],
        vectors=vectors,
    )


def _floats(value: Any) -> Any:
    """A stored embedding as floats (pgvector's adapter gives a Vector for the untyped column)."""
    return value.to_numpy() if hasattr(value, "to_numpy") else value


# --- systems: Canon's modes and the contenders ------------------------------------------------

Ranker = Callable[[str], list[str]]  # query -> document key per hit, best first (<= TOP_K)


def canon_ranker(kb: Any, mode: str, hits: dict[str, list[list[Any]]]) -> Ranker:
    """Canon's `search` in `mode`; each query's hits (chunk id, document key, score) are kept
    in `hits` for the details file (fusion can be tuned offline from the legs' lists)."""
    from retrieval.search.engine import search

    principal = principal_for(kb)

    def rank(query: str) -> list[str]:
        result = search(principal=principal, kb=kb, query=query, top_k=TOP_K, mode=mode)
        hits[query] = [[h.chunk_id, h.document_key, round(h.score, 6)] for h in result.hits]
        return [hit.document_key for hit in result.hits]

    return rank


def bm25s_ranker(chunks: Chunks, tokenizer: Tokenizer) -> Ranker:
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import
    retriever = bm25s.BM25()
    retriever.index([tokenizer(t) for t in chunks.texts], show_progress=False)
    k = min(TOP_K, len(chunks.texts))

    def rank(query: str) -> list[str]:
        tokens = tokenizer(query)
        if not tokens or not k:
            return []
        docs, scores = retriever.retrieve([tokens], k=k, show_progress=False, n_threads=1)
        return [chunks.keys[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    return rank


class PgFts:
    """`websearch_to_tsquery('english', q)` + `ts_rank_cd` over the same chunk texts, in a table
    of its own with a GIN index on the stored English tsvector."""

    def __init__(self, chunks: Chunks) -> None:
        import psycopg

        self.keys = chunks.keys
        self.conn = psycopg.connect(common.database_url(), autocommit=True)
        self.conn.execute("DROP TABLE IF EXISTS bench_quality_fts")
        self.conn.execute(
            "CREATE TABLE bench_quality_fts (i int PRIMARY KEY, text text NOT NULL, "
            "tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED)"
        )
        with (
            self.conn.cursor() as cur,
            cur.copy("COPY bench_quality_fts (i, text) FROM STDIN") as copy,
        ):
            for i, text in enumerate(chunks.texts):
                copy.write_row((i, text))
        self.conn.execute("CREATE INDEX bench_quality_fts_gin ON bench_quality_fts USING gin (tsv)")
        self.conn.execute("ANALYZE bench_quality_fts")

    def __call__(self, query: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT i FROM bench_quality_fts, websearch_to_tsquery('english', %s) q "
            "WHERE tsv @@ q ORDER BY ts_rank_cd(tsv, q) DESC, i LIMIT %s",
            [query, TOP_K],
        ).fetchall()
        return [self.keys[r[0]] for r in rows]


def numpy_ranker(chunks: Chunks, embed: Callable[[str], list[float]]) -> Ranker:
    import numpy as np

    matrix = chunks.vectors / (np.linalg.norm(chunks.vectors, axis=1, keepdims=True) + 1e-12)

    def rank(query: str) -> list[str]:
        q = np.asarray(embed(query), dtype=np.float32)
        q /= np.linalg.norm(q) + 1e-12
        scores = matrix @ q
        k = min(TOP_K, len(scores))
        if not k:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]
        return [chunks.keys[int(i)] for i in top]

    return rank


def langchain_ranker(chunks: Chunks, embed: Callable[[str], list[float]]) -> Ranker:
    from langchain_core.embeddings import Embeddings
    from langchain_postgres import PGVector

    class Precomputed(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise NotImplementedError("the bench passes the stored vectors")

        def embed_query(self, text: str) -> list[float]:
            return embed(text)

    url = common.database_url().replace("postgresql://", "postgresql+psycopg://", 1)
    store = PGVector(
        embeddings=Precomputed(),
        collection_name="bench-quality",
        connection=url,
        use_jsonb=True,
        pre_delete_collection=True,
    )
    for start in range(0, len(chunks.ids), 500):
        end = start + 500
        store.add_embeddings(
            texts=chunks.texts[start:end],
            embeddings=[v.tolist() for v in chunks.vectors[start:end]],
            metadatas=[{"doc": k} for k in chunks.keys[start:end]],
            ids=[str(i) for i in chunks.ids[start:end]],
        )

    def rank(query: str) -> list[str]:
        docs = store.similarity_search_by_vector(embed(query), k=TOP_K)
        return [d.metadata["doc"] for d in docs]

    return rank


# --- the run ----------------------------------------------------------------------------------


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


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3f}"
    return str(x)


def markdown(rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def targets(metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Canon keyword >= bm25s, and Canon hybrid >= every contender, on MRR@10 per language; and
    hybrid against the better of Canon's own legs."""
    out: dict[str, Any] = {"keyword_ge_bm25s": {}, "hybrid_ge_every_contender": {}, "legs": {}}
    contenders = [n for n in metrics if not n.startswith("canon ")]
    for lang in LANGS:
        if not metrics["canon hybrid"][lang].get("n"):
            continue

        def mrr(name: str, lang: str = lang) -> float:
            return float(metrics[name][lang]["mrr@10"])

        if "bm25s" in metrics:
            out["keyword_ge_bm25s"][lang] = {
                "canon_keyword": mrr("canon keyword"),
                "bm25s": mrr("bm25s"),
                "met": mrr("canon keyword") >= mrr("bm25s"),
            }
        best = max(contenders, key=mrr) if contenders else None
        out["hybrid_ge_every_contender"][lang] = {
            "canon_hybrid": mrr("canon hybrid"),
            "best_contender": best,
            "best_contender_mrr": mrr(best) if best else None,
            "met": all(mrr("canon hybrid") >= mrr(c) for c in contenders),
            "below": [c for c in contenders if mrr("canon hybrid") < mrr(c)],
        }
        leg = max(("canon vector", "canon keyword"), key=mrr)
        out["legs"][lang] = {
            "hybrid": mrr("canon hybrid"),
            "best_leg": leg,
            "best_leg_mrr": mrr(leg),
            "hybrid_minus_best_leg": round(mrr("canon hybrid") - mrr(leg), 4),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    # The embedding `make run` serves with; `--provider hash --model canon-hash-v1
    # --dimensions 384` measures the lexical-only baseline.
    parser.add_argument("--provider", default="use")
    parser.add_argument("--model", default="use-multilingual-v3")
    parser.add_argument("--dimensions", type=int, default=512)
    parser.add_argument("--limit-docs", type=int, default=None)
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR)
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
    from kb.services import knowledge_base_create

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


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def print_report(summary: dict[str, Any]) -> None:
    metrics, lat, ing = summary["metrics"], summary["latency"], summary["ingest"]
    prov = summary["provider"]
    print(
        f"\n== B8 retrieval quality ({prov['provider']} {prov['model']} {prov['dimensions']}-d; "
        f"{summary['corpus']['documents']} documents, {ing['chunks']} chunks, "
        f"{summary['corpus']['questions']} questions {summary['corpus']['questions_by_lang']}) =="
    )
    print(
        f"\ningest: {ing['live']} live, {ing['failed']} failed of {ing['documents']}; "
        f"{ing['chunks']} chunks in {ing['ingest_s']} s = {ing['chunks_per_s']} chunks/s\n"
    )
    header = ["system"]
    for lang in LANGS:
        header += [f"{lang} hit@1", f"{lang} hit@5", f"{lang} hit@10", f"{lang} MRR@10"]
    rows: list[list[Any]] = [header]
    for name, m in metrics.items():
        row: list[Any] = [name]
        for lang in LANGS:
            if m[lang].get("n"):
                row += [m[lang]["hit@1"], m[lang]["hit@5"], m[lang]["hit@10"], m[lang]["mrr@10"]]
            else:
                row += ["-"] * 4
        rows.append(row)
    print(markdown(rows))
    vector_p95 = lat.get("canon vector", {}).get("p95_ms") or float("nan")
    lrows: list[list[Any]] = [["system", "p50 ms", "p95 ms", "p95 / canon vector p95"]]
    for name, v in lat.items():
        lrows.append([name, v["p50_ms"], v["p95_ms"], common.ratio(v["p95_ms"], vector_p95)])
    print()
    print(markdown(lrows))
    t = summary["targets"]
    print()
    trows: list[list[Any]] = [["lang", "check", "Canon", "against", "verdict"]]
    for lang, v in t["legs"].items():
        trows.append(
            [
                lang,
                "hybrid vs best leg (MRR@10)",
                v["hybrid"],
                f"{v['best_leg']} {v['best_leg_mrr']:.3f}",
                f"{v['hybrid_minus_best_leg']:+.3f}",
            ]
        )
    for lang, v in t["keyword_ge_bm25s"].items():
        trows.append(
            [
                lang,
                "keyword >= bm25s (MRR@10)",
                v["canon_keyword"],
                f"bm25s {v['bm25s']:.3f}",
                "met" if v["met"] else "MISSED",
            ]
        )
    for lang, v in t["hybrid_ge_every_contender"].items():
        trows.append(
            [
                lang,
                "hybrid >= every contender (MRR@10)",
                v["canon_hybrid"],
                f"best: {v['best_contender']} {v['best_contender_mrr']:.3f}",
                "met" if v["met"] else "MISSED (below: " + ", ".join(v["below"]) + ")",
            ]
        )
    print(markdown(trows))
    print(f"\n[B8] run took {summary['run_s']} s; wrote {RESULTS} and {DETAILS}")
    sys.stdout.flush()
