"""The knowledge-base admin: settings, index versions and their swaps."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.http import HttpRequest
from django.urls import path, reverse
from django.utils.html import format_html

from console.admin import index_versions, kb_home, test_search
from console.admin.scoping import TenantScopedAdmin
from kb.models import (
    KnowledgeBase,
)
from kb.selectors.index_versions import index_version_rollback_target
from kb.services.index_versions import knowledge_base_create


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(TenantScopedAdmin):
    list_display = ["slug", "name", "home", "tenant", "active_index_version", "require_approval"]
    fields = [
        "tenant",
        "name",
        "slug",
        "description",
        "require_approval",
        "retention_days",
        "active_index_version",
    ]
    readonly_fields = ["active_index_version"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return (
            ["active_index_version"] if obj is None else ["tenant", "slug", "active_index_version"]
        )

    def save_model(self, request: HttpRequest, obj: KnowledgeBase, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created = knowledge_base_create(
            tenant=obj.tenant,
            name=obj.name,
            slug=obj.slug,
            require_approval=obj.require_approval,
        )
        obj.pk = created.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        """A settings change says each field's value before and after ("Changed require
        approval: off → on."), for the History page and the knowledge base's timeline."""
        if add or not form.changed_data:
            return super().construct_change_message(request, form, formsets, add)

        def shown(value: Any) -> str:
            if isinstance(value, bool):
                return "on" if value else "off"
            text = "—" if value in (None, "") else str(value)
            return text if len(text) <= 60 else f"{text[:57]}…"

        changes = [
            f"{form.fields[name].label or name.replace('_', ' ')}".lower()
            + f": {shown(form.initial.get(name))} → {shown(form.cleaned_data.get(name))}"
            for name in form.changed_data
        ]
        return f"Changed {'; '.join(changes)}."

    @admin.display(description="home")
    def home(self, kb: KnowledgeBase) -> str:
        url = reverse("admin:kb_knowledgebase_home", args=[kb.pk])
        return format_html('<a class="kb-home-link" href="{}">Home</a>', url)

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            # the knowledge base's home, its timeline and test search (kb_home, test_search)
            path("<path:object_id>/home/", wrap(kb_home.home_view), name="kb_knowledgebase_home"),
            path(
                "<path:object_id>/home/progress/",
                wrap(kb_home.progress_view),
                name="kb_knowledgebase_progress",
            ),
            path(
                "<path:object_id>/timeline/",
                wrap(kb_home.timeline_view),
                name="kb_knowledgebase_timeline",
            ),
            path(
                "<path:object_id>/search/",
                wrap(test_search.test_search_view),
                name="kb_knowledgebase_search",
            ),
            path(
                "<path:object_id>/index-versions/new/",
                wrap(index_versions.index_version_create_view),
                name="kb_indexversion_new",
            ),
            path(
                "<path:object_id>/index-versions/<int:version_id>/activate/",
                wrap(index_versions.index_version_swap_view),
                name="kb_indexversion_activate",
            ),
            path(
                "<path:object_id>/index-versions/rollback/",
                wrap(index_versions.index_version_rollback_view),
                name="kb_indexversion_rollback",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        kb = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if kb is not None:
            extra.update(
                versions=index_versions.index_version_rows(kb, request),
                can_manage_versions=request.user.has_perm("kb.manage_index_versions"),
                rollback_target=index_version_rollback_target(kb=kb),
            )
        return super().change_view(request, object_id, form_url, extra)
