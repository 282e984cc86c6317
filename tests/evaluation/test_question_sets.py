"""Writing question sets (evaluation.services.question_sets): the version rises with every change
of the questions and only then, imports are idempotent, nothing is written while a check finds
problems, a writer never removes what they cannot see, and Test search's hit joins or makes a
question."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from evaluation.models import Question, QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.question_sets import (
    Imported,
    QuestionSetInvalid,
    QuestionsRefused,
    question_add_from_hit,
    question_delete,
    question_save,
    question_set_create,
    question_set_update,
    questions_check,
    questions_import,
)
from kb.models import KnowledgeBase
from tests.evaluation.conftest import reader_of

pytestmark = pytest.mark.django_db

ROWS: list[dict[str, object]] = [
    {"id": "a", "question": "refund days", "expected_documents": ["refunds"]},
    {"id": "b", "question": "train class", "expected_documents": ["travel"]},
]


def imported(
    question_set: QuestionSet,
    rows: Sequence[Mapping[str, object]],
    *groups: str,
    replace: bool = False,
    valid_only: bool = False,
) -> Imported:
    reader = reader_of(question_set.kb, *groups)
    checked = questions_check(question_set=question_set, raw=read_rows(rows), reader=reader)
    return questions_import(
        question_set=question_set,
        checked=checked,
        reader=reader,
        replace=replace,
        valid_only=valid_only,
    )


def version(question_set: QuestionSet) -> int:
    question_set.refresh_from_db()
    return question_set.version


def test_the_version_rises_with_each_change_of_questions_only(corpus: KnowledgeBase) -> None:
    question_set = question_set_create(kb=corpus, name="Set")
    assert version(question_set) == 1

    first = imported(question_set, ROWS)
    again = imported(question_set, ROWS)
    question_set_update(question_set=question_set, name="Renamed", description="About refunds")
    changed = imported(question_set, [{**ROWS[0], "tag": "money"}])
    replaced = imported(question_set, [ROWS[1]], replace=True)

    assert (first.added, first.version) == (2, 2)
    assert (again.unchanged, again.version) == (2, 2)  # the same rows: nothing changed
    assert (changed.updated, changed.version) == (1, 3)  # renaming did not count
    assert (replaced.removed, replaced.version) == (1, 4)
    question_delete(question=Question.objects.get(question_set=question_set))
    assert version(question_set) == 5 and not question_set.questions.exists()


def test_nothing_is_written_while_the_check_finds_problems(corpus: KnowledgeBase) -> None:
    question_set = question_set_create(kb=corpus, name="Set")

    with pytest.raises(QuestionsRefused) as refused:
        imported(question_set, [*ROWS, {"question": "", "expected_documents": ["refunds"]}])

    assert str(refused.value) == "1 of 3 rows has problems; 2 are valid."
    assert version(question_set) == 1 and not question_set.questions.exists()
    valid = imported(
        question_set, [*ROWS, {"question": "", "expected_documents": ["refunds"]}], valid_only=True
    )
    assert (valid.added, valid.skipped, valid.version) == (2, 1, 2)


def test_names_are_unique_per_knowledge_base(corpus: KnowledgeBase) -> None:
    question_set_create(kb=corpus, name="Set")
    with pytest.raises(QuestionSetInvalid, match="already has a question set named 'Set'"):
        question_set_create(kb=corpus, name=" Set ")
    with pytest.raises(QuestionSetInvalid, match="Give the question set a name"):
        question_set_create(kb=corpus, name="  ")


def test_a_writer_never_removes_what_they_cannot_see(corpus: KnowledgeBase) -> None:
    question_set = question_set_create(kb=corpus, name="Pay")
    imported(
        question_set,
        [
            {
                "id": "pay",
                "question": "salaries",
                "expected_documents": ["payroll", "leave"],
                "expected_passage": "last working day",
            }
        ],
        "hr",
    )
    question = question_set.questions.get()

    # someone outside hr rewrites it, by form and by file
    question_save(
        question_set=question_set,
        question=question,
        row={"id": "pay", "question": "salary day", "expected_documents": ["refunds"]},
        reader=reader_of(corpus),
    )
    question.refresh_from_db()
    assert question.expected_keys == ["refunds", "payroll"]
    assert question.expected_passage == "last working day"  # it may quote payroll
    imported(question_set, [{"id": "pay", "question": "salary day", "answers": ["leave"]}])
    question.refresh_from_db()
    assert question.expected_keys == ["leave", "payroll"]
    # and one in hr may take it away
    imported(question_set, [{"id": "pay", "question": "salary day", "answers": ["leave"]}], "hr")
    question.refresh_from_db()
    assert (question.expected_keys, question.expected_passage) == (["leave"], "")


def test_one_question_is_checked_against_the_others(corpus: KnowledgeBase) -> None:
    question_set = question_set_create(kb=corpus, name="Set")
    imported(question_set, ROWS)
    reader = reader_of(corpus)

    for row, words in [
        ({"id": "a", "question": "new words", "expected_documents": ["leave"]}, "with id 'a'"),
        ({"id": "c", "question": "REFUND  days", "expected_documents": ["leave"]}, "already (a)"),
        ({"id": "c", "question": "pay", "expected_documents": ["payroll"]}, "'payroll'"),
    ]:
        with pytest.raises(QuestionsRefused) as refused:
            question_save(question_set=question_set, row=row, reader=reader)
        assert words in str(refused.value.checked.problems[0]), refused.value.checked.problems
    assert version(question_set) == 2


def test_a_hit_from_test_search_makes_or_joins_a_question(corpus: KnowledgeBase) -> None:
    question_set = question_set_create(kb=corpus, name="From search")
    reader = reader_of(corpus)

    made, created = question_add_from_hit(
        question_set=question_set, query=" refund   days ", document_key="refunds", reader=reader
    )
    same, created_again = question_add_from_hit(
        question_set=question_set, query="Refund days", document_key="refunds", reader=reader
    )
    joined, _ = question_add_from_hit(
        question_set=question_set, query="refund DAYS", document_key="travel", reader=reader
    )

    assert (created, created_again) == (True, False)
    assert made.pk == same.pk == joined.pk and joined.expected_keys == ["refunds", "travel"]
    assert (made.text, made.language) == ("refund days", "en")
    assert version(question_set) == 3  # made, then joined; the repeat changed nothing
    with pytest.raises(QuestionsRefused):
        question_add_from_hit(
            question_set=question_set, query="pay", document_key="payroll", reader=reader
        )
