"""B8's fusion fit with sign constraints (bench/quality/fusion_fit.py) and the cross-corpus
keyword drop (bench/quality/cross_corpus.py), on small hand-made data."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.quality import cross_corpus, fusion_fit
from retrieval.search import fusion_fitting
from retrieval.search.fusion import FEATURES


def _data(seed: int = 7) -> tuple[Any, Any, Any, Any]:
    """Two features: the first predicts the label, the second predicts it backwards."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(400, 2))
    y = (x[:, 0] - 0.8 * x[:, 1] + rng.normal(scale=0.5, size=400) > 0).astype(float)
    z = np.hstack([np.ones((400, 1)), x])
    w = np.full(400, 1 / 400)
    penalty = np.array([0.0, 1e-3, 1e-3])
    return z, y, w, penalty


def _gradient(z: Any, y: Any, w: Any, penalty: Any, beta: Any) -> Any:
    p = 1 / (1 + np.exp(-z @ beta))
    return z.T @ (w * (p - y)) + penalty * beta


def test_a_sign_the_data_agrees_with_changes_nothing() -> None:
    z, y, w, penalty = _data()
    free = fusion_fitting._newton_signed(z, y, w, penalty, np.zeros(3), np.array([0, 0, 0]))
    agreeing = fusion_fitting._newton_signed(z, y, w, penalty, np.zeros(3), np.array([0, 1, -1]))
    assert free[1] > 0 > free[2]
    assert np.allclose(free, agreeing, atol=1e-6)
    assert np.abs(_gradient(z, y, w, penalty, free)).max() < 1e-6


def test_a_sign_the_data_disagrees_with_holds_that_weight_at_zero() -> None:
    z, y, w, penalty = _data()
    # the second feature's weight may not be negative: the best it can do is 0, and the loss
    # would fall only by making it negative (its gradient is positive there)
    beta = fusion_fitting._newton_signed(z, y, w, penalty, np.zeros(3), np.array([0, 0, 1]))
    gradient = _gradient(z, y, w, penalty, beta)
    assert beta[2] == 0.0 and gradient[2] > 0
    # the free weights are at their optimum given that
    assert np.abs(gradient[:2]).max() < 1e-6 and beta[1] > 0


def test_a_monotone_recipe_constrains_the_legs_evidence_only() -> None:
    signs = dict(zip(FEATURES, fusion_fit.Recipe("m", monotone=True).signs() or [], strict=True))
    assert signs["bm25_share"] == signs["cos"] == signs["query_zh_x_cos"] == 1
    assert signs["cos_below_best"] == -1
    # query-level features and the language indicators stay free
    assert signs["vector_best"] == signs["query_zh"] == signs["cross"] == 0
    assert fusion_fit.Recipe("free").signs() is None


def _question(qid: str, lang: str, answers: list[str], keyword: list[str]) -> dict[str, Any]:
    return {
        "id": qid,
        "lang": lang,
        "answers": answers,
        "canon": {"keyword": [[i, doc, 1.0] for i, doc in enumerate(keyword)]},
    }


def test_the_keyword_drop_counts_english_questions_that_lose_a_keyword_answer() -> None:
    questions = [
        # the keyword leg has A; the system too: kept
        _question("q1", "en", ["A"], ["A", "B"]),
        # the keyword leg has A; the system does not: dropped
        _question("q2", "en", ["A"], ["B", "A"]),
        # the keyword leg has no answer: nothing to drop
        _question("q3", "en", ["A"], ["B"]),
        # a Chinese question is not counted
        _question("q4", "zh", ["A"], ["A"]),
    ]
    ranked = [["C", "A"], ["B", "C"], ["C"], ["C"]]
    drop = cross_corpus.keyword_drop(questions, ranked)
    assert drop == {"n": 3, "dropped": 1, "rate": 0.3333, "ids": ["q2"]}
