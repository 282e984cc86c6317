"""Hybrid search: one ranking from the vector and keyword legs.

Both legs read `depth(top_k)` rows (more than top_k, so a chunk ranked 12th by one leg and 2nd
by the other can still make the top 10). Three methods (`CANON_HYBRID_FUSION`), chosen by
measurement on B8's tuning questions (`bench/quality`, docs/BENCHMARKS.md):

- `learned` (the default): a logistic model over what each leg says about each candidate and
  about the query — its cosine similarity and how far below the vector leg's best it is, its
  BM25 score as a share of the most the query's terms could score (`Leg.bound`), its ranks, how
  strong and how flat each leg is, and the languages of the query and the chunk. So a keyword
  leg that only found a common word in the other language than the answer's stands aside, and
  a confident identifier match still wins. The model is monotone: in every cell (a Chinese
  query or not, the chunk in its language or not) a higher cosine or BM25 never lowers a
  candidate. Then the keyword gate (`KeywordGate`, queries not in Chinese): the keyword leg's
  near-best matches keep a place in the answer and its strong ones their keyword rank, so the
  default never buries what its keyword leg is sure of. The parameters are
  `fusion_model.json`, fitted by `python -m bench.quality.fusion_fit` on B8's first corpus's
  tuning half, the recipe chosen by how it did on a second corpus it never saw
  (`bench.quality.cross_corpus`); `retrieval.search.ranking` says how much each feature gave a
  hit, and why the gate kept one. A search that reads the English list
  (`retrieval.search.english`: a version with one, a query not in Chinese) is ranked by the
  three lists' model instead, `fusion_model_english.json`: the same features, then
  ENGLISH_FEATURES, with the same gate (`english_model`, `model_for`).
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
from typing import Any

from django.conf import settings

from retrieval.search.hits import Hit, Leg
from textkit.text import CHINESE_SHARE, cjk_share

RRF_K = 60
METHODS = ("learned", "convex", "rrf")
MODEL_PATH = Path(__file__).with_name("fusion_model.json")
# A text at least this Chinese counts as Chinese for the language features.
ZH_SHARE = CHINESE_SHARE

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
# What the English list adds (a version with one, a query not in Chinese: the three lists'
# model, `english_model`): the candidate's cosine in the English model (0 for a chunk in Chinese,
# which has no English vector) and how far below the list's best, whether and where the list has
# it, and the list's best (how sure the list is of this query).
ENGLISH_FEATURES = (
    "en_cos",
    "en_cos_below_best",
    "in_english",
    "english_reciprocal_rank",
    "english_best",
)
ENGLISH_MODEL_PATH = Path(__file__).with_name("fusion_model_english.json")


def depth(top_k: int, method: str | None = None, *, english: bool = False) -> int:
    """How many rows each list reads for a hybrid search of `top_k` (`english`: one that reads
    the English list, ranked by the three lists' model)."""
    if (method or settings.HYBRID_FUSION) == "learned":
        return min(100, max(2 * top_k, (english_model() if english else model()).depth))
    return min(100, max(2 * top_k, 30))


# --- the learned model ----------------------------------------------------------------------


@dataclass(frozen=True)
class KeywordGate:
    """The keyword leg's floor under the learned order. Among the keyword leg's first `ranks`
    hits, one scoring at least `share` of the most the query's terms could score (`Leg.bound`)
    and at least `of_best` of the leg's best hit keeps its document in the answer (the last
    places of top_k are its if the model ranked it lower); one scoring at least `at_rank` of
    the bound (None: none) keeps its document at or above its keyword rank. The model alone can
    bury such a hit when the vector leg did not find it (its weights were fitted on one
    corpus's questions); the gate is what the keyword leg guarantees. `chinese`: whether it
    holds for Chinese queries too, whose keyword leg often matches a page in the wrong
    language (the answer being in English)."""

    ranks: int
    share: float
    of_best: float = 0.0
    at_rank: float | None = None
    chinese: bool = False

    def floors(self, keyword: Sequence[tuple[int, float]], bound: float) -> dict[int, Floor]:
        """The keyword matches this gate keeps, best first: chunk id -> (keyword rank, whether
        it keeps that rank rather than only a place in the answer)."""
        if bound <= 0 or not keyword:
            return {}
        best = keyword[0][1]
        floors: dict[int, Floor] = {}
        for rank, (cid, score) in enumerate(keyword[: self.ranks], start=1):
            at_rank = self.at_rank is not None and score / bound >= self.at_rank
            if at_rank or (score / bound >= self.share and score >= self.of_best * best):
                floors[cid] = (rank, at_rank)
        return floors

    def holds_for(self, query_cjk: float) -> bool:
        return self.chinese or query_cjk < ZH_SHARE


# A kept keyword match: its keyword rank, and whether it keeps that rank (else only top_k).
Floor = tuple[int, bool]


@dataclass(frozen=True)
class FusionModel:
    """A logistic model: `bias + sum(weight * (x - mean) / scale)` over FEATURES (and
    ENGLISH_FEATURES after them, for the three lists' model), and the keyword gate applied to its
    order (None: no gate)."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    depth: int
    gate: KeywordGate | None = None

    def contributions(self, x: Sequence[float]) -> list[float]:
        """Each feature's share of the score (the bias apart)."""
        return [
            w * (v - m) / s
            for w, v, m, s in zip(self.weights, x, self.mean, self.scale, strict=True)
        ]

    def score(self, x: Sequence[float]) -> float:
        return self.bias + math.fsum(self.contributions(x))

    @property
    def english(self) -> bool:
        """Whether the model reads the English list (ENGLISH_FEATURES)."""
        return self.features == FEATURES + ENGLISH_FEATURES


@functools.cache
def model(path: Path = MODEL_PATH) -> FusionModel:
    """The shipped parameters (the default); their feature names must be FEATURES, in order."""
    return model_from(json.loads(path.read_text(encoding="utf-8")), name=path.name)


@functools.cache
def english_model(path: Path = ENGLISH_MODEL_PATH) -> FusionModel:
    """The shipped three lists' parameters, for a search that reads the English list (a version
    with one, a query not in Chinese): FEATURES then ENGLISH_FEATURES, fitted by
    `python -m bench.quality.third_leg write` on B8's first corpus's tuning half."""
    fitted = model_from(json.loads(path.read_text(encoding="utf-8")), name=path.name)
    if not fitted.english:
        raise ValueError(f"{path.name} is not a model of the three lists")
    return fitted


def model_from(raw: dict[str, Any], *, name: str = "the parameters") -> FusionModel:
    """A model from its parameters as `fusion_model.json` holds them (and a knowledge base's
    calibration, `retrieval.models.FusionCalibration.parameters`): FEATURES, or FEATURES then
    ENGLISH_FEATURES. Raises ValueError for parameters of other features."""
    features = tuple(raw["features"])
    if features not in (FEATURES, FEATURES + ENGLISH_FEATURES):
        raise ValueError(f"{name} were fitted for other features; fit them again")
    return FusionModel(
        features=features,
        mean=tuple(float(v) for v in raw["mean"]),
        scale=tuple(float(v) for v in raw["scale"]),
        weights=tuple(float(v) for v in raw["weights"]),
        bias=float(raw["bias"]),
        depth=int(raw["depth"]),
        gate=KeywordGate(**raw["gate"]) if raw.get("gate") else None,
    )


# (chunk id, score, CJK share of its text), best first: a leg as the features read it.
Ranked = Sequence[tuple[int, float, float]]


def learned_features(
    *,
    query_cjk: float,
    vector: Ranked,
    keyword: Ranked,
    keyword_bound: float,
    others: Ranked = (),
) -> dict[int, list[float]]:
    """FEATURES of every candidate either leg listed, and of `others` (chunks a further list
    found, which get both legs' floors where neither listed them). Pure, so B8's fit and search
    share it."""
    query_zh = 1.0 if query_cjk >= ZH_SHARE else 0.0
    vector_best = vector[0][1] if vector else 0.0
    vector_floor = vector[-1][1] if vector else 0.0
    vector_tenth = vector[min(9, len(vector) - 1)][1] if vector else 0.0
    keyword_top = keyword[0][1] if keyword else 0.0
    keyword_best_share = keyword_top / keyword_bound if keyword_bound > 0 else 0.0
    in_vector = {cid: (rank, score) for rank, (cid, score, _) in enumerate(vector, start=1)}
    in_keyword = {cid: (rank, score) for rank, (cid, score, _) in enumerate(keyword, start=1)}
    cjk = {cid: share for cid, _, share in (*vector, *keyword, *others)}
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


def english_columns(
    ids: Sequence[int], english: Sequence[tuple[int, float]], en_cos: dict[int, float]
) -> dict[int, list[float]]:
    """ENGLISH_FEATURES of each candidate in `ids`: `english` is the English list, best first
    ((chunk id, cosine)), `en_cos` the English cosine of every candidate that has an English
    vector. Pure, so B8's fit and search share it."""
    best = english[0][1] if english else 0.0
    rank = {cid: r for r, (cid, _) in enumerate(english, start=1)}
    columns: dict[int, list[float]] = {}
    for cid in ids:
        cos = en_cos.get(cid, 0.0)
        r = rank.get(cid, 0)
        columns[cid] = [
            cos,
            best - cos if cid in en_cos else 0.0,
            1.0 if r else 0.0,
            1.0 / (1 + r) if r else 0.0,
            best,
        ]
    return columns


def candidate_features(
    query: str,
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    keyword_bound: float,
    english: Leg | None = None,
) -> dict[int, list[float]]:
    """`learned_features` of the legs' hits, each chunk's language read once from its text; with
    `english` (for the three lists' model; an empty Leg for a query it was not read for) its
    candidates too and ENGLISH_FEATURES after FEATURES."""
    others = english.hits if english is not None else []
    shares: dict[int, float] = {}
    for hit in (*vector, *keyword, *others):
        if hit.chunk_id not in shares:
            shares[hit.chunk_id] = cjk_share(hit.text)
    features = learned_features(
        query_cjk=cjk_share(query),
        vector=[(h.chunk_id, h.score, shares[h.chunk_id]) for h in vector],
        keyword=[(h.chunk_id, h.score, shares[h.chunk_id]) for h in keyword],
        keyword_bound=keyword_bound,
        others=[(h.chunk_id, h.score, shares[h.chunk_id]) for h in others],
    )
    if english is None:
        return features
    en_cos = english.scores()
    listed = [(h.chunk_id, h.score) for h in english.hits]
    columns = english_columns(list(features), listed, en_cos)
    return {cid: x + columns[cid] for cid, x in features.items()}


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
    parameters: FusionModel | None = None,
    english: Leg | None = None,
) -> list[Hit]:
    """The fused top `top_k`; each hit's score is its fused score (for `learned`, the model's
    probability that the chunk answers, by `parameters`: by default the shipped ones).
    `learned` needs the query and the keyword leg's bound; without a bound it fuses by
    `convex`. `english`: the English list, which only the learned fusion reads
    (`learned_ranking`); `convex` and `rrf` fuse the two legs."""
    if method not in METHODS:
        raise ValueError(f"unknown fusion method {method!r}")
    if method == "learned" and keyword_bound is None:
        method = "convex"
    if method != "learned":
        english = None
    hits: dict[int, Hit] = {}
    for hit in (*vector, *keyword, *(english.hits if english is not None else [])):
        hits.setdefault(hit.chunk_id, hit)
    if method == "learned":
        learned = learned_ranking(
            vector,
            keyword,
            top_k=top_k,
            query=query,
            keyword_bound=keyword_bound or 0.0,
            parameters=parameters,
            english=english,
        )
        order = _passages_by_words(learned.order, hits, _convex(vector, keyword, vector_weight))
        # Each place keeps its score (the model's, best first), so scores still fall with rank.
        places = sorted(learned.scores.values(), reverse=True)
        return [
            replace(hits[cid], score=round(score, 6))
            for cid, score in zip(order, places, strict=False)
        ]
    scores: dict[int, float] = dict.fromkeys(hits, 0.0)
    if method == "rrf":
        for ranked, weight in ((vector, vector_weight), (keyword, 1 - vector_weight)):
            for rank, hit in enumerate(ranked):
                scores[hit.chunk_id] += 2 * weight / (RRF_K + rank + 1)
    else:
        scores.update(_convex(vector, keyword, vector_weight))
    ranks = _best_ranks(vector, keyword)
    order = sorted(scores, key=lambda cid: (-scores[cid], ranks[cid], cid))[:top_k]
    return [replace(hits[cid], score=round(scores[cid], 6)) for cid in order]


def _best_ranks(*lists: Sequence[Hit]) -> dict[int, int]:
    """Each candidate's best 0-based rank in any list (the ties' first key)."""
    ranks: dict[int, int] = {}
    for ranked in lists:
        for rank, hit in enumerate(ranked):
            ranks[hit.chunk_id] = min(rank, ranks.get(hit.chunk_id, rank))
    return ranks


def model_for(
    parameters: FusionModel | None, english: Leg | None
) -> tuple[FusionModel, Leg | None]:
    """The model a learned ranking uses and the English list it reads: `parameters` (a
    calibration) or the shipped model, the three lists' when the English list was read, else
    the two legs'. A model of two legs reads no English list. A calibration of the three lists
    ranks only the searches that read the list: one that did not (a question in Chinese) is
    ranked by the two legs' default, as it is without a calibration."""
    if parameters is not None and parameters.english and english is None:
        parameters = None
    fitted = parameters or (english_model() if english is not None else model())
    if not fitted.english:
        return fitted, None
    return fitted, english if english is not None else Leg([], 1.0)


@dataclass(frozen=True)
class LearnedRanking:
    """The learned fusion's answer: its first `top_k` chunk ids, the model's probability of
    every candidate, and the keyword matches the gate moved up (id -> `Floor`)."""

    order: list[int]
    scores: dict[int, float]
    kept: dict[int, Floor]


def learned_ranking(
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    *,
    top_k: int,
    query: str,
    keyword_bound: float,
    parameters: FusionModel | None = None,
    english: Leg | None = None,
) -> LearnedRanking:
    """The candidates in the model's order (ties by the best list rank, then chunk id), then
    the keyword gate's floor (`keyword_floor`). The model is `parameters` (a knowledge base's
    calibration) or the shipped one: the three lists' (`english_model`) when the English list
    was read (`english`), else the two legs'. A model of two legs leaves the English list aside;
    one of three reads it (an empty list where it was not read). Pure: search and its
    explanation share it."""
    fitted, listed = model_for(parameters, english)
    features = candidate_features(query, vector, keyword, keyword_bound, listed)
    scores = {cid: 1.0 / (1.0 + math.exp(-fitted.score(x))) for cid, x in features.items()}
    others = listed.hits if listed is not None else []
    ranks = _best_ranks(vector, keyword, others)
    order = sorted(scores, key=lambda cid: (-scores[cid], ranks[cid], cid))
    kept: dict[int, Floor] = {}
    gate = fitted.gate
    if gate is not None and gate.holds_for(cjk_share(query)):
        floors = gate.floors([(h.chunk_id, h.score) for h in keyword], keyword_bound)
        documents = {h.chunk_id: h.document_key for h in (*vector, *keyword, *others)}
        order, kept = keyword_floor(order, floors, documents, top_k)
    return LearnedRanking(order=order[:top_k], scores=scores, kept=kept)


def keyword_floor(
    order: Sequence[int], floors: dict[int, Floor], document_of: dict[int, str], top_k: int
) -> tuple[list[int], dict[int, Floor]]:
    """`order` cut to `top_k`, with each kept keyword match's document (`floors`, best first:
    `KeywordGate.floors`) at or above its keyword rank, or within top_k. A document already
    there, with any of its chunks, stays where it is; otherwise its keyword match takes the
    lowest place it may have and the rest keep their order around it. Returns the order and
    the chunks moved."""
    first_place: dict[str, int] = {}
    for place, cid in enumerate(order):
        first_place.setdefault(document_of[cid], place)
    kept: dict[int, Floor] = {}
    last: dict[int, int] = {}  # the lowest place each kept chunk may take (0-based)
    documents: set[str] = set()
    for cid, (rank, at_rank) in floors.items():
        document = document_of[cid]
        if document in documents or rank > top_k:
            continue  # the document's better keyword match decides
        documents.add(document)
        lowest = rank - 1 if at_rank else top_k - 1
        if first_place.get(document, len(order)) > lowest:
            kept[cid], last[cid] = (rank, at_rank), lowest
    if not kept:
        return list(order[:top_k]), kept
    pending = sorted(kept, key=lambda cid: (last[cid], kept[cid][0]))
    rest = [cid for cid in order if cid not in kept]
    out: list[int] = []
    while len(out) < top_k and (pending or rest):
        # The earliest-due kept chunk takes this place when it, or the kept chunks due no
        # later than some one of them, would otherwise run out of places.
        place = len(out)
        due = any(last[cid] - place <= j for j, cid in enumerate(pending))
        if pending and (due or not rest):
            out.append(pending.pop(0))
        else:
            out.append(rest.pop(0))
    return out, kept


def _passages_by_words(
    order: list[int], hits: dict[int, Hit], convex: dict[int, float]
) -> list[int]:
    """The learned model was fitted on which documents answer, not on which passage of a
    document does: so each document keeps the places the model gave its chunks, and within
    them its chunks go in the fixed-weight (`convex`) order, which puts the passage that
    matches the question's words first. A hit's score is then the learned score of its place.
    `convex` holds the fixed-weight score of every chunk in `order` the two legs listed (one
    only the English list found scores 0 there)."""
    by_document: dict[str, list[int]] = {}
    for cid in order:
        by_document.setdefault(hits[cid].document_key, []).append(cid)
    places = {cid: place for place, cid in enumerate(order)}
    queues = {
        doc: sorted(cids, key=lambda cid: (-convex.get(cid, 0.0), places[cid]))
        for doc, cids in by_document.items()
    }
    return [queues[hits[cid].document_key].pop(0) for cid in order]


def fuse_legs(
    legs: list[Leg],
    top_k: int,
    *,
    query: str,
    method: str | None = None,
    parameters: FusionModel | None = None,
) -> list[Hit]:
    """The hybrid ranking of the vector and keyword legs (and the English list, a third leg when
    it was read), by `method` or as the settings choose (CANON_HYBRID_FUSION); the learned
    fusion by `parameters` (a knowledge base's calibration, `retrieval.search.parameters`), by
    default the shipped ones."""
    vector, keyword, *rest = legs
    return fuse(
        vector=vector.hits,
        keyword=keyword.hits,
        top_k=top_k,
        method=method or settings.HYBRID_FUSION,
        vector_weight=settings.HYBRID_VECTOR_WEIGHT,
        query=query,
        keyword_bound=keyword.bound,
        parameters=parameters,
        english=rest[0] if rest else None,
    )
