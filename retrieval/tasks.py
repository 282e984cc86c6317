"""Retrieval's periodic job: upload idempotency records past their retention are deleted."""

from __future__ import annotations

from celery import shared_task

from retrieval.api.uploads import idempotency_records_expire
from work.jobs import job_ran


@shared_task(name="retrieval.tasks.expire_idempotency_records", ignore_result=True)
def expire_idempotency_records() -> int:
    job_ran("idempotency")
    return idempotency_records_expire()
