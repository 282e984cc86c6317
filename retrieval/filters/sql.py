"""A checked filter (`language`) as one SQL condition on the document `d` and the revision `r`
of the visibility rule (`retrieval.search.visibility`), with its values bound as parameters.

Every condition is two-valued — `coalesce(..., false)` — so a document without the field
matches no condition but `exists: false`, and `not` inverts exactly. Equality on metadata is
JSON containment (`@>`), which compares numbers by value and needs no cast; order comparisons
cast a number only where `jsonb_typeof` says it is one (CASE fixes the evaluation order), and
compare dates as their stored "YYYY-MM-DD" text, so no stored value can make the statement fail.
"""

from __future__ import annotations

import json
from typing import Any

from kb.metadata import BOOLEAN, DATE, NUMBER, STRING, STRING_LIST
from retrieval.filters.language import All, AnyOf, Condition, Filter, Not

# Built-in and hit fields: their SQL expression and the SQL type their values are bound as.
_BUILT_IN = {
    "key": ("d.key", "text"),
    "title": ("d.title", "text"),
    "content_type": ("r.media_type", "text"),
    "created": ("(d.created_at AT TIME ZONE 'UTC')::date", "date"),
    "updated": ("(d.updated_at AT TIME ZONE 'UTC')::date", "date"),
    "revision": ("r.number", "numeric"),
    "document_key": ("d.key", "text"),
    "document_id": ("d.id", "numeric"),
    "kb": (
        "(SELECT kb_of_d.slug FROM kb_knowledgebase kb_of_d WHERE kb_of_d.id = d.kb_id)",
        "text",
    ),
}
_SQL_OPS = {"eq": "=", "ne": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def filter_sql(tree: Filter, params: dict[str, Any]) -> str:
    """The condition for `tree`; its values are added to `params` as %(filter_N)s."""
    if isinstance(tree, All):
        return "(" + " AND ".join(filter_sql(part, params) for part in tree.parts) + ")"
    if isinstance(tree, AnyOf):
        return "(" + " OR ".join(filter_sql(part, params) for part in tree.parts) + ")"
    if isinstance(tree, Not):
        return f"(NOT {filter_sql(tree.part, params)})"
    return f"coalesce({_condition(tree, params)}, false)"


def _bind(params: dict[str, Any], value: Any) -> str:
    name = f"filter_{sum(1 for key in params if key.startswith('filter_'))}"
    params[name] = value
    return f"%({name})s"


def _condition(c: Condition, params: dict[str, Any]) -> str:
    if c.field.built_in:
        return _built_in(c, params)
    name = _bind(params, c.field.name)
    kind, op, value = c.field.type, c.op, c.value
    if op == "exists":
        return f"{'' if value else 'NOT '}(d.metadata ? {name})"
    if op == "eq" or (op == "contains" and kind == STRING_LIST):
        contained = [value] if op == "contains" else value
        return f"d.metadata @> {_bind(params, json.dumps({c.field.name: contained}))}::jsonb"
    if kind == STRING_LIST:  # in, nin: holds any / none of the strings
        holds = f"(d.metadata -> {name}) ?| {_bind(params, value)}::text[]"
        return holds if op == "in" else f"(d.metadata ? {name} AND NOT {holds})"
    if op in _TEXT_OPS:
        return _text_op(f"(d.metadata ->> {name})", op, value, params)
    if kind == NUMBER:
        column, sql_type = (
            f"(CASE WHEN jsonb_typeof(d.metadata -> {name}) = 'number' "
            f"THEN (d.metadata -> {name})::numeric END)",
            "numeric",
        )
    elif kind == BOOLEAN:  # ne: has a value and it differs
        return f"(d.metadata -> {name}) = {_bind(params, json.dumps(not value))}::jsonb"
    else:  # STRING, DATE: compared as text ("YYYY-MM-DD" sorts as dates do)
        column, sql_type = (
            f"(CASE WHEN jsonb_typeof(d.metadata -> {name}) = 'string' "
            f"THEN d.metadata ->> {name} END)",
            "text",
        )
        assert kind in (STRING, DATE)
    return _compare(column, sql_type, op, value, params)


def _built_in(c: Condition, params: dict[str, Any]) -> str:
    column, sql_type = _BUILT_IN[c.field.name]
    if c.op == "exists":  # every document has its built-in fields
        return "true" if c.value else "false"
    if c.op in _TEXT_OPS:
        return _text_op(column, c.op, c.value, params)
    return _compare(column, sql_type, c.op, c.value, params)


_TEXT_OPS = ("contains", "starts_with", "ends_with")


def _text_op(column: str, op: str, value: str, params: dict[str, Any]) -> str:
    bound = _bind(params, value)
    if op == "contains":  # case-folded, as people search
        return f"strpos(lower({column}), lower({bound})) > 0"
    if op == "starts_with":
        return f"starts_with({column}, {bound})"
    return f"right({column}, char_length({bound})) = {bound}"


def _compare(column: str, sql_type: str, op: str, value: Any, params: dict[str, Any]) -> str:
    if op in ("in", "nin"):
        bound = f"{_bind(params, value)}::{sql_type}[]"
        return f"{column} = ANY({bound})" if op == "in" else f"{column} <> ALL({bound})"
    return f"{column} {_SQL_OPS[op]} {_bind(params, value)}::{sql_type}"
