"""Search: the visibility rule, tenant scope and access groups in the same SQL statement.

Each query joins the Publication pointer to its chunks and checks, in the statement's one MVCC
snapshot, that the pointer's index version is the knowledge base's active one. A concurrent
switch is therefore seen entirely or not at all; a concurrent swap of the active index version
is detected in the same snapshot and the search starts again against the new version.

Also here: search as of a past time (from the PublicationEvent history), explain (why a chunk
is or is not visible), and the API's reads of knowledge bases and documents. Every read is
scoped by a Principal; what lies outside it raises the same NotFound as what does not exist.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

import embeddings
from kb import selectors as kb_selectors
from kb.ann import ann_distance
from kb.completeness import build_completeness
from kb.models import Build, Chunk, Document, IndexVersion, KnowledgeBase, Publication
from retrieval import bm25, fusion, routing
from retrieval.principals import Principal
from textkit import text
from work.models import AuditEvent

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
    heading_path: str = ""


@dataclass(frozen=True)
class SearchResult:
    kb: str
    index_version: int
    took_ms: float
    hits: list[Hit]
    as_of: datetime | None = None
    # as-of searches only: documents live then whose chunks are no longer retained
    unretained_documents: int | None = None


@dataclass(frozen=True)
class SearchFilters:
    """Client filters. They are ANDed into the statement that applies the visibility rule, so
    they can only narrow what the principal sees, never widen it."""

    document_keys: tuple[str, ...] | None = None
    metadata: dict[str, Any] | None = None  # subset match on Document.metadata (jsonb @>)


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


_GROUPS = "(%(all_groups)s OR d.access_groups = '{}' OR d.access_groups && %(groups)s::varchar[])"


def _filters(params: dict[str, Any]) -> str:
    """The client's filters as extra conditions on the document `d` (none when absent)."""
    sql = ""
    if params.get("document_keys") is not None:
        sql += " AND d.key = ANY(%(document_keys)s::varchar[])"
    if params.get("metadata") is not None:
        sql += " AND d.metadata @> %(metadata)s::jsonb"
    return sql


def _visible(*, iv: int, params: dict[str, Any] | None = None, chunks: str = "kb_chunk") -> str:
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
    JOIN kb_publication p
      ON p.build_id = c.build_id AND p.index_version_id = {iv} AND p.kb_id = %(kb)s
    JOIN kb_document d ON d.id = p.document_id
    JOIN kb_build b ON b.id = p.build_id
    JOIN kb_revision r ON r.id = b.revision_id
    WHERE c.index_version_id = {iv} AND c.kb_id = %(kb)s
      AND EXISTS (SELECT FROM kb_knowledgebase k
                  WHERE k.id = %(kb)s AND k.tenant_id = %(tenant)s{active})
      AND d.deleted_at IS NULL
      AND {_GROUPS} {_filters(params or {})}
    """


_COLUMNS = "c.id, c.text, c.ordinal, d.key, d.title, r.number, c.build_id, c.heading_path"


def vector_query(
    params: dict[str, Any],
    version: IndexVersion,
    vector: list[float],
    limit: int,
    *,
    exact: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The vector search statement and its parameters (also used by tests to EXPLAIN it).

    The approximate form orders by exactly the expression the version's HNSW index is built on,
    which the session walks iteratively (config/settings.py: hnsw.iterative_scan, ef_search,
    max_scan_tuples). The exact form orders by an expression no index matches, so PostgreSQL
    reads the visible chunks through the publication pointers and sorts them: exact, and cheap
    when few are visible.

    The LIMIT is a literal, like the version id: with it the planner prices the generic plan of
    the prepared statement as the ordered index scan it is, so PostgreSQL's plan cache settles
    on that plan after five runs (bound as a parameter, every run was planned again, ~3 ms).
    """
    distance = ann_distance(version)  # the index's expression: vector(D) or halfvec(D)
    order = f"({distance}) + 0" if exact else distance
    sql = f"""
        SELECT {_COLUMNS}, 1 - ({distance}) AS score
        {_visible(iv=version.pk, params=params)}
        ORDER BY {order}, c.id
        LIMIT {int(limit)}
    """
    literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    return sql, {**params, "q": literal}


def _still_active(*, kb_id: int, version: IndexVersion) -> bool:
    """Whether `version` is still the knowledge base's active one in this transaction's
    snapshot. A search asks only when its lists came back empty (`_ranked_lists`)."""
    with routing.db().cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM kb_knowledgebase WHERE id = %s "
            "AND active_index_version_id = %s)",
            [kb_id, version.pk],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _approximate_rows(
    params: dict[str, Any], version: IndexVersion, vector: list[float], limit: int
) -> list[tuple[Any, ...]]:
    """Approximate nearest visible chunks through the version's HNSW index."""
    return _fetch(*vector_query(params, version, vector, limit))


def _exact_rows(
    params: dict[str, Any], version: IndexVersion, vector: list[float], limit: int
) -> list[tuple[Any, ...]]:
    """The exact form, for when the index scan gave up before finding `limit` visible rows
    (very selective filters hit hnsw.max_scan_tuples), so a filter never starves the result."""
    return _fetch(*vector_query(params, version, vector, limit, exact=True))


def _keyword_rows(
    params: dict[str, Any], version: IndexVersion, query: str, limit: int
) -> list[tuple[Any, ...]]:
    """BM25 over the version's postings (`retrieval.bm25`); a p1 version, until it is replaced,
    keeps its `simple` tsvector ranking."""
    if not version.uses_postings:
        return _legacy_keyword_rows(params, version, query, limit)
    return _bm25_rows(params, version, query, limit, _visible)


def _bm25_rows(
    params: dict[str, Any],
    version: IndexVersion,
    query: str,
    limit: int,
    visible: Callable[..., str],
) -> list[tuple[Any, ...]]:
    """BM25 over the version's postings, with `visible` (`_visible` now, `_visible_then` for
    history) as the visibility rule."""
    return bm25.ranked_rows(
        version_id=version.pk,
        weights=bm25.query_weights(version_id=version.pk, query=query),
        params=params,
        columns=_COLUMNS,
        visible=lambda chunks: visible(iv=version.pk, params=params, chunks=chunks),
        limit=limit,
    )


def _legacy_keyword_rows(
    params: dict[str, Any], version: IndexVersion, query: str, limit: int
) -> list[tuple[Any, ...]]:
    sql = f"""
        SELECT {_COLUMNS}, ts_rank_cd(c.lexical, to_tsquery('simple', %(tsquery)s)) AS score
        {_visible(iv=version.pk, params=params)}
          AND c.lexical @@ to_tsquery('simple', %(tsquery)s)
        ORDER BY score DESC, c.id
        LIMIT %(limit)s
    """
    return _first_enough(
        _tsqueries(query),
        limit,
        lambda tsquery: _fetch(sql, {**params, "tsquery": tsquery, "limit": limit}),
    )


def _tsqueries(query: str) -> list[str]:
    """The p1 keyword leg's queries, to try in order: every term, then any term.

    Ranking is O(matching chunks), and any-term matching of common words matches nearly every
    chunk (66 ms at 4,000 chunks in docs/BENCHMARKS.md); every-term matching is both cheaper and
    what a reader expects first. Any-term answers when every-term finds fewer than top_k.
    """
    terms = text.lexical_terms(query)
    # Terms are word characters or CJK only (text.lexical_terms); quoting keeps them lexemes.
    quoted = list(dict.fromkeys("'" + t.replace("'", "''").replace("\\", "") + "'" for t in terms))
    if len(quoted) <= 1:
        return quoted
    return [" & ".join(quoted), " | ".join(quoted)]


def _first_enough(
    tsqueries: list[str], limit: int, run: Callable[[str], list[tuple[Any, ...]]]
) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for tsquery in tsqueries:
        rows = run(tsquery)
        if len(rows) >= limit:
            break
    return rows


def _fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with routing.db().cursor() as cursor:
        cursor.execute(sql, params)
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
            heading_path=r[7],
            score=float(r[8]),
        )
        for r in rows
    ]


def _fuse(ranked_lists: list[list[Hit]], top_k: int) -> list[Hit]:
    """The hybrid ranking of the vector and keyword lists (`retrieval.fusion`)."""
    vector, keyword = ranked_lists
    return fusion.fuse(
        vector=vector,
        keyword=keyword,
        top_k=top_k,
        method=settings.HYBRID_FUSION,
        vector_weight=settings.HYBRID_VECTOR_WEIGHT,
    )


def search_params(
    *, principal: Principal, kb: KnowledgeBase, filters: SearchFilters | None = None
) -> dict[str, Any]:
    """The scope of every search, derived from the principal alone, plus the client's filters
    (which only ever add conditions)."""
    filters = filters or SearchFilters()
    return {
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


def _snapshot() -> None:
    """Make the rest of this transaction read one snapshot (vector and keyword lists agree)."""
    connection = routing.db()
    if connection.in_atomic_block and not connection.savepoint_ids:
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


_BEGIN_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"


@contextmanager
def search_snapshot(using: str) -> Iterator[None]:
    """The block reads one repeatable-read, read-only snapshot of database `using`, with
    `routing.db()` that connection (`routing.reading`): the lists of a hybrid or keyword search,
    and a vector search's careful path (`search`).

    Outside any transaction (the API, the admin's pages) the block is a transaction of its own
    that begins with its isolation level and read-only mode in one round trip. On any failure
    the transaction is rolled back before the connection serves anything else, or the
    connection closed if that fails: Django takes the connection to be in autocommit mode.

    Inside a transaction the caller opened (a test's, a caller's atomic block) the block is a
    savepoint (Django's atomic block) and that transaction decides the snapshot (`_snapshot`)."""
    connection = connections[using]
    with routing.reading(using):
        if connection.in_atomic_block or not connection.get_autocommit():
            with transaction.atomic(using=using):
                _snapshot()
                yield
            return
        try:
            with connection.cursor() as cursor:
                cursor.execute(_BEGIN_SNAPSHOT)
            yield
            with connection.cursor() as cursor:
                cursor.execute("COMMIT")
        except BaseException:
            _end_failed_snapshot(connection)
            raise


@contextmanager
def one_statement(using: str) -> Iterator[None]:
    """The block runs one statement on database `using` (`routing.db()`), which reads its own
    snapshot: in autocommit nothing more, no BEGIN or COMMIT; inside a caller's transaction in
    a savepoint, so a failure leaves that transaction usable, as `search_snapshot` does."""
    connection = connections[using]
    with routing.reading(using):
        if connection.in_atomic_block or not connection.get_autocommit():
            with transaction.atomic(using=using):
                yield
        else:
            yield


def _end_failed_snapshot(connection: BaseDatabaseWrapper) -> None:
    """Leave no transaction open on a connection Django believes is in autocommit mode (the
    next request that borrows it would read inside it): roll back, or close the connection."""
    raw = connection.connection
    if raw is None or raw.closed:
        return
    try:
        if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raw.rollback()
    except Exception:
        connection.close()


def _embed_query(version: IndexVersion, query: str) -> list[float]:
    provider = embeddings.get_provider(
        provider=version.provider, model=version.model, dimensions=version.dimensions
    )
    return provider.embed([query])[0]


def _active_version(*, kb_id: int, using: str) -> IndexVersion:
    """The knowledge base's active version as database `using` has it now."""
    active_id = (
        KnowledgeBase.objects.using(using)
        .filter(pk=kb_id)
        .values_list("active_index_version_id", flat=True)
        .first()
    )
    version = IndexVersion.objects.using(using).filter(pk=active_id).first() if active_id else None
    if version is None:
        raise KnowledgeBaseNotFound(kb_id)
    return version


def _ranked_lists(
    *,
    kb_id: int,
    version: IndexVersion,
    params: dict[str, Any],
    vector: list[float] | None,
    query: str | None,
    limit: int,
    approximate: bool = True,
) -> list[list[Hit]] | None:
    """The search's lists (vector, keyword, or both) in the current snapshot, or None if
    `version` is no longer the knowledge base's active one there. A row proves it is: the
    visibility rule requires the version be active in the statement's snapshot, the same one
    (`_visible`). So the re-check (`_still_active`) runs only when a list came back empty. A
    candidate version (`params["candidate"]`) is never re-checked. The vector leg is the
    approximate statement, then the exact form if that came back short; `approximate=False`:
    the exact form alone (the caller's approximate statement came back short)."""
    check = not params.get("candidate")
    ranked: list[list[Hit]] = []
    if vector is not None:
        rows = _approximate_rows(params, version, vector, limit) if approximate else []
        if len(rows) < limit:
            rows = _exact_rows(params, version, vector, limit)
        if not rows and check and not _still_active(kb_id=kb_id, version=version):
            return None
        check = False  # a row, or the re-check, showed the version active in this snapshot
        ranked.append(_hits(rows))
    if query is not None:
        rows = _keyword_rows(params, version, query, limit)
        if not rows and check and not _still_active(kb_id=kb_id, version=version):
            return None
        ranked.append(_hits(rows))
    return ranked


def search(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    query: str,
    top_k: int = 10,
    mode: str = "hybrid",
    filters: SearchFilters | None = None,
    index_version: IndexVersion | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> SearchResult:
    """Top chunks visible to `principal` in `kb`.

    The query is embedded first (no I/O inside a transaction). A vector search is then one
    statement, the approximate one, in its own snapshot: when it returns top_k rows they are
    the answer, since each proves the version active in that snapshot. Otherwise (a swap, or a
    scope so small the index walk gave up) and for keyword and hybrid searches, every list is
    read in one repeatable-read snapshot that also confirms the index version is still the
    active one (`_ranked_lists`). If a swap happened in between, the search starts again with
    the new version.

    `index_version` (the admin's test search only; the API never passes it) searches that
    version of `kb` instead, a candidate before its swap: its pointers, by the same rule, minus
    the clause that the version be active.

    `using`: the database the snapshot is read from (`retrieval.routing`: the API passes the
    replica when one is configured). On a replica behind a swap, the version is the one the
    replica's snapshot says is active; a knowledge base it has not replayed yet is not found.
    """
    started = time.perf_counter()
    if index_version is not None and index_version.kb_id != kb.pk:
        raise ValueError("index_version belongs to another knowledge base")
    # The version `kb` was read with (`knowledge_base_for` selects it); after a swap, re-read.
    version = index_version or kb.active_index_version
    while True:
        if version is None:
            version = _active_version(kb_id=kb.pk, using=using)
        vector = _embed_query(version, query) if mode in ("vector", "hybrid") else None
        params = search_params(principal=principal, kb=kb, filters=filters)
        limit = fusion.depth(top_k) if mode == "hybrid" else top_k
        if index_version is not None:
            params["candidate"] = True
        if mode == "vector":
            assert vector is not None
            with one_statement(using):
                rows = _approximate_rows(params, version, vector, limit)
            if len(rows) >= limit:
                return _result(kb, version, started, _hits(rows))
        with search_snapshot(using):
            ranked = _ranked_lists(
                kb_id=kb.pk,
                version=version,
                params=params,
                vector=vector,
                query=query if mode in ("keyword", "hybrid") else None,
                limit=limit,
                approximate=mode != "vector",  # vector mode's came back short just now
            )
        if ranked is None:  # swapped since `version` was read: start again with the new one
            version = None
            continue
        return _result(
            kb, version, started, ranked[0] if len(ranked) == 1 else _fuse(ranked, top_k)
        )


def _result(
    kb: KnowledgeBase, version: IndexVersion, started: float, hits: list[Hit]
) -> SearchResult:
    took_ms = (time.perf_counter() - started) * 1000
    return SearchResult(kb=kb.slug, index_version=version.number, took_ms=took_ms, hits=hits)


# --- as of a past time ------------------------------------------------------------------------


class HistoryOutOfRange(ValueError):
    """`as_of` is in the future or older than the knowledge base's retention window."""


SWAP_EVENT_KINDS = ("index_version_swap", "index_version_rollback")


def index_version_at(
    *, kb: KnowledgeBase, at: datetime, using: str = DEFAULT_DB_ALIAS
) -> IndexVersion:
    """The index version that was active at `at`, from the swap audit trail: the target of the
    last swap at or before `at`; before the first swap, the version that swap replaced; with no
    swap at all, the active one."""
    swaps = AuditEvent.objects.using(using).filter(
        kb=kb, kind__in=SWAP_EVENT_KINDS, subject_type="index_version"
    )
    last = swaps.filter(detected_at__lte=at).order_by("-detected_at", "-id").first()
    version_id: Any = last.subject_id if last is not None else None
    if version_id is None:
        first_after = swaps.filter(detected_at__gt=at).order_by("detected_at", "id").first()
        if first_after is not None:
            version_id = (first_after.details or {}).get("previous_id")
    version = (
        IndexVersion.objects.using(using).filter(kb=kb, pk=version_id).first()
        if isinstance(version_id, int)
        else None
    )
    if version is None:
        version = kb.active_index_version
        assert version is not None, "knowledge_base_for only returns serving knowledge bases"
    return version


def _live_then(*, iv: int) -> str:
    """One row per document of the knowledge base: the build its pointer in version `iv` named
    at %(as_of)s (its last publish, approve or rollback event then), unless its last delete or
    restore event then was a delete."""
    iv = int(iv)
    # Only the integer `iv` is interpolated; values are bound parameters.
    return f"""
    (
        SELECT pointed.document_id, pointed.build_id
        FROM (
            SELECT DISTINCT ON (e.document_id) e.document_id, e.build_id
            FROM kb_publicationevent e
            WHERE e.kb_id = %(kb)s AND e.index_version_id = {iv}
              AND e.action IN ('publish', 'approve', 'rollback') AND e.created_at <= %(as_of)s
            ORDER BY e.document_id, e.created_at DESC, e.id DESC
        ) pointed
        LEFT JOIN LATERAL (
            SELECT x.action FROM kb_publicationevent x
            WHERE x.document_id = pointed.document_id AND x.action IN ('delete', 'restore')
              AND x.created_at <= %(as_of)s
            ORDER BY x.created_at DESC, x.id DESC
            LIMIT 1
        ) gone ON true
        WHERE gone.action IS DISTINCT FROM 'delete'
    ) live
    """  # noqa: S608


def _visible_then(*, iv: int, params: dict[str, Any], chunks: str = "kb_chunk") -> str:
    """FROM/WHERE of an as-of search: the chunks of the builds live at %(as_of)s that are still
    retained, scoped by tenant, the documents' current access groups and the client's filters;
    `chunks` (a constant) is the relation read as the chunks `c`."""
    return f"""
    FROM {_live_then(iv=iv)}
    JOIN {chunks} c ON c.build_id = live.build_id AND c.index_version_id = {int(iv)}
    JOIN kb_document d ON d.id = live.document_id
    JOIN kb_knowledgebase k ON k.id = d.kb_id
    JOIN kb_build b ON b.id = live.build_id
    JOIN kb_revision r ON r.id = b.revision_id
    WHERE c.kb_id = %(kb)s AND d.kb_id = %(kb)s AND k.tenant_id = %(tenant)s
      AND {_GROUPS} {_filters(params)}
    """


def _history_rows(
    params: dict[str, Any],
    version: IndexVersion,
    vector: list[float] | None,
    tsquery: str | None,
    limit: int,
) -> list[tuple[Any, ...]]:
    """Exact ranking over the chunks live at as_of (no approximate index: few rows, rare use)."""
    if vector is not None:
        dims = int(version.dimensions)
        distance = f"c.embedding::vector({dims}) <=> %(q)s::vector({dims})"
        sql = f"""
            SELECT {_COLUMNS}, 1 - ({distance}) AS score
            {_visible_then(iv=version.pk, params=params)}
            ORDER BY ({distance}) + 0, c.id LIMIT %(limit)s
        """
        literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
        sql_params = {**params, "q": literal, "limit": limit}
    else:
        sql = f"""
            SELECT {_COLUMNS}, ts_rank_cd(c.lexical, to_tsquery('simple', %(tsquery)s)) AS score
            {_visible_then(iv=version.pk, params=params)}
              AND c.lexical @@ to_tsquery('simple', %(tsquery)s)
            ORDER BY score DESC, c.id LIMIT %(limit)s
        """
        sql_params = {**params, "tsquery": tsquery, "limit": limit}
    return _fetch(sql, sql_params)


def _history_unretained(params: dict[str, Any], version: IndexVersion) -> int:
    """Documents (visible to the caller) that were live at as_of but whose build's chunks have
    since been collected or purged: the answer cannot include them."""
    sql = f"""
        SELECT count(*) FROM {_live_then(iv=version.pk)}
        JOIN kb_document d ON d.id = live.document_id
        JOIN kb_knowledgebase k ON k.id = d.kb_id
        LEFT JOIN kb_build b ON b.id = live.build_id
        WHERE d.kb_id = %(kb)s AND k.tenant_id = %(tenant)s AND {_GROUPS} {_filters(params)}
          AND (b.id IS NULL OR b.collected_at IS NOT NULL OR d.purged_at IS NOT NULL)
    """  # noqa: S608 (fragments of constants and integers; values are bound)
    with routing.db().cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def search_as_of(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    query: str,
    as_of: datetime,
    top_k: int = 10,
    mode: str = "hybrid",
    filters: SearchFilters | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> SearchResult:
    """What a search would have returned at `as_of`, from the PublicationEvent history: for each
    document the build its pointer named then (in the index version active then), minus
    documents deleted then, searched over those builds' chunks that are still retained.

    Access groups and tenant scope are today's (history does not widen them). The caller must be
    allowed to read history (checked by the caller of this function); raises HistoryOutOfRange
    outside [now - retention window, now]. `using`: the database read, as for `search`.
    """
    now = timezone.now()
    if as_of > now:
        raise HistoryOutOfRange("as_of is in the future.")
    if as_of < now - timedelta(days=kb.retention_days):
        raise HistoryOutOfRange(
            f"as_of is older than the retention window of {kb.retention_days} days."
        )
    started = time.perf_counter()
    version = index_version_at(kb=kb, at=as_of, using=using)
    vector = _embed_query(version, query) if mode in ("vector", "hybrid") else None
    params = {**search_params(principal=principal, kb=kb, filters=filters), "as_of": as_of}
    limit = fusion.depth(top_k) if mode == "hybrid" else top_k
    ranked: list[list[Hit]] = []
    with search_snapshot(using):
        if vector is not None:
            ranked.append(_hits(_history_rows(params, version, vector, None, limit)))
        if mode in ("keyword", "hybrid") and version.uses_postings:
            ranked.append(_hits(_bm25_rows(params, version, query, limit, _visible_then)))
        elif mode in ("keyword", "hybrid"):
            rows = _first_enough(
                _tsqueries(query),
                limit,
                lambda tsquery: _history_rows(params, version, None, tsquery, limit),
            )
            ranked.append(_hits(rows))
        unretained = _history_unretained(params, version)
    hits = ranked[0] if len(ranked) == 1 else _fuse(ranked, top_k)
    return SearchResult(
        kb=kb.slug,
        index_version=version.number,
        took_ms=(time.perf_counter() - started) * 1000,
        hits=hits,
        as_of=as_of,
        unretained_documents=unretained,
    )


# --- explain ----------------------------------------------------------------------------------


class NotFound(Exception):
    """Does not exist, or belongs to a scope the principal may not see: never told apart."""


@dataclass(frozen=True)
class ChunkExplanation:
    chunk_id: int
    visible: bool
    reasons: list[str]
    chunk: dict[str, Any]
    document: dict[str, Any]
    build: dict[str, Any]
    index_version: dict[str, Any]
    pointer: dict[str, Any]
    approval: dict[str, Any]
    access: dict[str, Any]


def _chunk_visible_now(*, principal: Principal, chunk: Chunk, iv: int) -> bool:
    """The search statement's own visibility rule, applied to one chunk."""
    params = {**search_params(principal=principal, kb=chunk.kb), "chunk": chunk.pk}
    with routing.db().cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) {_visible(iv=iv, params=params)} AND c.id = %(chunk)s", params
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def chunk_explain(*, principal: Principal, chunk_id: int) -> ChunkExplanation:
    """Why a chunk is, or is not, returned to `principal` by search right now: the facts of the
    visibility rule read in one snapshot, the verdict from the search statement itself. Raises
    NotFound, exactly as for an id that does not exist, for a chunk the principal may not read:
    of another tenant, outside its knowledge bases, or of a document whose access groups it
    does not hold. A readable chunk that is not served (superseded, awaiting approval, of a
    deleted document, ...) is explained."""
    with transaction.atomic():
        _snapshot()
        chunk = (
            Chunk.objects.select_related(
                "kb", "document", "build__revision", "build__index_version", "index_version"
            )
            .filter(pk=chunk_id, kb__tenant_id=principal.tenant_id)
            .first()
        )
        if (
            chunk is None
            or not principal.may_read_kb(chunk.kb_id)
            or not principal.may_read_groups(chunk.document.access_groups)
        ):
            raise NotFound(chunk_id)
        kb, document, build, version = chunk.kb, chunk.document, chunk.build, chunk.index_version
        active_id = kb.active_index_version_id
        publication = (
            Publication.objects.select_related("build__revision")
            .filter(document=document, index_version_id=active_id)
            .first()
        )
        completeness = build_completeness(build_id=build.pk)
        problems = completeness.problems(
            expected_count=build.expected_chunk_count,
            dimensions=version.dimensions,
            manifest=build.manifest_sha256,
        )
        approved = (
            document.events.filter(build_id=build.pk, action="approve")
            .order_by("-created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        visible = active_id is not None and _chunk_visible_now(
            principal=principal, chunk=chunk, iv=active_id
        )
    groups_held = sorted(set(document.access_groups) & principal.access_groups)
    points_here = publication is not None and publication.build_id == build.pk
    reasons: list[str] = []
    if version.pk != active_id:
        reasons.append(
            f"The chunk belongs to index version {version.number} ({version.state}), "
            "not the knowledge base's active one."
        )
    if publication is None:
        reasons.append("No build of this document is live in the active index version.")
    elif not points_here:
        reasons.append(
            f"The document's live pointer names build {publication.build_id} (revision "
            f"{publication.build.revision.number}), not this chunk's build {build.pk}."
        )
    if build.state != Build.State.LIVE:
        detail = {
            Build.State.READY: "complete and waiting for approval",
            Build.State.PENDING: "waiting to be built",
            Build.State.BUILDING: "still being built",
        }.get(Build.State(build.state), build.error or "no longer served")
        reasons.append(f"Build {build.pk} is {build.state}: {detail}.")
    if problems:
        reasons.append(f"Build {build.pk} is incomplete: {'; '.join(problems)}.")
    if document.desired_revision != build.revision.number:
        reasons.append(
            f"The build is of revision {build.revision.number}; revision "
            f"{document.desired_revision} is the desired one."
        )
    if document.deleted_at is not None:
        reasons.append(f"The document was deleted at {document.deleted_at.isoformat()}.")
    if visible:
        reasons = [
            f"The document's live pointer in the active index version names this chunk's "
            f"build {build.pk} (revision {build.revision.number}); the document is not deleted "
            "and the caller may read its access groups."
        ]
        if problems:
            reasons.append(
                f"Yet the live build fails its completeness check ({'; '.join(problems)}): the "
                "visibility rule is violated; run `manage.py kb_verify` and escalate."
            )
    elif not reasons:
        reasons.append("Not visible, for a reason the facts above do not show.")
    return ChunkExplanation(
        chunk_id=chunk.pk,
        visible=visible,
        reasons=reasons,
        chunk={"id": chunk.pk, "ordinal": chunk.ordinal, "token_count": chunk.token_count},
        document={
            "id": document.pk,
            "key": document.key,
            "title": document.title,
            "desired_revision": document.desired_revision,
            "deleted": document.deleted_at is not None,
            "deleted_at": document.deleted_at,
        },
        build={
            "id": build.pk,
            "state": build.state,
            "revision": build.revision.number,
            "is_desired_revision": build.revision.number == document.desired_revision,
            "expected_chunk_count": build.expected_chunk_count,
            "chunk_count": completeness.chunk_count,
            "complete": not problems,
            "problems": problems,
            "error": build.error,
        },
        index_version={
            "number": version.number,
            "state": version.state,
            "active": version.pk == active_id,
        },
        pointer={
            "build_id": publication.build_id if publication else None,
            "revision": publication.build.revision.number if publication else None,
            "published_at": publication.published_at if publication else None,
            "points_at_this_build": points_here,
        },
        approval={
            "kb_requires_approval": kb.require_approval,
            "awaiting_approval": build.state == Build.State.READY,
            "approved_at": approved,
        },
        access={
            "document_groups": sorted(document.access_groups),
            "caller_groups": sorted(principal.access_groups),
            "caller_reads_all_groups": principal.all_groups,
            "groups_matched": groups_held,
            "allowed": True,  # what the caller may not read is not explained (NotFound)
        },
    )


@dataclass(frozen=True)
class HitVisibility:
    """Why one hit of a search was returned to its principal: the facts of the visibility rule
    the search statement applied to it (for the admin's test search)."""

    pointer: str  # which pointer named the hit's build, in which version, since when
    document_groups: list[str]
    groups_matched: list[str]
    groups: str  # the access-group clause, in words


def hits_visibility(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    version: IndexVersion,
    hits: list[Hit],
    as_of: datetime | None = None,
) -> dict[int, HitVisibility]:
    """Per hit (by chunk id): the pointer that serves it and the access groups that let
    `principal` read it. The hits passed the search statement's rule already; this names its
    clauses. Two queries (the documents' groups, the pointers' times)."""
    if not hits:
        return {}
    groups_of = dict(
        Document.objects.filter(kb=kb, key__in={h.document_key for h in hits}).values_list(
            "key", "access_groups"
        )
    )
    since = dict(
        Publication.objects.filter(
            index_version=version, build_id__in={h.build_id for h in hits}
        ).values_list("build_id", "published_at")
    )
    active = version.pk == kb.active_index_version_id
    which = f"v{version.number} ({'active' if active else version.state})"
    result = {}
    for hit in hits:
        groups = sorted(groups_of.get(hit.document_key) or [])
        matched = sorted(set(groups) & principal.access_groups)
        if as_of is not None:
            pointer = (
                f"At {timezone.localtime(as_of):%Y-%m-%d %H:%M:%S} the document's pointer in "
                f"{which} named build {hit.build_id} (r{hit.revision}) and it was not deleted; "
                "its chunks are still retained."
            )
        else:
            published = since.get(hit.build_id)
            when = f", since {timezone.localtime(published):%Y-%m-%d %H:%M:%S}" if published else ""
            pointer = (
                f"The document's pointer in {which} names build {hit.build_id} "
                f"(r{hit.revision}){when}; the document is not deleted."
            )
        if not groups:
            words = "No access groups: everyone in the tenant reads it."
        elif principal.all_groups:
            words = f"Behind {', '.join(groups)}; this search reads every group."
        else:
            words = f"Behind {', '.join(groups)}; matched: {', '.join(matched)}."
        result[hit.chunk_id] = HitVisibility(pointer, groups, matched, words)
    return result


# --- knowledge bases and documents -------------------------------------------------------------


def knowledge_bases(*, principal: Principal) -> QuerySet[KnowledgeBase]:
    """The knowledge bases the principal may search, by slug."""
    kbs = KnowledgeBase.objects.filter(
        tenant_id=principal.tenant_id, active_index_version__isnull=False
    ).select_related("active_index_version")
    if principal.kb_ids is not None:
        kbs = kbs.filter(pk__in=principal.kb_ids)
    return kbs.order_by("slug", "id")


def _readable_documents(principal: Principal) -> QuerySet[Document]:
    """Documents of the principal's tenant and knowledge bases whose groups it may read."""
    documents = Document.objects.filter(kb__tenant_id=principal.tenant_id)
    if principal.kb_ids is not None:
        documents = documents.filter(kb_id__in=principal.kb_ids)
    if not principal.all_groups:
        documents = documents.filter(
            Q(access_groups=[]) | Q(access_groups__overlap=sorted(principal.access_groups))
        )
    return documents


def _with_live_revision(documents: QuerySet[Document]) -> QuerySet[Document]:
    live = Publication.objects.filter(
        document=OuterRef("pk"), index_version_id=OuterRef("kb__active_index_version_id")
    )
    return documents.annotate(
        live_revision=Subquery(live.values("build__revision__number")[:1]),
        live_build_id=Subquery(live.values("build_id")[:1]),
    )


@dataclass(frozen=True)
class DocumentPage:
    documents: list[Document]
    next_after_id: int | None


def documents_page(
    *, principal: Principal, kb: KnowledgeBase, after_id: int | None, limit: int
) -> DocumentPage:
    """Non-deleted documents of `kb` the principal may read, in id order after `after_id`
    (keyset pagination: stable while documents are added, one indexed range scan per page).
    Each carries `live_revision` and `live_build_id` (None when nothing is live)."""
    documents = _readable_documents(principal).filter(kb=kb, deleted_at__isnull=True)
    if after_id is not None:
        documents = documents.filter(pk__gt=after_id)
    rows = list(_with_live_revision(documents).select_related("kb").order_by("pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return DocumentPage(documents=rows, next_after_id=rows[-1].pk if more else None)


def document_for(*, principal: Principal, document_id: int) -> Document:
    """A document the principal may read (deleted ones included); NotFound otherwise, the same
    for 'does not exist', 'another tenant' and 'not your access groups'."""
    document = (
        _with_live_revision(_readable_documents(principal))
        .select_related("kb")
        .filter(pk=document_id)
        .first()
    )
    if document is None:
        raise NotFound(document_id)
    return document


IN_PROGRESS_STATES = (Build.State.PENDING, Build.State.BUILDING, Build.State.READY)


@dataclass(frozen=True)
class DocumentDetail:
    document: Document
    status: str
    live_revision: int | None
    live_build_id: int | None
    running_builds: list[Build] = field(default_factory=list)


def document_detail(*, principal: Principal, document_id: int) -> DocumentDetail:
    """A readable document with its status line, live revision and the builds still on their
    way (pending, building, or ready and waiting for approval). Raises NotFound."""
    document = document_for(principal=principal, document_id=document_id)
    running = list(
        Build.objects.filter(document=document, state__in=IN_PROGRESS_STATES)
        .select_related("revision", "index_version")
        .order_by("-revision__number", "index_version__number")
    )
    live = getattr(document, "live_revision", None) if document.deleted_at is None else None
    return DocumentDetail(
        document=document,
        status=kb_selectors.document_status(document=document),
        live_revision=live,
        live_build_id=getattr(document, "live_build_id", None) if live is not None else None,
        running_builds=running,
    )
