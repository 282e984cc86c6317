"""Read-only views of the machinery: tasks, outbox events, stage results, audit events, and the
embedding providers' circuit breakers on top of the task list."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from celery import current_app as celery_app
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.text import Truncator
from django.utils.translation import gettext, gettext_lazy

from console.admin import scoping
from console.admin.scoping import may_read, user_tenant_ids
from console.admin.work_queues import DASHBOARD_AFTER, long_held_runs
from console.dashboard import dashboard, every
from embeddings.breaker import breaker_states
from ingestion.models import StageResult
from ingestion.reconciler.runner import anomaly_dismiss, anomaly_retry
from ingestion.task_outcomes import PROVIDER_UNAVAILABLE
from kb.failures import reason_words, task_error_words
from kb.verify import verify
from work.models import AuditEvent, IngestionTask, OutboxEvent

logger = logging.getLogger(__name__)
RESTRICTED = gettext_lazy("(a document of access groups you do not hold)")
# How much of a task's last error its row shows (the task's page shows it whole).
ERROR_LIST_CHARS = 200


class ReadOnlyAdmin(scoping.ReadOnlyAdmin):
    tenant_path = "kb__tenant_id"


class WaitReasonFilter(admin.SimpleListFilter):
    """Tasks waiting on the embedding provider apart from tasks that failed or retry for other
    reasons (a bad file, a crash, a conflict)."""

    title = gettext_lazy("why")
    parameter_name = "why"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("provider", gettext("Waiting on the embedding provider")),
            ("retrying", gettext("Retrying for another reason")),
            ("failed", gettext("Failed or dead")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return tasks_by_reason(queryset).get(self.value() or "", queryset)


def tasks_by_reason(queryset: QuerySet[Any]) -> dict[str, QuerySet[Any]]:
    status = IngestionTask.Status
    waiting = queryset.filter(status=status.RETRY_WAIT)
    return {
        "provider": waiting.filter(last_error_code=PROVIDER_UNAVAILABLE),
        "retrying": waiting.exclude(last_error_code=PROVIDER_UNAVAILABLE),
        "failed": queryset.filter(status__in=[status.FAILED, status.DEAD]),
    }


def _when(timestamp: float | None) -> datetime | None:
    return datetime.fromtimestamp(timestamp, tz=UTC) if timestamp else None


def provider_panel(queryset: QuerySet[Any]) -> dict[str, Any]:
    """What the task list shows above its rows: each breaker's state and the tasks waiting on
    providers, counted within `queryset` (already scoped to the user's tenant)."""
    try:
        breakers: list[dict[str, Any]] | None = [
            {
                "label": state.label,
                "state": state.display_state,
                "failures": state.failures,
                "last_error": state.last_error,
                "last_error_at": _when(state.last_error_at),
                "next_probe_at": _when(state.next_probe_at),
                "probe_in_flight": state.probe_in_flight,
                "opens": state.opens,
                "rejected": state.rejected,
            }
            for state in breaker_states()
        ]
    except Exception as exc:  # Redis down: say so, never break the page
        logger.warning("cannot read circuit breakers: %s", exc)
        breakers = None
    by_reason = tasks_by_reason(queryset)
    waiting = by_reason["provider"].order_by("available_at")
    return {
        "breakers": breakers,
        "waiting_on_provider": [
            _worded(row)
            for row in waiting.values(
                "id",
                "kb__slug",
                "document__key",
                "available_at",
                "last_error",
                "last_error_reason",
                "last_error_params",
            )[:20]
        ],
        "counts": {reason: qs.count() for reason, qs in by_reason.items()},
    }


def _worded(row: dict[str, Any]) -> dict[str, Any]:
    """A waiting task's row with its last error in the reader's language where the error
    declared its reason (`kb.failures`), else as stored."""
    code, values = row.pop("last_error_reason"), row.pop("last_error_params")
    return {**row, "last_error": reason_words(code, values, fallback=row["last_error"])}


def _document_label(request: HttpRequest, document: Any) -> str:
    if document is None:
        return ""
    return str(document.key) if may_read(request, document) else str(RESTRICTED)


@admin.register(IngestionTask)
class IngestionTaskAdmin(ReadOnlyAdmin):
    document_path = "document"
    change_list_template = "admin/ingestion/ingestiontask/change_list.html"
    list_display = [
        "id",
        "kind",
        "document",
        "build",
        "status",
        "attempt",
        "lease_owner",  # its expiry is on the task's page: the list must fit the screen
        "last_error_code",
        "error_brief",
        "available_at",
        "updated_at",
    ]
    list_filter = [WaitReasonFilter, "status", "kind", "last_error_code"]
    list_select_related = ["document", "build"]
    # The last error in the reader's language in place of the stored English (its reason's
    # code and values beside it).
    readonly_fields = [
        "error_words" if f.name == "last_error" else f.name for f in IngestionTask._meta.fields
    ]
    exclude = ["last_error"]

    @admin.display(description=gettext_lazy("last error"))
    def error_words(self, task: IngestionTask) -> str:
        return task_error_words(task)

    @admin.display(description=gettext_lazy("last error"))
    def error_brief(self, task: IngestionTask) -> str:
        return Truncator(task_error_words(task)).chars(ERROR_LIST_CHARS)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {**(extra_context or {}), **provider_panel(self.get_queryset(request))}
        return super().changelist_view(request, extra_context=extra_context)

    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [
            path("dashboard/", wrap(self.dashboard_view), name="ingestion_dashboard"),
            path(
                "dashboard/anomalies/<int:event_id>/<str:action>/",
                wrap(self.anomaly_view),
                name="ingestion_anomaly",
            ),
            *super().get_urls(),
        ]

    def _dashboard_allowed(self, request: HttpRequest) -> list[int] | None:
        """Tenant scope of the dashboard (None: all tenants, for superusers)."""
        if not request.user.has_perm("ingestion.view_auditevent"):
            raise PermissionDenied(gettext("The dashboard is for index admins."))
        return None if request.user.is_superuser else user_tenant_ids(request)

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Consistency at a glance; POST runs kb_verify now (superusers: it reads everything)."""
        tenant_ids = self._dashboard_allowed(request)
        violations = None
        if request.method == "POST" and request.user.is_superuser:
            violations = [str(v) for v in verify()]
        board = dashboard(tenant_ids=tenant_ids)
        # Operators see every task of their tenant (counts and rows), but a document's key
        # only if they may read the document.
        for task in board.running + board.waiting + board.dead:
            task.document_label = _document_label(request, task.document)  # type: ignore[attr-defined]
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Consistency dashboard"),
            "d": board,
            "breakers": provider_panel(IngestionTask.objects.none())["breakers"],
            "schedule": [
                (name, entry["task"], every(entry["schedule"]))
                for name, entry in sorted(celery_app.conf.beat_schedule.items())
            ],
            "violations": violations,
            # a person's queue that went unanswered for over a day (console.admin.work_queues)
            "held_runs": long_held_runs(tenant_ids=tenant_ids),
            "held_after": DASHBOARD_AFTER,
            "can_verify": request.user.is_superuser,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/ingestion/dashboard.html", context)

    def anomaly_view(self, request: HttpRequest, event_id: int, action: str) -> HttpResponse:
        """The manual queue: retry the repair, or dismiss with a reason (POST only)."""
        self._dashboard_allowed(request)
        event = (
            self.scoped_queryset(request, AuditEvent)
            .filter(pk=event_id, escalated=True, resolved_at__isnull=True)
            .first()
        )
        if request.method != "POST" or event is None or action not in ("retry", "dismiss"):
            raise Http404(gettext("No such open anomaly."))
        if action == "retry":
            outcome = anomaly_retry(event_id=event.pk, actor=request.user)
            messages.success(request, gettext("Repair retried: %(outcome)s") % {"outcome": outcome})
        else:
            reason = request.POST.get("reason", "").strip()
            if not reason:
                messages.error(request, gettext("Say why you dismiss it."))
            else:
                anomaly_dismiss(event_id=event.pk, reason=reason, actor=request.user)
                messages.success(request, gettext("Dismissed."))
        return HttpResponseRedirect(reverse("admin:ingestion_dashboard"))


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnlyAdmin):
    tenant_path = "task__kb__tenant_id"
    document_path = "task__document"
    list_display = [
        "id",
        "kind",
        "task",
        "created_at",
        "available_at",
        "published_at",
        "attempts",
        "dead_at",
    ]


@admin.register(StageResult)
class StageResultAdmin(ReadOnlyAdmin):
    tenant_path = "task__kb__tenant_id"
    document_path = "task__document"
    list_display = ["id", "task", "stage", "status", "attempts", "updated_at"]
    exclude = ["output"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["detected_at", "kind", "subject_type", "subject_id", "action", "escalated"]
    list_filter = ["kind", "escalated"]
