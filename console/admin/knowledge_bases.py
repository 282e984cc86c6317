"""The knowledge-base admin: settings, index versions and their swaps."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from console.admin import index_versions, kb_home, metadata_fields, test_search
from console.admin.scoping import TenantScopedAdmin
from kb.metadata import MetadataInvalid
from kb.models import (
    KnowledgeBase,
    MetadataField,
)
from kb.selectors.index_versions import index_version_rollback_target
from kb.services.index_versions import knowledge_base_create


class KnowledgeBaseForm(forms.ModelForm):
    """The settings form. A post without one of the extraction settings (a script, a page from
    before they existed) leaves that setting as it is."""

    class Meta:
        model = KnowledgeBase
        fields = ["ocr_mode", "extract_headers_footers"]  # the admin's `fields` are the form's

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields.get("ocr_mode")
        if field is not None and self.is_bound and "ocr_mode" not in self.data:
            field.disabled = True  # its value is then the current one, and nothing changes


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(TenantScopedAdmin):
    form = KnowledgeBaseForm
    list_display = ["slug", "name", "home", "tenant", "active_index_version", "require_approval"]
    ordering = ["tenant__slug", "slug"]  # a stable order for the list and any autocomplete
    search_fields = ["slug", "name"]
    fields = [
        "tenant",
        "name",
        "slug",
        "description",
        "require_approval",
        "retention_days",
        "ocr_mode",
        "extract_headers_footers",
        "active_index_version",
    ]
    readonly_fields = ["active_index_version"]
    radio_fields = {"ocr_mode": admin.VERTICAL}
    inlines = [metadata_fields.MetadataFieldInline]

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        if obj is None:
            return []  # fields are declared once the knowledge base exists
        if request.method == "POST" and "metadata_fields-TOTAL_FORMS" not in request.POST:
            return []  # a post of the settings alone (a script, an older page) leaves fields be
        return self.inlines

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is MetadataField:
            metadata_fields.formset_save(request, form.instance, formset)
            return
        super().save_formset(request, form, formset, change)

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
            ocr_mode=obj.ocr_mode,
            extract_headers_footers=obj.extract_headers_footers,
        )
        obj.pk = created.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        """A settings change says each field's value before and after ("Changed require
        approval: off → on.", "Changed OCR: pages without text only → off."), for the History
        page and the knowledge base's timeline."""
        fields = [
            line
            for formset in formsets or []
            for line in getattr(formset, metadata_fields.CHANGE_LINES_ATTR, [])
        ]
        if add or not (form.changed_data or fields):
            return super().construct_change_message(request, form, formsets, add)

        def shown(name: str, value: Any) -> str:
            if isinstance(value, bool):
                return gettext("on") if value else gettext("off")
            choices = dict(getattr(form.fields[name], "choices", None) or ())
            if value in choices:
                return lowered(str(choices[value]))  # the words the form shows, not the code
            text = "—" if value in (None, "") else str(value)
            return text if len(text) <= 60 else f"{text[:57]}…"

        def lowered(label: str) -> str:
            return label if label[:2].isupper() else label[:1].lower() + label[1:]  # "OCR"

        changes = [
            lowered(str(form.fields[name].label or name.replace("_", " ")))
            + f": {shown(name, form.initial.get(name))}"
            + f" → {shown(name, form.cleaned_data.get(name))}"
            for name in form.changed_data
        ]
        words = [gettext("changed %(what)s") % {"what": "; ".join(changes)}] if changes else []
        text = "; ".join([*words, *fields])
        return f"{text[:1].upper()}{text[1:]}."

    @admin.display(description=gettext_lazy("home"))
    def home(self, kb: KnowledgeBase) -> str:
        url = reverse("admin:kb_knowledgebase_home", args=[kb.pk])
        return format_html('<a class="kb-home-link" href="{}">{}</a>', url, gettext("Home"))

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
                "<path:object_id>/metadata-fields/<int:field_id>/delete/",
                wrap(metadata_fields.field_delete_view),
                name="kb_metadatafield_delete",
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
        try:
            return super().change_view(request, object_id, form_url, extra)
        except MetadataInvalid as exc:
            # a document's value stopped fitting between the form's check and the save
            messages.error(request, gettext("Nothing was saved: %(why)s") % {"why": exc})
            return HttpResponseRedirect(request.path)
