"""Reading and checking question files (evaluation.question_files), no database: JSONL, CSV and
JSON arrays, bench/quality's own files as they are, and every problem a person can make, each
said once, where it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.question_files import (
    MAX_FILE_BYTES,
    FileUnreadable,
    auto_id,
    check,
    read_file,
    read_rows,
)

ROOT = Path(__file__).resolve().parents[2]
KNOWN = {"refunds", "travel", "leave", "en/python/library/os.html"}


def known(keys: set[str]) -> set[str]:
    return keys & KNOWN


def problems(data: bytes, name: str = "q.jsonl") -> list[str]:
    return [str(p) for p in check(read_file(data, name), known=known).problems]


def test_a_csv_with_keys_separated_by_bars() -> None:
    data = (
        "id,question,expected_documents,expected_passage,language,tag\n"
        'a,"refund days, with a receipt",refunds | travel,thirty days,,money\n'
        "b,返还 多少 天,refunds,,,\n"
    ).encode()

    checked = check(read_file(data, "Q.CSV"), known=known)

    assert checked.ok, checked.problems
    first, second = checked.questions
    assert first.text == "refund days, with a receipt"
    assert first.expected_keys == ("refunds", "travel")
    assert (first.expected_passage, first.language, first.tag) == ("thirty days", "en", "money")
    assert second.language == "zh"  # detected


def test_bench_qualitys_own_files_read_as_they_are() -> None:
    """`lang`, `answers` and `kind` are the aliases B8's files use."""
    line = (ROOT / "bench/quality/questions.jsonl").read_text().splitlines()[1]
    row = json.loads(line)

    (data,) = check(read_rows([row]), known=known).questions

    assert data.external_id == row["id"] and data.text == row["question"]
    assert data.expected_keys == tuple(row["answers"]) and data.language == row["lang"]


def test_a_json_array_and_ids_made_from_the_words() -> None:
    rows = [{"question": "Refund  days", "expected_documents": "refunds"}]
    (data,) = check(read_file(json.dumps(rows).encode(), "q.json"), known=known).questions

    assert data.external_id == auto_id("refund days")  # case and spacing do not count
    assert data.text == "Refund days"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([{"question": "a", "expected_documents": []}], "line 1: no expected document"),
        ([{"question": "a"}], "line 1: no expected document"),
        ([{"question": "a", "expected_documents": {"k": 1}}], "must be a list of document keys"),
        ([{"question": "a", "expected_documents": ["refunds"], "language": "fr"}], "'fr' is not"),
        ([{"question": " ", "expected_documents": ["refunds"]}], "line 1: empty question"),
        ([{"question": 5.5, "expected_documents": ["refunds"], "tag": ["x"]}], "tag must be text"),
        (
            [{"question": "a\u0000", "expected_documents": ["refunds"]}],
            "the question holds a NUL character",
        ),
        (
            [{"question": "a", "expected_documents": ["k" * 256]}],
            "a document key is longer than 255 characters",
        ),
        (
            [{"question": "x" * 4001, "expected_documents": ["refunds"]}],
            "the question is longer than 4000 characters",
        ),
        ([["a list"]], "line 1: not a question: give an object with fields"),
        (
            [
                {"id": "a", "question": "One", "expected_documents": ["refunds"]},
                {"id": "b", "question": "one", "expected_documents": ["travel"]},
            ],
            "line 2: the same question as line 1",
        ),
    ],
)
def test_each_problem_is_said_where_it_is(rows: list[object], expected: str) -> None:
    data = "\n".join(json.dumps(r) for r in rows).encode()

    said = problems(data)

    assert any(expected in p for p in said), said


def test_surrogates_and_broken_lines_and_files() -> None:
    assert problems(b'{"question": "a\\ud800", "expected_documents": ["refunds"]}') == [
        "line 1: the question holds an unpaired surrogate (\\ud800-\\udfff), which is not text"
    ]
    assert problems(b"{oops\n")[0].startswith("line 1: not valid JSON")
    with pytest.raises(FileUnreadable, match="not UTF-8 text"):
        read_file(b"\xff\xfeq", "q.jsonl")
    with pytest.raises(FileUnreadable, match="first line must name its columns"):
        read_file(b"a,b\n1,2\n", "q.csv")
    with pytest.raises(FileUnreadable, match=r"Give a \.jsonl file"):
        read_file(b"just words", "q.txt")
    with pytest.raises(FileUnreadable, match="larger than 2 MB"):
        read_file(b" " * (MAX_FILE_BYTES + 1), "q.jsonl")
    with pytest.raises(FileUnreadable, match="NUL"):
        read_file(b'{"a": 1}\x00', "q.jsonl")


def test_unknown_keys_and_a_file_too_long() -> None:
    said = problems(b'{"question": "q", "expected_documents": ["refunds", "gone", "hidden"]}')
    assert said == [
        "line 1: unknown document keys 'gone', 'hidden' (no document of this knowledge base "
        "you may read has them)"
    ]
    many = [{"question": f"q{n}", "expected_documents": ["refunds"]} for n in range(4)]
    checked = check(read_rows(many), known=known, limit=3)
    assert [str(p) for p in checked.problems] == ["4 questions: a question set holds at most 3."]
    assert not checked.rows


def test_the_summary_counts_rows_with_problems_once() -> None:
    data = b'{"question": "", "expected_documents": []}\n{"question": "q", "answers": ["leave"]}\n'
    checked = check(read_file(data, "q.jsonl"), known=known)

    assert len(checked.problems) == 2 and checked.invalid == 1
    assert checked.summary() == "1 of 2 rows has problems; 1 is valid."
