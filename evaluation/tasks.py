"""Celery tasks of evaluation: thin wrappers. A run itself is an IngestionTask of kind
"evaluation", and a calibration's computation one of kind "calibration", run by
`ingestion.tasks.run_task` like a build (`evaluation.run`, `evaluation.services.calibration`)."""

from __future__ import annotations

from celery import shared_task

from evaluation.services.calibration import calibrations_close_orphaned
from evaluation.services.runs import evaluation_runs_close_orphaned
from evaluation.services.schedule import evaluation_runs_start_due
from work.jobs import job_ran


@shared_task(name="evaluation.tasks.scheduled_runs", ignore_result=True)
def scheduled_runs() -> int:
    """Beat's periodic job (config/celery.py): close the runs and calibrations whose worker
    gave up (their tasks dead after the lease sweeper's attempts), then start the nightly runs
    that are due. All three are idempotent; returns how many runs it started."""
    job_ran("evaluation")
    evaluation_runs_close_orphaned()
    calibrations_close_orphaned()
    return evaluation_runs_start_due()
