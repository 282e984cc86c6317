"""Why each hit of a search ranks where it does (the API's `explain: true`, the admin's test
search): its place and score in each leg, and, for hybrid, what the fusion made of them.

A hybrid search that read the English list places each hit in it too ("english").
For the learned fusion that is each feature's value and its contribution to the model's logit
(`bias + sum of contributions`; the probability is its logistic), the largest first, and for a
hit the keyword gate moved up (`fusion.KeywordGate`), `kept`: the keyword rank it was kept at
and why, in words; for `convex` and `rrf`, each leg's share of the fused score. A caller reads
only hits it may see, so an explanation names nothing else: the legs' other candidates are not
listed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from retrieval.search import fusion
from retrieval.search.hits import Hit, Leg, Ranking
from textkit.text import cjk_share


def _places(leg: Leg, *, bounded: bool) -> dict[int, dict[str, Any]]:
    """Each hit's 1-based rank and score in one leg (and its share of the leg's bound)."""
    places: dict[int, dict[str, Any]] = {}
    for rank, hit in enumerate(leg.hits, start=1):
        place: dict[str, Any] = {"rank": rank, "score": round(hit.score, 6)}
        if bounded and leg.bound:
            place["share_of_bound"] = round(hit.score / leg.bound, 6)
        places[hit.chunk_id] = place
    return places


def kept_words(rank: int, at_rank: bool, top_k: int, *, share: float, of_best: float) -> str:
    """Why the keyword gate kept a hit where it is, in words."""
    if at_rank:
        return (
            f"kept at rank {rank} or better by the keyword gate: keyword rank {rank}, a strong "
            f"keyword match ({share:.0%} of what the query's words could score)"
        )
    return (
        f"kept in the top {top_k} by the keyword gate: keyword rank {rank}, "
        f"{of_best:.0%} of the keyword list's best match"
    )


def _kept(
    query: str,
    vector: Leg,
    keyword: Leg,
    hits: Sequence[Hit],
    parameters: fusion.FusionModel | None = None,
    english: Leg | None = None,
) -> dict[int, dict[str, Any]]:
    """The hits whose document the keyword gate moved up (`fusion.keyword_floor`), with why in
    words. Keyed by the hit that holds the place: within a document the passages are then put
    in the order of their words, so that can be another chunk of the same document."""
    bound = keyword.bound or 0.0
    learned = fusion.learned_ranking(
        vector.hits,
        keyword.hits,
        top_k=len(hits),
        query=query,
        keyword_bound=bound,
        parameters=parameters,
        english=english,
    )
    by_id = {h.chunk_id: h for h in keyword.hits}
    best = keyword.hits[0].score if keyword.hits else 0.0
    in_vector = {h.chunk_id for h in vector.hits}
    moved = {}
    for cid, (rank, at_rank) in learned.kept.items():
        score = by_id[cid].score
        why = kept_words(
            rank, at_rank, len(hits), share=score / bound, of_best=score / best if best else 0.0
        )
        if cid not in in_vector:
            why += ", which the vector leg did not find"
        moved[by_id[cid].document_key] = {"keyword_rank": rank, "at_rank": at_rank, "why": why}
    kept: dict[int, dict[str, Any]] = {}
    for hit in hits:
        if hit.document_key in moved:
            kept[hit.chunk_id] = moved.pop(hit.document_key)
    return kept


def _learned(
    query: str,
    vector: Leg,
    keyword: Leg,
    hits: Sequence[Hit],
    parameters: fusion.FusionModel | None = None,
    english: Leg | None = None,
) -> dict[int, dict[str, Any]]:
    model, listed = fusion.model_for(parameters, english)
    features = fusion.candidate_features(
        query, vector.hits, keyword.hits, keyword.bound or 0.0, listed
    )
    kept = _kept(query, vector, keyword, hits, model, english) if model.gate is not None else {}
    explained: dict[int, dict[str, Any]] = {}
    for cid, x in features.items():
        contributions = model.contributions(x)
        logit = model.bias + math.fsum(contributions)
        terms = sorted(zip(model.features, x, contributions, strict=True), key=lambda t: -abs(t[2]))
        explained[cid] = {
            "score": round(1.0 / (1.0 + math.exp(-logit)), 6),
            "logit": round(logit, 6),
            "bias": round(model.bias, 6),
            "contributions": [
                {"feature": name, "value": round(value, 6), "contribution": round(part, 6)}
                for name, value, part in terms
            ],
            **({"kept": kept[cid]} if cid in kept else {}),
        }
    return explained


def _shares(method: str, vector: Leg, keyword: Leg) -> dict[int, dict[str, Any]]:
    """Each leg's part of a `convex` or `rrf` fused score."""
    weight = settings.HYBRID_VECTOR_WEIGHT
    parts: dict[int, dict[str, float]] = {}
    for name, leg, leg_weight in (("vector", vector, weight), ("keyword", keyword, 1 - weight)):
        if method == "rrf":
            values = {
                h.chunk_id: 2 * leg_weight / (fusion.RRF_K + rank)
                for rank, h in enumerate(leg.hits, start=1)
            }
        else:
            values = {cid: leg_weight * v for cid, v in fusion.normalised(leg.hits).items()}
        for cid, value in values.items():
            parts.setdefault(cid, {"vector": 0.0, "keyword": 0.0})[name] = value
    return {
        cid: {
            "score": round(math.fsum(legs.values()), 6),
            "contributions": [
                {"feature": name, "contribution": round(value, 6)} for name, value in legs.items()
            ],
        }
        for cid, legs in parts.items()
    }


def explain_ranking(
    *,
    mode: str,
    query: str,
    legs: Sequence[Leg],
    hits: Sequence[Hit],
    fused_by: str | None = None,
    parameters: fusion.FusionModel | None = None,
) -> Ranking:
    """The explanation of `hits`, the answer a search of `mode` made of `legs` (vector then
    keyword for hybrid, then the English list when it was read; the one leg otherwise), fused
    by `fused_by` (default CANON_HYBRID_FUSION; the learned fusion by `parameters`, by default
    the shipped ones). Pure: no I/O."""
    bound = legs[1 if mode == "hybrid" else 0].bound if mode != "vector" else None
    method: str | None = None
    fused: dict[int, dict[str, Any]] = {}
    names: tuple[str, ...] = {"vector": ("vector",), "keyword": ("keyword",)}.get(
        mode, ("vector", "keyword", "english")[: len(legs)]
    )
    if mode == "hybrid":
        vector, keyword, *rest = legs
        english = rest[0] if rest else None
        method = (fused_by or settings.HYBRID_FUSION) if keyword.bound is not None else "convex"
        if method == "learned":
            fused = _learned(query, vector, keyword, hits, parameters, english)
        else:
            fused = _shares(method, vector, keyword)
    places = {
        name: _places(leg, bounded=name == "keyword") for name, leg in zip(names, legs, strict=True)
    }
    explained = {
        hit.chunk_id: {
            **{name: places[name].get(hit.chunk_id) for name in names},
            **({"fused": fused.get(hit.chunk_id)} if mode == "hybrid" else {}),
        }
        for hit in hits
    }
    return Ranking(
        mode=mode,
        method=method,
        query_language="zh" if cjk_share(query) >= fusion.ZH_SHARE else "other",
        keyword_bound=round(bound, 6) if bound is not None else None,
        hits=explained,
    )
