"""Scheduled evaluation: beat's job starts each nightly gate's run once a night (reading every
document, every mode), closes runs whose worker gave up, and a run of the active version whose
gate figure fell past the threshold since the last one — a bulk change of documents, say — is
an anomaly on the consistency dashboard."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.utils import timezone

from config.celery import app as celery_app
from evaluation.models import EvaluationRun, QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.gates import quality_gate_save
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from evaluation.services.runs import evaluation_request
from evaluation.services.schedule import (
    QUALITY_DROP,
    evaluation_runs_start_due,
    nightly_due_since,
)
from evaluation.tasks import scheduled_runs
from kb.models import KnowledgeBase, TenantMembership
from kb.roles import INDEX_ADMINS, ensure_roles
from tests.evaluation.conftest import EVERYTHING, reader_of
from tests.evaluation.gate_world import ANSWERS, QUESTIONS, publish_world
from tests.retrieval.factories import publish
from work.models import AuditEvent, IngestionTask

pytestmark = pytest.mark.django_db

Evaluate = Callable[[EvaluationRun], EvaluationRun]


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


def at(hour: int, day: int = 10) -> datetime:
    return timezone.make_aware(datetime(2026, 12, day, hour, 30))


def test_a_nightly_gate_gets_one_run_a_night(kb: KnowledgeBase, handbook: QuestionSet) -> None:
    gate = quality_gate_save(kb=kb, question_set=handbook, nightly=True, nightly_hour=2)
    assert nightly_due_since(gate, at(1)) == timezone.make_aware(datetime(2026, 12, 9, 2))
    assert nightly_due_since(gate, at(3)) == timezone.make_aware(datetime(2026, 12, 10, 2))
    now = timezone.now()

    assert evaluation_runs_start_due(now=now) == 1
    assert evaluation_runs_start_due(now=now) == 0  # once a night, whoever asks

    run = EvaluationRun.objects.get(kb=kb)
    assert run.scheduled and run.all_groups and run.target == "active"
    assert run.modes == ["hybrid", "keyword", "vector"]
    assert run.task is not None and run.task.kind == IngestionTask.Kind.EVALUATION
    assert run.requested_by_id is None
    # a night later (that run done, and asked before the last slot): the next one
    EvaluationRun.objects.filter(pk=run.pk).update(
        created_at=now - timedelta(days=2), state="succeeded"
    )
    assert evaluation_runs_start_due(now=now) == 1
    assert EvaluationRun.objects.filter(kb=kb, scheduled=True).count() == 2


def test_a_gate_without_nightly_runs_or_questions_starts_nothing(
    kb: KnowledgeBase, handbook: QuestionSet
) -> None:
    quality_gate_save(kb=kb, question_set=handbook, nightly=False)
    assert evaluation_runs_start_due() == 0
    empty = question_set_create(kb=kb, name="Empty")
    quality_gate_save(kb=kb, question_set=empty, nightly=True)
    assert evaluation_runs_start_due() == 0  # refused ("no questions yet"), logged, skipped
    assert not EvaluationRun.objects.exists()


def test_beats_job_closes_orphaned_runs_and_starts_the_due_ones(
    kb: KnowledgeBase, handbook: QuestionSet
) -> None:
    orphan, _ = evaluation_request(
        kb=kb, question_set=handbook, modes=["keyword"], reader=EVERYTHING
    )
    assert orphan.task_id is not None
    IngestionTask.objects.filter(pk=orphan.task_id).update(status="dead", last_error="killed")
    quality_gate_save(kb=kb, question_set=handbook, nightly=True, nightly_hour=0)
    assert celery_app.conf.beat_schedule["evaluation-runs"]["task"] == (
        "evaluation.tasks.scheduled_runs"
    )

    started = scheduled_runs()

    orphan.refresh_from_db()
    assert (orphan.state, orphan.error) == ("failed", "killed")
    assert started == 1
    assert EvaluationRun.objects.filter(scheduled=True).count() == 1


def test_a_drop_past_the_gate_after_a_bulk_change_is_an_anomaly_on_the_dashboard(
    kb: KnowledgeBase, handbook: QuestionSet, evaluate: Evaluate
) -> None:
    quality_gate_save(kb=kb, question_set=handbook, max_drop=0.1)

    def nightly() -> EvaluationRun:
        run, _ = evaluation_request(
            kb=kb, question_set=handbook, modes=["hybrid"], reader=EVERYTHING, scheduled=True
        )
        return evaluate(run)

    first = nightly()
    assert not AuditEvent.objects.filter(kind=QUALITY_DROP).exists()
    second = nightly()  # nothing changed: no anomaly
    assert not AuditEvent.objects.filter(kind=QUALITY_DROP).exists()
    for key in list(ANSWERS)[:3]:  # a sync rewrites three documents: their answers are gone
        publish(kb, key, "This page moved to the intranet.")
    # a run of what one person may read does not raise it
    evaluate(
        evaluation_request(kb=kb, question_set=handbook, modes=["hybrid"], reader=reader_of(kb))[0]
    )
    assert not AuditEvent.objects.filter(kind=QUALITY_DROP).exists()

    third = nightly()

    anomaly = AuditEvent.objects.get(kind=QUALITY_DROP)
    assert anomaly.escalated and anomaly.resolved_at is None
    assert (anomaly.kb_id, anomaly.subject_type, anomaly.subject_id) == (
        kb.pk,
        "evaluation_run",
        third.pk,
    )
    before = second.summary["hybrid"]["all"]["mrr@10"]
    after = third.summary["hybrid"]["all"]["mrr@10"]
    assert first.summary["hybrid"]["all"]["mrr@10"] == before
    assert anomaly.details["detail"] == (
        f"MRR@10 of hybrid on Facilities fell from {before:.3f} (evaluation {second.pk}) to "
        f"{after:.3f} (evaluation {third.pk}), by {before - after:.3f}, more than the 0.100 the "
        "quality gate allows."
    )
    # an index admin sees it on the consistency dashboard, with a way to the run
    ensure_roles(Group, Permission)
    iris = User.objects.create_user("iris", password="a-long-test-password", is_staff=True)
    iris.groups.add(Group.objects.get(name=INDEX_ADMINS))
    TenantMembership.objects.create(user=iris, tenant=kb.tenant)
    client = Client()
    client.force_login(iris)
    page = client.get("/admin/ingestion/ingestiontask/dashboard/").content.decode()
    assert "anomaly:quality_drop" in page
    assert f"MRR@10 of hybrid on Facilities fell from {before:.3f}" in page
    assert f'href="/admin/evaluation/evaluationrun/{third.pk}/change/"' in page
