"""Reads of metadata: a knowledge base's summary of values and counts, and the checks the admin
runs before a field change (`metadata_field_retype_problem`, `metadata_field_holders`).

The summary counts only documents the reader may read (`kb.access`: the same rule for an admin
user's `Reader` and an API key's `Principal`) and never deleted ones, so a facet tells nobody
that a document they may not read holds a value. Read-only; no locks.
"""

# ruff: noqa: S608  -- the SQL is built of constant fragments and Django's own compiled query;
# every value (field names included) is bound as a parameter

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import connections
from django.db.models import QuerySet
from django.utils.translation import gettext

from kb.access import readable_documents_q
from kb.metadata import (
    BOOLEAN,
    DATE,
    NUMBER,
    STRING,
    STRING_LIST,
    MetadataInvalid,
    normalise_value,
    retype_misfit,
)
from kb.models import Document, KnowledgeBase, MetadataField

TOP_VALUES = 20  # values listed per string, boolean and list field; the rest are counted only


class DocumentReader(Protocol):
    """Whose view a summary counts: `kb.access.Reader` (admin users) or
    `retrieval.principals.Principal` (API keys) — both carry these two."""

    @property
    def access_groups(self) -> Collection[str]: ...

    @property
    def all_groups(self) -> bool: ...


@dataclass(frozen=True)
class FieldSummary:
    """One field: how many documents hold a value (`documents`); for string, boolean and list
    fields the most frequent values with their counts (a list counts each document once per
    item), for number and date fields the smallest and largest value."""

    name: str
    type: str
    description: str = ""
    built_in: bool = False
    documents: int = 0
    values: list[tuple[Any, int]] = field(default_factory=list)
    more_values: bool = False  # more distinct values than `values` lists
    min: Any = None
    max: Any = None


@dataclass(frozen=True)
class MetadataSummary:
    documents: int  # readable, non-deleted documents of the knowledge base
    fields: list[FieldSummary]
    # keys documents hold that the knowledge base does not declare, with counts (a knowledge
    # base that declares none accepts any key): what to declare
    undeclared: list[tuple[str, int]]


def _readable(kb: KnowledgeBase, reader: DocumentReader) -> QuerySet[Document]:
    return Document.objects.filter(kb=kb, deleted_at__isnull=True).filter(
        readable_documents_q(access_groups=reader.access_groups, all_groups=reader.all_groups)
    )


def metadata_summary(
    *, kb: KnowledgeBase, reader: DocumentReader, using: str = "default"
) -> MetadataSummary:
    """Per declared field (and the built-in content_type: the media type of each document's
    newest revision) how many of the documents `reader` may read hold a value, with its top
    values or its range. A few statements per field; no locks."""
    documents = _readable(kb, reader).using(using)
    ids_sql, ids_params = documents.values("id").query.sql_with_params()
    declared = list(MetadataField.objects.using(using).filter(kb=kb).order_by("name"))
    with connections[using].cursor() as cursor:

        def rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

        total = rows(f"SELECT count(*) FROM ({ids_sql}) ids", list(ids_params))[0][0]
        fields = [_content_type(rows, ids_sql, ids_params)]
        fields += [_field(rows, ids_sql, ids_params, f) for f in declared]
        names = [f.name for f in declared]
        undeclared = rows(
            "SELECT k, count(*) FROM kb_document d, jsonb_object_keys(d.metadata) k"
            f" WHERE d.id IN ({ids_sql}) AND jsonb_typeof(d.metadata) = 'object'"
            " AND NOT (k = ANY(%s)) GROUP BY k ORDER BY count(*) DESC, k LIMIT %s",
            [*ids_params, names, TOP_VALUES],
        )
    return MetadataSummary(
        documents=total, fields=fields, undeclared=[(k, n) for k, n in undeclared]
    )


def _top(rows: Any, values_sql: str, params: list[Any]) -> tuple[list[tuple[Any, int]], bool]:
    found = rows(
        f"SELECT v, count(*) FROM ({values_sql}) t(v) WHERE v IS NOT NULL"
        " GROUP BY v ORDER BY count(*) DESC, v LIMIT %s",
        [*params, TOP_VALUES + 1],
    )
    return [(v, n) for v, n in found[:TOP_VALUES]], len(found) > TOP_VALUES


def _content_type(rows: Any, ids_sql: str, ids_params: Any) -> FieldSummary:
    values_sql = (
        "SELECT r.media_type FROM kb_document d JOIN kb_revision r"
        " ON r.document_id = d.id AND r.number = d.desired_revision"
        f" WHERE d.id IN ({ids_sql})"
    )
    params = list(ids_params)
    count = rows(f"SELECT count(v) FROM ({values_sql}) t(v)", params)[0][0]
    values, more = _top(rows, values_sql, params)
    return FieldSummary(
        "content_type",
        STRING,
        gettext("The media type of the document's newest revision."),
        built_in=True,
        documents=count,
        values=values,
        more_values=more,
    )


def _field(rows: Any, ids_sql: str, ids_params: Any, declared: MetadataField) -> FieldSummary:
    name, kind = declared.name, declared.type
    where = f"d.id IN ({ids_sql}) AND d.metadata ? %s"
    params = [*ids_params, name]
    count = rows(f"SELECT count(*) FROM kb_document d WHERE {where}", params)[0][0]
    summary: dict[str, Any] = {}
    if kind in (STRING, BOOLEAN):
        # the JSON text of a string or boolean value is exact: no cast can fail
        values, more = _top(
            rows, f"SELECT d.metadata -> %s FROM kb_document d WHERE {where}", [name, *params]
        )
        # Django has psycopg hand jsonb over as its text
        decoded = [(json.loads(v) if isinstance(v, str) else v, n) for v, n in values]
        summary.update(values=decoded, more_values=more)
    elif kind == STRING_LIST:
        values, more = _top(
            rows,
            "SELECT item FROM kb_document d CROSS JOIN LATERAL jsonb_array_elements_text("
            "CASE WHEN jsonb_typeof(d.metadata -> %s) = 'array' THEN d.metadata -> %s"
            f" ELSE '[]'::jsonb END) item WHERE {where}",
            [name, name, *params],
        )
        summary.update(values=values, more_values=more)
    elif kind in (NUMBER, DATE):
        # values are stored normalised (kb.metadata): numbers as JSON numbers, dates as
        # "YYYY-MM-DD" text that orders as dates do; anything else is left out
        json_type, cast = ("number", "numeric") if kind == NUMBER else ("string", "text")
        low, high = rows(
            f"SELECT min((d.metadata ->> %s)::{cast}), max((d.metadata ->> %s)::{cast})"
            f" FROM kb_document d WHERE {where} AND jsonb_typeof(d.metadata -> %s) = %s",
            [name, name, *params, name, json_type],
        )[0]
        if kind == NUMBER:
            low, high = _number(low), _number(high)
        summary.update(min=low, max=high)
    return FieldSummary(name, kind, declared.description, documents=count, **summary)


def _number(value: Any) -> Any:
    """A numeric as JSON shows it: an int when it is one."""
    if value is None:
        return None
    return int(value) if value == int(value) else float(value)


def metadata_field_holders(*, kb: KnowledgeBase, name: str) -> int:
    """How many documents of `kb` hold a value of `name`, deleted ones and those in any access
    group included: what deleting the field strips (`metadata_field_delete`)."""
    return Document.objects.filter(kb=kb, metadata__has_key=name).count()


def metadata_field_retype_problem(*, kb: KnowledgeBase, name: str, type: str) -> str | None:
    """Why declaring `name` as `type` would be refused now — the first document whose value
    does not fit, as `metadata_field_save` words it — or None. A dry run for a form's check;
    the service checks again under its lock."""
    rows = (
        Document.objects.filter(kb=kb, metadata__has_key=name)
        .order_by("pk")
        .values_list("key", "metadata")
        .iterator(chunk_size=500)
    )
    for key, metadata in rows:
        try:
            normalise_value(type, metadata[name], field=name)
        except MetadataInvalid as exc:
            return str(retype_misfit(key=key, name=name, kind=type, problem=exc))
    return None
