"""The keyword leg's candidate pruning: an upper bound that never drops a chunk that could win."""

from __future__ import annotations

from retrieval.bm25 import QueryWeights, most_promising


def test_a_chunk_missing_from_a_cut_list_is_bounded_by_that_lists_last_impact() -> None:
    # term 1 ("rare", df 2) was read whole; term 2 ("common", df 1000) was cut after 2 postings
    weights = QueryWeights(terms=["rare", "common"], idfs=[3.0, 0.5], dfs=[2, 1000], avg_length=1)
    rows = [(10, 1, 1.0), (11, 1, 0.2), (20, 2, 2.0), (21, 2, 1.5)]

    # 10: 3 * 1.0 read + 0.5 * 1.5 unread bound = 3.75; 11: 0.6 + 0.75 = 1.35;
    # 20: 0.5 * 2.0 = 1.0 (rare was read whole: nothing unread); 21: 0.75
    assert most_promising(rows, weights, depth=2, keep=4) == [10, 11, 20, 21]
    assert most_promising(rows, weights, depth=2, keep=2) == [10, 11]


def test_nothing_is_unread_when_every_list_was_read_whole() -> None:
    weights = QueryWeights(terms=["a", "b"], idfs=[1.0, 1.0], dfs=[2, 1], avg_length=1)
    rows = [(1, 1, 0.5), (2, 1, 0.4), (2, 2, 0.3)]
    # 1: 0.5, 2: 0.7, no unread bound since depth 200 covers both lists
    assert most_promising(rows, weights, depth=200, keep=5) == [2, 1]


def test_ties_break_by_what_was_read_then_by_chunk_id() -> None:
    weights = QueryWeights(terms=["a", "b"], idfs=[1.0, 1.0], dfs=[5, 5], avg_length=1)
    rows = [(7, 1, 1.0), (3, 2, 1.0), (9, 1, 0.5), (9, 2, 0.5)]
    # 7 and 3: 1.0 read + 0.5 (the other list's last impact) = 1.5, a tie broken by chunk id;
    # 9 is in both lists: 1.0 read and nothing unread
    assert most_promising(rows, weights, depth=2, keep=3) == [3, 7, 9]
