"""Read-only views of the machinery: tasks, outbox events, stage results, audit events."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ingestion.models import AuditEvent, IngestionTask, OutboxEvent, StageResult
from kb.admin import TenantScopedAdmin


class ReadOnlyAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(IngestionTask)
class IngestionTaskAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "kind",
        "document",
        "build",
        "status",
        "attempt",
        "lease_owner",
        "lease_expires_at",
        "last_error_code",
        "updated_at",
    ]
    list_filter = ["status", "kind"]
    list_select_related = ["document", "build"]


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnlyAdmin):
    tenant_path = "task__kb__tenant_id"
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
    list_display = ["id", "task", "stage", "status", "attempts", "updated_at"]
    exclude = ["output"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["detected_at", "kind", "subject_type", "subject_id", "action", "escalated"]
    list_filter = ["kind", "escalated"]
