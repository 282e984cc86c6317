"""The third target of a run: one document's pending revision, its build served instead of the
live one while the rest of the knowledge base answers as search serves it
(`search(served_instead=...)`), through the same leased executor; and what it refuses."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from evaluation.models import EvaluationRun, QuestionSet
from evaluation.question_files import read_rows
from evaluation.run import search_settings
from evaluation.selectors import quality_series, run_comparison
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from evaluation.services.runs import evaluation_request
from kb.models import Build, KnowledgeBase, Tenant
from kb.services.base import ActionRefused
from kb.services.index_versions import index_version_create, knowledge_base_create
from tests.evaluation.conftest import EVERYTHING, reader_of
from tests.evaluation.gate_world import QUESTIONS, publish_world
from tests.retrieval.factories import build, publish, upload

pytestmark = pytest.mark.django_db

Evaluate = Callable[[EvaluationRun], EvaluationRun]

# A revision of `parking` that no longer says what the question asks.
REWRITTEN = "Parking is handled by the landlord now; ask them."


@pytest.fixture
def handbook(kb: KnowledgeBase) -> QuestionSet:
    publish_world(kb)
    question_set = question_set_create(kb=kb, name="Facilities")
    reader = reader_of(kb)
    questions_import(
        question_set=question_set,
        checked=questions_check(question_set=question_set, raw=read_rows(QUESTIONS), reader=reader),
        reader=reader,
    )
    question_set.refresh_from_db()
    return question_set


@pytest.fixture
def pending(kb: KnowledgeBase, handbook: QuestionSet) -> Build:
    kb.require_approval = True
    kb.save()
    waiting = build(upload(kb, "parking", REWRITTEN))
    assert waiting.state == Build.State.READY
    return waiting


def test_a_revision_run_serves_the_pending_build_instead_and_nothing_else_moves(
    kb: KnowledgeBase, handbook: QuestionSet, pending: Build, evaluate: Evaluate
) -> None:
    live = evaluate(
        evaluation_request(kb=kb, question_set=handbook, modes=["keyword"], reader=EVERYTHING)[0]
    )
    run, created = evaluation_request(
        kb=kb, question_set=handbook, modes=["keyword"], reader=EVERYTHING, served_build=pending
    )
    assert created and run.target == "revision" and run.served_build_id == pending.pk
    assert run.index_version_id == kb.active_index_version_id

    run = evaluate(run)

    assert run.state == "succeeded", run.error
    assert run.search_settings == search_settings(pending.index_version, top_k=10)
    comparison = run_comparison(live, run)
    changed = {c.external_id: c.change for c in comparison.changes if c.change != "same"}
    assert changed == {"parking": "lost"}, comparison.changes
    # the knowledge base itself still serves revision 1: the run changed nothing
    assert Build.objects.get(pk=pending.pk).state == Build.State.READY
    # nor is it quality over time: the Quality chart shows what search served
    points = quality_series(question_set=handbook, metric="mrr@10")["keyword"]
    assert [point.run_id for point in points] == [live.pk]
    # asking again while it is open returns the open one; a finished one does not count
    again, created = evaluation_request(
        kb=kb, question_set=handbook, modes=["keyword"], reader=EVERYTHING, served_build=pending
    )
    assert created and again.pk != run.pk


def test_what_a_revision_run_refuses(
    kb: KnowledgeBase, handbook: QuestionSet, pending: Build, tenant: Tenant
) -> None:
    other = knowledge_base_create(tenant=tenant, name="Other", slug="other")
    theirs = publish(other, "x", "Some text of another knowledge base.")
    kb.require_approval = False
    kb.save()
    building = upload(kb, "lockers", "Lockers are gone.")  # its build is pending, not complete
    half = Build.objects.get(revision=building, index_version_id=kb.active_index_version_id)
    candidate = index_version_create(
        kb_id=kb.pk, provider="hash", model="m", dimensions=64, chunk_size=300, chunk_overlap=0
    )
    in_candidate = Build.objects.filter(index_version=candidate).first()
    assert in_candidate is not None

    for build_, words in (
        (theirs, "belongs to another knowledge base"),
        (half, "only a complete build can be served instead"),
        (in_candidate, "only a revision built in the active version"),
    ):
        with pytest.raises(ActionRefused, match=words):
            evaluation_request(
                kb=kb,
                question_set=handbook,
                modes=["keyword"],
                reader=EVERYTHING,
                served_build=build_,
            )


def test_a_revision_superseded_before_its_run_starts_fails_it_readably(
    kb: KnowledgeBase, handbook: QuestionSet, pending: Build, evaluate: Evaluate
) -> None:
    run, _ = evaluation_request(
        kb=kb, question_set=handbook, modes=["keyword"], reader=EVERYTHING, served_build=pending
    )
    Build.objects.filter(pk=pending.pk).update(state=Build.State.SUPERSEDED)

    run = evaluate(run)

    assert run.state == "failed"
    assert "Revision 2 of parking can no longer be served instead" in run.error
