"""Hybrid fusion: deterministic, keeps a confident leg's first hit, and rewards agreement."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from retrieval.search import fusion
from retrieval.search.fusion import depth, fuse
from retrieval.search.hits import Hit, Leg
from retrieval.search.ranking import explain_ranking
from tests.retrieval.factories import hit


def ids(hits: list[Hit]) -> list[int]:
    return [h.chunk_id for h in hits]


def test_convex_keeps_a_confident_keyword_match_first() -> None:
    # vector is vague (close scores), keyword is sure of chunk 9
    vector = [hit(1, 0.61), hit(2, 0.60), hit(9, 0.59)]
    keyword = [hit(9, 12.0), hit(3, 2.0)]
    assert ids(fuse(vector=vector, keyword=keyword, top_k=3, vector_weight=0.5)) == [9, 1, 2]


def test_convex_scores_are_the_weighted_normalised_sum() -> None:
    vector = [hit(1, 0.9), hit(2, 0.5)]
    keyword = [hit(2, 4.0), hit(3, 2.0)]
    fused = fuse(vector=vector, keyword=keyword, top_k=3, vector_weight=0.6)
    # chunk 2: 0.6 * 0.5 / 0.9 + 0.4 * 1; chunk 1: 0.6 * 1; chunk 3: 0.4 * 0.5
    assert [(h.chunk_id, h.score) for h in fused] == [(2, 0.733333), (1, 0.6), (3, 0.2)]


def test_ties_break_by_the_better_rank_then_chunk_id() -> None:
    vector = [hit(5, 0.8), hit(4, 0.0)]
    keyword = [hit(4, 3.0), hit(5, 0.0)]
    # both score 0.5; each is first in one leg, so the lower chunk id wins
    assert ids(fuse(vector=vector, keyword=keyword, top_k=2, vector_weight=0.5)) == [4, 5]


def test_rrf_rewards_agreement() -> None:
    vector = [hit(1, 0.9), hit(2, 0.8)]
    keyword = [hit(3, 9.0), hit(2, 8.0)]
    fused = fuse(vector=vector, keyword=keyword, top_k=3, method="rrf")
    assert ids(fused)[0] == 2
    assert fused[0].score == pytest.approx(2 / 62, abs=1e-6)


def test_an_empty_leg_leaves_the_other_in_order() -> None:
    keyword = [hit(3, 9.0), hit(2, 8.0), hit(7, 1.0)]
    assert ids(fuse(vector=[], keyword=keyword, top_k=2)) == [3, 2]


def test_unknown_method_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(vector=[], keyword=[], top_k=1, method="max")


def test_legs_read_deeper_than_top_k_but_bounded() -> None:
    assert depth(5, "convex") == 30 and depth(40, "convex") == 80
    assert depth(100, "convex") == 100
    # the learned fusion reads as deep as it was fitted for (at least 2 x top_k, at most 100)
    fitted = fusion.model().depth
    assert depth(5, "learned") == fitted and depth(100, "learned") == 100


# --- learned ---------------------------------------------------------------------------------


def test_learned_features_by_hand() -> None:
    # a Chinese query; the vector leg lists an English chunk (1) then a Chinese one (2); the
    # keyword leg lists only chunk 2, at half of what the whole query could score (bound 8)
    features = fusion.learned_features(
        query_cjk=0.9,
        vector=[(1, 0.8, 0.0), (2, 0.5, 0.95)],
        keyword=[(2, 4.0, 0.95)],
        keyword_bound=8.0,
    )
    named = {cid: dict(zip(fusion.FEATURES, x, strict=True)) for cid, x in features.items()}
    english, chinese = named[1], named[2]
    # the English chunk: best vector hit, not in the keyword leg, in the other language
    assert english["cos"] == 0.8 and english["cos_below_best"] == 0.0
    assert english["in_vector"] == 1.0 and english["vector_reciprocal_rank"] == 0.5
    assert english["in_keyword"] == 0.0 and english["bm25_share"] == 0.0
    assert english["cross"] == 1.0 and english["cross_x_cos"] == 0.8
    # the Chinese chunk: half the query's bound, the keyword leg's best, same language
    assert chinese["bm25_share"] == 0.5 and chinese["bm25_of_best"] == 1.0
    assert chinese["keyword_reciprocal_rank"] == 0.5 and chinese["keyword_best_share"] == 0.5
    assert chinese["cos_below_best"] == pytest.approx(0.3) and chinese["cross"] == 0.0
    assert chinese["query_zh_x_bm25_share"] == 0.5 and chinese["query_zh"] == 1.0
    # query-level features are the same for every candidate
    assert english["vector_spread"] == chinese["vector_spread"] == pytest.approx(0.3)


def test_a_chunk_only_a_further_list_found_gets_both_legs_floors() -> None:
    # a third list (B8's English leg) names chunk 3, which neither leg listed
    legs = {
        "query_cjk": 0.0,
        "vector": [(1, 0.8, 0.0), (2, 0.5, 0.0)],
        "keyword": [(2, 4.0, 0.0)],
        "keyword_bound": 8.0,
    }
    features = fusion.learned_features(**legs, others=[(3, 0.7, 0.0), (1, 0.6, 0.0)])  # type: ignore[arg-type]

    named = {cid: dict(zip(fusion.FEATURES, x, strict=True)) for cid, x in features.items()}
    assert sorted(named) == [1, 2, 3]
    only_other = named[3]
    # the vector leg's floor (its last similarity), no keyword evidence, listed by neither
    assert only_other["cos"] == 0.5 and only_other["in_vector"] == 0.0
    assert only_other["bm25_share"] == 0.0 and only_other["in_keyword"] == 0.0
    # a chunk the legs listed is featurised as without the further list
    assert features[1] == fusion.learned_features(**legs)[1]  # type: ignore[arg-type]


def test_learned_fusion_scores_by_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # a model that trusts the vector leg across languages and BM25 within one: score =
    # 2 * cross_x_cos + 1 * bm25_share - 1 (means 0, scales 1)
    weights = [0.0] * len(fusion.FEATURES)
    weights[fusion.FEATURES.index("cross_x_cos")] = 2.0
    weights[fusion.FEATURES.index("bm25_share")] = 1.0
    toy = fusion.FusionModel(
        features=fusion.FEATURES,
        mean=(0.0,) * len(fusion.FEATURES),
        scale=(1.0,) * len(fusion.FEATURES),
        weights=tuple(weights),
        bias=-1.0,
        depth=30,
    )
    monkeypatch.setattr(fusion, "model", lambda: toy)
    english = Hit(1, 0.8, "Joining paths", 0, "paths", "", 1, 1)
    chinese = Hit(2, 4.0, "设置系统时区", 0, "tz", "", 1, 1)
    fused = fusion.fuse(
        vector=[english, replace(chinese, score=0.5)],
        keyword=[chinese],
        top_k=2,
        method="learned",
        query="拼接路径",
        keyword_bound=8.0,
    )
    # English: 2 * 0.8 - 1 = 0.6; Chinese: 0.5 - 1 = -0.5; scores are the logistic of those
    assert ids(fused) == [1, 2]
    assert fused[0].score == round(1 / (1 + math.exp(-0.6)), 6)
    assert fused[1].score == round(1 / (1 + math.exp(0.5)), 6)
    explained = explain_ranking(
        mode="hybrid",
        query="拼接路径",
        legs=[Leg([english, replace(chinese, score=0.5)], 1.0), Leg([chinese], 8.0)],
        hits=fused,
    )
    assert explained.method == "learned"
    assert explained.query_language == "zh"
    english_why = explained.hits[1]
    assert english_why["vector"] == {"rank": 1, "score": 0.8}
    assert english_why["keyword"] is None
    # the largest contribution first: cross_x_cos = 2 * (1 * 0.8)
    assert english_why["fused"]["contributions"][0] == {
        "feature": "cross_x_cos",
        "value": 0.8,
        "contribution": 1.6,
    }
    assert english_why["fused"]["logit"] == pytest.approx(0.6)
    assert english_why["fused"]["score"] == fused[0].score
    assert explained.hits[2]["keyword"] == {"rank": 1, "score": 4.0, "share_of_bound": 0.5}


def test_learned_fusion_without_a_keyword_bound_is_convex() -> None:
    # a p1 version's keyword leg has no bound: the learned method falls back to convex
    vector = [hit(1, 0.9), hit(2, 0.8)]
    keyword = [hit(2, 3.0)]
    assert ids(fuse(vector=vector, keyword=keyword, top_k=2, method="learned")) == ids(
        fuse(vector=vector, keyword=keyword, top_k=2, method="convex")
    )


def test_the_shipped_model_reads_the_features_search_computes() -> None:
    shipped = fusion.model()
    assert shipped.features == fusion.FEATURES
    assert len(shipped.weights) == len(shipped.mean) == len(shipped.scale) == len(fusion.FEATURES)
    assert 10 <= shipped.depth <= 100


def test_learned_fusion_orders_a_documents_passages_by_their_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a model that follows the vector leg alone ranks chunk 1 over chunk 2 of one document, and
    # the other document's chunk 3 between them; the keyword leg is sure of chunk 2
    weights = [0.0] * len(fusion.FEATURES)
    weights[fusion.FEATURES.index("cos")] = 10.0
    toy = fusion.FusionModel(
        features=fusion.FEATURES,
        mean=(0.0,) * len(fusion.FEATURES),
        scale=(1.0,) * len(fusion.FEATURES),
        weights=tuple(weights),
        bias=0.0,
        depth=30,
    )
    monkeypatch.setattr(fusion, "model", lambda: toy)
    one, other, two = (
        replace(hit(1, 0.9), document_key="policy"),
        replace(hit(3, 0.8), document_key="other"),
        replace(hit(2, 0.7), document_key="policy"),
    )
    fused = fuse(
        vector=[one, other, two],
        keyword=[replace(two, score=5.0)],
        top_k=3,
        method="learned",
        query="vacation days",
        keyword_bound=10.0,
    )
    # the document keeps the places the model gave it (first and third); within them its
    # passage that matches the words comes first; scores stay those of the places
    assert ids(fused) == [2, 3, 1]
    assert [h.document_key for h in fused] == ["policy", "other", "policy"]
    assert fused[0].score >= fused[1].score >= fused[2].score
