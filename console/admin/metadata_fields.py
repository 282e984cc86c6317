"""The metadata fields a knowledge base declares, on its change page: an inline whose saves go
through `kb.services.metadata` (never the formset's own save), and a delete behind a
confirmation page that says how many documents hold a value.

Who may: index admins and superusers declare, retype and delete fields (the MetadataField
model permissions of `kb.roles`); content managers see them, and set documents' values on the
document pages.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy, ngettext

from console.admin.confirmation import KNOWLEDGE_BASE_TIMELINE, confirm, require
from console.admin.scoping import NOT_FOUND, TenantScopedAdmin
from kb.metadata import MetadataInvalid, check_field_name
from kb.models import KnowledgeBase, MetadataField
from kb.selectors.metadata import metadata_field_holders, metadata_field_retype_problem
from kb.services.metadata import metadata_field_delete, metadata_field_save

CHANGE_LINES_ATTR = "canon_change_lines"  # what a formset save did, for the History line


class MetadataFieldForm(forms.ModelForm):
    """One field. A declared field's name is fixed (a rename is a new field, then a delete);
    a new type is checked against every document's value first, so a change that some value
    does not fit is refused here, with the service's words."""

    class Meta:
        model = MetadataField
        fields = ["name", "type", "description"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["name"].disabled = True

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if not self.instance.pk:
            try:
                check_field_name(name)
            except MetadataInvalid as exc:
                raise forms.ValidationError(str(exc)) from exc
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        name, kind = data.get("name"), data.get("type")
        retyped = not self.instance.pk or "type" in self.changed_data
        if name and kind and retyped and self.instance.kb_id:
            problem = metadata_field_retype_problem(kb=self.instance.kb, name=name, type=kind)
            if problem:
                self.add_error("type", problem)
        return data


class MetadataFieldInline(admin.TabularInline):
    model = MetadataField
    form = MetadataFieldForm
    extra = 1
    can_delete = False  # a delete strips documents' values: it has its confirmation page
    verbose_name = gettext_lazy("metadata field")
    verbose_name_plural = gettext_lazy("metadata fields")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = ["name", "type", "description"]
        if request.user.has_perm("kb.delete_metadatafield"):
            fields.append("remove")
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["remove"]

    @admin.display(description=gettext_lazy("delete"))
    def remove(self, field: MetadataField) -> str:
        if not field.pk:
            return ""
        url = reverse("admin:kb_metadatafield_delete", args=[field.kb_id, field.pk])
        return format_html(
            '<a class="deletelink metadata-field-delete" href="{}">{}</a>', url, gettext("Delete…")
        )


def formset_save(request: HttpRequest, kb: KnowledgeBase, formset: Any) -> None:
    """Each declared or changed field through `metadata_field_save` (all or nothing per field;
    a value that stopped fitting since the form's check raises MetadataInvalid, which the
    change view reports). Records the History line's parts on the formset."""
    lines: list[str] = []
    formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
    for form in formset.forms:
        if not form.has_changed() or not form.cleaned_data:
            continue
        data = form.cleaned_data
        before = form.initial.get("type")
        saved = metadata_field_save(
            kb=kb, name=data["name"], type=data["type"], description=data.get("description", "")
        )
        if form.instance.pk:
            formset.changed_objects.append((saved, form.changed_data))
            if before != saved.type:
                lines.append(
                    gettext("changed metadata field %(name)s: %(before)s → %(after)s")
                    % {"name": saved.name, "before": before, "after": saved.type}
                )
            else:
                lines.append(
                    gettext("changed the description of metadata field %(name)s")
                    % {"name": saved.name}
                )
        else:
            formset.new_objects.append(saved)
            lines.append(
                gettext("declared metadata field %(name)s (%(type)s)")
                % {"name": saved.name, "type": saved.type}
            )
    setattr(formset, CHANGE_LINES_ATTR, lines)


def field_delete_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, field_id: int
) -> HttpResponse:
    """Delete a field: GET the confirmation (how many documents hold a value, whose values go
    with it), POST with a reason to delete through `metadata_field_delete`."""
    kb: KnowledgeBase = model_admin.get_scoped_object_or_404(request, object_id)
    field = MetadataField.objects.filter(kb=kb, pk=field_id).first()
    if field is None:
        raise Http404(NOT_FOUND)
    require(request, "kb.delete_metadatafield")
    holders = metadata_field_holders(kb=kb, name=field.name)
    back = reverse("admin:kb_knowledgebase_change", args=[kb.pk])

    def perform(reason: str, expected: int | None) -> str:
        stripped = metadata_field_delete(kb=kb, name=field.name)
        words = ngettext("%(n)s document", "%(n)s documents", stripped) % {"n": stripped}
        model_admin.log_change(
            request,
            kb,
            gettext("Deleted metadata field %(name)s; removed its value from %(words)s: %(reason)s")
            % {"name": field.name, "words": words, "reason": reason},
        )
        return gettext("Deleted the metadata field %(name)s and its value from %(words)s.") % {
            "name": field.name,
            "words": words,
        }

    held = (
        ngettext(
            "%(n)s document holds a value; it is removed from each",
            "%(n)s documents hold a value; it is removed from each",
            holders,
        )
        % {"n": holders}
        if holders
        else gettext("No document holds a value")
    )
    summary = {
        "facts": [
            (gettext("knowledge base"), str(kb)),
            (gettext("field"), f"{field.name} ({field.get_type_display()})"),
            (gettext("documents"), held),
            (gettext("search"), gettext("filters that name this field are refused afterwards")),
        ]
    }
    return confirm(
        model_admin,
        request,
        title=gettext("Delete the metadata field %(name)s") % {"name": field.name},
        summary=summary,
        expected=holders,
        perform=perform,
        back=back,
        danger=bool(holders),
        reason_help=KNOWLEDGE_BASE_TIMELINE,
    )
