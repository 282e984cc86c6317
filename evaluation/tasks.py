"""Celery tasks of evaluation: thin wrappers. A run itself is an IngestionTask of kind
"evaluation", run by `ingestion.tasks.run_task` like a build (`evaluation.run`)."""

from __future__ import annotations

from celery import shared_task

from evaluation.services.calibration import calibration_compute
from evaluation.services.runs import evaluation_runs_close_orphaned
from evaluation.services.schedule import evaluation_runs_start_due
from work.jobs import job_ran


@shared_task(name="evaluation.tasks.scheduled_runs", ignore_result=True)
def scheduled_runs() -> int:
    """Beat's periodic job (config/celery.py): close the runs whose worker gave up, then start
    the nightly runs that are due. Both are idempotent; returns how many runs it started."""
    job_ran("evaluation")
    evaluation_runs_close_orphaned()
    return evaluation_runs_start_due()


@shared_task(name="evaluation.tasks.calibration_compute", ignore_result=True)
def calibration_compute_task(calibration_id: int) -> None:
    """Compute a calibration asked for (`calibration_compute`); quiet when it is gone or no
    longer queued. Not retried: a failure is kept on the row, and asking again starts anew."""
    calibration_compute(calibration_id=calibration_id)
