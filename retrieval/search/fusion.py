"""Hybrid search: one ranking from the vector and keyword legs.

Both legs read `depth(top_k)` rows (more than top_k, so a chunk ranked 12th by one leg and 2nd
by the other can still make the top 10). Two methods, chosen by measurement
(`bench/quality`, docs/BENCHMARKS.md):

- `convex` (the default): each leg's scores are divided by the leg's best (cosine similarity
  and BM25 are both 0 for no match), and the fused score is
  `w * vector + (1 - w) * keyword`, a chunk missing from a leg scoring 0 there. Unlike rank
  fusion it keeps how far ahead a leg's first hit is, so a confident keyword match (an
  identifier, a rare word) is not pulled down by a vague vector neighbour, and the reverse.
- `rrf`: weighted reciprocal rank fusion, `sum(w_leg / (k + rank))`.

Ties break by the better rank in either leg, then by chunk id, so the order is deterministic
and a leg's first hit beats a chunk that merely appears in both lists lower down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from django.conf import settings

from retrieval.search.hits import Hit

RRF_K = 60
METHODS = ("convex", "rrf")


def depth(top_k: int) -> int:
    """How many rows each leg reads for a hybrid search of `top_k`."""
    return min(100, max(2 * top_k, 30))


def _normalised(hits: Sequence[Hit]) -> dict[int, float]:
    """Scores divided by the leg's best (the theoretical minimum, 0, stays 0): a leg whose
    hits are all about as good keeps them about equal, instead of stretching the spread."""
    best = max((h.score for h in hits), default=0.0)
    if best <= 0:
        return dict.fromkeys((h.chunk_id for h in hits), 0.0)
    return {h.chunk_id: max(h.score, 0.0) / best for h in hits}


def fuse(
    *,
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    top_k: int,
    method: str = "convex",
    vector_weight: float = 0.15,
) -> list[Hit]:
    """The fused top `top_k`; each hit's score is its fused score."""
    ranks: dict[int, int] = {}
    hits: dict[int, Hit] = {}
    for ranked in (vector, keyword):
        for rank, hit in enumerate(ranked):
            ranks[hit.chunk_id] = min(rank, ranks.get(hit.chunk_id, rank))
            hits.setdefault(hit.chunk_id, hit)
    scores: dict[int, float] = dict.fromkeys(hits, 0.0)
    if method == "rrf":
        for ranked, weight in ((vector, vector_weight), (keyword, 1 - vector_weight)):
            for rank, hit in enumerate(ranked):
                scores[hit.chunk_id] += 2 * weight / (RRF_K + rank + 1)
    elif method == "convex":
        for normalised, weight in (
            (_normalised(vector), vector_weight),
            (_normalised(keyword), 1 - vector_weight),
        ):
            for chunk_id, value in normalised.items():
                scores[chunk_id] += weight * value
    else:
        raise ValueError(f"unknown fusion method {method!r}")
    order = sorted(scores, key=lambda cid: (-scores[cid], ranks[cid], cid))[:top_k]
    return [replace(hits[cid], score=round(scores[cid], 6)) for cid in order]


def fuse_lists(ranked_lists: list[list[Hit]], top_k: int) -> list[Hit]:
    """The hybrid ranking of the vector and keyword lists, as the settings choose."""
    vector, keyword = ranked_lists
    return fuse(
        vector=vector,
        keyword=keyword,
        top_k=top_k,
        method=settings.HYBRID_FUSION,
        vector_weight=settings.HYBRID_VECTOR_WEIGHT,
    )
