"""Hybrid search: one ranking from the vector and keyword legs.

Both legs read `depth(top_k)` rows (more than top_k, so a chunk ranked 12th by one leg and 2nd
by the other can still make the top 10). Three methods (`CANON_HYBRID_FUSION`), chosen by
measurement on B8's tuning questions (`bench/quality`, docs/BENCHMARKS.md):

- `learned` (the default): a logistic model over what each leg says about each candidate and
  about the query — its cosine similarity and how far below the vector leg's best it is, its
  BM25 score as a share of the most the query's terms could score (`Leg.bound`), its ranks, how
  strong and how flat each leg is, and the languages of the query and the chunk. So a keyword
  leg that only found a common word in the other language than the answer's stands aside, and
  a confident identifier match still wins. The parameters are `fusion_model.json`, fitted by
  `python -m bench.quality.fusion_fit` on the tuning half only; `retrieval.search.ranking`
  says how much each feature gave a hit.
- `convex`: each leg's scores divided by the leg's best, fused as `w * vector + (1 - w) *
  keyword` (`CANON_HYBRID_VECTOR_WEIGHT`), a chunk missing from a leg scoring 0 there.
- `rrf`: weighted reciprocal rank fusion, `sum(w_leg / (k + rank))`.

A leg whose bound is unknown (a p1 version's tsvector ranking) is fused by `convex`. Ties break
by the better rank in either leg, then by chunk id, so the order is deterministic.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from django.conf import settings

from retrieval.search.hits import Hit, Leg
from textkit.text import cjk_share

RRF_K = 60
METHODS = ("learned", "convex", "rrf")
MODEL_PATH = Path(__file__).with_name("fusion_model.json")
# A text at least this Chinese counts as Chinese for the language features.
ZH_SHARE = 0.2

# What the learned model reads of one candidate, in its order. `cross` is 1 when the chunk's
# language differs from the query's; a candidate one leg did not list gets that leg's floor (the
# vector leg's last similarity, a BM25 share of 0) and a 0 in its `in_*` feature.
FEATURES = (
    "cos",
    "cos_below_best",
    "in_vector",
    "vector_reciprocal_rank",
    "bm25_share",
    "bm25_of_best",
    "in_keyword",
    "keyword_reciprocal_rank",
    "keyword_best_share",
    "vector_best",
    "vector_spread",
    "query_zh",
    "chunk_zh",
    "cross",
    "cross_x_bm25_share",
    "cross_x_bm25_of_best",
    "cross_x_cos",
    "cross_x_keyword_reciprocal_rank",
    "query_zh_x_bm25_share",
    "query_zh_x_cos",
)


def depth(top_k: int, method: str | None = None) -> int:
    """How many rows each leg reads for a hybrid search of `top_k`."""
    if (method or settings.HYBRID_FUSION) == "learned":
        return min(100, max(2 * top_k, model().depth))
    return min(100, max(2 * top_k, 30))


# --- the learned model ----------------------------------------------------------------------


@dataclass(frozen=True)
class FusionModel:
    """A logistic model: `bias + sum(weight * (x - mean) / scale)` over FEATURES."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    depth: int

    def contributions(self, x: Sequence[float]) -> list[float]:
        """Each feature's share of the score (the bias apart)."""
        return [
            w * (v - m) / s
            for w, v, m, s in zip(self.weights, x, self.mean, self.scale, strict=True)
        ]

    def score(self, x: Sequence[float]) -> float:
        return self.bias + math.fsum(self.contributions(x))


@functools.cache
def model(path: Path = MODEL_PATH) -> FusionModel:
    """The shipped parameters; their feature names must be FEATURES, in order."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    if tuple(raw["features"]) != FEATURES:
        raise ValueError(f"{path.name} was fitted for other features; fit it again")
    return FusionModel(
        features=FEATURES,
        mean=tuple(raw["mean"]),
        scale=tuple(raw["scale"]),
        weights=tuple(raw["weights"]),
        bias=float(raw["bias"]),
        depth=int(raw["depth"]),
    )


# (chunk id, score, CJK share of its text), best first: a leg as the features read it.
Ranked = Sequence[tuple[int, float, float]]


def learned_features(
    *, query_cjk: float, vector: Ranked, keyword: Ranked, keyword_bound: float
) -> dict[int, list[float]]:
    """FEATURES of every candidate either leg listed. Pure, so B8's fit and search share it."""
    query_zh = 1.0 if query_cjk >= ZH_SHARE else 0.0
    vector_best = vector[0][1] if vector else 0.0
    vector_floor = vector[-1][1] if vector else 0.0
    vector_tenth = vector[min(9, len(vector) - 1)][1] if vector else 0.0
    keyword_top = keyword[0][1] if keyword else 0.0
    keyword_best_share = keyword_top / keyword_bound if keyword_bound > 0 else 0.0
    in_vector = {cid: (rank, score) for rank, (cid, score, _) in enumerate(vector, start=1)}
    in_keyword = {cid: (rank, score) for rank, (cid, score, _) in enumerate(keyword, start=1)}
    cjk = {cid: share for cid, _, share in (*vector, *keyword)}
    features: dict[int, list[float]] = {}
    for cid, share in cjk.items():
        v_rank, cos = in_vector.get(cid, (0, vector_floor))
        k_rank, bm25 = in_keyword.get(cid, (0, 0.0))
        bm25_share = bm25 / keyword_bound if keyword_bound > 0 else 0.0
        bm25_of_best = bm25 / keyword_top if keyword_top > 0 else 0.0
        v_rr = 1.0 / (1 + v_rank) if v_rank else 0.0
        k_rr = 1.0 / (1 + k_rank) if k_rank else 0.0
        chunk_zh = 1.0 if share >= ZH_SHARE else 0.0
        cross = abs(query_zh - chunk_zh)
        features[cid] = [
            cos,
            vector_best - cos,
            1.0 if v_rank else 0.0,
            v_rr,
            bm25_share,
            bm25_of_best,
            1.0 if k_rank else 0.0,
            k_rr,
            keyword_best_share,
            vector_best,
            vector_best - vector_tenth,
            query_zh,
            chunk_zh,
            cross,
            cross * bm25_share,
            cross * bm25_of_best,
            cross * cos,
            cross * k_rr,
            query_zh * bm25_share,
            query_zh * cos,
        ]
    return features


def candidate_features(
    query: str, vector: Sequence[Hit], keyword: Sequence[Hit], keyword_bound: float
) -> dict[int, list[float]]:
    """`learned_features` of the legs' hits, each chunk's language read once from its text."""
    shares: dict[int, float] = {}
    for hit in (*vector, *keyword):
        if hit.chunk_id not in shares:
            shares[hit.chunk_id] = cjk_share(hit.text)
    return learned_features(
        query_cjk=cjk_share(query),
        vector=[(h.chunk_id, h.score, shares[h.chunk_id]) for h in vector],
        keyword=[(h.chunk_id, h.score, shares[h.chunk_id]) for h in keyword],
        keyword_bound=keyword_bound,
    )


# --- fusing ---------------------------------------------------------------------------------


def normalised(hits: Sequence[Hit]) -> dict[int, float]:
    """Scores divided by the leg's best (the theoretical minimum, 0, stays 0): a leg whose
    hits are all about as good keeps them about equal, instead of stretching the spread."""
    best = max((h.score for h in hits), default=0.0)
    if best <= 0:
        return dict.fromkeys((h.chunk_id for h in hits), 0.0)
    return {h.chunk_id: max(h.score, 0.0) / best for h in hits}


def _convex(
    vector: Sequence[Hit], keyword: Sequence[Hit], vector_weight: float
) -> dict[int, float]:
    """`w * vector / best + (1 - w) * keyword / best` of every chunk either leg listed."""
    scores: dict[int, float] = {}
    for shares, weight in (
        (normalised(vector), vector_weight),
        (normalised(keyword), 1 - vector_weight),
    ):
        for chunk_id, value in shares.items():
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight * value
    return scores


def fuse(
    *,
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    top_k: int,
    method: str = "convex",
    vector_weight: float = 0.15,
    query: str = "",
    keyword_bound: float | None = None,
) -> list[Hit]:
    """The fused top `top_k`; each hit's score is its fused score (for `learned`, the model's
    probability that the chunk answers). `learned` needs the query and the keyword leg's bound;
    without a bound it fuses by `convex`."""
    if method not in METHODS:
        raise ValueError(f"unknown fusion method {method!r}")
    if method == "learned" and keyword_bound is None:
        method = "convex"
    ranks: dict[int, int] = {}
    hits: dict[int, Hit] = {}
    for ranked in (vector, keyword):
        for rank, hit in enumerate(ranked):
            ranks[hit.chunk_id] = min(rank, ranks.get(hit.chunk_id, rank))
            hits.setdefault(hit.chunk_id, hit)
    scores: dict[int, float] = dict.fromkeys(hits, 0.0)
    if method == "learned":
        fitted = model()
        features = candidate_features(query, vector, keyword, keyword_bound or 0.0)
        for cid, x in features.items():
            scores[cid] = 1.0 / (1.0 + math.exp(-fitted.score(x)))
    elif method == "rrf":
        for ranked, weight in ((vector, vector_weight), (keyword, 1 - vector_weight)):
            for rank, hit in enumerate(ranked):
                scores[hit.chunk_id] += 2 * weight / (RRF_K + rank + 1)
    else:
        scores.update(_convex(vector, keyword, vector_weight))
    order = sorted(scores, key=lambda cid: (-scores[cid], ranks[cid], cid))[:top_k]
    if method == "learned":
        order = _passages_by_words(order, hits, _convex(vector, keyword, vector_weight))
        return [
            replace(hits[cid], score=round(score, 6))
            for cid, score in zip(order, sorted(scores.values(), reverse=True), strict=False)
        ]
    return [replace(hits[cid], score=round(scores[cid], 6)) for cid in order]


def _passages_by_words(
    order: list[int], hits: dict[int, Hit], convex: dict[int, float]
) -> list[int]:
    """The learned model was fitted on which documents answer, not on which passage of a
    document does: so each document keeps the places the model gave its chunks, and within
    them its chunks go in the fixed-weight (`convex`) order, which puts the passage that
    matches the question's words first. A hit's score is then the learned score of its place.
    `convex` holds the fixed-weight score of every chunk in `order`."""
    by_document: dict[str, list[int]] = {}
    for cid in order:
        by_document.setdefault(hits[cid].document_key, []).append(cid)
    places = {cid: place for place, cid in enumerate(order)}
    queues = {
        doc: sorted(cids, key=lambda cid: (-convex[cid], places[cid]))
        for doc, cids in by_document.items()
    }
    return [queues[hits[cid].document_key].pop(0) for cid in order]


def fuse_legs(legs: list[Leg], top_k: int, *, query: str, method: str | None = None) -> list[Hit]:
    """The hybrid ranking of the vector and keyword legs, by `method` or as the settings choose
    (CANON_HYBRID_FUSION)."""
    vector, keyword = legs
    return fuse(
        vector=vector.hits,
        keyword=keyword.hits,
        top_k=top_k,
        method=method or settings.HYBRID_FUSION,
        vector_weight=settings.HYBRID_VECTOR_WEIGHT,
        query=query,
        keyword_bound=keyword.bound,
    )
