"""Celery tasks: thin wrappers that take ids and call services. The database lease and attempt
cap, not the broker, decide whether work is redone."""

from __future__ import annotations

import os
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor

from celery import shared_task, signals
from django.conf import settings
from django.db import connections

import embeddings
from ingestion.pipeline.parse import ocr_wanted
from ingestion.pipeline.run import task_execute
from ingestion.reconciler.runner import reconcile as reconcile_pass
from ingestion.relay import outbox_relay_batch
from ingestion.sweeper import lease_sweep
from kb.ann_build import ann_index_build, ann_index_build_soon, ann_indexes_due
from kb.services.retention import retention_collect
from textkit import analysis
from textkit.extract import ocr
from work.jobs import job_ran


# Local embedding models (CANON_PRELOAD_EMBEDDING_MODELS) and, where OCR is on, the OCR engine
# are loaded by each worker child when it starts and kept warm; the parent (which imports this
# module before it forks) loads nothing.
@signals.worker_process_init.connect
def _preload_models(**_: object) -> None:
    if settings.PRELOAD_EMBEDDING_MODELS:
        embeddings.preload(settings.PRELOAD_EMBEDDING_MODELS)
        analysis.preload()
    if _ocr_wanted():
        ocr.preload(settings.OCR_THREADS)


def _ocr_wanted() -> bool:
    """`parse.ocr_wanted`, asked on a connection of its own (a thread's: Django's connections
    are per thread), closed after: this runs in a child just forked, which may still hold the
    parent's connection until Celery's own worker_process_init handler drops it."""
    if not settings.OCR_ENABLED or settings.OCR_MAX_PAGES <= 0:
        return False  # no query: off everywhere

    def ask() -> bool:
        try:
            return ocr_wanted()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(ask).result()


def worker_identity() -> str:
    """Unique per execution, so a redelivered message never inherits an old lease."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@shared_task(name="ingestion.tasks.run_task", acks_late=True, ignore_result=True)
def run_task(task_id: int) -> str:
    return task_execute(task_id=task_id, worker_id=worker_identity())


@shared_task(name="ingestion.tasks.relay_outbox", ignore_result=True)
def relay_outbox() -> int:
    job_ran("relay")
    return outbox_relay_batch()


@shared_task(name="ingestion.tasks.sweep_leases", ignore_result=True)
def sweep_leases() -> int:
    job_ran("sweeper")
    return lease_sweep()


@shared_task(name="ingestion.tasks.collect_garbage", ignore_result=True)
def collect_garbage() -> int:
    job_ran("gc")
    return retention_collect()


@shared_task(name="ingestion.tasks.reconcile", ignore_result=True)
def reconcile() -> dict[str, int]:
    job_ran("reconciler")
    return reconcile_pass()


@shared_task(
    name="ingestion.tasks.build_ann_index",
    ignore_result=True,
    acks_late=False,  # a lost run is sent again by build_ann_indexes, not redelivered mid-build
    # Not a build's 30 minutes: a 50M-chunk graph takes hours (docs/PRODUCTION.md).
    time_limit=7 * 24 * 3600,
    soft_time_limit=7 * 24 * 3600 - 60,
)
def build_ann_index(version_id: int) -> str:
    """One index version's vector index, once its builds are written (`kb.ann_build`)."""
    return ann_index_build(version_id=version_id)


@shared_task(name="ingestion.tasks.build_ann_indexes", ignore_result=True)
def build_ann_indexes() -> int:
    """Periodic: every version whose index is due and not being built (`kb.ann_build`)."""
    due = ann_indexes_due()
    for version_id in due:
        ann_index_build_soon(version_id=version_id)
    return len(due)
