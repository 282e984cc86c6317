"""Canon's filter language: conditions on a document's fields, combined with and, or, not.

    {"field": "department", "op": "eq", "value": "finance"}
    {"and": [{"field": "year", "op": "gte", "value": 2024},
             {"not": {"field": "tags", "op": "contains", "value": "draft"}}]}
    {"or": [...]}

A field is one the knowledge base declares (`kb.metadata`), a built-in one (key, title,
content_type, created, updated, revision) or one every search hit carries (`HIT_FIELDS`:
document_key, document_id, kb), so a client can filter on what it sees in an answer; a declared
field of the same name wins. Operators: eq, ne, gt, gte, lt, lte, in, nin, contains,
starts_with, ends_with, exists. What each means by type:

- eq / ne: equal / has a value and it differs (a document without the field matches neither;
  `not eq` matches it too). On a list field eq is containment: the list holds every string
  given (eq "a" is contains "a"; eq ["a", "b"] holds both, and maybe more).
- gt, gte, lt, lte: numbers and dates; on strings, in text order.
- in / nin: the value is / is not one of a list (nin needs a value, as ne does); on a list
  field, holds any of them (overlap) / none of them.
- contains: a list field holds the string; a string field contains it as text (case-folded).
- starts_with, ends_with: a string field begins / ends with the text (case-sensitive).
- exists: true when the document has a value for the field, false when not.

A value is read by its field's type: a number field takes a number, or a number written as
text ("2024", as Dify and agents send them); a date field takes "YYYY-MM-DD", an ISO date-time
(its date), or a Unix time in seconds, as a number or text (OpenAI's attributes and Dify's time
metadata carry dates so): the UTC date it falls on.

`parse_filter` checks the whole tree against the fields and refuses, with FilterError naming the
place ("filter.and[1].value"), an unknown field or operator, a value of the wrong type, a tree
deeper than MAX_DEPTH objects (the outermost counts as one: four and / or / not around a
condition at most) or with more than MAX_CONDITIONS conditions, an in / nin of more than
MAX_IN_VALUES values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Union

from kb.metadata import (
    BOOLEAN,
    DATE,
    NUMBER,
    STRING,
    STRING_LIST,
    FieldSpec,
    MetadataInvalid,
    normalise_value,
)

MAX_DEPTH = 5
MAX_CONDITIONS = 50
MAX_IN_VALUES = 100

# Fields every search hit carries (REST's hits, OpenAI's attributes, Dify's metadata), beside the
# built-in ones: `retrieval.filters.sql` reads them from the document.
HIT_FIELDS = {
    name: FieldSpec(name, kind, built_in=True)
    for name, kind in (("document_key", STRING), ("document_id", NUMBER), ("kb", STRING))
}
# A number written as text: JSON's number grammar, around it only spaces.
_NUMBER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")

COMPARISONS = ("gt", "gte", "lt", "lte")
OPERATORS = (
    "eq",
    "ne",
    *COMPARISONS,
    "in",
    "nin",
    "contains",
    "starts_with",
    "ends_with",
    "exists",
)
_TEXT_ONLY = {"contains", "starts_with", "ends_with"}
# Which operators each type allows.
_ALLOWED = {
    STRING: set(OPERATORS),
    NUMBER: set(OPERATORS) - _TEXT_ONLY,
    DATE: set(OPERATORS) - _TEXT_ONLY,
    BOOLEAN: {"eq", "ne", "exists"},
    STRING_LIST: {"eq", "in", "nin", "contains", "exists"},
}


def allowed_operators(kind: str) -> frozenset[str]:
    """The operators a field of type `kind` takes (the admin's filter builder offers these)."""
    return frozenset(_ALLOWED.get(kind, ()))


class FilterError(ValueError):
    """A filter that cannot be applied; `place` names where ("filter.or[0].field")."""

    def __init__(self, place: str, message: str) -> None:
        super().__init__(f"{place}: {message}")
        self.place = place
        self.message = message


@dataclass(frozen=True)
class Condition:
    field: FieldSpec
    op: str
    value: Any  # normalised to the field's type; a list for in/nin; a bool for exists


@dataclass(frozen=True)
class All:
    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    part: Filter


Filter = Union[Condition, All, AnyOf, Not]  # noqa: UP007 (a runtime alias of a recursive type)


def parse_filter(data: Any, fields: Mapping[str, FieldSpec], *, place: str = "filter") -> Filter:
    """The checked tree of a filter in Canon's shape; FilterError when it cannot be applied.
    `fields`: the knowledge base's (`kb.metadata.field_specs`); the hit fields are added."""
    counter = [0]
    return _parse(data, {**HIT_FIELDS, **fields}, place, 1, counter)


def _parse(
    data: Any, fields: Mapping[str, FieldSpec], place: str, depth: int, counter: list[int]
) -> Filter:
    if depth > MAX_DEPTH:
        raise FilterError(place, f"Filters nest at most {MAX_DEPTH} levels deep.")
    if not isinstance(data, Mapping):
        raise FilterError(place, "A filter is a JSON object.")
    compound = [key for key in ("and", "or", "not") if key in data]
    if compound:
        if len(data) != 1:
            raise FilterError(place, f'"{compound[0]}" stands alone in its object.')
        key = compound[0]
        if key == "not":
            return Not(_parse(data["not"], fields, f"{place}.not", depth + 1, counter))
        parts = data[key]
        if not isinstance(parts, list) or not parts:
            raise FilterError(f"{place}.{key}", "Give a non-empty list of filters.")
        parsed = tuple(
            _parse(part, fields, f"{place}.{key}[{i}]", depth + 1, counter)
            for i, part in enumerate(parts)
        )
        return All(parsed) if key == "and" else AnyOf(parsed)
    counter[0] += 1
    if counter[0] > MAX_CONDITIONS:
        raise FilterError(place, f"A filter holds at most {MAX_CONDITIONS} conditions.")
    return _condition(data, fields, place)


def _condition(data: Mapping[str, Any], fields: Mapping[str, FieldSpec], place: str) -> Condition:
    unknown = set(data) - {"field", "op", "value"}
    if unknown:
        raise FilterError(
            place,
            f"Unknown key {sorted(unknown)[0]!r}: a condition has field, op and value; "
            "combine conditions with and, or, not.",
        )
    name, op = data.get("field"), data.get("op")
    if not isinstance(name, str) or not name:
        raise FilterError(f"{place}.field", "Name a field.")
    field = fields.get(name)
    if field is None:
        known = ", ".join(sorted(fields))
        raise FilterError(f"{place}.field", f'Unknown field "{name}"; the fields are: {known}.')
    if op not in OPERATORS:
        raise FilterError(
            f"{place}.op", f"Unknown operator {op!r}; use one of {', '.join(OPERATORS)}."
        )
    if op not in _ALLOWED[field.type]:
        allowed = ", ".join(o for o in OPERATORS if o in _ALLOWED[field.type])
        raise FilterError(
            f"{place}.op", f'"{op}" does not apply to {field.type} field "{name}"; use {allowed}.'
        )
    if "value" not in data:
        raise FilterError(f"{place}.value", "Give a value.")
    return Condition(field, op, _value(field, op, data["value"], f"{place}.value"))


def _value(field: FieldSpec, op: str, value: Any, place: str) -> Any:
    if op == "exists":
        if not isinstance(value, bool):
            raise FilterError(place, "exists takes true or false.")
        return value
    single = STRING if field.type == STRING_LIST else field.type
    if op in ("in", "nin"):
        if not isinstance(value, list) or not value or len(value) > MAX_IN_VALUES:
            raise FilterError(place, f"{op} takes a list of 1 to {MAX_IN_VALUES} values.")
        return [_one(single, field.name, item, f"{place}[{i}]") for i, item in enumerate(value)]
    if op in _TEXT_ONLY:
        return _one(STRING, field.name, value, place)
    if field.type == STRING_LIST and op == "eq":
        return _one(STRING_LIST, field.name, value, place)
    return _one(single, field.name, value, place)


def _one(kind: str, name: str, value: Any, place: str) -> Any:
    if kind == NUMBER and isinstance(value, str):
        value = _number_of_text(value, name, place)
    elif kind == DATE and (_is_number(value) or isinstance(value, str)):
        value = _date_of_unix_time(value, name, place)
    try:
        return normalise_value(kind, value, field=name)
    except MetadataInvalid as exc:
        if kind == DATE:
            raise FilterError(
                place, f'"{name}" is a date field; give a date as "YYYY-MM-DD" or a Unix time.'
            ) from exc
        raise FilterError(place, str(exc)) from exc


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_of_text(text: str, name: str, place: str) -> Any:
    """A number written as text, as a number; other text as it is (refused by its type)."""
    match = _NUMBER_TEXT.fullmatch(text.strip())
    if match is None:
        return text
    if match.group(1) is None and match.group(2) is None:
        return int(match.group(0))
    number = float(match.group(0))
    if not math.isfinite(number):
        raise FilterError(place, f'"{name}": {text.strip()} is beyond the numbers it can hold.')
    return number


def _date_of_unix_time(value: Any, name: str, place: str) -> Any:
    """A Unix time in seconds (a number, or one written as text) as the UTC date it falls on;
    anything else as it is, for the date check. Text that reads as a date ("2026-01-15", and
    "20260115") stays a date."""
    if isinstance(value, str):
        if _NUMBER_TEXT.fullmatch(value.strip()) is None or _reads_as_date(value):
            return value
        value = float(value)
    try:
        return datetime.fromtimestamp(value, tz=UTC).date().isoformat()
    except (OverflowError, OSError, ValueError) as exc:
        raise FilterError(
            place,
            f'"{name}" is a date field; {value:g} is not a Unix time in seconds (or give the '
            'date as "YYYY-MM-DD").',
        ) from exc


def _reads_as_date(text: str) -> bool:
    """Whether `kb.metadata` reads `text` as a date (its first ten characters, ISO 8601)."""
    try:
        date.fromisoformat(text[:10])
    except ValueError:
        return False
    return True
