"""B8's fixed split of the natural questions (bench/quality/splits.py) into tuning and held-out."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from bench.quality import splits


def _questions(counts: dict[str, int]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for kind, n in counts.items():
        out.extend({"id": f"{kind}-{i:03d}", "kind": kind} for i in range(n))
    return out


def test_the_committed_split_is_what_the_function_gives() -> None:
    """splits.json never changes silently: regenerating it from natural.jsonl gives the file."""
    assert splits.render(splits.read_questions()) == splits.SPLITS.read_text(encoding="utf-8")


def test_every_natural_question_has_a_split_and_each_kind_is_halved() -> None:
    questions = splits.read_questions()
    assigned = splits.load()
    assert set(assigned) == {str(q["id"]) for q in questions}
    assert set(assigned.values()) == {splits.TUNING, splits.HELDOUT}
    per_kind = Counter((str(q["kind"]), assigned[str(q["id"])]) for q in questions)
    for kind in {str(q["kind"]) for q in questions}:
        tuning, heldout = per_kind[(kind, splits.TUNING)], per_kind[(kind, splits.HELDOUT)]
        assert heldout - tuning in (0, 1), kind
    data = json.loads(splits.SPLITS.read_text(encoding="utf-8"))
    assert data["seed"] == splits.SEED


def test_stratified_half_and_half_by_kind() -> None:
    assigned = splits.assign(_questions({"a": 7, "b": 4, "c": 1}))
    counts = Counter((qid.split("-")[0], split) for qid, split in assigned.items())
    assert counts[("a", "tuning")] == 3 and counts[("a", "heldout")] == 4
    assert counts[("b", "tuning")] == 2 and counts[("b", "heldout")] == 2
    assert counts[("c", "tuning")] == 0 and counts[("c", "heldout")] == 1


def test_order_is_sha256_of_seed_and_id_within_a_kind() -> None:
    questions = _questions({"k": 6})
    by_hash = sorted(
        (str(q["id"]) for q in questions),
        key=lambda qid: hashlib.sha256(f"s1:{qid}".encode()).hexdigest(),
    )
    assigned = splits.assign(questions, seed="s1")
    assert [assigned[qid] for qid in by_hash] == ["tuning"] * 3 + ["heldout"] * 3


def test_deterministic_whatever_the_input_order_and_seed_dependent() -> None:
    questions = _questions({"a": 20, "b": 11})
    first = splits.assign(questions)
    assert splits.assign(list(reversed(questions))) == first
    assert splits.assign(questions) == first
    assert splits.assign(questions, seed="another seed") != first


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        splits.assign([{"id": "x", "kind": "a"}, {"id": "x", "kind": "b"}])
