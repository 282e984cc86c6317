"""A calibration is leased work (its task, kind "calibration"): one whose worker died while
computing it (a running task whose lease expired) is handed to another worker by the lease
sweeper and computed there exactly once, the dead worker's late writes fenced out; past the
attempt cap the task is dead-lettered and the calibration fails with the sweeper's reason (its
admin page says so at once), after which asking again starts anew; a fit that fails fails it
at once. In this process, with the services a worker and beat run
(tests/evaluation/test_calibration_crashes.py kills a real worker)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from evaluation.calibration import MIN_QUESTIONS, calibration_status
from evaluation.models import Calibration
from evaluation.services import calibration as services
from evaluation.services.calibration import (
    calibration_compute,
    calibration_request,
    calibrations_close_orphaned,
)
from evaluation.tasks import scheduled_runs
from ingestion.pipeline.run import task_execute
from ingestion.sweeper import lease_sweep
from kb.models import KnowledgeBase, TenantMembership
from kb.roles import INDEX_ADMINS, ensure_roles
from tests.evaluation.calibration_world import publish_topics, topic_set
from work.leases import Lease, LeaseLost, task_claim
from work.models import AuditEvent, IngestionTask

pytestmark = pytest.mark.django_db


@pytest.fixture
def topics(kb: KnowledgeBase) -> KnowledgeBase:
    publish_topics(kb, MIN_QUESTIONS)
    kb.refresh_from_db()
    return kb


def asked(kb: KnowledgeBase) -> Calibration:
    calibration, created = calibration_request(kb=kb, question_set=topic_set(kb, MIN_QUESTIONS))
    assert created and calibration.task is not None
    return calibration


def index_admin(kb: KnowledgeBase) -> Client:
    ensure_roles(Group, Permission)
    user = User.objects.create_user("iris", password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=INDEX_ADMINS))
    TenantMembership.objects.create(user=user, tenant=kb.tenant, access_groups=[])
    client = Client()
    client.force_login(user)
    return client


def calibration_task(calibration: Calibration) -> IngestionTask:
    """The calibration's task as it is now."""
    task = Calibration.objects.select_related("task").get(pk=calibration.pk).task
    assert task is not None
    return task


def available(task_id: int) -> None:
    # Inside a test's transaction the database clock stands still at the test's start.
    IngestionTask.objects.filter(pk=task_id).update(available_at=None)


def died_computing(calibration: Calibration) -> Lease:
    """What a worker killed mid-compute leaves: the task running under its lease, the
    calibration computing, nothing of the result written; then the lease runs out."""
    assert calibration.task_id is not None
    available(calibration.task_id)
    lease = task_claim(task_id=calibration.task_id, owner="doomed")
    assert lease is not None
    claimed = Calibration.objects.filter(pk=calibration.pk, state="queued").update(state="running")
    assert claimed == 1
    IngestionTask.objects.filter(pk=calibration.task_id).update(
        lease_expires_at=timezone.now() - timedelta(hours=1)
    )
    return lease


def test_a_calibration_whose_worker_died_is_requeued_and_computed_exactly_once(
    topics: KnowledgeBase,
) -> None:
    # given: a worker died computing it
    calibration = asked(topics)
    doomed = died_computing(calibration)
    assert calibrations_close_orphaned() == 0  # its task is still open: not failed
    assert calibration_status(Calibration.objects.get(pk=calibration.pk)).state == "running"

    # when: the sweeper finds the expired lease, and a live worker runs the task again
    assert lease_sweep() == 1
    task = calibration_task(calibration)
    assert task.status == IngestionTask.Status.QUEUED
    event = AuditEvent.objects.get(kind="lease_expired", subject_id=task.pk)
    assert event.action == "requeued"
    available(task.pk)
    outcome = task_execute(task_id=task.pk, worker_id="live")

    # then: computed once, on the second attempt
    done = Calibration.objects.get(pk=calibration.pk)
    assert outcome == done.state == "default_kept", done.error
    assert done.default_mrr == 1.0 and len(done.per_question) == MIN_QUESTIONS
    task.refresh_from_db()
    assert (task.status, task.attempt) == (IngestionTask.Status.SUCCEEDED, 2)
    computed_at = done.computed_at
    # a duplicate message claims nothing; the dead worker, were it to wake, writes nothing
    assert task_execute(task_id=task.pk, worker_id="late") == "not_claimed"
    with pytest.raises(LeaseLost):
        calibration_compute(calibration_id=calibration.pk, lease=doomed)
    assert Calibration.objects.get(pk=calibration.pk).computed_at == computed_at


def test_past_its_attempts_a_calibration_fails_with_the_reason_and_may_be_asked_again(
    topics: KnowledgeBase,
) -> None:
    calibration = asked(topics)
    IngestionTask.objects.filter(pk=calibration_task(calibration).pk).update(max_attempts=1)
    died_computing(calibration)

    # when: the sweeper dead-letters its task (no attempt left)
    assert lease_sweep() == 1
    task = calibration_task(calibration)
    assert task.status == IngestionTask.Status.DEAD

    # then: its status says so before beat's evaluation job writes it, and after
    reason = "The worker stopped (crash, kill or timeout) on all 1 attempts; giving up."
    status = calibration_status(Calibration.objects.select_related("task").get(pk=calibration.pk))
    assert (status.state, status.error) == ("failed", reason)
    page = index_admin(topics).get(reverse("admin:evaluation_calibration", args=[calibration.pk]))
    assert page.status_code == 200
    assert reason in page.content.decode() and "reloads itself" not in page.content.decode()
    assert scheduled_runs() == 0  # closes orphans, starts no nightly run
    failed = Calibration.objects.get(pk=calibration.pk)
    assert (failed.state, failed.error) == ("failed", reason)
    assert calibrations_close_orphaned() == 0  # idempotent
    # asking again starts anew
    again, created = calibration_request(kb=topics, question_set=failed.question_set)
    assert created and again.pk != calibration.pk and again.state == "queued"


def test_a_calibration_whose_task_is_gone_fails_when_asked_again(topics: KnowledgeBase) -> None:
    calibration = asked(topics)
    calibration_task(calibration).delete()

    again, created = calibration_request(kb=topics, question_set=calibration.question_set)

    assert created and again.pk != calibration.pk
    failed = Calibration.objects.get(pk=calibration.pk)
    assert failed.state == "failed"
    assert failed.error == "The calibration's worker stopped before it finished. Calibrate again."


def test_a_fit_that_fails_fails_the_calibration_at_once(
    topics: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("the fit diverged")

    monkeypatch.setattr(services, "calibrate", broken)
    calibration = asked(topics)
    assert calibration.task_id is not None
    available(calibration.task_id)

    assert task_execute(task_id=calibration.task_id, worker_id="test") == "failed"

    failed = Calibration.objects.get(pk=calibration.pk)
    assert (failed.state, failed.error) == ("failed", "the fit diverged")
    task = IngestionTask.objects.get(pk=calibration.task_id)
    assert (task.status, task.last_error_code) == (
        IngestionTask.Status.FAILED,
        "calibration_failed",
    )
