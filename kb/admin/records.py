"""Read-mostly admin pages: index versions, builds, publication events, tenants."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from kb import selectors
from kb.admin.scoping import TenantScopedAdmin
from kb.models import (
    Build,
    IndexVersion,
    PublicationEvent,
    Tenant,
    TenantMembership,
)


@admin.register(IndexVersion)
class IndexVersionAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    list_display = ["kb", "number", "state", "provider", "model", "dimensions", "created_at"]
    readonly_fields = [f.name for f in IndexVersion._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Build)
class BuildAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    document_path = "document"
    list_display = [
        "id",
        "document",
        "revision_number",
        "index_version",
        "state",
        "progress",
        "updated_at",
    ]
    list_filter = ["state"]
    list_select_related = ["document", "revision", "index_version__kb__tenant"]
    readonly_fields = [f.name for f in Build._meta.fields]

    @admin.display(description="revision")
    def revision_number(self, build: Build) -> int:
        return build.revision.number

    @admin.display(description="chunks")
    def progress(self, build: Build) -> str:
        return format_html("{}", selectors.build_progress_of(build=build)["label"])

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PublicationEvent)
class PublicationEventAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    document_path = "document"
    list_display = ["created_at", "action", "document", "revision_number", "build", "actor"]
    list_filter = ["action"]
    readonly_fields = [f.name for f in PublicationEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = "id"
    list_display = ["slug", "name", "created_at"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser


@admin.register(TenantMembership)
class TenantMembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "access_groups"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser
