"""Evaluation's leased work (a run, a calibration) whose task ended without its result: the
worker was killed or timed out on every attempt (the lease sweeper gave up), the task failed,
or it is gone. Such work is failed with the task's reason, so its page says why and asking
again starts anew; work whose task is still open (queued, running, waiting to retry) is left
to the lease sweeper."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from work.models import IngestionTask


def orphans_close(
    rows: QuerySet[Any],
    *,
    open_states: Collection[str],
    failed: str,
    finished_field: str,
    default_reason: str,
) -> int:
    """Fail the open ones of `rows` (`open_states`) whose task ended without a result: state
    `failed`, `error` the task's last error (`default_reason` when it kept none or is gone),
    `finished_field` now. Returns how many. Idempotent: each is failed by a conditional UPDATE
    on its open state, so a worker finishing meanwhile wins or loses whole."""
    closed = 0
    for row in rows.filter(state__in=open_states).select_related("task"):
        task = row.task
        if task is not None and task.status in IngestionTask.OPEN_STATUSES:
            continue
        reason = (task.last_error if task is not None else "") or default_reason
        closed += (
            type(row)
            .objects.filter(pk=row.pk, state__in=open_states)
            .update(state=failed, error=reason[:4000], **{finished_field: timezone.now()})
        )
    return closed
