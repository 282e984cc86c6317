"""B8's metrics (bench/quality/metrics.py): hit@k and MRR@10 over distinct documents of the hits."""

from __future__ import annotations

import pytest

from bench.quality.contenders import Tokenizer
from bench.quality.metrics import distinct_documents, hit_at, reciprocal_rank, summarize


def test_distinct_documents_keeps_each_document_at_its_first_rank() -> None:
    assert distinct_documents(["a", "a", "b", "a", "c", "b"]) == ["a", "b", "c"]
    assert distinct_documents([]) == []


def test_hit_at_counts_distinct_documents_not_hits() -> None:
    # Chunks of a fill ranks 1-4; the answer b is the 2nd distinct document (5th hit).
    ranked = ["a", "a", "a", "a", "b", "c"]
    assert not hit_at(ranked, ["b"], 1)
    assert hit_at(ranked, ["b"], 2)
    assert hit_at(ranked, ["b"], 5)
    assert not hit_at(ranked, ["z"], 10)
    assert hit_at(ranked, ["z", "a"], 1)  # any answer document counts


def test_hit_at_only_reads_the_first_ten_hits() -> None:
    ranked = ["a"] * 10 + ["b"]  # b is the 2nd distinct document but the 11th hit
    assert not hit_at(ranked, ["b"], 10)
    assert hit_at(ranked, ["b"], 10, depth=11)


def test_reciprocal_rank_uses_the_document_rank_after_dedup() -> None:
    assert reciprocal_rank(["a", "b", "c"], ["a"]) == 1.0
    assert reciprocal_rank(["a", "a", "b", "b", "c"], ["c"]) == pytest.approx(1 / 3)
    # The better of two answer documents decides.
    assert reciprocal_rank(["x", "c", "y", "a"], ["a", "c"]) == 0.5
    assert reciprocal_rank(["x", "y"], ["a"]) == 0.0
    assert reciprocal_rank([], ["a"]) == 0.0
    # An answer first seen at hit 11 is outside MRR@10.
    assert reciprocal_rank(["x"] * 10 + ["a"], ["a"]) == 0.0


def test_summarize_per_language_and_overall() -> None:
    rows = [
        ("en", ["a"], ["a", "b"]),  # rr 1
        ("en", ["b"], ["a", "a", "c", "b"]),  # distinct a, c, b: rr 1/3, hit@5 yes, hit@1 no
        ("zh", ["z"], ["y", "z"]),  # rr 1/2
        ("zh", ["q"], ["y", "z"]),  # miss
    ]
    out = summarize(rows)
    assert out["en"] == {
        "n": 2,
        "hit@1": 0.5,
        "hit@5": 1.0,
        "hit@10": 1.0,
        "mrr@10": round((1 + 1 / 3) / 2, 4),
    }
    assert out["zh"] == {"n": 2, "hit@1": 0.0, "hit@5": 0.5, "hit@10": 0.5, "mrr@10": 0.25}
    assert out["all"]["n"] == 4
    assert out["all"]["hit@1"] == 0.25
    assert out["all"]["mrr@10"] == round((1 + 1 / 3 + 0.5) / 4, 4)


def test_summarize_reports_a_language_without_questions_as_empty() -> None:
    assert summarize([("en", ["a"], ["a"])])["zh"] == {"n": 0}


def test_bm25s_tokenizer_stems_english_and_splits_chinese_into_bigrams() -> None:
    pytest.importorskip("bm25s")
    tokenize = Tokenizer("bigrams")
    # "the" and "are" are English stop words; the rest is stemmed.
    assert tokenize("The packages are upgrading") == ["packag", "upgrad"]
    assert tokenize("软件包 管理") == ["软件", "件包", "管理"]
    assert tokenize("用 apt 更新") == ["用", "apt", "更新"]
