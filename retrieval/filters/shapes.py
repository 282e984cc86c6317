"""The filter shapes other tools send, as Canon's filter language (`language`), before it is
checked against a knowledge base's fields:

- the OpenAI vector-store search's `filters`: a comparison {"type": eq|ne|gt|gte|lt|lte|in|nin,
  "key", "value"} or a compound {"type": and|or, "filters": [...]};
- Dify's External Knowledge API `metadata_condition`: {"logical_operator": and|or,
  "conditions": [{"name": [field, ...], "comparison_operator", "value"}]}, where a condition
  naming several fields holds when any of them matches.

Dify's values come as a running Dify sends them (its `dataset_retrieval`): numbers, or numbers
as text when a workflow variable fills them; dates as Unix seconds (its time metadata); `in`
and `not in` a list, or one text of comma-separated values. The language reads numbers and
dates so by the field's type (`language`); the comma-separated text is split here, as Dify
splits it. One rule for a document without the field, as in Dify's own knowledge bases (its
missing value compares as SQL NULL): it matches no negative operator — `not contains`,
`is not`, `≠`, `not in` alike — and only `empty` finds it.

Each raises FilterError naming the place in the caller's own shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from retrieval.filters.language import MAX_DEPTH, FilterError

_OPENAI_COMPARISONS = frozenset({"eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"})

# Dify's comparison operators, as Canon's (op, negated); "empty" and "not empty" take no value.
# A negated one holds for a document that has a value and does not match (the module's rule).
_DIFY = {
    "contains": ("contains", False),
    "not contains": ("contains", True),
    "start with": ("starts_with", False),
    "end with": ("ends_with", False),
    "is": ("eq", False),
    "is not": ("ne", False),
    "=": ("eq", False),
    "≠": ("ne", False),
    "!=": ("ne", False),
    ">": ("gt", False),
    "<": ("lt", False),
    "≥": ("gte", False),
    ">=": ("gte", False),
    "≤": ("lte", False),
    "<=": ("lte", False),
    "before": ("lt", False),
    "after": ("gt", False),
    "in": ("in", False),
    "not in": ("nin", False),
    "empty": ("exists", True),
    "not empty": ("exists", False),
}


def from_openai(data: Any, *, place: str = "filters", depth: int = 1) -> dict[str, Any]:
    """An OpenAI vector-store filter as a Canon filter."""
    if depth > MAX_DEPTH:
        raise FilterError(place, f"Filters nest at most {MAX_DEPTH} levels deep.")
    if not isinstance(data, Mapping):
        raise FilterError(place, "A filter is a JSON object with a type.")
    kind = data.get("type")
    if kind in ("and", "or"):
        parts = data.get("filters")
        if not isinstance(parts, list) or not parts:
            raise FilterError(f"{place}.filters", "Give a non-empty list of filters.")
        return {
            kind: [
                from_openai(part, place=f"{place}.filters[{i}]", depth=depth + 1)
                for i, part in enumerate(parts)
            ]
        }
    if kind not in _OPENAI_COMPARISONS:
        raise FilterError(
            f"{place}.type",
            f"Unknown type {kind!r}; use eq, ne, gt, gte, lt, lte, in, nin, and, or.",
        )
    if "key" not in data or "value" not in data:
        raise FilterError(place, "A comparison has a key and a value.")
    return {"field": data["key"], "op": kind, "value": data["value"]}


def from_dify(data: Any, *, place: str = "metadata_condition") -> dict[str, Any]:
    """Dify's metadata_condition as a Canon filter."""
    if not isinstance(data, Mapping):
        raise FilterError(place, "metadata_condition is a JSON object.")
    logic = str(data.get("logical_operator", "and")).lower()
    if logic not in ("and", "or"):
        raise FilterError(f"{place}.logical_operator", "Use and or or.")
    conditions = data.get("conditions")
    if not isinstance(conditions, list) or not conditions:
        raise FilterError(f"{place}.conditions", "Give a non-empty list of conditions.")
    return {
        logic: [_dify_condition(c, f"{place}.conditions[{i}]") for i, c in enumerate(conditions)]
    }


def _dify_condition(data: Any, place: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise FilterError(place, "A condition is a JSON object.")
    names = data.get("name")
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise FilterError(f"{place}.name", "Name the metadata field (a list of names).")
    operator = data.get("comparison_operator")
    if operator not in _DIFY:
        raise FilterError(
            f"{place}.comparison_operator",
            f"Unknown comparison operator {operator!r}; use one of {', '.join(_DIFY)}.",
        )
    op, negated = _DIFY[operator]
    if op == "exists":
        value: Any = not negated
        negated = False
    else:
        if "value" not in data:
            raise FilterError(f"{place}.value", "Give a value.")
        value = data["value"]
        if op in ("in", "nin") and isinstance(value, str):  # "a, b", as Dify splits it
            value = [part.strip() for part in value.split(",") if part.strip()]
    parts = [_dify_one(name, op, value, negated) for name in names]
    return parts[0] if len(parts) == 1 else {"or": parts}


def _dify_one(name: str, op: str, value: Any, negated: bool) -> dict[str, Any]:
    condition = {"field": name, "op": op, "value": value}
    if not negated:
        return condition
    return {"and": [{"field": name, "op": "exists", "value": True}, {"not": condition}]}
