"""A real worker process dies computing a calibration, after reading its fifth question's legs
(`CANON_FAULT_CALIBRATION_AFTER_LEGS`, `os._exit`: no cleanup, no ack, nothing written). Its
lease runs out; the sweeper hands the task to a live worker, which computes the calibration
once, on the task's second attempt, and writes what an uninterrupted computation gives."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from evaluation.calibration import MIN_QUESTIONS
from evaluation.models import Calibration, Question
from evaluation.services.calibration import calibration_examples, calibration_request
from kb.models import KnowledgeBase
from retrieval.search import fusion
from retrieval.search.fusion_fitting import calibrate, parameters_of
from tests.conftest import Worker
from tests.evaluation.calibration_world import publish_topics, topic_set
from tests.fault.harness import FAULT_LEASE_TTL, beat_once, wait_for_marker
from work.models import AuditEvent, IngestionTask

pytestmark = pytest.mark.integration

DIES_AFTER = 5


def closed(calibration: Calibration, timeout: float = 180.0) -> Calibration:
    """The calibration once it is computed or failed, running the beat's jobs (relay,
    sweeper) meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        current = Calibration.objects.select_related("task").get(pk=calibration.pk)
        if current.state not in Calibration.OPEN_STATES:
            return current
        if time.monotonic() > deadline:
            tasks = list(IngestionTask.objects.values_list("id", "kind", "status", "attempt"))
            pytest.fail(f"calibration {calibration.pk} did not finish in {timeout}s: {tasks}")
        beat_once()
        time.sleep(0.2)


def test_a_worker_killed_mid_calibration_is_replaced_and_the_calibration_computed_once(
    transactional_db: None,
    kb: KnowledgeBase,
    worker_factory: Callable[..., Worker],
    tmp_path: Path,
) -> None:
    publish_topics(kb, MIN_QUESTIONS)
    kb.refresh_from_db()
    question_set = topic_set(kb, MIN_QUESTIONS)

    # given: a worker that dies after reading its fifth question's legs
    markers = tmp_path / "markers"
    doomed = worker_factory(
        pool="solo",
        CANON_LEASE_TTL_SECONDS=FAULT_LEASE_TTL,
        CANON_FAULT_CALIBRATION_AFTER_LEGS=str(DIES_AFTER),
        CANON_FAULT_MARKER_DIR=str(markers),
    )
    calibration, created = calibration_request(kb=kb, question_set=question_set)
    assert created
    wait_for_marker(markers, f"calibration_after_legs_{DIES_AFTER}")
    assert doomed.wait_exit() == 137
    died = Calibration.objects.get(pk=calibration.pk)
    assert died.state == "running" and died.computed_at is None and died.per_question == []

    # when: the sweeper hands its task to a live worker
    worker_factory(pool="solo", CANON_LEASE_TTL_SECONDS=FAULT_LEASE_TTL)
    done = closed(calibration)

    # then: computed once, on the second attempt, as an uninterrupted computation computes it
    assert done.state == "default_kept", done.error
    assert done.task is not None
    assert (done.task.status, done.task.attempt) == (IngestionTask.Status.SUCCEEDED, 2)
    expired = AuditEvent.objects.filter(kind="lease_expired", subject_id=done.task_id)
    assert list(expired.values_list("action", flat=True)) == ["requeued"]
    questions = list(Question.objects.filter(question_set=question_set).order_by("pk"))
    assert done.index_version is not None
    found = calibrate(
        calibration_examples(kb=kb, version=done.index_version, questions=questions),
        fusion.model(),
    )
    assert done.parameters == parameters_of(found.model, l2=found.l2, questions=found.questions)
    assert {
        row["external_id"]: (row["default"], row["candidate"]) for row in done.per_question
    } == {qid: (default, candidate) for qid, (default, candidate) in found.held_out.items()}
    assert len(done.per_question) == MIN_QUESTIONS
