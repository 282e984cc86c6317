"""The lease sweeper: tasks whose worker stopped renewing go back to the queue, or die past
their attempt cap."""

from __future__ import annotations

from django.db import transaction
from django.db.models.functions import Now

from ingestion.task_outcomes import task_close, task_requeue
from kb import locks
from kb.failures import WORKER_STOPPED
from work.models import AuditEvent, IngestionTask

SWEEPER_LOCK_KEY = 0x43616E6F6E01  # "Canon" 1


def lease_sweep(*, limit: int = 200) -> int:
    """Return tasks whose lease expired to the queue (new outbox event, AuditEvent
    `lease_expired`), or dead-letter them past the attempt cap (the build fails with the reason;
    the live version keeps serving). Returns how many tasks it handled.

    Singleton: holds an advisory lock, so a second sweeper (a second beat) does nothing. Each task
    is handled in its own short transaction that locks build then task and re-checks expiry, so a
    worker renewing at the last moment wins. A build another transaction holds is skipped for
    this pass rather than waited for: a host cut off inside the switch holds it until PostgreSQL
    ends its idle transaction, and no other lease should wait for that.
    """
    handled = 0
    with locks.singleton(SWEEPER_LOCK_KEY) as held:
        if not held:
            return 0
        expired = list(
            IngestionTask.objects.filter(
                status=IngestionTask.Status.RUNNING, lease_expires_at__lt=Now()
            )
            .order_by("lease_expires_at")
            .values_list("pk", "build_id")[:limit]
        )
        for task_id, build_id in expired:
            with transaction.atomic():
                if build_id is not None and locks.try_lock_build(build_id) is None:
                    continue
                task = (
                    IngestionTask.objects.select_for_update(skip_locked=True)
                    .filter(
                        pk=task_id, status=IngestionTask.Status.RUNNING, lease_expires_at__lt=Now()
                    )
                    .first()
                )
                if task is None:
                    continue
                _lease_expired(task)
                handled += 1
    return handled


def _lease_expired(task: IngestionTask) -> None:
    dead = task.attempt >= task.max_attempts
    AuditEvent.objects.create(
        kind="lease_expired",
        kb_id=task.kb_id,
        subject_type="task",
        subject_id=task.pk,
        action="dead-lettered" if dead else "requeued",
        attempts=task.attempt,
        escalated=dead,
        details={"lease_owner": task.lease_owner, "build_id": task.build_id},
    )
    if dead:
        stopped = WORKER_STOPPED(attempts=task.attempt)
        task_close(
            task,
            status=IngestionTask.Status.DEAD,
            code="lease_expired",
            message=stopped.english(),
            reason=stopped,
        )
    else:
        task_requeue(task, status=IngestionTask.Status.QUEUED)
