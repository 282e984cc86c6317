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


_VISIBLE = """
    FROM kb_publication p
    JOIN kb_knowledgebase k ON k.id = p.kb_id AND k.active_index_version_id = p.index_version_id
    JOIN kb_document d ON d.id = p.document_id
    JOIN kb_chunk c ON c.build_id = p.build_id
    JOIN kb_revision r ON r.id = (SELECT b.revision_id FROM kb_build b WHERE b.id = p.build_id)
    WHERE p.kb_id = %(kb)s AND p.index_version_id = %(iv)s AND k.tenant_id = %(tenant)s
      AND d.deleted_at IS NULL
      AND (%(all_groups)s OR d.access_groups = '{}' OR d.access_groups && %(groups)s::varchar[])
"""

_COLUMNS = "c.id, c.text, c.ordinal, d.key, d.title, r.number, c.build_id"


def _vector_rows(params: dict[str, Any], vector: list[float], limit: int) -> list[tuple[Any, ...]]:
    sql = f"""
        SELECT {_COLUMNS}, 1 - (c.embedding <=> %(q)s::vector) AS score
        {_VISIBLE}
        ORDER BY c.embedding <=> %(q)s::vector, c.id
        LIMIT %(limit)s
    """
    literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    with connection.cursor() as cursor:
        cursor.execute(sql, {**params, "q": literal, "limit": limit})
        return cursor.fetchall()


def _keyword_rows(params: dict[str, Any], query: str, limit: int) -> list[tuple[Any, ...]]:
    terms = text.lexical_terms(query)
    if not terms:
        return []
    sql = f"""
        SELECT {_COLUMNS}, ts_rank_cd(c.lexical, q.query) AS score
        {_VISIBLE}
          AND c.lexical @@ q.query
        ORDER BY score DESC, c.id
        LIMIT %(limit)s
    """
    sql = sql.replace(
        "FROM kb_publication p",
        "FROM (SELECT to_tsquery('simple', %(tsquery)s) AS query) q, kb_publication p",
        1,
    )
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
        params = {
            "kb": kb.pk,
            "iv": version.pk,
            "tenant": principal.tenant_id,
            "all_groups": principal.all_groups,
            "groups": sorted(principal.access_groups),
        }
        with transaction.atomic():
            _snapshot()
            if not KnowledgeBase.objects.filter(
                pk=kb.pk, active_index_version_id=version.pk
            ).exists():
                continue
            ranked: list[list[Hit]] = []
            if vector is not None:
                ranked.append(_hits(_vector_rows(params, vector, top_k)))
            if mode in ("keyword", "hybrid"):
                ranked.append(_hits(_keyword_rows(params, query, top_k)))
        hits = ranked[0] if len(ranked) == 1 else _fuse(ranked, top_k)
        took_ms = (time.perf_counter() - started) * 1000
        return SearchResult(kb=kb.slug, index_version=version.number, took_ms=took_ms, hits=hits)
