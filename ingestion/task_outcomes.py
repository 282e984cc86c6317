"""How a claimed task ends: succeeded, failed for good, retried later, or waiting for its provider.

Every outcome is fenced: it locks build then task (the one lock order) and checks the lease, so
a worker that lost its lease changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from kb import locks
from kb.failures import GAVE_UP, failure_fields, reason_record
from kb.models import Build
from textkit.reasons import Reason
from work.backoff import backoff_seconds
from work.leases import Lease, lease_check
from work.models import IngestionTask
from work.outbox import outbox_add


def task_succeed(*, lease: Lease) -> None:
    """Mark the task succeeded. Must run inside a `fenced(lease)` transaction."""
    IngestionTask.objects.filter(pk=lease.task_id, lease_owner=lease.owner).update(
        status=IngestionTask.Status.SUCCEEDED,
        finished_at=Now(),
        lease_expires_at=None,
        last_error_code="",
        last_error="",
        last_error_reason="",
        last_error_params={},
        updated_at=Now(),
    )


def task_fail(*, lease: Lease, code: str, message: str, reason: Reason | None = None) -> None:
    """Terminal failure: the task fails and its build fails with a readable reason (`reason`,
    when declared, which the admin words in the person's language; else `message`); whatever
    is live keeps serving. Fenced: a worker that lost its lease changes nothing."""
    with transaction.atomic():
        task = _lock_build_then_task(lease)
        task_close(
            task, status=IngestionTask.Status.FAILED, code=code, message=message, reason=reason
        )


def task_retry_later(
    *, lease: Lease, code: str, message: str, reason: Reason | None = None
) -> None:
    """Retryable failure: back off with jitter and try again, or dead-letter past the cap.
    `reason`, when the error declared one, is kept beside `message` for the admin's words."""
    with transaction.atomic():
        task = _lock_build_then_task(lease)
        if task.attempt >= task.max_attempts:
            gave_up = GAVE_UP(attempts=task.attempt, detail=message)
            task_close(
                task,
                status=IngestionTask.Status.DEAD,
                code=code,
                message=gave_up.english(),
                reason=gave_up,
            )
            return
        delay = backoff_seconds(
            task.attempt, base=settings.RETRY_BASE_SECONDS, cap=settings.RETRY_MAX_SECONDS
        )
        task_requeue(task, status=IngestionTask.Status.RETRY_WAIT, delay=delay)
        _record_error(task, code=code, message=message, reason=reason)
        task.save(update_fields=["last_error_code", *ERROR_FIELDS])


PROVIDER_UNAVAILABLE = "provider_unavailable"
STORAGE_UNAVAILABLE = "storage_unavailable"


def task_wait_for_provider(
    *,
    lease: Lease,
    until: datetime,
    message: str,
    code: str = PROVIDER_UNAVAILABLE,
    reason: Reason | None = None,
) -> None:
    """The embedding provider is unavailable (its circuit breaker is open, or every attempt within
    the budget failed), or the file store is (`code` STORAGE_UNAVAILABLE): wait in `retry_wait`
    until `until` with reason `code`.

    The provider's outage is not the task's fault, so the attempt the claim counted is given back:
    waiting never brings a task closer to `dead`, and its build keeps building. Fenced like
    `task_retry_later` (build, then task, then the lease check).
    """
    with transaction.atomic():
        task = _lock_build_then_task(lease)
        task.attempt = max(task.attempt - 1, 0)
        _record_error(task, code=code, message=message, reason=reason)
        task.save(update_fields=["attempt", "last_error_code", *ERROR_FIELDS])
        delay = max(0.0, (until - timezone.now()).total_seconds())
        task_requeue(task, status=IngestionTask.Status.RETRY_WAIT, delay=delay)


def _lock_build_then_task(lease: Lease) -> IngestionTask:
    """Lock in the one order (build, then task) and check the lease; raises LeaseLost."""
    build_id = IngestionTask.objects.values_list("build_id", flat=True).get(pk=lease.task_id)
    if build_id is not None:
        locks.lock_build(build_id)
    lease_check(lease)
    return IngestionTask.objects.get(pk=lease.task_id)


def task_requeue(task: IngestionTask, *, status: str, delay: float = 0.0) -> None:
    task.status = status
    task.available_at = timezone.now() + timedelta(seconds=delay)
    task.lease_owner = ""
    task.lease_expires_at = None
    task.save(
        update_fields=["status", "available_at", "lease_owner", "lease_expires_at", "updated_at"]
    )
    outbox_add(task=task, delay=delay)


def task_close(
    task: IngestionTask, *, status: str, code: str, message: str, reason: Reason | None = None
) -> None:
    """Close a task; it and its build, unless already decided, fail with `reason` (a declared
    one: its English is the message) or, without one, `message`. Caller holds build and task."""
    task.status = status
    _record_error(task, code=code, message=message, reason=reason)
    task.lease_expires_at = None
    task.finished_at = timezone.now()
    task.save()
    if task.build_id:
        Build.objects.filter(pk=task.build_id).exclude(
            state__in=[Build.State.LIVE, Build.State.SUPERSEDED, Build.State.READY]
        ).update(
            state=Build.State.FAILED,
            **failure_fields(reason, message=message),
            finished_at=Now(),
        )


# What `_record_error` writes besides the code.
ERROR_FIELDS = ("last_error", "last_error_reason", "last_error_params")


def _record_error(task: IngestionTask, *, code: str, message: str, reason: Reason | None) -> None:
    """The task's last error: its kind (`code`), its English (bounded) and, for a declared
    reason, the reason's code and values (which the admin words in the person's language)."""
    task.last_error_code = code
    task.last_error = message[:4000]
    task.last_error_reason, task.last_error_params = reason_record(reason)
