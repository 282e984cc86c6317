"""B8's fourth list (bench/quality/fourth_list.py): the title-and-headings field's BM25 against
values computed by hand, and the fourth list's candidates and columns, on small hand-made data."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.quality import fourth_list, fusion_fit
from retrieval.search.fusion import FEATURES
from textkit import analysis


def test_the_field_is_the_heading_path_after_a_title_it_does_not_start_with() -> None:
    assert fourth_list.field_text("Git", "Git › Branches") == "Git › Branches"
    assert fourth_list.field_text("git-branch(1)", "NAME") == "git-branch(1)\nNAME"
    assert fourth_list.field_text("Guide", "") == "Guide"
    assert fourth_list.field_text("", "Install") == "Install"


def test_field_scores_are_bm25_over_the_field_alone() -> None:
    rows = [
        (1, "a", "Backups", "Backups › Restoring a snapshot", "body one"),
        (2, "a", "Backups", "Backups › Restoring a snapshot", "body two"),
        (3, "a", "Backups", "Backups › Scheduling", "snapshot snapshot snapshot"),
        (4, "b", "Networking", "Firewall rules", "restoring a snapshot"),
    ]
    field = fourth_list.Field(rows)
    scores, bound = field.scores("restoring snapshot")
    # the fields' lengths as the chunks' analysis counts them; N = 4
    lengths = [analysis.term_frequencies(fourth_list.field_text(r[2], r[3]))[1] for r in rows]
    avg = sum(lengths) / 4
    k1, b = analysis.K1, analysis.B

    def idf(df: int) -> float:
        return math.log(1 + (4 - df + 0.5) / (df + 0.5))

    def part(tf: int, length: int) -> float:
        return tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))

    # both terms are in the section's two fields only: the chunks' texts do not count
    assert scores[0] == scores[1] == pytest.approx(2 * idf(2) * part(1, lengths[0]))
    assert scores[2] == scores[3] == 0.0
    assert bound == pytest.approx((k1 + 1) * 2 * idf(2))

    leg = field.leg("restoring snapshot", named={2, 4})
    # the section's two chunks share the field and tie: by chunk id; chunk 4 has no score
    assert [r[0] for r in leg["rows"]] == [1, 2]
    assert leg["scores"] == {"2": round(float(scores[1]), 6)}
    # a short field beats a long one on the same word (length normalisation)
    assert [r[0] for r in field.leg("backups", named=set())["rows"]] == [3, 1, 2]


def _question(**lists: Any) -> dict[str, Any]:
    def hit(cid: int, score: float) -> dict[str, Any]:
        return {"chunk": cid, "doc": f"d{cid}", "cos": score, "bm25": score, "cjk": 0.0}

    return {
        "corpus": "test",
        "set": "natural",
        "id": "q1",
        "chunks": 100,
        "query": {
            "cjk": 0.0,
            "present": [["backup", 2.0, 10]],
            "terms": ["backup"],
            "avg_length": 50,
        },
        "vector": [hit(1, 0.6), hit(2, 0.5)],
        "keyword": [hit(2, 3.0)],
        "english": [],
        "en_cos": {},
        "fourth": lists,
        "fourth_en_cos": {},
        "fourth_cjk": {"7": 0.0},
    }


def test_a_fourth_list_adds_its_candidates_and_a_re_score_does_not() -> None:
    q = _question(headings={"rows": [[7, "d7", 4.0], [1, "d1", 2.0]], "bound": 8.0, "scores": {}})
    q["fourth"]["headings"]["scores"] = {"7": 4.0, "1": 2.0}
    ids, x, docs = fourth_list._fourth_rows(q, 30, name="headings", english=False, add=True)
    assert sorted(ids) == [1, 2, 7] and docs[7] == "d7"
    columns = dict(zip(ids, x[:, len(FEATURES) :].tolist(), strict=True))
    # in_fourth, reciprocal rank, share of the bound, of the list's best, the best's share
    assert columns[7][:5] == [1.0, 0.5, 0.5, 1.0, 0.5]
    assert columns[1][:5] == [1.0, pytest.approx(1 / 3), 0.25, 0.5, 0.5]
    assert columns[2][:5] == [0.0, 0.0, 0.0, 0.0, 0.5]

    ids, x, _ = fourth_list._fourth_rows(q, 30, name="headings", english=False, add=False)
    assert sorted(ids) == [1, 2]  # chunk 7 is no candidate of the lists search reads
    columns = dict(zip(ids, x[:, len(FEATURES) :].tolist(), strict=True))
    assert columns[1][:4] == [1.0, 0.0, 0.25, 1.0]


def test_the_recipes_keep_the_fourth_lists_evidence_monotone() -> None:
    recipe = fourth_list.with_fourth("+ headings", "headings")
    assert recipe.chinese is not None and recipe.chinese.extra == "headings"
    names = fusion_fit.EXTRAS[recipe.extra or ""].names
    signs = dict(zip(names, (recipe.signs() or [])[len(FEATURES) :], strict=True))
    assert signs["in_fourth"] == signs["fourth_share"] == signs["en_cos"] == 1
    assert signs["fourth_best_share"] == 0
