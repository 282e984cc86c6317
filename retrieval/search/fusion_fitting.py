"""Fitting the learned fusion's parameters (`fusion.FusionModel`): the one fitting code. The
shipped default (`fusion_model.json`) is fitted with it by `python -m bench.quality.fusion_fit`;
a knowledge base's calibration (`evaluation.calibration`) refits it on that knowledge base's
own questions, toward the default.

The examples: every candidate either leg of a question listed is one row of FEATURES
(`fusion.learned_features`, what search computes), labelled 1 when its document answers the
question; each question weighs the same (its answers half, the rest half), and a question none
of whose candidates answers (or all do) teaches nothing and is left out. The model is
L2-regularised logistic regression fitted by Newton's method (numpy); with sign constraints
(`MONOTONE`, so a higher cosine or BM25 never lowers a candidate) by projected Newton.

`calibrate` keeps the default's standardisation, depth and keyword gate, and shrinks the
weights toward the default's (`l2 * |w - w_default|^2`, the bias free) rather than toward 0:
the strength is chosen by cross-validation over the set's questions, with the default itself
(infinite strength) among the choices, and a refit is kept only when its held-out reciprocal
ranks beat the default's by more than one paired standard error. So a small set returns the
default, or something its own held-out folds show better by more than noise.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from retrieval.search import fusion
from retrieval.search.fusion import ENGLISH_FEATURES, FEATURES, FusionModel, Ranked
from retrieval.search.hits import Hit, Leg
from textkit.text import cjk_share

TOP_K = 10

# The legs' evidence about a candidate, each in the direction that means "more likely the
# answer", with its interactions: a monotone model may weigh each that way or not at all, so in
# every cell (a Chinese query or not, the chunk in its language or not) a higher cosine or BM25
# never lowers a candidate. Query-level features (the same for every candidate) and the
# language indicators themselves stay free.
MONOTONE = {
    "cos": 1,
    "cos_below_best": -1,
    "in_vector": 1,
    "vector_reciprocal_rank": 1,
    "bm25_share": 1,
    "bm25_of_best": 1,
    "in_keyword": 1,
    "keyword_reciprocal_rank": 1,
    "cross_x_bm25_share": 1,
    "cross_x_bm25_of_best": 1,
    "cross_x_cos": 1,
    "cross_x_keyword_reciprocal_rank": 1,
    "query_zh_x_bm25_share": 1,
    "query_zh_x_cos": 1,
}
# A calibration's choices of L2 strength toward the default (besides the default itself), and
# its folds. The strengths are per unit of the loss, where each question weighs 1.
CALIBRATION_L2S = (100.0, 30.0, 10.0, 3.0, 1.0, 0.3, 0.1)
FOLDS = 5
SEED = 39
MARGIN = 1.0
NET = 1


def signs(names: Sequence[str] = FEATURES) -> list[int]:
    """Each feature's sign constraint (MONOTONE): +1, -1, or 0 (free)."""
    return [MONOTONE.get(name, 0) for name in names]


# --- examples -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One question's candidates as search sees them: chunk ids, their FEATURES rows, each
    one's document and better leg rank (search's tie-break), the keyword leg (chunk id, BM25)
    and its bound for the keyword gate, the query's CJK share, and the answer documents."""

    id: str
    ids: list[int]
    x: np.ndarray[Any, Any]
    documents: dict[int, str]
    best_ranks: dict[int, int]
    keyword: list[tuple[int, float]]
    bound: float
    query_cjk: float
    answers: frozenset[str]

    @property
    def labels(self) -> np.ndarray[Any, Any]:
        return np.array([1.0 if self.documents[c] in self.answers else 0.0 for c in self.ids])

    @property
    def teaches(self) -> bool:
        """Whether its candidates include both an answer and something else."""
        y = self.labels
        return bool(len(y)) and 0 < y.sum() < len(y)


def example_of_legs(
    *,
    id: str,
    query_cjk: float,
    vector: Ranked,
    keyword: Ranked,
    keyword_bound: float,
    documents: dict[int, str],
    answers: Sequence[str],
    english: Sequence[tuple[int, float]] | None = None,
    en_cos: dict[int, float] | None = None,
) -> Example:
    """An example from the legs as `fusion.learned_features` reads them ((chunk id, score, CJK
    share), best first), with each chunk's document. `english`: the English list ((chunk id,
    cosine), best first; empty for a question it is not read for) and `en_cos` the English
    cosine of every candidate with an English vector, for an example of three lists
    (ENGLISH_FEATURES after FEATURES, as `fusion.candidate_features` computes them)."""
    others = [(cid, cos, 0.0) for cid, cos in english or []]  # English chunks: not Chinese
    features = fusion.learned_features(
        query_cjk=query_cjk,
        vector=vector,
        keyword=keyword,
        keyword_bound=keyword_bound,
        others=others,
    )
    ids = list(features)
    width = len(FEATURES)
    if english is not None:
        columns = fusion.english_columns(ids, list(english), en_cos or {})
        features = {cid: x + columns[cid] for cid, x in features.items()}
        width += len(ENGLISH_FEATURES)
    ranks: dict[int, int] = {}
    for leg in (vector, keyword, others):
        for rank, (cid, _, _) in enumerate(leg):
            ranks[cid] = min(rank, ranks.get(cid, rank))
    x = np.array([features[c] for c in ids], dtype=float).reshape(len(ids), width)
    return Example(
        id=id,
        ids=ids,
        x=x,
        documents={c: documents[c] for c in ids},
        best_ranks=ranks,
        keyword=[(cid, score) for cid, score, _ in keyword],
        bound=keyword_bound,
        query_cjk=query_cjk,
        answers=frozenset(answers),
    )


def example_of_hits(
    *,
    id: str,
    query: str,
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    keyword_bound: float,
    answers: Sequence[str],
    english: Leg | None = None,
) -> Example:
    """An example from a hybrid search's legs (`retrieval.search.engine.search_legs`), each
    chunk's language read from its text as search reads it (`fusion.candidate_features`).
    `english`: for a version with the English list, the list as the search read it (an empty
    Leg for a query it is not read for): the rows then hold ENGLISH_FEATURES after FEATURES,
    and the list's candidates are candidates too."""
    listed = english.hits if english is not None else []
    shares: dict[int, float] = {}
    for hit in (*vector, *keyword):
        if hit.chunk_id not in shares:
            shares[hit.chunk_id] = cjk_share(hit.text)
    return example_of_legs(
        id=id,
        query_cjk=cjk_share(query),
        vector=[(h.chunk_id, h.score, shares[h.chunk_id]) for h in vector],
        keyword=[(h.chunk_id, h.score, shares[h.chunk_id]) for h in keyword],
        keyword_bound=keyword_bound,
        documents={h.chunk_id: h.document_key for h in (*vector, *keyword, *listed)},
        answers=answers,
        english=[(h.chunk_id, h.score) for h in listed] if english is not None else None,
        en_cos=english.scores() if english is not None else None,
    )


def training_rows(
    examples: Sequence[Example],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The rows, labels and weights of the examples that teach: each question weighs 1, its
    answers half and the rest half."""
    xs, ys, ws = [], [], []
    for example in examples:
        if not example.teaches:
            continue  # nothing to learn from a question no candidate answers
        y = example.labels
        xs.append(example.x)
        ys.append(y)
        ws.append(np.where(y == 1, 0.5 / y.sum(), 0.5 / (len(y) - y.sum())))
    if not xs:
        raise ValueError("no question has both an answer and another candidate among its legs")
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws)


def standardisation(x: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Each feature's mean and standard deviation (1 where it does not vary)."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    return mean, scale


# --- the fit --------------------------------------------------------------------------------


def logistic_fit(
    x: np.ndarray[Any, Any],
    y: np.ndarray[Any, Any],
    w: np.ndarray[Any, Any],
    *,
    mean: np.ndarray[Any, Any],
    scale: np.ndarray[Any, Any],
    l2: float,
    prior: Sequence[float] | None = None,
    constraints: Sequence[int] | None = None,
) -> tuple[np.ndarray[Any, Any], float]:
    """Weights and bias minimising the weighted logistic loss of `(x - mean) / scale` plus
    `l2 / 2 * |weights - prior|^2` (prior: 0 by default; the bias is not shrunk), by Newton's
    method; with `constraints` (one per feature: +1 keeps that weight at or above 0, -1 at or
    below, 0 leaves it free) by projected Newton with an active set."""
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0
    prior_weights = prior if prior is not None else [0.0] * (z.shape[1] - 1)
    centre = np.concatenate([[0.0], np.asarray(prior_weights, dtype=float)])
    if constraints is not None and any(constraints):
        beta = _newton_signed(
            z, y, w, penalty, centre, np.concatenate([[0], np.asarray(constraints)])
        )
        return beta[1:], float(beta[0])
    beta = centre.copy()
    for _ in range(50):
        p = _sigmoid(z @ beta)
        grad = z.T @ (w * (p - y)) + penalty * (beta - centre)
        hessian = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hessian, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta[1:], float(beta[0])


def _sigmoid(s: Any) -> Any:
    with np.errstate(over="ignore"):  # exp overflows to inf for a very negative s: p is 0
        return 1.0 / (1.0 + np.exp(-s))


def _newton_signed(
    z: Any, y: Any, w: Any, penalty: Any, centre: Any, constraints: Any
) -> np.ndarray[Any, Any]:
    """Projected Newton for the weighted logistic loss, L2-penalised toward `centre`, with sign
    constraints: each step solves Newton's system over the weights not held at 0 (a constrained
    weight at 0 whose gradient pushes it out of its sign is held), then halves the step,
    projected back onto the signs, until the loss falls (Armijo). Starts at `centre` projected
    onto the signs."""
    lower = np.where(constraints > 0, 0.0, -np.inf)
    upper = np.where(constraints < 0, 0.0, np.inf)

    def loss(beta: Any) -> float:
        s = z @ beta
        apart = beta - centre
        return float(w @ (np.logaddexp(0.0, s) - y * s) + 0.5 * penalty @ (apart * apart))

    beta = np.clip(centre, lower, upper)
    for _ in range(200):
        p = _sigmoid(z @ beta)
        grad = z.T @ (w * (p - y)) + penalty * (beta - centre)
        held = ((beta <= lower) & (grad > 0)) | ((beta >= upper) & (grad < 0))
        free = ~held
        hessian = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.zeros_like(beta)
        step[free] = np.linalg.solve(hessian[np.ix_(free, free)], grad[free])
        before, t = loss(beta), 1.0
        while True:
            moved = np.clip(beta - t * step, lower, upper)
            if loss(moved) <= before - 1e-4 * grad @ (beta - moved) or t < 1e-10:
                break
            t /= 2
        change = np.abs(moved - beta).max()
        beta = moved
        if change < 1e-9:
            break
    return beta


# --- ranking, as search ranks -----------------------------------------------------------------


def ranked_documents(example: Example, model: FusionModel, top_k: int = TOP_K) -> list[str]:
    """The question's first `top_k` documents under `model`, as search ranks them: the model's
    order (ties by the better leg rank, then chunk id), the keyword gate's floor, each document
    once at its first place (`fusion.learned_ranking`: the passages' order within a document,
    which search then changes, moves no document)."""
    if not example.ids:
        return []
    # A model of the two legs reads the first columns of an example of three lists.
    x = example.x[:, : len(model.features)]
    logits = model.bias + ((x - np.asarray(model.mean)) / np.asarray(model.scale)) @ (
        np.asarray(model.weights)
    )
    score = dict(zip(example.ids, logits.tolist(), strict=True))
    order = sorted(example.ids, key=lambda c: (-score[c], example.best_ranks[c], c))
    gate = model.gate
    if gate is not None and gate.holds_for(example.query_cjk):
        floors = gate.floors(example.keyword, example.bound)
        order, _ = fusion.keyword_floor(order, floors, example.documents, top_k)
    return list(dict.fromkeys(example.documents[c] for c in order[:top_k]))


def reciprocal_rank(ranked: Sequence[str], answers: frozenset[str]) -> float:
    """1 / the rank of the first answer document among `ranked`; 0 when none is there."""
    return next((1.0 / (i + 1) for i, d in enumerate(ranked[:TOP_K]) if d in answers), 0.0)


def with_weights(prior: FusionModel, weights: Sequence[float], bias: float) -> FusionModel:
    """`prior` with other weights and bias: its standardisation, depth and gate."""
    return replace(prior, weights=tuple(float(v) for v in weights), bias=float(bias))


def parameters_of(model: FusionModel, **about: Any) -> dict[str, Any]:
    """`model` as `fusion_model.json` holds it (`fusion.model_from` reads it back), with
    `about`'s entries first."""
    out: dict[str, Any] = {
        **about,
        "features": list(model.features),
        "mean": [round(float(v), 6) for v in model.mean],
        "scale": [round(float(v), 6) for v in model.scale],
        "weights": [round(float(v), 6) for v in model.weights],
        "bias": round(float(model.bias), 6),
        "depth": model.depth,
    }
    if model.gate is not None:
        out["gate"] = vars(model.gate)
    return out


# --- calibration: a refit toward the default, cross-validated -------------------------------


@dataclass(frozen=True)
class Fold:
    """One held-out fold: its questions and their MRR@10 under the default and under the
    refit made without them (at the chosen strength)."""

    n: int
    default_mrr: float
    candidate_mrr: float


@dataclass
class Calibration:
    """What `calibrate` found: the model (the default itself when no refit beat it), the chosen
    L2 strength (None: the default kept), each strength's cross-validated MRR@10 and its paired
    difference from the default (mean, standard error), the folds at the chosen strength, and
    per question its ranked documents when held out (under the default, under the refit)."""

    model: FusionModel
    l2: float | None
    questions: int
    teaching: int
    grid: dict[str, dict[str, float]] = field(default_factory=dict)
    folds: list[Fold] = field(default_factory=list)
    held_out: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)

    @property
    def kept_default(self) -> bool:
        return self.l2 is None


def fold_of(examples: Sequence[Example], folds: int = FOLDS, seed: int = SEED) -> dict[str, int]:
    """Each question's fold: its ids shuffled by a fixed seed, dealt round."""
    ids = sorted(e.id for e in examples)
    random.Random(seed).shuffle(ids)
    return {qid: i % folds for i, qid in enumerate(ids)}


def refit(examples: Sequence[Example], prior: FusionModel, l2: float) -> FusionModel:
    """The default's model refitted on `examples`, shrunk toward its weights by `l2`, under the
    sign constraints (MONOTONE), its standardisation, depth and gate kept."""
    x, y, w = training_rows(examples)
    weights, bias = logistic_fit(
        x,
        y,
        w,
        mean=np.asarray(prior.mean),
        scale=np.asarray(prior.scale),
        l2=l2,
        prior=prior.weights,
        constraints=signs(prior.features),
    )
    return with_weights(prior, [float(v) for v in weights], bias)


def calibrate(
    examples: Sequence[Example],
    prior: FusionModel,
    *,
    l2s: Sequence[float] = CALIBRATION_L2S,
    folds: int = FOLDS,
    seed: int = SEED,
    default: FusionModel | None = None,
) -> Calibration:
    """Refit `prior` on `examples` (one per question), cross-validated.

    The default each refit is measured against is what search serves without a calibration:
    `prior`, or for a version with the English list (`prior` the three lists' model) `default`,
    the two legs' model, for the questions in Chinese: search reads no English list for them,
    and ranks them by `default` with a calibration too (`fusion.model_for`), so a refit is
    measured on the others.

    Every question is held out once (`folds` folds, at most one per question); for each L2
    strength its fold's refit ranks it, as the default does. The strength with the best mean
    held-out reciprocal rank wins if it beats the default by more than one paired standard
    error (the spread of the per-question differences over the root of their number); then the
    strongest strength within one such error of the best is chosen (the nearest the default
    that does as well), and the model refitted on every question. Otherwise the default is
    kept. Questions that cannot teach (no answer among their candidates, or only answers) are
    still ranked and counted: they are what the knowledge base asks."""
    if not examples:
        raise ValueError("no question to calibrate from")
    folds = max(2, min(folds, len(examples)))
    fold = fold_of(examples, folds, seed)

    def served(e: Example, model: FusionModel) -> FusionModel:
        chinese = e.query_cjk >= fusion.ZH_SHARE
        return default if default is not None and chinese else model

    defaults = {e.id: ranked_documents(e, served(e, prior)) for e in examples}
    rr_default = {e.id: reciprocal_rank(defaults[e.id], e.answers) for e in examples}
    held: dict[float, dict[str, list[str]]] = {}
    for l2 in l2s:
        held[l2] = {}
        for k in range(folds):
            train = [e for e in examples if fold[e.id] != k]
            test = [e for e in examples if fold[e.id] == k]
            try:
                model = refit(train, prior, l2)
            except ValueError:
                model = prior  # nothing in this fold's training half teaches
            for e in test:
                held[l2][e.id] = ranked_documents(e, served(e, model))
    ids = [e.id for e in examples]
    answers = {e.id: e.answers for e in examples}
    grid: dict[str, dict[str, float]] = {}
    for l2 in l2s:
        diffs = [reciprocal_rank(held[l2][i], answers[i]) - rr_default[i] for i in ids]
        grid[f"{l2:g}"] = {
            "mrr@10": round(
                statistics.fmean(rr_default[i] + d for i, d in zip(ids, diffs, strict=True)), 4
            ),
            "gain": round(statistics.fmean(diffs), 4),
            "se": round(_se(diffs), 4),
        }
    teaching = sum(e.teaches for e in examples)
    result = Calibration(prior, None, len(examples), teaching, grid=grid)
    best = max(l2s, key=lambda l2: (grid[f"{l2:g}"]["gain"], l2))
    gain, se = grid[f"{best:g}"]["gain"], grid[f"{best:g}"]["se"]
    best_diffs = [reciprocal_rank(held[best][i], answers[i]) - rr_default[i] for i in ids]
    net = sum(d > 0 for d in best_diffs) - sum(d < 0 for d in best_diffs)
    chosen: float | None = None
    if gain > MARGIN * se and gain > 0 and net >= NET:
        rr_best = {i: reciprocal_rank(held[best][i], answers[i]) for i in ids}
        near = [
            l2
            for l2 in l2s
            if statistics.fmean(reciprocal_rank(held[l2][i], answers[i]) - rr_best[i] for i in ids)
            >= -_se([reciprocal_rank(held[l2][i], answers[i]) - rr_best[i] for i in ids])
        ]
        chosen = max(near)
    shown = chosen if chosen is not None else best
    result.folds = [
        Fold(
            n=sum(1 for i in ids if fold[i] == k),
            default_mrr=round(statistics.fmean(rr_default[i] for i in ids if fold[i] == k), 4),
            candidate_mrr=round(
                statistics.fmean(
                    reciprocal_rank(held[shown][i], answers[i]) for i in ids if fold[i] == k
                ),
                4,
            ),
        )
        for k in range(folds)
        if any(fold[i] == k for i in ids)
    ]
    result.held_out = {i: (defaults[i], held[shown][i]) for i in ids}
    if chosen is not None:
        result.model = refit(examples, prior, chosen)
        result.l2 = chosen
    return result


def _se(values: Sequence[float]) -> float:
    """The standard error of the mean of `values` (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) / math.sqrt(len(values))
