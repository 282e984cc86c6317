"""Search: the visibility rule, tenant scope and access groups in the same SQL statement.

Each query joins the Publication pointer to its chunks and checks, in the statement's one MVCC
snapshot, that the pointer's index version is the knowledge base's active one. A concurrent
switch is therefore seen entirely or not at all; a concurrent swap of the active index version
is detected in the same snapshot and the search starts again against the new version.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from ingestion import providers, text
from kb.models import IndexVersion, KnowledgeBase
from retrieval.principals import Principal

RRF_K = 60
MODES = ("vector", "keyword", "hybrid")


class KnowledgeBaseNotFound(Exception):
    pass


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    score: float
    text: str
    ordinal: int
    document_key: str
    document_title: str
    revision: int
    build_id: int


@dataclass(frozen=True)
class SearchResult:
    kb: str
    index_version: int
    took_ms: float
    hits: list[Hit]


def knowledge_base_for(*, principal: Principal, kb_ref: str) -> KnowledgeBase:
    """The principal's knowledge base by slug (or id); KnowledgeBaseNotFound otherwise, with no
    difference between 'does not exist' and 'belongs to someone else'."""
    kbs = KnowledgeBase.objects.filter(tenant_id=principal.tenant_id)
    kb = kbs.filter(slug=kb_ref).first()
    if kb is None and kb_ref.isdigit():
        kb = kbs.filter(pk=int(kb_ref)).first()
    if kb is None or not principal.may_read_kb(kb.pk) or kb.active_index_version_id is None:
        raise KnowledgeBaseNotFound(kb_ref)
    return kb


def _visible(*, iv: int) -> str:
    """FROM/WHERE of every search: the visibility rule, tenant and access groups, chunk-first so
    the planner can drive the version's HNSW (or GIN) index. The index version id is inlined as
    a literal so the partial-index predicate `index_version_id = N` is provably implied."""
    iv = int(iv)
    return f"""
    FROM kb_chunk c
    JOIN kb_publication p ON p.build_id = c.build_id AND p.index_version_id = {iv}
    JOIN kb_knowledgebase k ON k.id = p.kb_id AND k.active_index_version_id = {iv}
    JOIN kb_document d ON d.id = p.document_id
    JOIN kb_build b ON b.id = p.build_id
    JOIN kb_revision r ON r.id = b.revision_id
    WHERE c.index_version_id = {iv} AND c.kb_id = %(kb)s AND k.tenant_id = %(tenant)s
      AND d.deleted_at IS NULL
      AND (%(all_groups)s OR d.access_groups = '{{}}' OR d.access_groups && %(groups)s::varchar[])
    """


_COLUMNS = "c.id, c.text, c.ordinal, d.key, d.title, r.number, c.build_id"
EF_SEARCH = 100


def vector_query(
    params: dict[str, Any],
    version: IndexVersion,
    vector: list[float],
    limit: int,
    *,
    exact: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The vector search statement and its parameters (also used by tests to EXPLAIN it).

    The approximate form orders by exactly the expression the version's HNSW index is built on.
    The exact form orders by an expression no index matches, so PostgreSQL reads the visible
    chunks through the publication pointers and sorts them: exact, and cheap when few are visible.
    """
    dims = int(version.dimensions)
    distance = f"c.embedding::vector({dims}) <=> %(q)s::vector({dims})"
    order = f"({distance}) + 0" if exact else distance
    sql = f"""
        SELECT {_COLUMNS}, 1 - ({distance}) AS score
        {_visible(iv=version.pk)}
        ORDER BY {order}, c.id
        LIMIT %(limit)s
    """
    literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    return sql, {**params, "q": literal, "limit": limit}


def use_iterative_scan(*, limit: int) -> None:
    """For this transaction: walk the HNSW graph until `limit` rows pass the visibility filters
    (pgvector iterative scan), and prefer that ordered index scan to sorting: the planner's join
    estimates otherwise make it read every visible chunk and sort them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', 'strict_order', true), "
            "set_config('hnsw.ef_search', %s, true), set_config('enable_sort', 'off', true)",
            [str(max(EF_SEARCH, limit))],
        )


def _vector_rows(
    params: dict[str, Any], version: IndexVersion, vector: list[float], limit: int
) -> list[tuple[Any, ...]]:
    """Approximate nearest visible chunks; if the index scan gave up before finding `limit`
    visible rows (very selective filters hit hnsw.max_scan_tuples), the exact form answers, so a
    filter never starves the result."""
    sql, sql_params = vector_query(params, version, vector, limit)
    with connection.cursor() as cursor:
        use_iterative_scan(limit=limit)
        cursor.execute(sql, sql_params)
        rows = cursor.fetchall()
        cursor.execute("SELECT set_config('enable_sort', 'on', true)")
        if len(rows) < limit:
            sql, sql_params = vector_query(params, version, vector, limit, exact=True)
            cursor.execute(sql, sql_params)
            rows = cursor.fetchall()
    return rows


def _keyword_rows(
    params: dict[str, Any], version: IndexVersion, query: str, limit: int
) -> list[tuple[Any, ...]]:
    terms = text.lexical_terms(query)
    if not terms:
        return []
    sql = f"""
        SELECT {_COLUMNS}, ts_rank_cd(c.lexical, to_tsquery('simple', %(tsquery)s)) AS score
        {_visible(iv=version.pk)}
          AND c.lexical @@ to_tsquery('simple', %(tsquery)s)
        ORDER BY score DESC, c.id
        LIMIT %(limit)s
    """
    # Terms are word characters or CJK only (text.lexical_terms); quoting keeps them lexemes.
    tsquery = " | ".join("'" + term.replace("'", "''").replace("\\", "") + "'" for term in terms)
    with connection.cursor() as cursor:
        cursor.execute(sql, {**params, "tsquery": tsquery, "limit": limit})
        return cursor.fetchall()


def _hits(rows: list[tuple[Any, ...]]) -> list[Hit]:
    return [
        Hit(
            chunk_id=r[0],
            text=r[1],
            ordinal=r[2],
            document_key=r[3],
            document_title=r[4],
            revision=r[5],
            build_id=r[6],
            score=float(r[7]),
        )
        for r in rows
    ]


def _fuse(ranked_lists: list[list[Hit]], top_k: int) -> list[Hit]:
    """Reciprocal rank fusion."""
    scores: dict[int, float] = {}
    hits: dict[int, Hit] = {}
    for ranked in ranked_lists:
        for rank, hit in enumerate(ranked):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + 1.0 / (RRF_K + rank + 1)
            hits.setdefault(hit.chunk_id, hit)
    order = sorted(scores, key=lambda cid: (-scores[cid], cid))[:top_k]
    return [Hit(**{**hits[cid].__dict__, "score": round(scores[cid], 6)}) for cid in order]


def search_params(*, principal: Principal, kb: KnowledgeBase) -> dict[str, Any]:
    """The scope of every search, derived from the principal alone."""
    return {
        "kb": kb.pk,
        "tenant": principal.tenant_id,
        "all_groups": principal.all_groups,
        "groups": sorted(principal.access_groups),
    }


def _snapshot() -> None:
    """Make the rest of this transaction read one snapshot (vector and keyword lists agree)."""
    if connection.in_atomic_block and not connection.savepoint_ids:
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def search(
    *, principal: Principal, kb: KnowledgeBase, query: str, top_k: int = 10, mode: str = "hybrid"
) -> SearchResult:
    """Top chunks visible to `principal` in `kb`.

    The query is embedded first (no I/O inside the transaction); then every list is read in one
    repeatable-read snapshot that also confirms the index version is still the active one. If a
    swap happened in between, the search starts again with the new version.
    """
    started = time.perf_counter()
    while True:
        version = IndexVersion.objects.get(
            pk=KnowledgeBase.objects.values_list("active_index_version_id", flat=True).get(pk=kb.pk)
        )
        vector = None
        if mode in ("vector", "hybrid"):
            provider = providers.get_provider(
                provider=version.provider, model=version.model, dimensions=version.dimensions
            )
            vector = provider.embed([query])[0]
        params = search_params(principal=principal, kb=kb)
        with transaction.atomic():
            _snapshot()
            if not KnowledgeBase.objects.filter(
                pk=kb.pk, active_index_version_id=version.pk
            ).exists():
                continue
            ranked: list[list[Hit]] = []
            if vector is not None:
                ranked.append(_hits(_vector_rows(params, version, vector, top_k)))
            if mode in ("keyword", "hybrid"):
                ranked.append(_hits(_keyword_rows(params, version, query, top_k)))
        hits = ranked[0] if len(ranked) == 1 else _fuse(ranked, top_k)
        took_ms = (time.perf_counter() - started) * 1000
        return SearchResult(kb=kb.slug, index_version=version.number, took_ms=took_ms, hits=hits)
