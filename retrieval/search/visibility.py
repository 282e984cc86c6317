"""The visibility rule as SQL, and the scope every search reads: the principal's knowledge
base, tenant and access groups, plus the client's filters (which only ever narrow it)."""

from __future__ import annotations

import functools
import json
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from kb.models import IndexVersion, KnowledgeBase
from retrieval.filters import filter_sql
from retrieval.principals import KnowledgeBaseNotFound, Principal
from retrieval.search.hits import SearchFilters


@functools.cache
def _kb_lookup_sql() -> tuple[str, int]:
    """The knowledge-base lookup statement (every column of the knowledge base and of its active
    index version, so both rows are whole model instances) and how many columns are the
    knowledge base's. Built once per process from the models."""
    kb_columns = [f.column for f in KnowledgeBase._meta.concrete_fields]
    iv_columns = [f.column for f in IndexVersion._meta.concrete_fields]
    columns = ", ".join([f"k.{c}" for c in kb_columns] + [f"v.{c}" for c in iv_columns])
    # Slug first, then id: a slug that looks like another knowledge base's id names its own.
    sql = f"""
        SELECT {columns}
        FROM kb_knowledgebase k
        LEFT JOIN kb_indexversion v ON v.id = k.active_index_version_id
        WHERE k.tenant_id = %(tenant)s AND (k.slug = %(slug)s OR k.id = %(id)s)
        ORDER BY k.slug = %(slug)s DESC
        LIMIT 1
    """  # noqa: S608 (column names from the models; values are bound)
    return sql, len(kb_columns)


def knowledge_base_for(*, principal: Principal, kb_ref: str) -> KnowledgeBase:
    """The principal's knowledge base by slug (or id), with its active index version loaded;
    KnowledgeBaseNotFound otherwise, with no difference between 'does not exist' and 'belongs
    to someone else'. One prepared statement (`_kb_lookup_sql`), not cached: a swap or a
    change of the key's knowledge bases counts from the next request."""
    sql, n_kb = _kb_lookup_sql()
    kb_id = int(kb_ref) if kb_ref.isascii() and kb_ref.isdigit() and len(kb_ref) < 19 else None
    connection = connections[DEFAULT_DB_ALIAS]  # the primary (retrieval/routing.py says why)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"tenant": principal.tenant_id, "slug": kb_ref, "id": kb_id})
        row = cursor.fetchone()
    if row is None or row[n_kb] is None:  # none, or no active index version
        raise KnowledgeBaseNotFound(kb_ref)
    kb_fields = [f.attname for f in KnowledgeBase._meta.concrete_fields]
    iv_fields = [f.attname for f in IndexVersion._meta.concrete_fields]
    kb = KnowledgeBase.from_db(connection.alias, kb_fields, row[:n_kb])
    if not principal.may_read_kb(kb.pk):
        raise KnowledgeBaseNotFound(kb_ref)
    kb.active_index_version = IndexVersion.from_db(connection.alias, iv_fields, row[n_kb:])
    return kb


GROUPS = "(%(all_groups)s OR d.access_groups = '{}' OR d.access_groups && %(groups)s::varchar[])"


def filters_sql(params: dict[str, Any]) -> str:
    """The client's filters as extra conditions on the document `d` (none when absent)."""
    sql = ""
    if params.get("chunk_ids") is not None:  # a hybrid search's narrow filter, probed
        sql += " AND c.id = ANY(%(chunk_ids)s::bigint[])"
    if params.get("document_keys") is not None:
        sql += " AND d.key = ANY(%(document_keys)s::varchar[])"
    if params.get("metadata") is not None:
        sql += " AND d.metadata @> %(metadata)s::jsonb"
    if params.get("filter_sql"):
        # Compiled by retrieval.filters.filter_sql: constant SQL, its values bound as filter_N.
        sql += " AND " + params["filter_sql"]
    return sql


def _pointers(iv: int, params: dict[str, Any]) -> str:
    """The publication pointers `p` are read from: the table, or, for an evaluation of a pending
    revision (`search(served_instead=...)`, `served_documents` and `served_builds` in `params`),
    the table without those documents' pointers plus one pointer per named build, each a build
    of that very document in this version and knowledge base (so no pairing can serve another
    document's chunks). Read in the search's own statement, hence its own snapshot."""
    if params.get("served_documents") is None:
        return "kb_publication"
    return f"""(
      SELECT op.document_id, op.build_id, op.index_version_id, op.kb_id FROM kb_publication op
      WHERE op.index_version_id = {int(iv)} AND op.kb_id = %(kb)s
        AND op.document_id <> ALL(%(served_documents)s::bigint[])
      UNION ALL
      SELECT sb.document_id, sb.id, sb.index_version_id, sb.kb_id
      FROM unnest(%(served_documents)s::bigint[], %(served_builds)s::bigint[]) AS s(doc, build)
      JOIN kb_build sb ON sb.id = s.build AND sb.document_id = s.doc
      WHERE sb.index_version_id = {int(iv)} AND sb.kb_id = %(kb)s)"""  # noqa: S608 (ids bound)


def visible_sql(*, iv: int, params: dict[str, Any] | None = None, chunks: str = "kb_chunk") -> str:
    """FROM/WHERE of every search: the visibility rule, tenant and access groups (and the
    client's filters in `params`), chunk-first so the planner can drive the version's HNSW
    index. `chunks` (a constant) is the relation read as the chunks `c`: the table, or the keyword
    leg's scored candidates. The index version id is inlined as a literal so the partial-index
    predicate `index_version_id = N` is provably implied.

    The knowledge base (tenant, active version) is one condition on %(kb)s, which the pointer's
    `kb_id` must equal, evaluated once per statement; joined to every pointer instead, it made
    the planner estimate one visible pointer and build all of the version's pointers (with
    their documents, builds, revisions) before the scan, where now each scanned chunk finds its
    own through `pub_build` (docs/BENCHMARKS.md, B2)."""
    iv = int(iv)
    # An admin's search of a candidate version (`search(index_version=...)`) drops only the
    # "active" clause; everything else of the rule applies to it as to the active one.
    active = "" if (params or {}).get("candidate") else f" AND k.active_index_version_id = {iv}"
    return f"""
    FROM {chunks} c
    JOIN {_pointers(iv, params or {})} p
      ON p.build_id = c.build_id AND p.index_version_id = {iv} AND p.kb_id = %(kb)s
    JOIN kb_document d ON d.id = p.document_id
    JOIN kb_build b ON b.id = p.build_id
    JOIN kb_revision r ON r.id = b.revision_id
    WHERE c.index_version_id = {iv} AND c.kb_id = %(kb)s
      AND EXISTS (SELECT FROM kb_knowledgebase k
                  WHERE k.id = %(kb)s AND k.tenant_id = %(tenant)s{active})
      AND d.deleted_at IS NULL
      AND {GROUPS} {filters_sql(params or {})}
    """


def search_params(
    *, principal: Principal, kb: KnowledgeBase, filters: SearchFilters | None = None
) -> dict[str, Any]:
    """The scope of every search, derived from the principal alone, plus the client's filters
    (which only ever add conditions)."""
    filters = filters or SearchFilters()
    params: dict[str, Any] = {
        "kb": kb.pk,
        "tenant": principal.tenant_id,
        "all_groups": principal.all_groups,
        "groups": sorted(principal.access_groups),
        "document_keys": (
            sorted(set(filters.document_keys)) if filters.document_keys is not None else None
        ),
        "metadata": (
            json.dumps(filters.metadata, sort_keys=True) if filters.metadata is not None else None
        ),
    }
    if filters.where is not None:
        params["filter_sql"] = filter_sql(filters.where, params)
    return params
