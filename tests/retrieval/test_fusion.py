"""Hybrid fusion: deterministic, keeps a confident leg's first hit, and rewards agreement."""

from __future__ import annotations

import pytest

from retrieval.search.fusion import depth, fuse
from retrieval.search.hits import Hit


def hit(chunk_id: int, score: float) -> Hit:
    return Hit(
        chunk_id=chunk_id,
        score=score,
        text="",
        ordinal=0,
        document_key=f"d{chunk_id}",
        document_title="",
        revision=1,
        build_id=1,
    )


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
    assert depth(5) == 30 and depth(40) == 80 and depth(100) == 100
