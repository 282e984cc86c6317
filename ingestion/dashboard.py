"""Reads for the consistency dashboard: a fixed number of aggregate queries, whatever the
number of tasks, events or anomalies (lists are bounded)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from ingestion.models import AuditEvent, IngestionTask, OutboxEvent

LIST_LIMIT = 50
JOBS = ("relay", "sweeper", "reconciler", "gc")


def job_ran(name: str) -> None:
    """Remember when a periodic job last ran (in the shared cache; losing it loses no fact)."""
    try:
        cache.set(f"canon:last-run:{name}", timezone.now().isoformat(), timeout=None)
    except Exception:  # the cache is Redis; a dashboard detail must never fail a job
        return


@dataclass
class Dashboard:
    outbox_unpublished: int
    outbox_oldest: datetime | None
    outbox_dead: int
    tasks_by_status: dict[str, int]
    running: list[IngestionTask]
    waiting: list[IngestionTask]
    dead: list[IngestionTask]
    anomalies: list[AuditEvent]
    anomalies_by_kind: dict[str, int]
    last_runs: dict[str, str | None] = field(default_factory=dict)
    now: datetime = field(default_factory=timezone.now)

    @property
    def outbox_lag_seconds(self) -> float:
        return (self.now - self.outbox_oldest).total_seconds() if self.outbox_oldest else 0.0


def _scoped(qs: QuerySet[Any], path: str, tenant_ids: list[int] | None) -> QuerySet[Any]:
    return qs if tenant_ids is None else qs.filter(**{f"{path}__in": tenant_ids})


def dashboard(*, tenant_ids: list[int] | None) -> Dashboard:
    """Everything the dashboard shows; `tenant_ids=None` means every tenant (superusers)."""
    tasks = _scoped(IngestionTask.objects.all(), "kb__tenant_id", tenant_ids)
    events = _scoped(OutboxEvent.objects.all(), "task__kb__tenant_id", tenant_ids)
    outbox = events.aggregate(
        unpublished=Count("id", filter=Q(published_at__isnull=True, dead_at__isnull=True)),
        oldest=Min("available_at", filter=Q(published_at__isnull=True, dead_at__isnull=True)),
        dead=Count("id", filter=Q(dead_at__isnull=False)),
    )
    by_status = dict(tasks.values_list("status").annotate(n=Count("id")).order_by("status"))
    listed = tasks.select_related("document", "build__revision").order_by("-updated_at")
    anomalies = _scoped(
        AuditEvent.objects.filter(
            kind__startswith="anomaly:", escalated=True, resolved_at__isnull=True
        ),
        "kb__tenant_id",
        tenant_ids,
    )
    try:
        runs = cache.get_many([f"canon:last-run:{job}" for job in JOBS])
    except Exception:
        runs = {}
    return Dashboard(
        outbox_unpublished=outbox["unpublished"],
        outbox_oldest=outbox["oldest"],
        outbox_dead=outbox["dead"],
        tasks_by_status=by_status,
        running=list(listed.filter(status="running").order_by("lease_expires_at")[:LIST_LIMIT]),
        waiting=list(listed.filter(status="retry_wait")[:LIST_LIMIT]),
        dead=list(listed.filter(status__in=["dead", "failed"])[:LIST_LIMIT]),
        anomalies=list(anomalies.order_by("-detected_at")[:LIST_LIMIT]),
        anomalies_by_kind=dict(
            anomalies.values_list("kind").annotate(n=Count("id")).order_by("kind")
        ),
        last_runs={job: runs.get(f"canon:last-run:{job}") for job in JOBS},
    )
