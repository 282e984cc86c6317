"""Search as of a past time: the index version active then and the builds its pointers named,
from the PublicationEvent history, by the same visibility rule."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone

from kb.models import IndexVersion, KnowledgeBase
from retrieval import routing
from retrieval.principals import Principal
from retrieval.search.fusion import depth
from retrieval.search.hits import COLUMNS, Leg, SearchFilters, SearchResult, hits_from_rows
from retrieval.search.lexical.leg import bm25_rows
from retrieval.search.lexical.tsvector import first_enough, tsqueries
from retrieval.search.ranking import explain_ranking
from retrieval.search.rerank import rerank_plan, rerank_stage
from retrieval.search.snapshot import (
    fetch,
    search_snapshot,
)
from retrieval.search.vector import embed_query
from retrieval.search.visibility import (
    GROUPS,
    filters_sql,
    search_params,
)
from work.models import AuditEvent


class HistoryOutOfRange(ValueError):
    """`as_of` is in the future (`earliest` None) or older than the knowledge base's retention
    window (`earliest`: the oldest time that can be searched); the message is the API's."""

    def __init__(
        self, message: str, *, earliest: datetime | None = None, retention_days: int = 0
    ) -> None:
        super().__init__(message)
        self.earliest = earliest
        self.retention_days = retention_days


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
      AND {GROUPS} {filters_sql(params)}
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
            SELECT {COLUMNS}, 1 - ({distance}) AS score
            {_visible_then(iv=version.pk, params=params)}
            ORDER BY ({distance}) + 0, c.id LIMIT %(limit)s
        """
        literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
        sql_params = {**params, "q": literal, "limit": limit}
    else:
        sql = f"""
            SELECT {COLUMNS}, ts_rank_cd(c.lexical, to_tsquery('simple', %(tsquery)s)) AS score
            {_visible_then(iv=version.pk, params=params)}
              AND c.lexical @@ to_tsquery('simple', %(tsquery)s)
            ORDER BY score DESC, c.id LIMIT %(limit)s
        """
        sql_params = {**params, "tsquery": tsquery, "limit": limit}
    return fetch(sql, sql_params)


def _history_unretained(params: dict[str, Any], version: IndexVersion) -> int:
    """Documents (visible to the caller) that were live at as_of but whose build's chunks have
    since been collected or purged: the answer cannot include them."""
    sql = f"""
        SELECT count(*) FROM {_live_then(iv=version.pk)}
        JOIN kb_document d ON d.id = live.document_id
        JOIN kb_knowledgebase k ON k.id = d.kb_id
        LEFT JOIN kb_build b ON b.id = live.build_id
        WHERE d.kb_id = %(kb)s AND k.tenant_id = %(tenant)s AND {GROUPS} {filters_sql(params)}
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
    explain: bool = False,
    rerank: bool = True,
) -> SearchResult:
    """What a search would have returned at `as_of`, from the PublicationEvent history: for each
    document the build its pointer named then (in the index version active then), minus
    documents deleted then, searched over those builds' chunks that are still retained.

    Access groups and tenant scope are today's (history does not widen them). The caller must be
    allowed to read history (checked by the caller of this function); raises HistoryOutOfRange
    outside [now - retention window, now]. `using`, `explain` and `rerank`: as for `search`
    (the ranking is today's, the reranker's too; history rewinds only what was live).
    """
    now = timezone.now()
    if as_of > now:
        raise HistoryOutOfRange("as_of is in the future.")
    earliest = now - timedelta(days=kb.retention_days)
    if as_of < earliest:
        raise HistoryOutOfRange(
            f"as_of is older than the retention window of {kb.retention_days} days: "
            f"the earliest time that can be searched is {earliest:%Y-%m-%dT%H:%M:%SZ} (UTC).",
            earliest=earliest,
            retention_days=kb.retention_days,
        )
    started = time.perf_counter()
    version = index_version_at(kb=kb, at=as_of, using=using)
    vector = embed_query(version, query) if mode in ("vector", "hybrid") else None
    params = {**search_params(principal=principal, kb=kb, filters=filters), "as_of": as_of}
    plan = rerank_plan(mode=mode, requested=rerank)
    limit = plan.depth(depth(top_k) if mode == "hybrid" else top_k)
    ranked: list[Leg] = []
    with search_snapshot(using):
        if vector is not None:
            rows = _history_rows(params, version, vector, None, limit)
            ranked.append(Leg(hits_from_rows(rows), 1.0))
        if mode in ("keyword", "hybrid") and version.uses_postings:
            rows, bound = bm25_rows(params, version, query, limit, _visible_then)
            ranked.append(Leg(hits_from_rows(rows), bound))
        elif mode in ("keyword", "hybrid"):
            rows = first_enough(
                tsqueries(query),
                limit,
                lambda tsquery: _history_rows(params, version, None, tsquery, limit),
            )
            ranked.append(Leg(hits_from_rows(rows), None))
        unretained = _history_unretained(params, version)
    hits, reranked = rerank_stage(plan, query=query, legs=ranked, top_k=top_k)
    return SearchResult(
        kb=kb.slug,
        index_version=version.number,
        took_ms=(time.perf_counter() - started) * 1000,
        hits=[replace(hit, kb=kb.slug) for hit in hits],
        as_of=as_of,
        unretained_documents=unretained,
        rerank=reranked,
        ranking=explain_ranking(mode=mode, query=query, legs=ranked, hits=hits)
        if explain
        else None,
    )
