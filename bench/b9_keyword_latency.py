"""B9 keyword and hybrid latency: p50/p95 of `search` in keyword and hybrid mode against vector
mode in the same run, at 100,000 chunks (`--chunks`), for four kinds of query:

- common: only words that occur in most chunks (each in >= 50 % of them);
- rare: words that occur in well under 1 % of chunks;
- mixed: two common words, one of middling frequency and one rare (a typical question);
- random7: seven vocabulary words drawn uniformly (B2's kind of query).

The corpus is bench/common.py's synthetic one (its vocabulary, 200 paragraphs of ~620 characters
per document, so 200 chunks each) except that words are drawn Zipf-distributed (s = 1) instead of
uniformly: with uniform draws no word occurs in more than ~2 % of chunks, so "common words" would
not exist. It goes through Canon's path (upload services -> outbox -> relay -> a real worker ->
switch) into a database of its own, `canon_keyword` (Redis db 3), which later runs reuse while
it holds the same corpus built by the same pipeline version (`--fresh` rebuilds it).

Queries run interleaved (the mode order rotating per query) in this process through
`retrieval.search.engine.search`. Target: hybrid p95 <= 3x vector p95.

`--english-list` (issue 38, item 6): the same corpus in a knowledge base of its own whose index
version has the English list (`IndexVersion.english_list`), so hybrid reads three lists (its
index walks on snapshot readers, `retrieval.search.shared_snapshot`); `hybrid, in series` reads
them all on its own connection (CANON_SNAPSHOT_READERS 0), `hybrid, two legs` reads the same
version without the list (`english_list=False`) and `two legs, in series` without the list or
readers: the new list's cost and the readers' gain, side by side. Its chunks' English vectors
are hash vectors of the list's 384 dimensions put in the embedding cache before each upload
(`english_cache_fill`; MiniLM would take an hour for 100,000 chunks, and the walk's cost
depends on the vectors' count and dimensions, not on what they mean); the query's English
vector is MiniLM's, as search embeds it, and its time is reported apart (`english embed`).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Sequence
from typing import Any

from bench import common

DB_NAME = "canon_keyword"
REDIS_DB = 3
ZIPF_S = 1.0
MODES = ("vector", "keyword", "hybrid")
TWO_LEGS = "hybrid, two legs"  # with --english-list: hybrid without the English list
ENGLISH_EMBED = "english embed"  # with --english-list: the query's English vector alone
IN_SERIES = "hybrid, in series"  # with --english-list: no snapshot readers (walks in series)
TWO_IN_SERIES = "two legs, in series"  # with --english-list: neither the list nor readers
COMMON_DF = 0.5  # "common": in at least half the chunks
RARE_DF = 0.005  # "rare": in at most 0.5 % of them
TARGET = 3.0


# --- corpus -----------------------------------------------------------------------------------


class ZipfCorpus:
    """common.py's vocabulary drawn Zipf-distributed; document i is seeded by i."""

    def __init__(self, n_docs: int) -> None:
        import numpy as np

        self.vocab = list(dict.fromkeys(common._words()))  # the synthetic words, once each
        weights = 1.0 / np.arange(1, len(self.vocab) + 1) ** ZIPF_S
        self.p = weights / weights.sum()
        self.n_docs = n_docs
        self.df = np.zeros(len(self.vocab), dtype=np.int64)
        self.paragraphs = 0

    def document(self, i: int) -> str:
        """Document i's text; also counts each word's document frequency over its paragraphs
        (paragraph = chunk)."""
        import numpy as np

        rng = np.random.default_rng(1_000_003 + i)
        lengths = random.Random(i)
        ids = rng.choice(len(self.vocab), size=common.CHUNKS_PER_DOC * 160, p=self.p)
        pos = 0
        paragraphs = []
        for _ in range(common.CHUNKS_PER_DOC):
            start = pos
            sentences: list[str] = []
            length = 0
            while length < 620:
                n = lengths.randint(8, 16)
                sentence = " ".join(self.vocab[j] for j in ids[pos : pos + n]).capitalize() + "."
                pos += n
                sentences.append(sentence)
                length += len(sentence) + 1
            self.df[np.unique(ids[start:pos])] += 1
            self.paragraphs += 1
            paragraphs.append(" ".join(sentences))
        return common.join(paragraphs)

    def fraction(self, word: str) -> float:
        return float(self.df[self.vocab.index(word)]) / max(1, self.paragraphs)


def queries(corpus: ZipfCorpus, per_class: int, seed: int = 11) -> dict[str, list[str]]:
    """Query words picked by their measured document frequency in this corpus."""
    rng = random.Random(seed)
    share = corpus.df / max(1, corpus.paragraphs)
    by_rank = list(range(len(corpus.vocab)))  # vocabulary index = Zipf rank - 1
    common_words = [corpus.vocab[j] for j in by_rank if share[j] >= COMMON_DF]
    rare = [corpus.vocab[j] for j in by_rank if 0 < share[j] <= RARE_DF]
    middling = [corpus.vocab[j] for j in by_rank if 0.02 <= share[j] <= 0.2]
    if len(common_words) < 2 or not rare or not middling:
        raise RuntimeError(
            f"corpus too small for the query classes: {len(common_words)} common, "
            f"{len(middling)} middling, {len(rare)} rare words"
        )
    out: dict[str, list[str]] = {"common": [], "rare": [], "mixed": [], "random7": []}
    for _ in range(per_class):
        out["common"].append(
            " ".join(rng.sample(common_words, min(len(common_words), rng.randint(3, 5))))
        )
        out["rare"].append(" ".join(rng.sample(rare, rng.randint(2, 3))))
        words = [*rng.sample(common_words, 2), rng.choice(middling), rng.choice(rare)]
        rng.shuffle(words)
        out["mixed"].append(" ".join(words))
        out["random7"].append(" ".join(rng.sample(corpus.vocab, 7)))
    return out


# --- setup ------------------------------------------------------------------------------------


def _slug(n_docs: int, *, english: bool = False) -> str:
    return f"b9-zipf-{n_docs}" + ("-en" if english else "")


def _reusable(n_docs: int, *, english: bool = False) -> bool:
    from kb.models import PIPELINE_VERSION, Build, Chunk, KnowledgeBase, Publication

    # B15 adds a small knowledge base of its own beside this one.
    kb = (
        KnowledgeBase.objects.select_related("active_index_version")
        .filter(slug=_slug(n_docs, english=english))
        .first()
    )
    if kb is None or kb.active_index_version is None:
        return False
    version = kb.active_index_version
    assert version is not None
    if version.pipeline_version != PIPELINE_VERSION:
        return False
    if Build.objects.filter(kb=kb).exclude(state=Build.State.LIVE).exists():
        return False
    live = Publication.objects.filter(kb=kb, index_version=version)
    chunks = Chunk.objects.filter(kb=kb, build__in=live.values("build")).count()
    return live.count() == n_docs and chunks == n_docs * common.CHUNKS_PER_DOC


def english_cache_fill(texts: Sequence[str], version: Any) -> int:
    """Put an English vector (a hash vector of the list's dimensions) for each chunk of `texts`
    in the embedding cache, keyed as the embed stage looks it up (`embed.english_hash`), so the
    build's English pass is a lookup."""
    import embeddings
    from ingestion.pipeline.embed import english_hash, english_model_key
    from textkit import chunker

    provider = embeddings.get_provider(
        provider=embeddings.HASH_PROVIDER,
        model="b9-english",
        dimensions=int(version.english_dimensions),
    )
    rows: dict[str, str] = {}
    for text in texts:
        for piece in chunker.chunk_text(
            text, size=version.chunk_size, overlap=version.chunk_overlap
        ):
            key = english_hash({"text": piece.text})
            if key is not None and key not in rows:
                rows[key] = piece.text
    keys = list(rows)
    for start in range(0, len(keys), 2000):
        batch = keys[start : start + 2000]
        vectors = provider.embed([rows[k] for k in batch])
        common.cache_put(
            english_model_key(version), int(version.english_dimensions), batch, vectors
        )
    return len(keys)


def build_corpus(
    corpus: ZipfCorpus, *, concurrency: int, english: bool = False
) -> tuple[Any, dict[str, Any]]:
    from kb.models import Chunk

    kb = common.tenant_kb(_slug(corpus.n_docs, english=english), english_list=english)
    version = kb.active_index_version
    started = time.perf_counter()
    with common.worker(concurrency=concurrency):
        for start in range(0, corpus.n_docs, 50):
            batch = range(start, min(corpus.n_docs, start + 50))
            texts = {i: corpus.document(i) for i in batch}
            if english:
                english_cache_fill(list(texts.values()), version)
            for i, text in texts.items():
                common.upload(kb, f"doc-{i:05d}", text)
            common.wait_settled(kb)
            print(
                f"[B9] {min(corpus.n_docs, start + 50)}/{corpus.n_docs} documents live "
                f"({time.perf_counter() - started:.0f}s)",
                flush=True,
            )
    seconds = time.perf_counter() - started
    chunks = Chunk.objects.filter(kb=kb).count()
    built = {"built": True, "seconds": round(seconds, 1), "chunks_per_s": chunks / seconds}
    if english:
        built["english_vectors"] = Chunk.objects.filter(kb=kb, embedding_en__isnull=False).count()
    return kb, built


# --- measuring --------------------------------------------------------------------------------


def measure(
    kb: Any,
    classes: dict[str, list[str]],
    *,
    rounds: int,
    class_seconds: float,
    modes: Sequence[str] = MODES,
) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, list[int]]]]:
    """Each mode's latency (ms) and hit count per class, the modes interleaved. TWO_LEGS is a
    hybrid search without the English list; ENGLISH_EMBED times the query's English vector
    alone (no search)."""
    from django.test.utils import override_settings

    from retrieval.principals import Principal
    from retrieval.search.engine import search
    from retrieval.search.english import english_query

    principal = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    version = kb.active_index_version

    def run(mode: str, q: str) -> int:
        if mode == ENGLISH_EMBED:
            return int(english_query(version, q) is not None)
        if mode in (IN_SERIES, TWO_IN_SERIES):
            with override_settings(SEARCH_SNAPSHOT_READERS=0):
                got = search(
                    principal=principal,
                    kb=kb,
                    query=q,
                    top_k=10,
                    mode="hybrid",
                    english_list=mode == IN_SERIES,
                )
        elif mode == TWO_LEGS:
            got = search(
                principal=principal, kb=kb, query=q, top_k=10, mode="hybrid", english_list=False
            )
        else:
            got = search(principal=principal, kb=kb, query=q, top_k=10, mode=mode)
        return len(got.hits)

    # Warm up: the statements are prepared after five runs on a connection.
    for q in classes["mixed"][:6]:
        for mode in modes:
            run(mode, q)
    latency: dict[str, dict[str, list[float]]] = {c: {m: [] for m in modes} for c in classes}
    hits: dict[str, dict[str, list[int]]] = {c: {m: [] for m in modes} for c in classes}
    spent = dict.fromkeys(classes, 0.0)
    turn = 0
    for _ in range(rounds):
        for name, qs in classes.items():
            for q in qs:
                if spent[name] > class_seconds:
                    break
                order = [*modes[turn % len(modes) :], *modes[: turn % len(modes)]]
                turn += 1
                for mode in order:
                    t0 = time.perf_counter()
                    found = run(mode, q)
                    elapsed = time.perf_counter() - t0
                    spent[name] += elapsed
                    latency[name][mode].append(elapsed * 1000)
                    hits[name][mode].append(found)
    return latency, hits


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=common.DEFAULT_CHUNKS)
    parser.add_argument("--queries", type=int, default=20, help="per class")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--class-seconds", type=float, default=120.0, help="stop a class after this much search"
    )
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--db", default=DB_NAME)
    parser.add_argument("--redis-db", type=int, default=REDIS_DB)
    parser.add_argument("--fresh", action="store_true", help="rebuild the corpus")
    parser.add_argument(
        "--english-list", action="store_true", help="a knowledge base with the English list"
    )
    a = parser.parse_args(argv)
    english = a.english_list
    modes = (*MODES, IN_SERIES, TWO_LEGS, TWO_IN_SERIES, ENGLISH_EMBED) if english else MODES
    if a.db in ("canon", "canon_bench") or a.db.startswith("test_"):
        parser.error(f"--db {a.db} belongs to someone else")
    n_docs = max(1, a.chunks // common.CHUNKS_PER_DOC)
    os.environ["REDIS_URL"] = common.redis_url(a.redis_db)
    common.DB_NAME = a.db  # setup() creates and migrates exactly this database
    admin_url = os.environ.get("DATABASE_URL")  # setup() points DATABASE_URL at common.DB_NAME
    common.setup(fresh=a.fresh)
    from django.db import connections

    from kb.models import Chunk

    corpus = ZipfCorpus(n_docs)
    if _reusable(n_docs, english=english):
        t0 = time.perf_counter()
        for i in range(n_docs):  # the same texts again, for the words' document frequencies
            corpus.document(i)
        kb = common.tenant_kb(_slug(n_docs, english=english))
        build: dict[str, Any] = {"built": False, "regenerated_s": round(time.perf_counter() - t0)}
        print(f"[B9] reusing {a.db}: {n_docs} documents already live", flush=True)
    else:
        connections.close_all()
        if admin_url is None:
            os.environ.pop("DATABASE_URL", None)
        else:
            os.environ["DATABASE_URL"] = admin_url
        common.setup(fresh=a.fresh or not english)  # keep the other corpus where it can be
        kb, build = build_corpus(corpus, concurrency=a.concurrency, english=english)
    kb.refresh_from_db()
    chunks = Chunk.objects.filter(kb=kb).count()
    classes = queries(corpus, a.queries)
    words_df = {
        name: round(
            sum(corpus.fraction(w) for q in qs for w in q.split())
            / sum(len(q.split()) for q in qs),
            4,
        )
        for name, qs in classes.items()
    }
    latency, hits = measure(
        kb, classes, rounds=a.rounds, class_seconds=a.class_seconds, modes=modes
    )

    summary: dict[str, Any] = {
        "chunks": chunks,
        "documents": n_docs,
        "corpus": build,
        "zipf_s": ZIPF_S,
        "mean_word_chunk_fraction": words_df,
        "examples": {name: qs[:3] for name, qs in classes.items()},
        "classes": {},
        "target": f"hybrid p95 <= {TARGET}x vector p95",
        "english_list": english,
    }
    rows: list[tuple[Any, ...]] = [
        (
            "queries",
            "words in % of chunks",
            "mode",
            "n",
            "p50 ms",
            "p95 ms",
            "p95 / vector p95",
            "hits (min)",
            "verdict",
        )
    ]
    pooled: dict[str, list[float]] = {m: [] for m in modes}
    for name in classes:
        vector_p95 = common.percentile(latency[name]["vector"], 95)
        entry: dict[str, Any] = {}
        for mode in modes:
            values = latency[name][mode]
            pooled[mode] += values
            p95 = common.percentile(values, 95)
            entry[mode] = {
                "n": len(values),
                "p50_ms": round(common.percentile(values, 50), 2),
                "p95_ms": round(p95, 2),
                "p95_over_vector_p95": common.ratio(p95, vector_p95),
                "min_hits": min(hits[name][mode], default=0),
            }
            verdict = ""
            if mode == "hybrid":
                met = p95 <= TARGET * vector_p95
                entry["hybrid_target_met"] = met
                verdict = "met" if met else "MISSED"
            rows.append(
                (
                    name,
                    f"{100 * words_df[name]:.1f}",
                    mode,
                    len(values),
                    entry[mode]["p50_ms"],
                    entry[mode]["p95_ms"],
                    entry[mode]["p95_over_vector_p95"],
                    entry[mode]["min_hits"],
                    verdict,
                )
            )
        summary["classes"][name] = entry
    vector_p95 = common.percentile(pooled["vector"], 95)
    summary["all"] = {}
    for mode in modes:
        p95 = common.percentile(pooled[mode], 95)
        summary["all"][mode] = {
            "n": len(pooled[mode]),
            "p50_ms": round(common.percentile(pooled[mode], 50), 2),
            "p95_ms": round(p95, 2),
            "p95_over_vector_p95": common.ratio(p95, vector_p95),
        }
        verdict = ""
        if mode == "hybrid":
            summary["all"]["hybrid_target_met"] = p95 <= TARGET * vector_p95
            verdict = "met" if summary["all"]["hybrid_target_met"] else "MISSED"
        rows.append(
            (
                "all",
                "",
                mode,
                len(pooled[mode]),
                summary["all"][mode]["p50_ms"],
                summary["all"][mode]["p95_ms"],
                summary["all"][mode]["p95_over_vector_p95"],
                "",
                verdict,
            )
        )
    common.report("B9", summary, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
