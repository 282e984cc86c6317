"""GET /api/v1/evaluations/{id}/compare/{other}: two runs of one knowledge base side by side,
as the admin's Compare page and the swap's confirmation show them, through a real API key."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from evaluation.models import EvaluationRun, Question, QuestionSet
from evaluation.selectors import run_comparison
from evaluation.services.question_sets import question_set_create
from evaluation.services.runs import evaluation_request
from kb.models import KnowledgeBase
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.evaluation.conftest import EVERYTHING
from tests.retrieval.factories import api, publish

pytestmark = pytest.mark.django_db

Evaluate = Callable[[EvaluationRun], EvaluationRun]


def test_two_runs_compare_by_figure_and_question(
    corpus: KnowledgeBase, question_set: QuestionSet, evaluate: Evaluate
) -> None:
    before = evaluate(
        evaluation_request(
            kb=corpus, question_set=question_set, modes=["keyword", "vector"], reader=EVERYTHING
        )[0]
    )
    # a new revision of `leave` no longer answers its question
    publish(corpus, "leave", "The canteen serves soup on Mondays.")
    after = evaluate(
        evaluation_request(
            kb=corpus, question_set=question_set, modes=["keyword"], reader=EVERYTHING
        )[0]
    )
    _, plaintext = api_key_create(tenant=corpus.tenant, name="admins", can_manage_sources=True)
    _, reader_key = api_key_create(tenant=corpus.tenant, name="readers")
    client = api(plaintext)

    response = client.get(f"/api/v1/evaluations/{before.pk}/compare/{after.pk}")

    assert response.status_code == 200, response.content
    body = response.json()
    expected = run_comparison(before, after)
    assert body["before"] == before.pk and body["after"] == after.pk
    assert [m["mode"] for m in body["modes"]] == ["keyword"]  # the modes both asked
    figures = {f["figure"]: f for f in body["modes"][0]["figures"]}
    assert figures["mrr@10"]["before"] == before.summary["keyword"]["all"]["mrr@10"]
    assert figures["mrr@10"]["after"] == after.summary["keyword"]["all"]["mrr@10"]
    assert figures["mrr@10"]["change"] == pytest.approx(
        after.summary["keyword"]["all"]["mrr@10"] - before.summary["keyword"]["all"]["mrr@10"],
        abs=1e-4,
    )
    assert body["changes"] == [
        {
            "question": "q-leave",
            "text": "paid leave days a year",
            "mode": "keyword",
            "before": 1,
            "after": None,
            "change": "lost",
        }
    ]
    assert body["modes"][0]["counts"]["lost"] == 1
    assert body["unchanged"] == len(expected.changes) - 1
    assert body["notes"] == []

    # refused: a key that may not view evaluations; runs of two knowledge bases; a missing one
    refused = api(reader_key).get(f"/api/v1/evaluations/{before.pk}/compare/{after.pk}")
    assert refused.status_code == 403
    other = knowledge_base_create(tenant=corpus.tenant, name="Other", slug="other")
    publish(other, "x", "Some text.")
    theirs, _ = evaluation_request(
        kb=other,
        question_set=_one_question_set(other),
        modes=["keyword"],
        reader=EVERYTHING,
    )
    mixed = client.get(f"/api/v1/evaluations/{before.pk}/compare/{theirs.pk}")
    assert mixed.status_code == 400
    assert "only runs of one knowledge base compare" in mixed.content.decode()
    missing = client.get(f"/api/v1/evaluations/{before.pk}/compare/{10**12}")
    assert missing.status_code == 404


def _one_question_set(kb: KnowledgeBase) -> QuestionSet:
    question_set = question_set_create(kb=kb, name="Q")
    Question.objects.create(
        question_set=question_set,
        external_id="x",
        text="some text",
        expected_keys=["x"],
        language="en",
    )
    return question_set
