"""The document list's bulk edit of metadata, "Set metadata…": pick the values (one input per
field the knowledge base declares, or a JSON object when it declares none), see every selected
document with what changes, confirm with a reason; `documents_metadata_set` then writes them
all or nothing.

The action needs the permission to change documents (content managers have it) and works on
the documents of one knowledge base. Its documents are the changelist's scoped queryset (the
user's tenant and access groups), looked up again on every step; deleted documents are left
out. The confirmed values are checked again by the service, under its lock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from console.admin import document_metadata
from console.admin.bulk_actions import BULK_MAX, EACH_DOCUMENT_HISTORY, _names
from console.admin.confirmation import ReasonForm, confirm_label, require
from kb.metadata import BOOLEAN, MetadataInvalid, normalise_metadata
from kb.models import Document, KnowledgeBase
from kb.services.metadata import documents_metadata_set

ACTION = "set_metadata"
REMOVE = "remove__"
VALUES = "values"  # the JSON textarea of a knowledge base that declares no field


class MetadataValuesForm(forms.Form):
    """The values to set on every selected document: a field left empty is left as it is; its
    "remove" box removes it. `values()` is what to pass to `documents_metadata_set`."""

    def __init__(self, *args: Any, kb: KnowledgeBase, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kb = kb
        self.declared = document_metadata.declared_fields(kb)
        for field in self.declared:
            name = document_metadata.PREFIX + field.name
            if field.type == BOOLEAN:
                self.fields[name] = forms.TypedChoiceField(
                    choices=[("", "leave as it is"), ("true", "yes"), ("false", "no")],
                    coerce=lambda v: v == "true",
                    empty_value=None,
                    required=False,
                    label=field.name,
                    help_text=field.description,
                )
            else:
                self.fields[name] = document_metadata.form_field(field)
            self.fields[REMOVE + field.name] = forms.BooleanField(
                required=False, label=f"remove {field.name} from each"
            )
        if not self.declared:
            self.fields[VALUES] = document_metadata.JsonObjectField(
                label="Values",
                widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
                help_text='A JSON object of the keys to set on each document, e.g. {"year": '
                "2024}; null removes a key. Other keys are kept.",
            )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        values = self.values()
        if not values:
            raise forms.ValidationError("Give a value to set, or tick a field to remove.")
        try:
            normalise_metadata(self.kb, {k: v for k, v in values.items() if v is not None})
        except MetadataInvalid as exc:
            document_metadata.misfit_error(self, exc)
        return data

    def values(self) -> dict[str, Any]:
        data = self.cleaned_data
        if VALUES in self.fields:
            return dict(data.get(VALUES) or {})
        values: dict[str, Any] = {}
        for field in self.declared:
            if data.get(REMOVE + field.name):
                values[field.name] = None
                continue
            value = document_metadata.stored_value(data.get(document_metadata.PREFIX + field.name))
            if value is not None:
                values[field.name] = value
        return values


@dataclass(frozen=True)
class Change:
    document: Document
    changes: list[str]  # "field: before → after"


def _plan(documents: list[Document], values: dict[str, Any]) -> tuple[list[Change], list[Any]]:
    changing: list[Change] = []
    skipped: list[tuple[Document, str]] = []
    for document in documents:
        if document.deleted_at is not None:
            skipped.append((document, "deleted"))
            continue
        stored = document.metadata or {}
        lines = [
            f"{name}: {document_metadata.shown(stored.get(name))} → "
            f"{document_metadata.shown(value)}"
            for name, value in sorted(values.items())
            if stored.get(name) != value
        ]
        if lines:
            changing.append(Change(document, lines))
        else:
            skipped.append((document, "already has these values"))
    return changing, skipped


def _confirmed_values(request: HttpRequest) -> dict[str, Any] | None:
    try:
        values = json.loads(request.POST.get("values_json") or "")
    except ValueError:
        return None
    return values if isinstance(values, dict) and values else None


def run(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Document]
) -> HttpResponse | None:
    """The action: the values form, then the confirmation, then the write. None: back to the
    list (with a message)."""
    require(request, "kb.change_document")
    count = queryset.count()
    if count > BULK_MAX:
        messages.error(
            request, f"Select at most {BULK_MAX} documents to set metadata (you selected {count})."
        )
        return None
    kb_ids = set(queryset.values_list("kb_id", flat=True))
    if len(kb_ids) != 1:
        messages.error(
            request,
            "Select documents of one knowledge base: each declares its own metadata fields.",
        )
        return None
    kb = KnowledgeBase.objects.get(pk=kb_ids.pop())
    documents = list(queryset.select_related("kb").order_by("key"))
    stage = request.POST.get("stage")
    if stage == "confirm":
        values = _confirmed_values(request)
        reason_form = ReasonForm(request.POST, reason_help=EACH_DOCUMENT_HISTORY)
        if values is not None and reason_form.is_valid():
            _perform(
                model_admin, request, kb, documents, values, reason_form.cleaned_data["reason"]
            )
            return None
        if values is not None:
            return _confirmation(model_admin, request, kb, documents, values, reason_form)
    form = MetadataValuesForm(request.POST if stage == "preview" else None, kb=kb)
    if stage == "preview" and form.is_valid():
        values = form.values()
        reason_form = ReasonForm(reason_help=EACH_DOCUMENT_HISTORY)
        return _confirmation(model_admin, request, kb, documents, values, reason_form)
    title = f"Set metadata on {len(documents)} document{'s' if len(documents) != 1 else ''}"
    context = {
        **_context(model_admin, request, kb, documents, title),
        "stage": "preview",
        "form": form,
        "confirm_label": "Preview the changes",
    }
    return TemplateResponse(request, "admin/kb/document/bulk_metadata.html", context)


def _context(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    kb: KnowledgeBase,
    documents: list[Document],
    title: str,
) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "kb": kb,
        "selected": documents,
        "action_name": ACTION,
        "back": request.get_full_path(),
        "opts": model_admin.model._meta,
        "summary": {},
    }


def _confirmation(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    kb: KnowledgeBase,
    documents: list[Document],
    values: dict[str, Any],
    reason_form: ReasonForm,
) -> HttpResponse:
    changing, skipped = _plan(documents, values)
    n = len(changing)
    title = f"Set metadata on {n} document{'s' if n != 1 else ''}"
    context = {
        **_context(model_admin, request, kb, documents, title),
        "stage": "confirm",
        "form": reason_form,
        "confirm_label": confirm_label(title),
        "changing": changing,
        "skipped": skipped,
        "values": sorted((name, document_metadata.shown(value)) for name, value in values.items()),
        "values_json": json.dumps(values, sort_keys=True),
    }
    return TemplateResponse(request, "admin/kb/document/bulk_metadata.html", context)


def _perform(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    kb: KnowledgeBase,
    documents: list[Document],
    values: dict[str, Any],
    reason: str,
) -> None:
    """Every selected, non-deleted document the user may still see, in one transaction."""
    live = [d for d in documents if d.deleted_at is None]
    changing, _ = _plan(live, values)
    try:
        changed = documents_metadata_set(
            kb=kb, document_ids=[c.document.pk for c in changing], values=values
        )
    except MetadataInvalid as exc:
        messages.error(request, f"Nothing was changed: {exc}")
        return
    names = ", ".join(f"{k}={document_metadata.shown(v)}" for k, v in sorted(values.items()))
    for change in changing:
        model_admin.log_change(
            request, change.document, f"Set metadata {names} (bulk action): {reason}"
        )
    keys = [c.document.key for c in changing]
    if changed:
        messages.success(request, f"Set metadata on {changed}: {_names(keys)}.")
    else:
        messages.warning(request, "Nothing was changed: the documents already had these values.")


@admin.action(description="Set metadata on selected documents…", permissions=["change"])
def set_metadata(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Document]
) -> HttpResponse | None:
    return run(model_admin, request, queryset)
