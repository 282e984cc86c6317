"""B8's per-leg dump for offline fusion research (`bench/results/quality-legs.json`).

For every question of both sets: Canon's vector leg and keyword leg, each read as Canon's own
`search` reads it in that mode, `LEG_DEPTH` chunks deep (`vector`, `keyword`: each hit's rank,
chunk id, document key and score), and the keyword leg as the hybrid reads it, `fusion.depth(10)`
deep (`keyword_hybrid`). The two keyword lists can disagree in order: Canon's BM25 ranks exactly
only its max(4 x limit, 100) most promising candidates (`retrieval.search.lexical.bm25`), so a
deeper read ranks more of them. The vector leg's first rows are the same at any depth (one HNSW
walk at ef_search 100), so the hybrid's vector leg is `vector`'s prefix. Beside each hit, what a
fusion method could use:

- `cjk`: the chunk's share of CJK characters among its non-space characters (its language);
- `cos`: the cosine similarity of the query's embedding to the chunk's stored vector (numpy,
  for the hits of both legs; a vector hit's `score` is Canon's own, from PostgreSQL);
- `bm25`: the chunk's exact BM25 for the query (Canon's formula and statistics), `matched`: how
  many of the query's terms it contains, `idf_matched`: the sum of their IDF (for the hits of
  both legs; a keyword hit's `score` is Canon's own).

For a version with the English list (issue 38), the list as search reads it and the English
cosine of every chunk either list names (`english`, `en_cos`: `_english`). And per query: its
language and CJK share, its analysed terms, those the index version holds
(`present`: term, IDF, df) and their IDF mass, the version's average chunk length. Canon's own
hybrid, vector and keyword top 10 (chunk ids), as the timed run got them, are kept too, so an
offline fusion can be checked against the real one (`bench.quality.offline`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.quality.ingest import Chunks, principal_for
from textkit.text import cjk_share

LEG_DEPTH = 100
# Depths below LEG_DEPTH the learned fusion's fit may choose (its legs' rows per hybrid search).
FIT_DEPTHS = (30, 50, 70)


@dataclass
class Legs:
    """What the dump needs of the live index: the chunks (as every contender gets them), their
    unit vectors and lexical lengths."""

    kb: Any
    chunks: Chunks
    embed: Callable[[str], list[float]]
    index: dict[int, int] = field(default_factory=dict)
    unit: Any = None
    lengths: dict[int, int] = field(default_factory=dict)
    cjk: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import numpy as np

        from kb.models import Chunk

        self.index = {cid: i for i, cid in enumerate(self.chunks.ids)}
        vectors = self.chunks.vectors
        self.unit = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12)
        self.lengths = {
            pk: length or 0
            for pk, length in Chunk.objects.filter(
                index_version_id=self.kb.active_index_version_id
            ).values_list("pk", "lexical_length")
        }
        self.principal = principal_for(self.kb)
        self.version_id = self.kb.active_index_version_id

    def chunk_cjk(self, chunk_id: int) -> float:
        if chunk_id not in self.cjk:
            self.cjk[chunk_id] = cjk_share(self.chunks.texts[self.index[chunk_id]])
        return self.cjk[chunk_id]

    def question(self, query: str) -> dict[str, Any]:
        """Both legs of `query`, LEG_DEPTH deep, with the features above."""
        import numpy as np

        from bench.quality.metrics import TOP_K
        from retrieval.search.engine import search
        from retrieval.search.fusion import depth
        from retrieval.search.lexical.bm25 import query_weights
        from textkit import analysis

        def leg(mode: str, top_k: int) -> list[Any]:
            return search(
                principal=self.principal, kb=self.kb, query=query, top_k=top_k, mode=mode
            ).hits

        legs = {
            "vector": leg("vector", LEG_DEPTH),
            "keyword": leg("keyword", LEG_DEPTH),
            # What the hybrid reads: its keyword leg at depth(TOP_K) ranks fewer candidates
            # exactly than a read LEG_DEPTH deep, so its order can differ from the deep list's.
            "keyword_hybrid": leg("keyword", depth(TOP_K)),
            # The keyword leg as a hybrid reading each depth the fusion's fit tries would read
            # it (`bench.quality.fusion_fit`); LEG_DEPTH's is `keyword`.
            **{f"keyword_{d}": leg("keyword", d) for d in FIT_DEPTHS},
        }
        terms = analysis.query_terms(query)
        weights = query_weights(version_id=self.version_id, query=query)
        idf = dict(zip(weights.terms, weights.idfs, strict=True))
        union = list(dict.fromkeys(h.chunk_id for hits in legs.values() for h in hits))
        tfs = self._tfs(union, weights.terms)
        q = np.asarray(self.embed(query), dtype=np.float32)
        q /= np.linalg.norm(q) + 1e-12
        rows = np.asarray([self.index[c] for c in union], dtype=np.int64)
        cos = dict(zip(union, (self.unit[rows] @ q).tolist(), strict=True)) if union else {}
        k1, b = float(analysis.K1), float(analysis.B)

        def bm25(chunk_id: int) -> float:
            norm = k1 * (1 - b + b * self.lengths.get(chunk_id, 0) / weights.avg_length)
            return sum(
                idf[t] * tf * (k1 + 1) / (tf + norm) for t, tf in tfs.get(chunk_id, {}).items()
            )

        def entry(rank: int, hit: Any) -> dict[str, Any]:
            matched = tfs.get(hit.chunk_id, {})
            return {
                "rank": rank,
                "chunk": hit.chunk_id,
                "doc": hit.document_key,
                "score": hit.score,
                "cjk": self.chunk_cjk(hit.chunk_id),
                "cos": round(cos[hit.chunk_id], 6),
                "bm25": round(bm25(hit.chunk_id), 6),
                "matched": len(matched),
                "idf_matched": round(sum(idf[t] for t in matched), 6),
            }

        return {
            **self._english(query, [h for hits in legs.values() for h in hits]),
            "query": {
                "cjk": cjk_share(query),
                "terms": terms,
                "present": [
                    [t, round(i, 6), df]
                    for t, i, df in zip(weights.terms, weights.idfs, weights.dfs, strict=True)
                ],
                "idf_total": sum(weights.idfs),
                "avg_length": weights.avg_length,
            },
            **{
                name: [entry(r, h) for r, h in enumerate(hits, start=1)]
                for name, hits in legs.items()
            },
        }

    def _english(self, query: str, candidates: list[Any]) -> dict[str, Any]:
        """For a version with the English list: the list as search reads it for `query`,
        LEG_DEPTH deep (`english`: rank, chunk, document, cosine; empty for a question in
        Chinese, which search reads no list for), and the English cosine of every chunk either
        list names (`en_cos`), in bench.quality.third_leg's format; nothing for a version
        without the list."""
        from django.db import DEFAULT_DB_ALIAS

        from kb.models import IndexVersion
        from retrieval.search.english import english_leg, english_query
        from retrieval.search.snapshot import search_snapshot
        from retrieval.search.visibility import search_params

        version = IndexVersion.objects.get(pk=self.version_id)
        if not version.english_list:
            return {}
        vector = english_query(version, query)
        if vector is None:
            return {"english": [], "en_cos": {}}
        with search_snapshot(DEFAULT_DB_ALIAS):
            leg = english_leg(
                search_params(principal=self.principal, kb=self.kb),
                version,
                vector,
                LEG_DEPTH,
                candidates,
            )
        listed = [
            {"rank": r, "chunk": h.chunk_id, "doc": h.document_key, "cos": round(h.score, 6)}
            for r, h in enumerate(leg.hits, start=1)
        ]
        return {
            "english": listed,
            "en_cos": {str(c): round(v, 6) for c, v in leg.scores().items()},
        }

    def _tfs(self, chunk_ids: list[int], terms: list[str]) -> dict[int, dict[str, int]]:
        """chunk id -> {term: tf} for the query's present terms each chunk contains."""
        from django.db import connection

        if not chunk_ids or not terms:
            return {}
        out: dict[int, dict[str, int]] = {}
        with connection.cursor() as cursor:
            cursor.execute(  # each chunk's tf (kb.Posting: one row per chunk and term)
                "SELECT p.chunk_id, p.term, p.tf FROM kb_posting p "
                "WHERE p.term = ANY(%s) AND p.chunk_id = ANY(%s)",
                [terms, chunk_ids],
            )
            for chunk_id, term, tf in cursor.fetchall():
                out.setdefault(chunk_id, {})[term] = int(tf)
        return out
