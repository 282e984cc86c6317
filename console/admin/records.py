"""Read-mostly admin pages: index versions, builds, publication events, tenants."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy, pgettext_lazy

from console.admin.scoping import ReadOnlyAdmin, TenantScopedAdmin
from console.admin.users import TenantMembershipForm
from console.words import build_state
from kb.failures import build_error_words
from kb.models import (
    Build,
    IndexVersion,
    Publication,
    PublicationEvent,
    Tenant,
    TenantMembership,
)
from kb.selectors.builds import build_progress_of, build_role_of, builds_with_roles
from kb.selectors.index_versions import (
    index_version_progress,
    index_version_settings_line,
    index_version_status,
)

# The stored state, secondary to what a row is for (lists carry no page styles of their own).
RAW_STATE = (
    '<span class="canon-raw-state" style="white-space:nowrap;color:var(--body-quiet-color)">'
    "{}</span>"
)


@admin.register(IndexVersion)
class IndexVersionAdmin(TenantScopedAdmin):
    """Index versions with their settings and what each is doing (`index_version_status`: ready,
    building x/n, retired and still built for rollback until a date); the stored state is kept
    in its own, secondary column."""

    tenant_path = "kb__tenant_id"
    # The settings in one column, as the knowledge base's page has them: twelve columns did not
    # fit a 1,400-pixel window beside the admin's sidebar.
    list_display = ["kb", "version", "status", "settings", "stored_state", "created_at"]
    list_display_links = ["version"]
    list_select_related = ["kb__tenant", "kb__active_index_version"]
    readonly_fields = ["status", *[f.name for f in IndexVersion._meta.fields]]

    @admin.display(description=gettext_lazy("version"), ordering="number")
    def version(self, version: IndexVersion) -> str:
        return f"v{version.number}"

    @admin.display(description=gettext_lazy("settings"))
    def settings(self, version: IndexVersion) -> str:
        """Provider and model, dimensions and metric, chunk size and overlap, pipeline."""
        return index_version_settings_line(version)

    @admin.display(description=gettext_lazy("status"))
    def status(self, version: IndexVersion) -> str:
        # Counts only: no failure is named here, so no access-group filter is needed.
        progress = index_version_progress(version=version)
        state = index_version_status(version=version, progress=progress, kb=version.kb)
        return format_html('<span class="canon-state-{}">{}</span>', state.kind, state.label)

    @admin.display(description=gettext_lazy("stored state"), ordering="state")
    def stored_state(self, version: IndexVersion) -> str:
        return format_html(RAW_STATE, version.state)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Build)
class BuildAdmin(TenantScopedAdmin):
    """Builds by what they are for (`kb.selectors.builds.build_role_of`: served now, kept for
    rollback,
    kept for restore, candidate, building x/n, ...), the stored state secondary."""

    tenant_path = "kb__tenant_id"
    document_path = "document"
    list_display = [
        "id",
        "document",
        "revision_number",
        "version",
        "role",
        "progress",
        "stored_state",
        "updated_at",
    ]
    list_filter = ["state", "index_version"]
    # find a build by its document, file or error (issue 13, item 4)
    search_fields = ["document__key", "document__title", "revision__original_name", "error"]
    # The error in the reader's language in place of the stored English (its code beside it).
    readonly_fields = [
        "role",
        *["error_words" if f.name == "error" else f.name for f in Build._meta.fields],
    ]
    exclude = ["error"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return builds_with_roles(super().get_queryset(request))

    @admin.display(description=gettext_lazy("revision"))
    def revision_number(self, build: Build) -> int:
        return build.revision.number

    @admin.display(description=gettext_lazy("index version"), ordering="index_version__number")
    def version(self, build: Build) -> str:
        return f"v{build.index_version.number}"

    @admin.display(description=pgettext_lazy("build", "role"))
    def role(self, build: Build) -> str:
        role = build_role_of(build=build)
        return format_html('<span class="canon-role-{}">{}</span>', role.kind, role.label)

    @admin.display(description=gettext_lazy("stored state"), ordering="state")
    def stored_state(self, build: Build) -> str:
        return format_html(RAW_STATE, build_state(build.state))

    @admin.display(description=gettext_lazy("error"))
    def error_words(self, build: Build) -> str:
        return build_error_words(build)

    @admin.display(description=gettext_lazy("chunks"))
    def progress(self, build: Build) -> str:
        """The chunk count, linked to the build's parsed text and chunks (`admin.chunks`)."""
        return format_html(
            '<a class="chunks-link" href="{}">{}</a>',
            reverse("admin:kb_build_chunks", args=[build.pk]),
            build_progress_of(build=build)["label"],
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PublicationEvent)
class PublicationEventAdmin(ReadOnlyAdmin):
    """Pointer changes; each names its build by revision, version and what it is for now."""

    tenant_path = "kb__tenant_id"
    document_path = "document"
    list_display = [
        "created_at",
        "action",
        "document",
        "index_version_number",
        "revision_number",
        "build_now",
        "actor",
        "reason",
    ]
    list_filter = ["action"]
    list_select_related = [
        "document",
        "index_version",
        "actor",
        "build__kb",
        "build__document",
        "build__index_version",
        "build__revision",
    ]
    readonly_fields = [f.name for f in PublicationEvent._meta.fields]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        pointed = Publication.objects.filter(build_id=OuterRef("build_id"))
        return super().get_queryset(request).annotate(build_pointed=Exists(pointed))

    @admin.display(description=gettext_lazy("index version"))
    def index_version_number(self, event: PublicationEvent) -> str:
        return f"v{event.index_version.number}" if event.index_version else "—"

    @admin.display(description=gettext_lazy("that build now"))
    def build_now(self, event: PublicationEvent) -> str:
        build = event.build
        if build is None:
            return "—"
        role = build_role_of(build=build, pointed=getattr(event, "build_pointed", None))
        return format_html(
            gettext('build {} (r{}): <span class="canon-role-{}">{}</span>'),
            build.pk,
            build.revision.number,
            role.kind,
            role.label,
        )


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = "id"
    list_display = ["slug", "name", "created_at"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser


@admin.register(TenantMembership)
class TenantMembershipAdmin(admin.ModelAdmin):
    """Also inline on each user's page (`console.admin.users`), where it is usually set."""

    list_display = ["user", "tenant", "access_groups"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        kwargs["form"] = TenantMembershipForm
        return super().get_form(request, obj, change, **kwargs)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser
