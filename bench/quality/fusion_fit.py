"""Fit the hybrid search's learned fusion (`retrieval/search/fusion_model.json`) on B8's tuning
half only, from the per-leg dump of a B8 run (`bench/results/quality-legs.json`).

    python -m bench.quality.fusion_fit            # choose depth and L2 by 5-fold CV, fit, write
    python -m bench.quality.fusion_fit --dry-run  # the same, print only

Every candidate either leg listed (each cut to the depth tried) is one example, labelled 1 when
its document answers the question; each question weighs the same (its answers half, the rest
half). The features are `retrieval.search.fusion.learned_features`, the very function search
runs, on the dump's legs. The model is L2-regularised logistic regression fitted by Newton's
method (numpy); with sign constraints (MONOTONE) by projected Newton. The depth and the L2
weight are chosen by 5-fold cross-validation over the tuning questions (MRR@10 of the
documents): the shallowest depth, then the strongest L2, within one standard error of the best
(deeper legs cost latency); the held-out half is never read here.

What is fitted is a `Recipe` (sign constraints, a keyword gate, one model per query language,
extra features); `bench.quality.cross_corpus` fits every recipe on each of B8's two corpora and
measures it on the other, and SHIPPED is the one it chose, fitted here on the first corpus's
tuning half. `python -m bench.quality.offline --fusion bench/quality/fusion_fit.py:learned`
then reports every split.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.quality.metrics import TOP_K
from retrieval.search import fusion_fitting

LEGS = common.RESULTS / "quality-legs.json"
MODEL = common.ROOT / "retrieval" / "search" / "fusion_model.json"
DEPTHS = (30, 50, 70, 100)
L2S = (1e-3, 1e-2, 1e-1)
FOLDS = 5
SEED = 24
VECTOR_WEIGHT = 0.15  # CANON_HYBRID_VECTOR_WEIGHT's default: the passages' order in a document
CHUNKS = [0]  # the dump's chunk count (its IDFs' N), set when the dump is read


def _legs(q: dict[str, Any], depth: int, chunks: int) -> tuple[list[Any], list[Any], float, float]:
    """The question's legs cut to `depth`, its CJK share and the keyword leg's bound as
    `QueryWeights.bound` computes it (every query term, those no chunk has at df 0). A question
    that names its dump's chunk count (`chunks`, set by `annotate`) is read with that one."""
    from retrieval.search.lexical.bm25 import QueryWeights, idf

    chunks = int(q.get("chunks") or chunks)
    vector = [(e["chunk"], e["cos"], e["cjk"]) for e in q["vector"][:depth]]
    # The keyword leg as a hybrid reading `depth` rows reads it (Canon ranks max(4 x depth, 100)
    # BM25 candidates exactly, so a deeper read's top can differ): `keyword_<depth>`, or the
    # LEG_DEPTH-deep `keyword` (`bench.quality.legs`).
    listed = q.get(f"keyword_{depth}", q["keyword"])
    keyword = [(e["chunk"], e["bm25"], e["cjk"]) for e in listed[:depth]]
    query = q["query"]
    absent = len(query["terms"]) - len(query["present"])
    weights = QueryWeights(
        terms=[p[0] for p in query["present"]],
        idfs=[p[1] for p in query["present"]],
        dfs=[p[2] for p in query["present"]],
        avg_length=float(query["avg_length"]),
        absent_idf=absent * idf(chunks=chunks, df=0),
    )
    return vector, keyword, float(query["cjk"]), weights.bound


Examples = tuple[list[int], np.ndarray[Any, Any], dict[int, str]]
# A question told its corpus (`annotate`) is featurised once per depth: recipes refit often.
_EXAMPLES: dict[tuple[str, str, str, int], Examples] = {}


def examples(q: dict[str, Any], depth: int) -> Examples:
    """The question's candidates, their features (FEATURES order) and documents."""
    if "corpus" not in q:
        return _examples(q, depth)
    key = (q["corpus"], q["set"], q["id"], depth)
    if key not in _EXAMPLES:
        _EXAMPLES[key] = _examples(q, depth)
    return _EXAMPLES[key]


def _examples(q: dict[str, Any], depth: int) -> Examples:
    from retrieval.search.fusion import learned_features

    vector, keyword, query_cjk, bound = _legs(q, depth, CHUNKS[0])
    features = learned_features(
        query_cjk=query_cjk, vector=vector, keyword=keyword, keyword_bound=bound
    )
    legs = [leg for key, leg in q.items() if key == "vector" or key.startswith("keyword")]
    docs = {e["chunk"]: e["doc"] for leg in legs for e in leg}
    ids = list(features)
    return ids, np.array([features[c] for c in ids], dtype=float), docs


@dataclass(frozen=True)
class Extra:
    """Columns (and candidates) beside FEATURES, tried in the bench: their names, the signs a
    monotone recipe keeps them to, and `rows(q, depth)` -> the question's examples with them."""

    names: tuple[str, ...]
    signs: dict[str, int]
    rows: Callable[[dict[str, Any], int], Examples]


# "Only one leg found it" (issue 38, item 2), tried as extra features beside FEATURES: whether
# only the vector leg or only the keyword leg listed the candidate, and the strength of what
# that one leg saw (bench only: search reads FEATURES).
ONE_LEG = ("only_vector", "only_keyword", "only_vector_x_cos", "only_keyword_x_bm25_share")
ONE_LEG_SIGNS = {"only_vector_x_cos": 1, "only_keyword_x_bm25_share": 1}


def _one_leg_rows(q: dict[str, Any], depth: int) -> Examples:
    """`examples` with the ONE_LEG columns after FEATURES."""
    ids, x, docs = examples(q, depth)
    if not len(ids):
        return ids, x, docs
    from retrieval.search.fusion import FEATURES

    def column(name: str) -> Any:
        return x[:, FEATURES.index(name)]

    in_vector, in_keyword = column("in_vector"), column("in_keyword")
    only_vector, only_keyword = in_vector * (1 - in_keyword), in_keyword * (1 - in_vector)
    extra = np.column_stack(
        [
            only_vector,
            only_keyword,
            only_vector * column("cos"),
            only_keyword * column("bm25_share"),
        ]
    )
    return ids, np.hstack([x, extra]), docs


# What a Recipe's `extra` may name (bench.quality.third_leg registers its own).
EXTRAS: dict[str, Extra] = {"one-leg": Extra(ONE_LEG, ONE_LEG_SIGNS, _one_leg_rows)}


def _rows(q: dict[str, Any], depth: int, extra: str | None) -> Examples:
    """`examples`, or the `extra`'s rows when the recipe names one."""
    return examples(q, depth) if extra is None else EXTRAS[extra].rows(q, depth)


Params = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], float]
_FITS: dict[Any, Params] = {}


def fit(
    questions: Sequence[dict[str, Any]],
    depth: int,
    l2: float,
    *,
    signs: Sequence[int] | None = None,
    extra: str | None = None,
) -> Params:
    """Standardisation (mean, scale), weights and bias, by Newton's method. `signs`, one per
    feature: +1 keeps that weight at or above 0, -1 at or below, 0 leaves it free (projected
    Newton with an active set; no sign: plain Newton, as the shipped model was first fitted).
    Questions told their corpus (`annotate`) have their fits remembered: recipes that differ
    only in their gate share them."""
    key = None
    if all("corpus" in q for q in questions):
        ids = tuple((q["corpus"], q["set"], q["id"]) for q in questions)
        key = (ids, depth, l2, tuple(signs) if signs is not None and any(signs) else None, extra)
        if key in _FITS:
            return _FITS[key]
    fitted = _fit(questions, depth, l2, signs, extra)
    if key is not None:
        _FITS[key] = fitted
    return fitted


def _fit(
    questions: Sequence[dict[str, Any]],
    depth: int,
    l2: float,
    signs: Sequence[int] | None,
    extra: str | None,
) -> Params:
    """The product's fit (`retrieval.search.fusion_fitting.logistic_fit`, toward 0) on the
    dump's examples, standardised by their own mean and spread."""
    from retrieval.search.fusion_fitting import logistic_fit, standardisation

    xs, ys, ws = [], [], []
    for q in questions:
        ids, x, docs = _rows(q, depth, extra)
        y = np.array([1.0 if docs[c] in q["answers"] else 0.0 for c in ids])
        if not len(ids) or y.sum() == 0 or y.sum() == len(y):
            continue  # nothing to learn from a question no candidate answers
        xs.append(x)
        ys.append(y)
        ws.append(np.where(y == 1, 0.5 / y.sum(), 0.5 / (len(y) - y.sum())))
    x, y, w = np.vstack(xs), np.concatenate(ys), np.concatenate(ws)
    mean, scale = standardisation(x)
    weights, bias = logistic_fit(x, y, w, mean=mean, scale=scale, l2=l2, constraints=signs)
    return mean, scale, weights, bias


def _keyword_gated(
    q: dict[str, Any], depth: int, order: list[int], docs: dict[int, str], gate: Any
) -> list[int]:
    """`order` (chunk ids) under the keyword gate, as search applies it
    (`fusion.KeywordGate.floors`, `fusion.keyword_floor`)."""
    from retrieval.search.fusion import keyword_floor

    _, keyword, query_cjk, bound = _legs(q, depth, CHUNKS[0])
    if not gate.holds_for(query_cjk):
        return order
    floors = gate.floors([(cid, bm25) for cid, bm25, _ in keyword], bound)
    return keyword_floor(order, floors, docs, TOP_K)[0]


def ranked_documents(
    q: dict[str, Any],
    depth: int,
    mean: Any,
    scale: Any,
    weights: Any,
    bias: float,
    *,
    gate: Any = None,
    extra: str | None = None,
) -> list[str]:
    """The question's first TOP_K distinct documents under one model (and `gate`, a
    `fusion.KeywordGate`, when given)."""
    ids, x, docs = _rows(q, depth, extra)
    scores = bias + ((x - mean) / scale) @ weights if len(ids) else np.array([])
    order = [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))]
    if gate is not None:
        order = _keyword_gated(q, depth, order, docs, gate)
    ranked: list[str] = []
    for cid in order[:TOP_K]:
        if docs[cid] not in ranked:
            ranked.append(docs[cid])
    return ranked


def mrr(ranked: Sequence[str], answers: Sequence[str]) -> float:
    return next((1.0 / (i + 1) for i, d in enumerate(ranked[:TOP_K]) if d in answers), 0.0)


def cross_validate(
    questions: list[dict[str, Any]],
    depth: int,
    l2: float,
    *,
    signs: Sequence[int] | None = None,
    gate: Any = None,
    extra: str | None = None,
) -> list[float]:
    """Each tuning question's reciprocal rank when its fold was held out."""
    order = sorted(questions, key=lambda q: q["id"])
    random.Random(SEED).shuffle(order)
    scores = []
    for fold in range(FOLDS):
        test = order[fold::FOLDS]
        train = [q for i, q in enumerate(order) if i % FOLDS != fold]
        mean, scale, weights, bias = fit(train, depth, l2, signs=signs, extra=extra)
        scores += [
            mrr(
                ranked_documents(q, depth, mean, scale, weights, bias, gate=gate, extra=extra),
                q["answers"],
            )
            for q in test
        ]
    return scores


# --- recipes: how a model is made, so every one can be fitted on either corpus -------------

# The sign constraints: the product's (`retrieval.search.fusion_fitting.MONOTONE`), which a
# calibration keeps too. (Free, the shipped model let a Chinese query's same-language cosine
# count against a chunk: query_zh_x_cos outweighed cos.)
MONOTONE = fusion_fitting.MONOTONE


@dataclass(frozen=True)
class Recipe:
    """One way to make the learned fusion: sign constraints (`monotone`), a keyword gate
    (`fusion.KeywordGate` parameters), one model per query language (`by_language`: Chinese
    queries, and the rest). Depth and L2 are chosen by fusion_fit's CV rule on whatever the
    recipe is fitted on."""

    name: str
    monotone: bool = False
    gate: tuple[Any, ...] | None = None  # KeywordGate's fields, in order
    by_language: bool = False
    extra: str | None = None  # an EXTRAS entry's columns too (bench only)
    # Chinese questions ranked by this recipe's model instead (fitted on the same questions):
    # a third list that only reads English, asked only for questions not in Chinese.
    chinese: Recipe | None = None

    def signs(self) -> list[int] | None:
        from retrieval.search.fusion import FEATURES

        if not self.monotone:
            return None
        if self.extra is None:
            return [MONOTONE.get(name, 0) for name in FEATURES]
        more = EXTRAS[self.extra]
        return [{**MONOTONE, **more.signs}.get(name, 0) for name in (*FEATURES, *more.names)]

    def keyword_gate(self) -> Any:
        from retrieval.search.fusion import KeywordGate

        return KeywordGate(*self.gate) if self.gate else None


@dataclass
class Fitted:
    """A recipe fitted on some questions: per query language ("all", or "zh" and "other") the
    chosen depth and L2, their CV figure, and the parameters."""

    recipe: Recipe
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    chinese: Fitted | None = None  # the recipe's `chinese` recipe, fitted

    def part_of(self, q: dict[str, Any]) -> dict[str, Any]:
        if not self.recipe.by_language:
            return self.parts["all"]
        return self.parts["zh" if query_is_chinese(q) else "other"]

    def rank(self, q: dict[str, Any]) -> list[str]:
        """The question's ranked documents under this model."""
        if self.chinese is not None and query_is_chinese(q):
            return self.chinese.rank(q)
        part = self.part_of(q)
        return ranked_documents(
            q,
            part["depth"],
            part["mean"],
            part["scale"],
            part["weights"],
            part["bias"],
            gate=self.recipe.keyword_gate(),
            extra=self.recipe.extra,
        )


def query_is_chinese(q: dict[str, Any]) -> bool:
    from retrieval.search.fusion import ZH_SHARE

    return float(q["query"]["cjk"]) >= ZH_SHARE


def choose(
    tuning: list[dict[str, Any]],
    *,
    signs: Sequence[int] | None = None,
    gate: Any = None,
    extra: str | None = None,
) -> dict[str, Any]:
    """fusion_fit's rule: 5-fold CV over DEPTHS x L2S on `tuning`, then the shallowest depth
    and the strongest L2 within one standard error of the best (deeper legs cost latency)."""
    results, errors = {}, {}
    for depth in DEPTHS:
        for l2 in L2S:
            scores = cross_validate(tuning, depth, l2, signs=signs, gate=gate, extra=extra)
            results[(depth, l2)] = float(np.mean(scores))
            errors[(depth, l2)] = float(np.std(scores, ddof=1) / math.sqrt(len(scores)))
    best = max(results, key=lambda k: results[k])
    good_enough = results[best] - errors[best]
    depth, l2 = min((k for k in results if results[k] >= good_enough), key=lambda k: (k[0], -k[1]))
    return {
        "depth": depth,
        "l2": l2,
        "cv_mrr": results[(depth, l2)],
        "best": best,
        "best_mrr": results[best],
        "best_error": errors[best],
        "grid": results,
        "errors": errors,
    }


def fit_recipe(recipe: Recipe, tuning: list[dict[str, Any]]) -> Fitted:
    """`recipe` fitted on `tuning` (each part's depth and L2 by `choose`)."""
    groups = {"all": tuning}
    if recipe.by_language:
        groups = {
            "zh": [q for q in tuning if query_is_chinese(q)],
            "other": [q for q in tuning if not query_is_chinese(q)],
        }
    fitted = Fitted(recipe)
    if recipe.chinese is not None:
        fitted.chinese = fit_recipe(recipe.chinese, tuning)
    for name, questions in groups.items():
        signs = recipe.signs()
        choice = choose(questions, signs=signs, gate=recipe.keyword_gate(), extra=recipe.extra)
        mean, scale, weights, bias = fit(
            questions, choice["depth"], choice["l2"], signs=signs, extra=recipe.extra
        )
        fitted.parts[name] = {
            **choice,
            "n": len(questions),
            "mean": mean,
            "scale": scale,
            "weights": weights,
            "bias": bias,
        }
    return fitted


# The recipe `fusion_model.json` ships, fitted on the first corpus's tuning half: chosen by
# the cross-corpus figures of every recipe (`bench.quality.cross_corpus`, docs/BENCHMARKS.md
# B8): monotone in every language cell, with a keyword gate for queries not in Chinese that
# keeps the keyword leg's near-best matches (at least 80 % of its best and 10 % of the query's
# bound, in its first 10) in the top 10, and a strong one (30 % of the bound) at its rank.
SHIPPED = Recipe(
    "learned, monotone + keyword gate",
    monotone=True,
    gate=(10, 0.1, 0.8, 0.3),
)


def annotate(data: dict[str, Any], corpus: str) -> list[dict[str, Any]]:
    """A dump's questions, each told its corpus and its dump's chunk count (the IDFs' N)."""
    chunks = int(data["about"]["chunks"])
    return [{**q, "corpus": corpus, "chunks": chunks} for q in data["questions"]]


def tuning_half(questions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q for q in questions if q["set"] == "natural" and q["split"] == "tuning"]


def model_file(fitted: Fitted, about: str, fitted_on: str = "quality") -> dict[str, Any]:
    """fusion_model.json's content for a fitted recipe of one part (`fitted_on`: the corpus
    whose tuning half it was fitted on)."""
    from retrieval.search.fusion import FEATURES

    if fitted.recipe.by_language or fitted.recipe.extra:
        raise SystemExit("Canon's search reads one model over FEATURES: this recipe cannot ship")
    part = fitted.parts["all"]
    model: dict[str, Any] = {
        "about": about,
        "recipe": fitted.recipe.name,
        "fitted_on": fitted_on,
        "features": list(FEATURES),
        "mean": [round(float(v), 6) for v in part["mean"]],
        "scale": [round(float(v), 6) for v in part["scale"]],
        "weights": [round(float(v), 6) for v in part["weights"]],
        "bias": round(part["bias"], 6),
        "depth": part["depth"],
        "l2": part["l2"],
    }
    if fitted.recipe.gate:
        model["gate"] = vars(fitted.recipe.keyword_gate())
    if fitted.recipe.monotone:
        model["monotone"] = sorted(MONOTONE)
    return model


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--legs", type=Path, default=LEGS)
    parser.add_argument("--out", type=Path, default=MODEL)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(common.ROOT))
    from retrieval.search.fusion import FEATURES

    dump = json.loads(args.legs.read_text(encoding="utf-8"))
    CHUNKS[0] = int(dump["about"]["chunks"])
    tuning = tuning_half(annotate(dump, "quality"))
    missing = [d for d in DEPTHS[:-1] if f"keyword_{d}" not in tuning[0]]
    if missing:
        raise SystemExit(f"the dump has no keyword leg read {missing} deep: run B8 again")
    print(f"[fit] {len(tuning)} tuning questions; {FOLDS}-fold CV over depth x L2")
    fitted = fit_recipe(SHIPPED, tuning)
    part = fitted.parts["all"]
    for (depth, l2), value in part["grid"].items():
        print(
            f"  depth {depth:>3}  l2 {l2:<6g}  CV MRR@10 {value:.4f}"
            f" (standard error {part['errors'][(depth, l2)]:.4f})"
        )
    depth, l2, best = part["depth"], part["l2"], part["best"]
    print(f"[fit] best CV {part['best_mrr']:.4f} at depth {best[0]}, l2 {best[1]:g}; within one")
    print(
        f"      standard error ({part['best_error']:.4f}) the shallowest is depth {depth},"
        f" l2 {l2:g}"
    )
    about = (
        f"Canon's learned hybrid fusion (retrieval/search/fusion.py), recipe {SHIPPED.name!r} "
        "(chosen by bench.quality.cross_corpus), fitted by "
        f"`python -m bench.quality.fusion_fit` on the {len(tuning)} questions of "
        "bench/quality/natural.jsonl's tuning half (bench/quality/splits.json); depth and L2 "
        f"chosen by {FOLDS}-fold cross-validation there (MRR@10 {part['cv_mrr']:.4f}; "
        f"best {part['best_mrr']:.4f} at depth {best[0]}, within one standard error)."
    )
    model = model_file(fitted, about)
    print(f"[fit] chose depth {depth}, l2 {l2:g}; weights:")
    for name, weight in zip(FEATURES, part["weights"].tolist(), strict=True):
        print(f"  {name:<34} {weight:+.3f}")
    if not args.dry_run:
        args.out.write_text(json.dumps(model, indent=2) + "\n", encoding="utf-8")
        print(f"[fit] wrote {args.out}")
    return 0


def learned(q: dict[str, Any]) -> list[int]:
    """For `bench.quality.offline`: the shipped model on one question's legs, as search runs it
    (the keyword gate's floor when the model has one, then each document's passages in the
    fixed-weight order, `fusion._passages_by_words`)."""
    from retrieval.search import fusion
    from retrieval.search.hits import Hit

    if not CHUNKS[0] and not q.get("chunks"):
        CHUNKS[0] = int(json.loads(LEGS.read_text(encoding="utf-8"))["about"]["chunks"])
    fitted = fusion.model()
    ids, x, docs = examples(q, fitted.depth)
    scores = [fitted.score(row) for row in x.tolist()]
    order = [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))]
    if fitted.gate is not None:
        order = _keyword_gated(q, fitted.depth, order, docs, fitted.gate)
    vector, keyword, _, _ = _legs(q, fitted.depth, CHUNKS[0])

    def hits(leg: list[Any]) -> list[Hit]:
        return [Hit(cid, score, "", 0, docs[cid], "", 0, 0) for cid, score, _ in leg]

    vector_hits, keyword_hits = hits(vector), hits(keyword)
    by_id = {h.chunk_id: h for h in (*vector_hits, *keyword_hits)}
    convex = fusion._convex(vector_hits, keyword_hits, VECTOR_WEIGHT)
    return fusion._passages_by_words(order[:TOP_K], by_id, convex)


if __name__ == "__main__":
    sys.exit(main())
