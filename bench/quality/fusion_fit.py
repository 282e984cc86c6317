"""Fit the hybrid search's learned fusion (`retrieval/search/fusion_model.json`) on B8's tuning
half only, from the per-leg dump of a B8 run (`bench/results/quality-legs.json`).

    python -m bench.quality.fusion_fit            # choose depth and L2 by 5-fold CV, fit, write
    python -m bench.quality.fusion_fit --dry-run  # the same, print only

Every candidate either leg listed (each cut to the depth tried) is one example, labelled 1 when
its document answers the question; each question weighs the same (its answers half, the rest
half). The features are `retrieval.search.fusion.learned_features`, the very function search
runs, on the dump's legs. The model is L2-regularised logistic regression fitted by Newton's
method (numpy). The depth and the L2 weight are chosen by 5-fold cross-validation over the tuning
questions (MRR@10 of the documents): the shallowest depth, then the strongest L2, within one
standard error of the best (deeper legs cost latency); the held-out half is never read here.
`python -m bench.quality.offline --fusion bench/quality/fusion_fit.py:learned` then reports every
split.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.quality.metrics import TOP_K

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
    `QueryWeights.bound` computes it (every query term, those no chunk has at df 0)."""
    from retrieval.search.lexical.bm25 import QueryWeights, idf

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


def examples(
    q: dict[str, Any], depth: int
) -> tuple[list[int], np.ndarray[Any, Any], dict[int, str]]:
    """The question's candidates, their features (FEATURES order) and documents."""
    from retrieval.search.fusion import learned_features

    vector, keyword, query_cjk, bound = _legs(q, depth, CHUNKS[0])
    features = learned_features(
        query_cjk=query_cjk, vector=vector, keyword=keyword, keyword_bound=bound
    )
    legs = [leg for key, leg in q.items() if key == "vector" or key.startswith("keyword")]
    docs = {e["chunk"]: e["doc"] for leg in legs for e in leg}
    ids = list(features)
    return ids, np.array([features[c] for c in ids], dtype=float), docs


def fit(
    questions: Sequence[dict[str, Any]], depth: int, l2: float
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], float]:
    """Standardisation (mean, scale), weights and bias, by Newton's method."""
    xs, ys, ws = [], [], []
    for q in questions:
        ids, x, docs = examples(q, depth)
        y = np.array([1.0 if docs[c] in q["answers"] else 0.0 for c in ids])
        if not len(ids) or y.sum() == 0 or y.sum() == len(y):
            continue  # nothing to learn from a question no candidate answers
        xs.append(x)
        ys.append(y)
        ws.append(np.where(y == 1, 0.5 / y.sum(), 0.5 / (len(y) - y.sum())))
    x, y, w = np.vstack(xs), np.concatenate(ys), np.concatenate(ws)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    beta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0  # the bias is not shrunk
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-z @ beta))
        grad = z.T @ (w * (p - y)) + penalty * beta
        hessian = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hessian, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return mean, scale, beta[1:], float(beta[0])


def ranked_documents(
    q: dict[str, Any], depth: int, mean: Any, scale: Any, weights: Any, bias: float
) -> list[str]:
    ids, x, docs = examples(q, depth)
    scores = bias + ((x - mean) / scale) @ weights if len(ids) else np.array([])
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))
    ranked: list[str] = []
    for i in order[:TOP_K]:
        if docs[ids[i]] not in ranked:
            ranked.append(docs[ids[i]])
    return ranked


def mrr(ranked: Sequence[str], answers: Sequence[str]) -> float:
    return next((1.0 / (i + 1) for i, d in enumerate(ranked[:TOP_K]) if d in answers), 0.0)


def cross_validate(questions: list[dict[str, Any]], depth: int, l2: float) -> list[float]:
    """Each tuning question's reciprocal rank when its fold was held out."""
    order = sorted(questions, key=lambda q: q["id"])
    random.Random(SEED).shuffle(order)
    scores = []
    for fold in range(FOLDS):
        test = order[fold::FOLDS]
        train = [q for i, q in enumerate(order) if i % FOLDS != fold]
        mean, scale, weights, bias = fit(train, depth, l2)
        scores += [
            mrr(ranked_documents(q, depth, mean, scale, weights, bias), q["answers"]) for q in test
        ]
    return scores


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
    tuning = [q for q in dump["questions"] if q["set"] == "natural" and q["split"] == "tuning"]
    missing = [d for d in DEPTHS[:-1] if f"keyword_{d}" not in tuning[0]]
    if missing:
        raise SystemExit(f"the dump has no keyword leg read {missing} deep: run B8 again")
    print(f"[fit] {len(tuning)} tuning questions; {FOLDS}-fold CV over depth x L2")
    results, errors = {}, {}
    for depth in DEPTHS:
        for l2 in L2S:
            scores = cross_validate(tuning, depth, l2)
            results[(depth, l2)] = float(np.mean(scores))
            errors[(depth, l2)] = float(np.std(scores, ddof=1) / math.sqrt(len(scores)))
            print(
                f"  depth {depth:>3}  l2 {l2:<6g}  CV MRR@10 {results[(depth, l2)]:.4f}"
                f" (standard error {errors[(depth, l2)]:.4f})"
            )
    # The one-standard-error rule: the shallowest depth (each leg's rows cost latency), then the
    # strongest regularisation, whose CV figure is within one standard error of the best.
    best = max(results, key=lambda k: results[k])
    good_enough = results[best] - errors[best]
    depth, l2 = min((k for k in results if results[k] >= good_enough), key=lambda k: (k[0], -k[1]))
    print(f"[fit] best CV {results[best]:.4f} at depth {best[0]}, l2 {best[1]:g}; within one")
    print(f"      standard error ({errors[best]:.4f}) the shallowest is depth {depth}, l2 {l2:g}")
    mean, scale, weights, bias = fit(tuning, depth, l2)
    model = {
        "about": (
            "Canon's learned hybrid fusion (retrieval/search/fusion.py), fitted by "
            f"`python -m bench.quality.fusion_fit` on the {len(tuning)} questions of "
            "bench/quality/natural.jsonl's tuning half (bench/quality/splits.json); depth and L2 "
            f"chosen by {FOLDS}-fold cross-validation there (MRR@10 {results[(depth, l2)]:.4f}; "
            f"best {results[best]:.4f} at depth {best[0]}, within one standard error)."
        ),
        "features": list(FEATURES),
        "mean": [round(float(v), 6) for v in mean],
        "scale": [round(float(v), 6) for v in scale],
        "weights": [round(float(v), 6) for v in weights],
        "bias": round(bias, 6),
        "depth": depth,
        "l2": l2,
    }
    print(f"[fit] chose depth {depth}, l2 {l2:g}; weights:")
    for name, weight in zip(FEATURES, weights.tolist(), strict=True):
        print(f"  {name:<34} {weight:+.3f}")
    if not args.dry_run:
        args.out.write_text(json.dumps(model, indent=2) + "\n", encoding="utf-8")
        print(f"[fit] wrote {args.out}")
    return 0


def learned(q: dict[str, Any]) -> list[int]:
    """For `bench.quality.offline`: the shipped model on one question's legs, as search runs it
    (each document's passages then in the fixed-weight order, `fusion._passages_by_words`)."""
    from retrieval.search import fusion
    from retrieval.search.hits import Hit

    if not CHUNKS[0]:
        CHUNKS[0] = int(json.loads(LEGS.read_text(encoding="utf-8"))["about"]["chunks"])
    fitted = fusion.model()
    ids, x, docs = examples(q, fitted.depth)
    scores = [fitted.score(row) for row in x.tolist()]
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))
    vector, keyword, _, _ = _legs(q, fitted.depth, CHUNKS[0])

    def hits(leg: list[Any]) -> list[Hit]:
        return [Hit(cid, score, "", 0, docs[cid], "", 0, 0) for cid, score, _ in leg]

    vector_hits, keyword_hits = hits(vector), hits(keyword)
    by_id = {h.chunk_id: h for h in (*vector_hits, *keyword_hits)}
    convex = fusion._convex(vector_hits, keyword_hits, VECTOR_WEIGHT)
    return fusion._passages_by_words([ids[i] for i in order[:TOP_K]], by_id, convex)


if __name__ == "__main__":
    sys.exit(main())
