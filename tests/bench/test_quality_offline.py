"""B8's offline fusion evaluator (bench/quality/offline.py) on tiny hand-computed dumps."""

from __future__ import annotations

from typing import Any

import pytest

from bench.quality import offline
from bench.quality.contenders import rrf

SETTINGS = {"HYBRID_FUSION": "convex", "HYBRID_VECTOR_WEIGHT": 0.15}


def _entries(*hits: tuple[int, str, float]) -> list[dict[str, Any]]:
    return [
        {"rank": r, "chunk": c, "doc": d, "score": s} for r, (c, d, s) in enumerate(hits, start=1)
    ]


def _question(qid: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": qid,
        "set": "natural",
        "kind": "zh-to-en",
        "split": "heldout",
        "lang": "zh",
        "question": qid,
        "answers": ["A"],
        "query": {},
        "vector": [],
        "keyword": [],
        "canon": {"hybrid": [], "vector": [], "keyword": []},
    }
    return {**base, **fields}


def test_canon_fusion_is_the_convex_method_hand_computed() -> None:
    # w = 0.15; vector best 0.9, keyword best 10.
    # c1: 0.15 * 0.9/0.9 = 0.15; c2: 0.15 * 0.8/0.9 + 0.85 * 5/10 = 0.5583; c3: 0.85 * 1 = 0.85
    q = _question(
        "q",
        vector=_entries((1, "A", 0.9), (2, "B", 0.8)),
        keyword=_entries((3, "C", 10.0), (2, "B", 5.0)),
    )
    assert list(offline.canon_fusion(SETTINGS)(q)) == [3, 2, 1]
    assert offline.convex(0.15)(q) == [3, 2, 1]
    # weight 0.9: c1 0.9; c2 0.8 + 0.05 = 0.85; c3 0.1
    assert offline.convex(0.9)(q) == [1, 2, 3]


def test_canon_fusion_reads_the_keyword_leg_the_hybrid_read_at_its_depth() -> None:
    # The hybrid's keyword leg (keyword_hybrid) ranked B above C; the deeper read did not.
    # c2: 0.15 * 0.8/0.9 + 0.85 * 1 = 0.9833; c3: 0.85 * 0.5 = 0.425; c1: 0.15
    q = _question(
        "q",
        vector=_entries((1, "A", 0.9), (2, "B", 0.8)),
        keyword=_entries((3, "C", 10.0), (2, "B", 5.0)),
        keyword_hybrid=_entries((2, "B", 10.0), (3, "C", 5.0)),
    )
    assert list(offline.canon_fusion(SETTINGS)(q)) == [2, 3, 1]
    # the hybrid reads depth(10) = 30 rows of each leg: a 31st vector row is not read
    deep = [(100 + i, "X", 0.5) for i in range(30)]
    q["vector"] = _entries((1, "A", 0.9), *deep, (5, "E", 0.95))
    assert 5 not in offline.canon_fusion({**SETTINGS, "hybrid_depth": 30})(q)


def test_rrf_hand_computed() -> None:
    # b: 1/61 + 1/62 (both legs); a: 1/61 (vector 1st); c: 1/62 (keyword 2nd)
    q = _question(
        "q",
        vector=_entries((1, "A", 0.9), (2, "B", 0.5)),
        keyword=_entries((2, "B", 3.0), (3, "C", 1.0)),
    )
    assert offline.rrf(60)(q) == [2, 1, 3]
    assert rrf([[1, 2], [2, 3]], k=60) == [2, 1, 3]
    # depth 1 reads only each leg's first: a and b tie at 1/61, a's (and b's) best rank 1 -> id
    assert offline.rrf(60, 1)(q) == [1, 2]


def test_metrics_per_split_and_kind_hand_computed() -> None:
    questions = [
        # vector leg: A first -> rr 1
        _question("q1", vector=_entries((1, "A", 0.9), (2, "B", 0.8))),
        # vector leg: B, B, A -> distinct documents B, A: rr 1/2, not a hit@1
        _question("q2", vector=_entries((2, "B", 0.9), (3, "B", 0.8), (1, "A", 0.7))),
        # no answer in the list: rr 0
        _question("q3", split="tuning", vector=_entries((2, "B", 0.9))),
        # the keyword-style set, per language
        _question(
            "k1", set="keyword", kind=None, split=None, lang="en", vector=_entries((1, "A", 1))
        ),
    ]
    out = offline.run_fusion(offline.leg("vector"), questions)
    held = out["natural"]["heldout"]
    assert held["zh-to-en"] == {"n": 2, "hit@1": 0.5, "hit@5": 1.0, "hit@10": 1.0, "mrr@10": 0.75}
    assert held["zh"] == held["zh-to-en"] and held["all"] == held["zh-to-en"]
    assert held["en"] == {"n": 0} and held["en-fact"] == {"n": 0}
    assert out["natural"]["tuning"]["zh-to-en"]["mrr@10"] == 0.0
    assert out["keyword-style"]["en"]["mrr@10"] == 1.0
    assert out["keyword-style"]["zh"] == {"n": 0}


def test_a_fusion_never_sees_the_answers() -> None:
    seen: list[dict[str, Any]] = []

    def spy(q: dict[str, Any]) -> list[int]:
        seen.append(q)
        return []

    offline.run_fusion(spy, [_question("q")])
    assert "answers" not in seen[0] and "canon" not in seen[0]


def test_check_compares_with_the_runs_own_hybrid() -> None:
    vector = _entries((1, "A", 0.9), (2, "B", 0.8))
    keyword = _entries((3, "C", 10.0), (2, "B", 5.0))
    same = [[3, "C", 0.85], [2, "B", 0.558333], [1, "A", 0.15]]
    data: dict[str, Any] = {
        "about": {"settings": SETTINGS},
        "questions": [
            _question("q", vector=vector, keyword=keyword, canon={"hybrid": same}),
        ],
    }
    ok, lines = offline.check(data)
    assert ok and "differ: 0 of 1" in lines[0]
    data["questions"][0]["canon"] = {"hybrid": [[1, "A", 1.0], [3, "C", 0.5]]}
    ok, lines = offline.check(data)
    assert not ok and "differ: 1 of 1" in lines[0]


def test_resolve_names_and_files(tmp_path: Any) -> None:
    path = tmp_path / "mine.py"
    path.write_text("def fuse(q):\n    return [e['chunk'] for e in q['keyword']]\n")
    q = _question("q", keyword=_entries((7, "A", 1.0)))
    assert list(offline.resolve(f"{path}:fuse", SETTINGS)(q)) == [7]
    assert list(offline.resolve("keyword", SETTINGS)(q)) == [7]
    with pytest.raises(SystemExit):
        offline.resolve("nonsense", SETTINGS)
