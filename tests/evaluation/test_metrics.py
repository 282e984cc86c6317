"""evaluation.metrics against values computed by hand on a tiny set: document-level ranks (a
document's first chunk counts), ties between a document's chunks, missing answers, the k
boundaries, the 10-hit depth, nDCG with several expected documents, and the percentiles."""

from __future__ import annotations

import math

import pytest

from evaluation.metrics import (
    Answer,
    figures,
    first_rank,
    hit_at,
    ndcg_at,
    percentile,
    recall_at,
    reciprocal_rank,
    summarize,
)

# (expected documents, the hits' document keys best first)
FIRST = (["a"], ["a", "b", "c"])  # rank 1
TWO_EXPECTED = (["b", "d"], ["x", "x", "b", "y", "d"])  # documents x, b, y, d: b 2nd, d 4th
MISSED = (["z"], ["a", "b"])
SIXTH = (["k"], ["a", "b", "c", "d", "e", "k"])  # just past hit@5
ELEVENTH_HIT = (["m"], ["a"] * 10 + ["m"])  # the 2nd document, but the 11th hit: outside top 10
TIED_CHUNKS = (["b"], ["a", "a", "b", "b"])  # a's two chunks count once: b is 2nd

LOG2_3 = math.log2(3)
LOG2_5 = math.log2(5)


@pytest.mark.parametrize(
    ("row", "rank"),
    [
        (FIRST, 1),
        (TWO_EXPECTED, 2),
        (MISSED, None),
        (SIXTH, 6),
        (ELEVENTH_HIT, None),
        (TIED_CHUNKS, 2),
    ],
)
def test_the_rank_is_the_first_expected_documents_among_distinct_documents(
    row: tuple[list[str], list[str]], rank: int | None
) -> None:
    expected, ranked = row
    assert first_rank(ranked, expected) == rank


def test_hit_at_k_boundaries() -> None:
    expected, ranked = SIXTH
    assert not hit_at(ranked, expected, 5)
    assert hit_at(ranked, expected, 6)
    assert hit_at(ranked, expected, 10)
    assert not hit_at(ELEVENTH_HIT[1], ELEVENTH_HIT[0], 10)
    assert hit_at(ELEVENTH_HIT[1], ELEVENTH_HIT[0], 10, depth=11)


def test_ndcg_with_two_expected_documents_by_hand() -> None:
    expected, ranked = TWO_EXPECTED
    # DCG: b at 2 -> 1/log2(3), d at 4 -> 1/log2(5); ideal: ranks 1 and 2 -> 1 + 1/log2(3)
    assert ndcg_at(ranked, expected) == pytest.approx((1 / LOG2_3 + 1 / LOG2_5) / (1 + 1 / LOG2_3))
    assert ndcg_at(ranked, expected) == pytest.approx(0.650921, abs=1e-6)
    # only one expected document fits in k=1: the ideal is 1, and nothing is found at rank 1
    assert ndcg_at(ranked, expected, 1) == 0.0
    assert ndcg_at(FIRST[1], FIRST[0]) == 1.0
    assert ndcg_at(SIXTH[1], SIXTH[0]) == pytest.approx(1 / math.log2(7))
    assert ndcg_at(MISSED[1], MISSED[0]) == 0.0
    assert ndcg_at(["a"], []) == 0.0  # no expected document: nothing to find


def test_recall_is_the_share_of_expected_documents_in_the_top_k() -> None:
    expected, ranked = TWO_EXPECTED
    assert recall_at(ranked, expected, 1) == 0.0
    assert recall_at(ranked, expected, 2) == 0.5  # b
    assert recall_at(ranked, expected, 3) == 0.5
    assert recall_at(ranked, expected, 4) == 1.0  # b and d
    assert recall_at(SIXTH[1], SIXTH[0], 5) == 0.0
    assert recall_at(SIXTH[1], SIXTH[0], 10) == 1.0
    assert recall_at(ELEVENTH_HIT[1], ELEVENTH_HIT[0], 10) == 0.0


def test_reciprocal_rank() -> None:
    assert reciprocal_rank(TWO_EXPECTED[1], TWO_EXPECTED[0]) == 0.5
    assert reciprocal_rank(SIXTH[1], SIXTH[0]) == pytest.approx(1 / 6)
    assert reciprocal_rank(MISSED[1], MISSED[0]) == 0.0


def test_figures_of_the_tiny_set_by_hand() -> None:
    rows = [FIRST, TWO_EXPECTED, MISSED, SIXTH, ELEVENTH_HIT, TIED_CHUNKS]

    out = figures(rows)

    assert out["n"] == 6
    assert out["hit@1"] == round(1 / 6, 4)  # FIRST
    assert out["hit@5"] == round(3 / 6, 4)  # FIRST, TWO_EXPECTED, TIED_CHUNKS
    assert out["hit@10"] == round(4 / 6, 4)  # and SIXTH
    assert out["mrr@10"] == round((1 + 1 / 2 + 0 + 1 / 6 + 0 + 1 / 2) / 6, 4)
    ndcg = [
        1.0,
        (1 / LOG2_3 + 1 / LOG2_5) / (1 + 1 / LOG2_3),
        0.0,
        1 / math.log2(7),
        0.0,
        1 / LOG2_3,
    ]
    assert out["ndcg@10"] == round(sum(ndcg) / 6, 4)
    assert out["recall@5"] == round((1 + 1 + 0 + 0 + 0 + 1) / 6, 4)
    assert out["recall@10"] == round((1 + 1 + 0 + 1 + 0 + 1) / 6, 4)
    assert figures([]) == {"n": 0}
    assert figures(rows, names=("hit@1",)) == {"n": 6, "hit@1": round(1 / 6, 4)}


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0  # between the 2nd and the 3rd
    # 95th of 1..20: at (20 - 1) * 0.95 = 18.05 -> 19 + 0.05 * (20 - 19)
    assert percentile([float(n) for n in range(20, 0, -1)], 95) == pytest.approx(19.05)
    assert percentile([5.0, 5.0, 5.0, 9.0], 50) == 5.0  # ties


def test_summarize_groups_by_language_and_tag_with_latency_and_passages() -> None:
    answers = [
        Answer(*FIRST, language="en", tag="faq", latency_ms=10.0, passage_found=True),
        Answer(*TWO_EXPECTED, language="en", latency_ms=20.0, passage_found=False),
        Answer(*MISSED, language="zh", tag="faq", latency_ms=30.0),
        Answer(*SIXTH, language="zh", latency_ms=40.0),
    ]

    out = summarize(answers)

    assert out["all"]["n"] == 4 and out["all"]["hit@10"] == 0.75
    assert out["all"]["n_passage"] == 2 and out["all"]["passage@10"] == 0.5
    assert out["language"]["en"] == {
        **figures([FIRST, TWO_EXPECTED]),
        "n_passage": 2,
        "passage@10": 0.5,
    }
    assert out["language"]["zh"]["mrr@10"] == round((0 + 1 / 6) / 2, 4)
    assert "passage@10" not in out["language"]["zh"]
    assert list(out["tag"]) == ["faq"]
    assert out["tag"]["faq"]["n"] == 2 and out["tag"]["faq"]["hit@1"] == 0.5
    assert out["latency_ms"] == {"p50": 25.0, "p95": 38.5}
