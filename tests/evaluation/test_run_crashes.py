"""A real worker process dies inside an evaluation run, after its fifth answer is committed
(`CANON_FAULT_EVALUATION_AFTER_RESULT`, `os._exit`: no cleanup, no ack). The sweeper hands the
run to a live worker, which asks only what is left; the resumed run's figures equal those of
a run nobody interrupted, answer by answer."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evaluation.models import EvaluationResult, EvaluationRun, QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from evaluation.services.runs import evaluation_request
from kb.models import KnowledgeBase
from tests.conftest import Worker
from tests.evaluation.conftest import DOCUMENTS, EVERYTHING, QUESTIONS, summary_without_latency
from tests.fault.harness import FAULT_LEASE_TTL, beat_once, wait_for_marker
from tests.retrieval.factories import publish
from work.models import IngestionTask

pytestmark = pytest.mark.integration

MODES = ["hybrid", "keyword"]
DIES_AFTER = 5


def finished(run: EvaluationRun, timeout: float = 90.0) -> EvaluationRun:
    """The run once it is closed, running the beat's jobs (relay, sweeper) meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        current = EvaluationRun.objects.get(pk=run.pk)
        if current.state not in EvaluationRun.OPEN_STATES:
            return current
        if time.monotonic() > deadline:
            tasks = list(IngestionTask.objects.values_list("id", "kind", "status", "attempt"))
            pytest.fail(f"evaluation {run.pk} did not finish in {timeout}s; tasks: {tasks}")
        beat_once()
        time.sleep(0.2)


def answers(run: EvaluationRun) -> list[tuple[str, str, int | None, list[str], bool | None]]:
    return list(
        EvaluationResult.objects.filter(run=run)
        .order_by("external_id", "mode")
        .values_list("external_id", "mode", "rank", "returned_keys", "passage_found")
    )


def test_a_worker_killed_mid_run_resumes_and_its_figures_equal_an_uninterrupted_runs(
    transactional_db: None,
    kb: KnowledgeBase,
    worker_factory: Callable[..., Worker],
    tmp_path: Path,
    settings: Any,
) -> None:
    for key, text in DOCUMENTS.items():
        publish(kb, key, text)
    question_set: QuestionSet = question_set_create(kb=kb, name="Crash questions")
    checked = questions_check(
        question_set=question_set, raw=read_rows(QUESTIONS), reader=EVERYTHING
    )
    questions_import(question_set=question_set, checked=checked, reader=EVERYTHING)
    total = len(QUESTIONS) * len(MODES)

    # given: a worker that dies after its fifth answer
    markers = tmp_path / "markers"
    doomed = worker_factory(
        pool="solo",
        CANON_LEASE_TTL_SECONDS=FAULT_LEASE_TTL,
        CANON_FAULT_EVALUATION_AFTER_RESULT=str(DIES_AFTER),
        CANON_FAULT_MARKER_DIR=str(markers),
    )
    run, created = evaluation_request(
        kb=kb, question_set=question_set, modes=MODES, reader=EVERYTHING
    )
    assert created
    wait_for_marker(markers, f"evaluation_after_result_{DIES_AFTER}")
    assert doomed.wait_exit() == 137
    assert EvaluationResult.objects.filter(run=run).count() == DIES_AFTER  # committed, no more
    assert EvaluationRun.objects.get(pk=run.pk).state == "running"

    # when: the sweeper hands the run to a live worker, which asks only what is left
    worker_factory(pool="solo", CANON_LEASE_TTL_SECONDS=FAULT_LEASE_TTL)
    resumed = finished(run)
    # and the same worker then runs the same evaluation uninterrupted
    whole, _ = evaluation_request(kb=kb, question_set=question_set, modes=MODES, reader=EVERYTHING)
    whole = finished(whole)

    # then
    assert whole.state == "succeeded", whole.error
    assert resumed.state == "succeeded", resumed.error
    assert resumed.task is not None and resumed.task.attempt == 2
    assert EvaluationResult.objects.filter(run=resumed).count() == total  # none twice
    assert answers(resumed) == answers(whole)
    assert summary_without_latency(resumed.summary) == summary_without_latency(whole.summary)
    assert resumed.search_settings == whole.search_settings
    assert resumed.index_version_id == whole.index_version_id
