"""Canon's filter language: conditions on a document's fields, combined with and, or, not.

    {"field": "department", "op": "eq", "value": "finance"}
    {"and": [{"field": "year", "op": "gte", "value": 2024},
             {"not": {"field": "tags", "op": "contains", "value": "draft"}}]}
    {"or": [...]}

A field is a built-in one (key, title, content_type, created, updated, revision) or one the
knowledge base declares (`kb.metadata`). Operators: eq, ne, gt, gte, lt, lte, in, nin,
contains, starts_with, ends_with, exists. What each means by type:

- eq / ne: equal / has a value and it differs (a document without the field matches neither;
  `not eq` matches it too). A list field is eq when it holds exactly that list.
- gt, gte, lt, lte: numbers and dates ("YYYY-MM-DD"); on strings, in text order.
- in / nin: the value is / is not one of a list (nin needs a value, as ne does); on a list
  field, holds any / none of them.
- contains: a list field holds the string; a string field contains it as text (case-folded).
- starts_with, ends_with: a string field begins / ends with the text (case-sensitive).
- exists: true when the document has a value for the field, false when not.

`parse_filter` checks the whole tree against the fields and refuses, with FilterError naming the
place ("filter.and[1].value"), an unknown field or operator, a value of the wrong type, a tree
deeper than MAX_DEPTH or with more than MAX_CONDITIONS conditions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
    """The checked tree of a filter in Canon's shape; FilterError when it cannot be applied."""
    counter = [0]
    return _parse(data, fields, place, 1, counter)


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
    try:
        return normalise_value(kind, value, field=name)
    except MetadataInvalid as exc:
        raise FilterError(place, str(exc)) from exc
