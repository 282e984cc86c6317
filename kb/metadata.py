"""Document metadata against the fields its knowledge base declares (`MetadataField`).

Values are normalised on every write so that filters can compare them in SQL without casts
that could fail: a string is a string of at most 500 characters; a number a JSON number; a
date the text "YYYY-MM-DD" (so dates compare as text, in order); a boolean true or false; a
list of strings at most 100 distinct strings, sorted. `null` removes a field's value.

Built-in fields every document has are not metadata; filters name them too
(`BUILT_IN_FIELDS`). A knowledge base that declares no fields accepts any JSON object, as before
fields existed; one that declares some refuses a key it does not declare.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.utils.translation import gettext

from kb.models import KnowledgeBase, MetadataField

STRING, NUMBER, DATE, BOOLEAN, STRING_LIST = (t.value for t in MetadataField.Type)

# Filters name these beside the declared fields; a declared field may not take their names.
BUILT_IN_FIELDS: dict[str, str] = {
    "key": STRING,
    "title": STRING,
    "content_type": STRING,
    "created": DATE,
    "updated": DATE,
    "revision": NUMBER,
}

NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
MAX_STRING_CHARS = 500
MAX_LIST_ITEMS = 100
MAX_FIELDS = 100


class MetadataInvalid(ValueError):
    """A value does not fit its field; `field` names it, the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str
    built_in: bool = False


def field_specs(kb: KnowledgeBase) -> dict[str, FieldSpec]:
    """The fields a filter on `kb` may name: the built-in ones and the declared ones."""
    specs = {name: FieldSpec(name, kind, built_in=True) for name, kind in BUILT_IN_FIELDS.items()}
    for name, kind in MetadataField.objects.filter(kb=kb).values_list("name", "type"):
        specs[name] = FieldSpec(name, kind)
    return specs


def check_field_name(name: str) -> None:
    """Raise MetadataInvalid unless `name` can be a declared field's name."""
    if not NAME_RE.fullmatch(name):
        raise MetadataInvalid(
            name,
            gettext("A field name is a lower-case letter, then letters, digits or _ (64 at most)."),
        )
    if name in BUILT_IN_FIELDS:
        raise MetadataInvalid(
            name, gettext('"%(name)s" is a built-in field; choose another name.') % {"name": name}
        )


def normalise_value(kind: str, value: Any, *, field: str) -> Any:
    """`value` in the stored form of a field of type `kind`; MetadataInvalid when it does not
    fit (the message names the type expected)."""
    if kind == STRING:
        if not isinstance(value, str):
            raise MetadataInvalid(
                field,
                gettext('"%(field)s" is a string field; give it a string.') % {"field": field},
            )
        if len(value) > MAX_STRING_CHARS:
            raise MetadataInvalid(
                field,
                gettext('"%(field)s" is longer than %(MAX_STRING_CHARS)s characters.')
                % {"field": field, "MAX_STRING_CHARS": MAX_STRING_CHARS},
            )
        return value
    if kind == NUMBER:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise MetadataInvalid(
                field,
                gettext('"%(field)s" is a number field; give it a number.') % {"field": field},
            )
        if value != value or value in (float("inf"), float("-inf")):
            raise MetadataInvalid(
                field, gettext('"%(field)s" must be a finite number.') % {"field": field}
            )
        return value
    if kind == DATE:
        return _date(value, field)
    if kind == BOOLEAN:
        if not isinstance(value, bool):
            raise MetadataInvalid(
                field,
                gettext('"%(field)s" is a boolean field; give it true or false.')
                % {"field": field},
            )
        return value
    if kind == STRING_LIST:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise MetadataInvalid(
                field,
                gettext('"%(field)s" is a list of strings; give it a list of strings.')
                % {"field": field},
            )
        if len(set(items)) > MAX_LIST_ITEMS:
            raise MetadataInvalid(
                field,
                gettext('"%(field)s" holds more than %(MAX_LIST_ITEMS)s items.')
                % {"field": field, "MAX_LIST_ITEMS": MAX_LIST_ITEMS},
            )
        for item in items:
            normalise_value(STRING, item, field=field)
        return sorted(set(items))
    raise MetadataInvalid(
        field,
        gettext('"%(field)s" has an unknown type %(kind)s.') % {"field": field, "kind": repr(kind)},
    )


def _date(value: Any, field: str) -> str:
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return date.fromisoformat(value[:10]).isoformat()
        except ValueError:
            pass
    raise MetadataInvalid(
        field,
        gettext('"%(field)s" is a date field; give it a date as "YYYY-MM-DD".') % {"field": field},
    )


def retype_misfit(*, key: str, name: str, kind: str, problem: MetadataInvalid) -> MetadataInvalid:
    """The refusal of declaring `name` as `kind` while document `key` holds a value that does
    not fit it (the service's refusal and the admin's dry run word it alike)."""
    return MetadataInvalid(
        name,
        gettext('Document %(key)s holds a value of "%(name)s" that is not a %(kind)s: %(problem)s')
        % {"key": key, "name": name, "kind": kind, "problem": problem},
    )


def undeclared_keys(metadata: Mapping[str, Any], declared: Collection[str]) -> list[str]:
    """The keys of a document's `metadata` its knowledge base does not declare (it declares the
    names `declared`), sorted; none when it declares no field (then any key is kept). A document
    holds such keys when they were set before the fields were declared."""
    if not declared:
        return []
    return sorted(name for name in metadata if name not in declared)


def normalise_metadata(
    kb: KnowledgeBase, values: Mapping[str, Any], *, fields: Iterable[MetadataField] | None = None
) -> dict[str, Any]:
    """The metadata to store for `values` on a document of `kb`: each declared field's value
    normalised, null dropped; a key the knowledge base does not declare is refused when it
    declares any. Raises MetadataInvalid naming the first field at fault."""
    declared = {
        f.name: f.type for f in (fields if fields is not None else kb.metadata_fields.all())
    }
    if not isinstance(values, Mapping):
        raise MetadataInvalid(
            "metadata", gettext("Metadata is a JSON object of field names and values.")
        )
    stored: dict[str, Any] = {}
    for name, value in values.items():
        if declared and name not in declared:
            known = ", ".join(sorted(declared))
            raise MetadataInvalid(
                name,
                gettext('"%(name)s" is not a metadata field of %(kb)s; its fields are: %(known)s.')
                % {"name": name, "kb": kb.name, "known": known},
            )
        if value is None:
            continue
        stored[name] = normalise_value(declared[name], value, field=name) if declared else value
    return stored
