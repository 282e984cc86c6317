"""Documents' metadata in the admin's forms: one typed input per field the knowledge base
declares (text, number, date, checkbox, comma-separated list), or one JSON textarea when it
declares none. The values are checked by `kb.metadata` (a misfit is a form error naming the
field) and written by the services: `document_create` / `document_update` for one document,
`documents_metadata_set` for the document list's bulk edit (`console.admin.bulk_metadata`).
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from django import forms
from django.utils.translation import gettext, gettext_lazy

from kb.metadata import BOOLEAN, DATE, MAX_STRING_CHARS, NUMBER, STRING_LIST, MetadataInvalid
from kb.models import Document, KnowledgeBase, MetadataField

PREFIX = "metadata__"  # a typed input's form name: metadata__<field>
JSON_FIELD = "metadata"  # the textarea of a knowledge base that declares no field


class NumberField(forms.FloatField):
    """A JSON number: an int when the input is a whole number (2024, not 2024.0)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.widget.attrs["step"] = "any"

    def to_python(self, value: Any) -> Any:
        number = super().to_python(value)
        if number is not None and float(number).is_integer() and abs(number) < 2**53:
            return int(number)
        return number


class CommaListField(forms.Field):
    """A list of strings typed as "a, b, c": stripped, empty items dropped, in the order given
    (the stored form sorts them; `kb.metadata` checks each string's length)."""

    widget = forms.TextInput

    def to_python(self, value: Any) -> list[str]:
        if isinstance(value, list | tuple):
            return [str(v).strip() for v in value if str(v).strip()]
        return [item.strip() for item in str(value or "").split(",") if item.strip()]

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list | tuple) else value


class JsonObjectField(forms.JSONField):
    """The whole metadata as a JSON object."""

    def to_python(self, value: Any) -> Any:
        parsed = super().to_python(value)
        if parsed is not None and not isinstance(parsed, dict):
            raise forms.ValidationError(
                gettext(
                    'Metadata is a JSON object of field names and values, e.g. {"department": '
                    '"hr"}.'
                )
            )
        return parsed

    def prepare_value(self, value: Any) -> Any:
        # No metadata yet is an empty box, not JSON's `null` for a person to delete first.
        return "" if value is None else super().prepare_value(value)


def declared_fields(kb: KnowledgeBase) -> list[MetadataField]:
    return list(MetadataField.objects.filter(kb=kb).order_by("name"))


def form_field(declared: MetadataField) -> forms.Field:
    """The typed input of one declared field; empty means no value (the field is removed)."""
    kind = declared.type
    common: dict[str, Any] = {
        "required": False,
        "label": declared.name,
        "help_text": " ".join(filter(None, [declared.description, _kind_words(kind)])),
    }
    if kind == NUMBER:
        return NumberField(**common)
    if kind == DATE:
        return forms.DateField(
            widget=forms.DateInput(format="%Y-%m-%d", attrs={"type": "date"}), **common
        )
    if kind == BOOLEAN:
        return forms.BooleanField(**common)
    if kind == STRING_LIST:
        return CommaListField(widget=forms.TextInput(attrs={"size": 60}), **common)
    return forms.CharField(
        max_length=MAX_STRING_CHARS, widget=forms.TextInput(attrs={"size": 60}), **common
    )


def _kind_words(kind: str) -> str:
    return str(
        {
            NUMBER: gettext_lazy("A number."),
            DATE: gettext_lazy("A date."),
            BOOLEAN: gettext_lazy("Yes when ticked."),
            STRING_LIST: gettext_lazy("Comma-separated."),
        }.get(kind, "")
    )


def json_form_field() -> forms.Field:
    return JsonObjectField(
        required=False,
        label=gettext("Metadata"),
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "class": "vLargeTextField"}),
        help_text=gettext(
            'A JSON object, e.g. {"department": "hr", "year": 2024}. This knowledge base '
            "declares no metadata fields, so any keys are kept; an index admin declares typed "
            "fields on its settings page."
        ),
    )


def add_form_fields(form: forms.BaseForm, kb: KnowledgeBase) -> list[str]:
    """Add `kb`'s metadata inputs to `form`; returns their names (the admin's fieldset)."""
    declared = declared_fields(kb)
    if not declared:
        form.fields[JSON_FIELD] = json_form_field()
        return [JSON_FIELD]
    names = []
    for field in declared:
        form.fields[PREFIX + field.name] = form_field(field)
        names.append(PREFIX + field.name)
    return names


def field_names(kb: KnowledgeBase) -> list[str]:
    names = [
        PREFIX + name for name in MetadataField.objects.filter(kb=kb).values_list("name", flat=True)
    ]
    return sorted(names) or [JSON_FIELD]


def initial_values(form: forms.BaseForm, metadata: dict[str, Any]) -> dict[str, Any]:
    """The inputs' values for a document's stored `metadata`, each as its input's Python value
    (a date as a date), so that a comparison with what the page posts back is exact."""
    initial: dict[str, Any] = {}
    for name, field in form.fields.items():
        if name == JSON_FIELD:
            initial[name] = metadata
        elif name.startswith(PREFIX):
            initial[name] = python_value(field, metadata.get(name[len(PREFIX) :]))
    return initial


def python_value(field: forms.Field, stored: Any) -> Any:
    if isinstance(field, forms.BooleanField):
        return bool(stored)
    if stored is None:
        return [] if isinstance(field, CommaListField) else None
    if isinstance(field, forms.DateField) and isinstance(stored, str):
        try:
            return date.fromisoformat(stored)
        except ValueError:
            return None
    return stored


def stored_value(value: Any) -> Any:
    """A typed input's value as the metadata to write: empty is None (removes the field)."""
    if value in ("", [], None):
        return None
    if isinstance(value, date):
        return value.isoformat()
    return value


def misfit_error(form: forms.BaseForm, exc: MetadataInvalid) -> None:
    """A value that does not fit its field, as an error on that field's input (on the JSON
    textarea, or the form, when it has none)."""
    name = PREFIX + exc.field
    if name in form.fields:
        form.add_error(name, str(exc))
    elif JSON_FIELD in form.fields:
        form.add_error(JSON_FIELD, str(exc))
    else:
        form.add_error(None, str(exc))


def shown(value: Any) -> str:
    """A stored value for people: lists comma-separated, booleans yes/no, none as —."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return gettext("yes") if value else gettext("no")
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def fieldset_words(document: Document) -> str:
    """The metadata fieldset's line on a document page."""
    declared = set(
        MetadataField.objects.filter(kb_id=document.kb_id).values_list("name", flat=True)
    )
    if not declared:
        return ""
    words = gettext(
        "Values of the fields this knowledge base declares; an empty input removes a value."
    )
    other = sorted(set(document.metadata or {}) - declared)
    if other:
        words += " " + gettext(
            "The document also holds keys the knowledge base does not declare (%(keys)s); "
            "saving a metadata change here removes them."
        ) % {"keys": ", ".join(other)}
    return words
