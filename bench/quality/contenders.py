"""B8's contenders on exactly Canon's chunks: bm25s (with or without jieba), PostgreSQL
full text search, exact dense retrieval in numpy, reciprocal rank fusion of bm25s+jieba and exact
dense, langchain-postgres; Canon's modes as rankers."""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from bench import common
from bench.quality.ingest import (
    Chunks,
    principal_for,
)
from bench.quality.metrics import (
    TOP_K,
)

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


Ranker = Callable[[str], list[str]]  # query -> document key per hit, best first (<= TOP_K)


def canon_ranker(
    kb: Any, mode: str, hits: dict[str, list[list[Any]]], *, english_list: bool = True
) -> Ranker:
    """Canon's `search` in `mode`; each query's hits (chunk id, document key, score) are kept
    in `hits` for the details file (fusion can be tuned offline from the legs' lists).
    `english_list=False`: hybrid without the English list of a version that has one."""
    from retrieval.search.engine import search

    principal = principal_for(kb)

    def rank(query: str) -> list[str]:
        result = search(
            principal=principal,
            kb=kb,
            query=query,
            top_k=TOP_K,
            mode=mode,
            english_list=english_list,
        )
        hits[query] = [[h.chunk_id, h.document_key, round(h.score, 6)] for h in result.hits]
        return [hit.document_key for hit in result.hits]

    return rank


Search = Callable[[str, int], list[int]]  # (query, depth) -> chunk indices into Chunks, best first


def documents(chunks: Chunks, search: Search) -> Ranker:
    """A chunk-level search as a ranker: the document key of each of its first TOP_K hits."""

    def rank(query: str) -> list[str]:
        return [chunks.keys[i] for i in search(query, TOP_K)]

    return rank


def bm25s_search(chunks: Chunks, tokenizer: Tokenizer) -> Search:
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import
    retriever = bm25s.BM25()
    retriever.index([tokenizer(t) for t in chunks.texts], show_progress=False)

    def search(query: str, depth: int) -> list[int]:
        tokens = tokenizer(query)
        k = min(depth, len(chunks.texts))
        if not tokens or not k:
            return []
        docs, scores = retriever.retrieve([tokens], k=k, show_progress=False, n_threads=1)
        return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    return search


def bm25s_ranker(chunks: Chunks, tokenizer: Tokenizer) -> Ranker:
    return documents(chunks, bm25s_search(chunks, tokenizer))


RRF_K = 60
RRF_DEPTH = 100


def rrf(lists: Sequence[Sequence[int]], *, k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion: sum over the lists of 1 / (k + rank), rank from 1; ties by the
    best rank in any list, then by the chunk index."""
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranked in lists:
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            best[item] = min(rank, best.get(item, rank))
    return sorted(scores, key=lambda i: (-scores[i], best[i], i))


def rrf_ranker(
    chunks: Chunks, searches: Sequence[Search], *, depth: int = RRF_DEPTH, k: int = RRF_K
) -> Ranker:
    """RRF (k=60) of the first `depth` hits of each search; every search runs per query."""

    def search(query: str, top: int) -> list[int]:
        return rrf([s(query, depth) for s in searches], k=k)[:top]

    return documents(chunks, search)


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


def numpy_search(chunks: Chunks, embed: Callable[[str], list[float]]) -> Search:
    """Exact dense retrieval: cosine similarity to every stored vector."""
    import numpy as np

    matrix = chunks.vectors / (np.linalg.norm(chunks.vectors, axis=1, keepdims=True) + 1e-12)

    def search(query: str, depth: int) -> list[int]:
        q = np.asarray(embed(query), dtype=np.float32)
        q /= np.linalg.norm(q) + 1e-12
        scores = matrix @ q
        k = min(depth, len(scores))
        if not k:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]
        return [int(i) for i in top]

    return search


def numpy_ranker(chunks: Chunks, embed: Callable[[str], list[float]]) -> Ranker:
    return documents(chunks, numpy_search(chunks, embed))


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
