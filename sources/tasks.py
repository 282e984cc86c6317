"""Celery tasks of sources: thin wrappers. A sync run itself is an IngestionTask of kind "sync",
run by `ingestion.tasks.run_task` like a build (`sources.sync`)."""

from __future__ import annotations

from celery import shared_task

from sources.services.runs import syncs_start_due
from work.jobs import job_ran


@shared_task(name="sources.tasks.start_due_syncs", ignore_result=True)
def start_due_syncs() -> int:
    job_ran("sources")
    return syncs_start_due()
