"""Reads for the consistency dashboard: a fixed number of aggregate queries, whatever the
number of tasks, events or anomalies (lists are bounded)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, Min, Q, QuerySet, Sum
from django.utils import timezone
from django.utils.translation import gettext

from kb.models import Build
from work.jobs import JOBS, jobs_last_run
from work.models import AuditEvent, IngestionTask, OutboxEvent

LIST_LIMIT = 50
EMBEDDED_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Embedded:
    """Chunks embedded for one provider and model by builds that moved in the last hour: what a
    local model (which makes no remote call and has no circuit breaker) did, from the builds'
    own progress (`Build.chunks_embedded`, vectors from the embedding cache included)."""

    provider: str
    model: str
    chunks: int
    builds: int


@dataclass
class Dashboard:
    """`outbox_due` and `tasks_by_status` count only work that may run now; work scheduled for
    later (a purge at the end of the retention window, a retry's back-off) is counted apart,
    because it is not lag. A build task that failed for a revision since superseded by a newer
    one, or of a document since deleted, is history, counted apart too (`tasks_failed_earlier`,
    `tasks_failed_deleted`) and not listed."""

    outbox_due: int
    outbox_oldest: datetime | None
    outbox_scheduled: int
    outbox_next: datetime | None
    outbox_dead: int
    tasks_by_status: dict[str, int]
    tasks_scheduled: int
    tasks_next: datetime | None
    running: list[IngestionTask]
    waiting: list[IngestionTask]
    dead: list[IngestionTask]
    anomalies: list[AuditEvent]
    anomalies_by_kind: dict[str, int]
    last_runs: dict[str, datetime | None] = field(default_factory=dict)
    now: datetime = field(default_factory=timezone.now)
    # failed or dead tasks of a revision no longer desired: history, not counted in
    # `tasks_by_status` nor listed in `dead` (`kb.selectors.builds.current_failure_q`)
    tasks_failed_earlier: int = 0
    # failed or dead tasks of a document since deleted: history too, counted apart
    tasks_failed_deleted: int = 0
    embedded: list[Embedded] = field(default_factory=list)

    @property
    def outbox_lag_seconds(self) -> float:
        return (self.now - self.outbox_oldest).total_seconds() if self.outbox_oldest else 0.0


def _scoped(qs: QuerySet[Any], path: str, tenant_ids: list[int] | None) -> QuerySet[Any]:
    return qs if tenant_ids is None else qs.filter(**{f"{path}__in": tenant_ids})


def dashboard(*, tenant_ids: list[int] | None) -> Dashboard:
    """Everything the dashboard shows; `tenant_ids=None` means every tenant (superusers)."""
    now = timezone.now()
    tasks = _scoped(IngestionTask.objects.all(), "kb__tenant_id", tenant_ids)
    events = _scoped(OutboxEvent.objects.all(), "task__kb__tenant_id", tenant_ids)
    pending = Q(published_at__isnull=True, dead_at__isnull=True)
    outbox = events.aggregate(
        due=Count("id", filter=pending & Q(available_at__lte=now)),
        oldest=Min("available_at", filter=pending & Q(available_at__lte=now)),
        scheduled=Count("id", filter=pending & Q(available_at__gt=now)),
        next=Min("available_at", filter=pending & Q(available_at__gt=now)),
        dead=Count("id", filter=Q(dead_at__isnull=False)),
    )
    # A queued task whose time has not come is scheduled, not waiting (retry_wait is shown
    # with its next try in its own list).
    later = Q(status=IngestionTask.Status.QUEUED, available_at__gt=now)
    failed = Q(status__in=[IngestionTask.Status.FAILED, IngestionTask.Status.DEAD])
    earlier = (
        failed
        & Q(build__isnull=False)
        & ~Q(build__revision__number=F("document__desired_revision"))
    )
    # A deleted document's failure needs nobody: nothing of it is served or will be built.
    deleted = failed & Q(document__deleted_at__isnull=False) & ~earlier
    rows = (
        tasks.values_list("status")
        .annotate(
            n=Count("id", filter=~later & ~earlier & ~deleted),
            scheduled=Count("id", filter=later),
            next=Min("available_at", filter=later),
            earlier=Count("id", filter=earlier),
            of_deleted=Count("id", filter=deleted),
        )
        .order_by("status")
    )
    by_status: dict[str, int] = {}
    scheduled, next_at, failed_earlier, failed_deleted = 0, None, 0, 0
    for status, n, status_scheduled, status_next, status_earlier, status_deleted in rows:
        failed_earlier += status_earlier
        failed_deleted += status_deleted
        if n:
            by_status[status] = n
        if status_scheduled:  # only the queued row has any
            scheduled, next_at = status_scheduled, status_next
    listed = tasks.select_related("document", "build__revision").order_by("-updated_at")
    anomalies = _scoped(
        AuditEvent.objects.filter(
            kind__startswith="anomaly:", escalated=True, resolved_at__isnull=True
        ),
        "kb__tenant_id",
        tenant_ids,
    )
    embedded = [
        Embedded(provider, model, chunks, builds)
        for provider, model, chunks, builds in _scoped(
            Build.objects.filter(updated_at__gte=now - EMBEDDED_WINDOW, chunks_embedded__gt=0),
            "kb__tenant_id",
            tenant_ids,
        )
        .values_list("index_version__provider", "index_version__model")
        .annotate(chunks=Sum("chunks_embedded"), builds=Count("id"))
        .order_by("index_version__provider", "index_version__model")
    ]
    try:
        last_runs = jobs_last_run()
    except Exception:  # the cache is down; the rest of the page still says what it knows
        last_runs = dict.fromkeys(JOBS)
    return Dashboard(
        outbox_due=outbox["due"],
        outbox_oldest=outbox["oldest"],
        outbox_scheduled=outbox["scheduled"],
        outbox_next=outbox["next"],
        outbox_dead=outbox["dead"],
        tasks_by_status=by_status,
        tasks_scheduled=scheduled,
        tasks_next=next_at,
        running=list(listed.filter(status="running").order_by("lease_expires_at")[:LIST_LIMIT]),
        waiting=list(listed.filter(status="retry_wait")[:LIST_LIMIT]),
        dead=list(
            listed.filter(status__in=["dead", "failed"]).exclude(earlier | deleted)[:LIST_LIMIT]
        ),
        anomalies=list(anomalies.order_by("-detected_at")[:LIST_LIMIT]),
        anomalies_by_kind=dict(
            anomalies.values_list("kind").annotate(n=Count("id")).order_by("kind")
        ),
        last_runs=last_runs,
        now=now,
        tasks_failed_earlier=failed_earlier,
        tasks_failed_deleted=failed_deleted,
        embedded=embedded,
    )


def every(seconds: Any) -> str:
    """A periodic job's interval as a person reads it ("every 15 s", "every 5 min")."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return str(seconds)  # a crontab or solar schedule describes itself
    if value >= 3600 and value % 3600 == 0:
        return gettext("every %(n)s h") % {"n": f"{value / 3600:g}"}
    if value >= 60 and value % 60 == 0:
        return gettext("every %(n)s min") % {"n": f"{value / 60:g}"}
    return gettext("every %(n)s s") % {"n": f"{value:g}"}
