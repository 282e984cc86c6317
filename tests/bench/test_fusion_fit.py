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


def _legs_question() -> dict[str, Any]:
    """A question (English) whose vector leg lists chunks 1, 2, keyword leg 2, and whose third
    list (MiniLM over English chunks) lists 3 then 1."""

    def entry(rank: int, chunk: int, doc: str, **more: float) -> dict[str, Any]:
        return {"rank": rank, "chunk": chunk, "doc": doc, "cjk": 0.0, **more}

    return {
        "id": "q1",
        "set": "natural",
        "corpus": "hand",
        "chunks": 100,
        "query": {
            "cjk": 0.0,
            "terms": ["hold"],
            "present": [["hold", 2.0, 3]],
            "avg_length": 50.0,
        },
        "vector": [entry(1, 1, "A", cos=0.8), entry(2, 2, "B", cos=0.5)],
        "keyword": [entry(1, 2, "B", bm25=3.0)],
        "english": [entry(1, 3, "C", cos=0.9), entry(2, 1, "A", cos=0.7)],
        "en_cos": {"1": 0.7, "2": 0.2, "3": 0.9},
    }


def test_the_third_list_adds_its_candidates_and_its_columns() -> None:
    from bench.quality import third_leg

    q = _legs_question()
    ids, x, docs = third_leg._english_rows(q, 30, add=True)

    assert sorted(ids) == [1, 2, 3] and docs[3] == "C"
    extra = {
        cid: dict(zip(third_leg.ENGLISH, row[len(FEATURES) :], strict=True))
        for cid, row in zip(ids, x, strict=True)
    }
    # chunk 3: only the third list found it, at its top
    assert extra[3] == {
        "en_cos": 0.9,
        "en_cos_below_best": 0.0,
        "in_english": 1.0,
        "english_reciprocal_rank": 0.5,
        "english_best": 0.9,
    }
    # chunk 2: the legs found it, the third list did not; its cosine is still known
    assert extra[2]["in_english"] == 0.0 and extra[2]["en_cos"] == 0.2
    assert extra[2]["en_cos_below_best"] == np.float64(0.9 - 0.2)
    # re-scoring adds no candidate: the best is the candidates' own
    ids, x, _ = third_leg._english_rows(q, 30, add=False)
    assert sorted(ids) == [1, 2]
    rescore = {cid: row[len(FEATURES) :].tolist() for cid, row in zip(ids, x, strict=True)}
    assert rescore[1] == [0.7, 0.0, 0.7]


def test_a_chinese_question_has_no_third_list() -> None:
    from bench.quality import third_leg

    q = {**_legs_question(), "id": "q2", "english": [], "en_cos": {}}
    q["query"] = {**q["query"], "cjk": 0.9}
    ids, x, _ = third_leg._english_rows(q, 30, add=True)

    assert sorted(ids) == [1, 2]
    assert not x[:, len(FEATURES) :].any()


def test_a_recipe_ranks_chinese_questions_by_its_chinese_recipes_model() -> None:
    class Fixed(fusion_fit.Fitted):
        def rank(self, q: dict[str, Any]) -> list[str]:
            return ["the Chinese model's answer"]

    english = {**_legs_question(), "answers": ["A"]}
    mean, scale, weights, bias = fusion_fit.fit([english], 30, 0.1)
    part = {"depth": 30, "mean": mean, "scale": scale, "weights": weights, "bias": bias}
    two_legs = fusion_fit.Recipe("two legs")
    fitted = fusion_fit.Fitted(
        fusion_fit.Recipe("three", chinese=two_legs), {"all": part}, chinese=Fixed(two_legs)
    )
    chinese = {**english, "id": "q3", "query": {**english["query"], "cjk": 0.9}}

    assert fitted.rank(chinese) == ["the Chinese model's answer"]
    assert set(fitted.rank(english)) == {"A", "B"}  # the question's own model, its legs' documents
