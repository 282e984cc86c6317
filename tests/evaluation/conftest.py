"""A small knowledge base with published documents (one behind the group `hr`), question sets
of it, and running an evaluation's task in this process as a worker would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from evaluation.models import EvaluationRun, QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from kb.access import Reader
from kb.models import KnowledgeBase
from tests.helpers import execute_here
from tests.retrieval.factories import publish
from work.models import IngestionTask

DOCUMENTS = {
    "refunds": "Refunds are possible within thirty days of purchase, with the receipt.",
    "travel": "Train tickets are reimbursed in second class; first class needs approval.",
    "leave": "Every employee has twenty-five days of paid leave a year.",
    "laptops": "Laptops are replaced every four years by the IT desk.",
    "baoxiao": "出差的火车票按二等座报销，一等座需要批准。",
}
HR_DOCUMENT = ("payroll", "Salaries are paid on the last working day of the month.")

# Asked of the corpus above: the first five are found by keyword search, the last is not.
QUESTIONS = [
    {
        "id": "q-refund",
        "question": "within how many days are refunds possible",
        "expected_documents": ["refunds"],
        "tag": "money",
        "expected_passage": "Refunds are possible within thirty days",
    },
    {
        "id": "q-train",
        "question": "train tickets second class reimbursed",
        "expected_documents": ["travel", "baoxiao"],
        "tag": "travel",
    },
    {"id": "q-leave", "question": "paid leave days a year", "expected_documents": ["leave"]},
    {"id": "q-laptop", "question": "laptops replaced", "expected_documents": ["laptops"]},
    {"id": "q-zh", "question": "火车票 报销", "expected_documents": ["baoxiao"], "tag": "travel"},
    {
        "id": "q-miss",
        "question": "parking garage opening hours",
        "expected_documents": ["leave"],
    },
]

EVERYTHING = Reader(tenant_id=0, access_groups=frozenset(), all_groups=True)


def reader_of(kb: KnowledgeBase, *groups: str) -> Reader:
    return Reader(tenant_id=kb.tenant_id, access_groups=frozenset(groups))


@pytest.fixture
def corpus(kb: KnowledgeBase) -> KnowledgeBase:
    for key, text in DOCUMENTS.items():
        publish(kb, key, text)
    publish(kb, *HR_DOCUMENT, groups=("hr",))
    return kb


@pytest.fixture
def question_set(corpus: KnowledgeBase) -> QuestionSet:
    question_set = question_set_create(kb=corpus, name="Handbook questions")
    checked = questions_check(
        question_set=question_set, raw=read_rows(QUESTIONS), reader=reader_of(corpus)
    )
    assert checked.ok, [str(p) for p in checked.problems]
    questions_import(question_set=question_set, checked=checked, reader=reader_of(corpus))
    question_set.refresh_from_db()
    return question_set


def run_evaluation(run: EvaluationRun) -> str:
    """Run the run's task here, as a worker would; return what it did."""
    assert run.task_id is not None
    # Inside a test's transaction the database clock stands still at the test's start.
    IngestionTask.objects.filter(pk=run.task_id).update(available_at=None)
    return execute_here(run.task_id)


@pytest.fixture
def evaluate() -> Callable[[EvaluationRun], EvaluationRun]:
    def run_it(run: EvaluationRun) -> EvaluationRun:
        outcome = run_evaluation(run)
        run.refresh_from_db()
        assert outcome == run.state, (outcome, run.state, run.error)
        return run

    return run_it


def summary_without_latency(summary: dict[str, Any]) -> dict[str, Any]:
    """A run's figures but its latencies (which no two runs share)."""
    return {mode: {k: v for k, v in s.items() if k != "latency_ms"} for mode, s in summary.items()}
