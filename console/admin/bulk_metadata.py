"""The document list's bulk edit of metadata, "Set metadata…": pick the values (one input per
field the knowledge base declares, or a JSON object when it declares none), see every selected
document with what changes, confirm with a reason; `documents_metadata_set` then writes them
all or nothing.

A document holding keys the knowledge base does not declare (set before the fields were) cannot
be written as it is: the confirmation names each such document and its keys, and the person
either leaves those documents as they are (the others change) or drops the keys from them.
Nothing typed is lost on the way: the selection, the values and the reason ride along when the
person goes back to the values, switches that choice, forgets the reason or meets a refusal.

The action needs the permission to change documents (content managers have it) and works on
the documents of one knowledge base. Its documents are the changelist's scoped queryset (the
user's tenant and access groups), looked up again on every step; deleted documents are left
out. The confirmed values are checked again by the service, under its lock.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext, gettext_lazy, ngettext

from console.admin import document_metadata
from console.admin.bulk_actions import BULK_MAX, EACH_DOCUMENT_HISTORY, _names
from console.admin.confirmation import ReasonForm, confirm_label, require
from kb.metadata import BOOLEAN, MetadataInvalid, normalise_metadata, undeclared_keys
from kb.models import Document, KnowledgeBase
from kb.services.metadata import documents_metadata_set

ACTION = "set_metadata"
REMOVE = "remove__"
VALUES = "values"  # the JSON textarea of a knowledge base that declares no field
TEMPLATE = "admin/kb/document/bulk_metadata.html"
# Documents holding keys the knowledge base does not declare: the person's choice (a hidden
# input carries the one the confirmation shows; the REVIEW buttons show it with the other).
UNDECLARED, DROP, LEAVE = "undeclared", "drop", "leave"
REVIEW = "undeclared_review"
EDIT = "edit_values"  # the confirmation's button back to the values form


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
                    choices=[
                        ("", gettext("leave as it is")),
                        ("true", gettext("yes")),
                        ("false", gettext("no")),
                    ],
                    coerce=lambda v: v == "true",
                    empty_value=None,
                    required=False,
                    label=field.name,
                    help_text=field.description,
                )
            else:
                self.fields[name] = document_metadata.form_field(field)
            self.fields[REMOVE + field.name] = forms.BooleanField(
                required=False,
                label=gettext("remove %(name)s from each") % {"name": field.name},
            )
        if not self.declared:
            self.fields[VALUES] = document_metadata.JsonObjectField(
                label=gettext("Values"),
                widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
                help_text=gettext(
                    'A JSON object of the keys to set on each document, e.g. {"year": 2024}; '
                    "null removes a key. Other keys are kept."
                ),
            )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        values = self.values()
        if not values:
            raise forms.ValidationError(gettext("Give a value to set, or tick a field to remove."))
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


@dataclass(frozen=True)
class Holder:
    """A selected document holding keys its knowledge base does not declare (set before the
    fields were): (key, value shown) each."""

    document: Document
    keys: list[tuple[str, str]]


@dataclass
class Plan:
    """What the confirmation shows and the write does: the documents that change and how, those
    left alone and why, and the holders of undeclared keys, which change (their keys dropped)
    only when the person chose `drop`."""

    changing: list[Change] = dataclasses.field(default_factory=list)
    skipped: list[tuple[Document, str]] = dataclasses.field(default_factory=list)
    holders: list[Holder] = dataclasses.field(default_factory=list)
    drop: bool = False


def _plan(
    documents: list[Document], values: dict[str, Any], declared: set[str], drop: bool
) -> Plan:
    plan = Plan(drop=drop)
    for document in documents:
        if document.deleted_at is not None:
            plan.skipped.append((document, "deleted"))
            continue
        stored = document.metadata or {}
        extra = undeclared_keys(stored, declared)
        if extra:
            plan.holders.append(
                Holder(document, [(k, document_metadata.shown(stored[k])) for k in extra])
            )
            if not drop:
                continue  # left as it is: listed with the holders
        lines = [
            f"{name}: {document_metadata.shown(stored[name])} → removed (not declared)"
            for name in extra
        ] + [
            f"{name}: {document_metadata.shown(stored.get(name))} → "
            f"{document_metadata.shown(value)}"
            for name, value in sorted(values.items())
            if stored.get(name) != value
        ]
        if lines:
            plan.changing.append(Change(document, lines))
        else:
            plan.skipped.append((document, gettext("already has these values")))
    return plan


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
    list (with a message). What the person typed — the selection, the values, the reason — is
    carried from page to page: back to the values (EDIT), the confirmation shown again with
    the undeclared keys dropped or not (REVIEW), and a refused write shown again with why."""
    require(request, "kb.change_document")
    count = queryset.count()
    if count > BULK_MAX:
        messages.error(
            request,
            gettext("Select at most %(max)s documents to set metadata (you selected %(n)s).")
            % {"max": BULK_MAX, "n": count},
        )
        return None
    kb_ids = set(queryset.values_list("kb_id", flat=True))
    if len(kb_ids) != 1:
        messages.error(
            request,
            gettext(
                "Select documents of one knowledge base: each declares its own metadata fields."
            ),
        )
        return None
    kb = KnowledgeBase.objects.get(pk=kb_ids.pop())
    documents = list(queryset.select_related("kb").order_by("key"))
    stage = request.POST.get("stage")
    typed_reason = request.POST.get("reason", "")
    confirmed = _confirmed_values(request) if stage == "confirm" else None
    page = Page(model_admin, request, kb, documents)
    if confirmed is not None and EDIT not in request.POST:
        review = request.POST.get(REVIEW)
        if review in (DROP, LEAVE):
            return page.confirmation(confirmed, _reason_form(typed_reason), drop=review == DROP)
        drop = request.POST.get(UNDECLARED) == DROP
        reason_form = ReasonForm(request.POST, reason_help=EACH_DOCUMENT_HISTORY)
        if reason_form.is_valid():
            refusal = _perform(
                model_admin,
                request,
                kb,
                documents,
                confirmed,
                reason_form.cleaned_data["reason"],
                drop,
            )
            if refusal is None:
                return None
            return page.confirmation(confirmed, reason_form, drop=drop, refusal=refusal)
        return page.confirmation(confirmed, reason_form, drop=drop)
    if confirmed is not None:  # EDIT: the values form again, filled with what was typed
        form = MetadataValuesForm(initial=_initial(kb, confirmed), kb=kb)
    else:
        form = MetadataValuesForm(request.POST if stage == "preview" else None, kb=kb)
    if stage == "preview" and form.is_valid():
        return page.confirmation(form.values(), _reason_form(typed_reason), drop=False)
    title = ngettext(
        "Set metadata on %(n)s document", "Set metadata on %(n)s documents", len(documents)
    ) % {"n": len(documents)}
    context = {
        **page.context(title),
        "stage": "preview",
        "form": form,
        "confirm_label": gettext("Preview the changes"),
        "kept_reason": typed_reason,
    }
    return TemplateResponse(request, TEMPLATE, context)


def _reason_form(typed: str) -> ReasonForm:
    """The reason box showing what was typed, without an error before anyone confirms."""
    return ReasonForm(initial={"reason": typed}, reason_help=EACH_DOCUMENT_HISTORY)


def _initial(kb: KnowledgeBase, values: dict[str, Any]) -> dict[str, Any]:
    """The values form's inputs for `values` (what the confirmation carried)."""
    if not document_metadata.declared_fields(kb):
        return {VALUES: values}
    kinds = dict(kb.metadata_fields.values_list("name", "type"))
    initial: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            initial[REMOVE + name] = True
        elif kinds.get(name) == BOOLEAN:
            initial[document_metadata.PREFIX + name] = "true" if value else "false"
        else:
            initial[document_metadata.PREFIX + name] = value
    return initial


@dataclass
class Page:
    """The pages of one run of the action: its documents, in one knowledge base."""

    model_admin: admin.ModelAdmin
    request: HttpRequest
    kb: KnowledgeBase
    documents: list[Document]

    def context(self, title: str) -> dict[str, Any]:
        return {
            **self.model_admin.admin_site.each_context(self.request),
            "title": title,
            "kb": self.kb,
            "selected": self.documents,
            "action_name": ACTION,
            "back": self.request.get_full_path(),
            "opts": self.model_admin.model._meta,
            "summary": {},
        }

    def confirmation(
        self,
        values: dict[str, Any],
        reason_form: ReasonForm,
        *,
        drop: bool,
        refusal: str = "",
    ) -> HttpResponse:
        declared = {f.name for f in document_metadata.declared_fields(self.kb)}
        plan = _plan(self.documents, values, declared, drop)
        n = len(plan.changing)
        title = ngettext("Set metadata on %(n)s document", "Set metadata on %(n)s documents", n) % {
            "n": n
        }
        context = {
            **self.context(title),
            "stage": "confirm",
            "form": reason_form,
            "confirm_label": confirm_label(title),
            "plan": plan,
            "changing": plan.changing,
            "skipped": plan.skipped,
            "refusal": refusal,
            "declared": sorted(declared),
            "values": sorted(
                (name, document_metadata.shown(value)) for name, value in values.items()
            ),
            "values_json": json.dumps(values, sort_keys=True),
            "undeclared": DROP if drop else LEAVE,
        }
        return TemplateResponse(self.request, TEMPLATE, context)


def _perform(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    kb: KnowledgeBase,
    documents: list[Document],
    values: dict[str, Any],
    reason: str,
    drop: bool,
) -> str | None:
    """Every document the plan changes (the selected, non-deleted documents the user may still
    see; holders of undeclared keys only when `drop`), in one transaction. None when done (a
    message says what changed); else why nothing was, for the confirmation shown again."""
    declared = {f.name for f in document_metadata.declared_fields(kb)}
    plan = _plan([d for d in documents if d.deleted_at is None], values, declared, drop)
    try:
        changed = documents_metadata_set(
            kb=kb,
            document_ids=[c.document.pk for c in plan.changing],
            values=values,
            drop_undeclared=drop,
            actor=request.user,
            reason=reason,
        )
    except MetadataInvalid as exc:
        return gettext("Nothing was changed: %(why)s") % {"why": exc}
    names = ", ".join(f"{k}={document_metadata.shown(v)}" for k, v in sorted(values.items()))
    for change in plan.changing:
        model_admin.log_change(
            request,
            change.document,
            gettext("Set metadata %(names)s (bulk action): %(reason)s")
            % {"names": names, "reason": reason},
        )
    keys = [c.document.key for c in plan.changing]
    if changed:
        messages.success(
            request,
            gettext("Set metadata on %(n)s: %(names)s.") % {"n": changed, "names": _names(keys)},
        )
    else:
        messages.warning(
            request, gettext("Nothing was changed: the documents already had these values.")
        )
    left = [h.document.key for h in plan.holders] if not drop else []
    if left:
        messages.info(
            request,
            gettext("Left as they are, holding keys %(kb)s does not declare: %(names)s.")
            % {"kb": kb.name, "names": _names(left)},
        )
    return None


@admin.action(
    description=gettext_lazy("Set metadata on selected documents…"), permissions=["change"]
)
def set_metadata(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Document]
) -> HttpResponse | None:
    return run(model_admin, request, queryset)
