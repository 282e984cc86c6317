"""Search: the query embedded, then the legs read in one snapshot that also proves the index
version active, fused for hybrid; a swap in between starts the search again. A hybrid search is
then reranked when a reranker is configured (`retrieval.search.rerank`), outside the snapshot."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

from kb.models import IndexVersion, KnowledgeBase
from retrieval import routing
from retrieval.principals import KnowledgeBaseNotFound, Principal
from retrieval.search import shared_snapshot
from retrieval.search.english import english_leg, english_query_started, english_walk_started
from retrieval.search.fusion import FusionModel, depth
from retrieval.search.hits import (
    Hit,
    Leg,
    Ranking,
    Rerank,
    SearchFilters,
    SearchResult,
    hits_from_rows,
)
from retrieval.search.lexical.bm25 import Narrow, Statistics, filtered, narrow_ids
from retrieval.search.lexical.leg import keyword_rows
from retrieval.search.parameters import adopted_parameters
from retrieval.search.ranking import explain_ranking
from retrieval.search.rerank import rerank_plan, rerank_stage
from retrieval.search.snapshot import (
    one_statement,
    search_snapshot,
)
from retrieval.search.vector import approximate_rows, embed_query, exact_rows, vector_query
from retrieval.search.visibility import search_params, visible_sql

MODES = ("vector", "keyword", "hybrid")
# Under a narrow client filter the vector leg ranks exactly the filter's chunks, probed before
# any index walk (`_narrow`); B15 times it against this off.
NARROW_VECTOR = True


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
    shared: Statistics | None = None,
    english: Future[list[float]] | None = None,
) -> list[Leg] | None:
    """The search's lists (vector, keyword, or both; then the English list when `english`, the
    query's English vector being embedded, is given: `retrieval.search.english`, read last so
    the other legs need not wait for the model) in the current snapshot, or
    None if `version` is no longer the knowledge base's active one there. A row proves it is: the
    visibility rule requires the version be active in the statement's snapshot, the same one
    (`visible_sql`). So the re-check (`_still_active`) runs only when a list came back empty. A
    candidate version (`params["candidate"]`) is never re-checked. The vector leg is, under a
    client filter that leaves few chunks, the exact form over those (`_narrow`), else the
    approximate statement, then the exact form if that came back short; `approximate=False`:
    the exact form alone (the caller's approximate statement came back short). `shared`: the
    keyword leg weighs the query's terms by these statistics (`bm25.query_weights`).

    The index walks (the vector leg's beside a keyword leg, the English list's) are read on
    snapshot readers, other connections in this same snapshot, while this connection reads the
    keyword leg (`shared_snapshot`); in series when the snapshot cannot be shared (a caller's
    transaction), no reader is idle or one fails."""
    check = not params.get("candidate")
    narrow = _narrow(params, version) if vector is not None else None
    unfiltered = narrow is None or narrow.ids is None
    # The index walks on snapshot readers while this connection reads the keyword leg
    # (`shared_snapshot`): the vector leg's when there is a keyword leg to overlap, the English
    # list's (which waits there for its query vector) always. In series without a reader.
    walk_vector = vector is not None and approximate and unfiltered and query is not None
    walk_english = english is not None and unfiltered
    vector_walk = english_walk = None

    def vector_statement() -> tuple[str, dict[str, Any]]:
        assert vector is not None
        return vector_query(params, version, vector, limit)

    if walk_vector or walk_english:
        snapshot = shared_snapshot.exported()
        if snapshot is not None and walk_vector:
            vector_walk = shared_snapshot.read_soon(snapshot, routing.db().alias, vector_statement)
        if snapshot is not None and english is not None and walk_english:
            english_walk = english_walk_started(snapshot, params, version, english, limit)
    keyword: tuple[list[tuple[Any, ...]], float | None] | None = None
    if query is not None:
        keyword = keyword_rows(params, version, query, limit, narrow, shared)
    ranked: list[Leg] = []
    if vector is not None:
        if narrow is not None and narrow.ids is not None:
            # A narrow filter: its chunks ranked exactly, no index walk that would give up.
            rows = exact_rows({**params, "chunk_ids": narrow.ids}, version, vector, limit)
        else:
            if not approximate:
                rows = []
            elif vector_walk is not None:  # read by a reader meanwhile (in series if it failed)
                rows = shared_snapshot.read_or_fetch(vector_walk, vector_statement)
            else:
                rows = approximate_rows(params, version, vector, limit)
            if len(rows) < limit:
                rows = exact_rows(params, version, vector, limit)
        ranked.append(Leg(hits_from_rows(rows), 1.0))
    if keyword is not None:
        ranked.append(Leg(hits_from_rows(keyword[0]), keyword[1]))
    # a row showed the version active in this snapshot; else ask (a candidate never is)
    if (
        check
        and not any(leg.hits for leg in ranked)
        and not _still_active(kb_id=kb_id, version=version)
    ):
        return None
    if english is not None:
        candidates = [hit for leg in ranked for hit in leg.hits]
        ids = narrow.ids if narrow is not None else None
        vector_en = english.result()
        ranked.append(
            english_leg(
                params, version, vector_en, limit, candidates, narrow_ids=ids, walking=english_walk
            )
        )
    return ranked


def _narrow(params: dict[str, Any], version: IndexVersion) -> Narrow | None:
    """Under a client filter, the filter's visible chunks when they are few
    (`bm25.narrow_ids`), probed once for both legs of a hybrid search, and before a vector
    search walks its index. B15 (docs/BENCHMARKS.md): with a 1 % filter the vector leg's index
    walk often gave up after hnsw.max_scan_tuples, and the exact form over every visible chunk
    then found the filter's few slowly (0.2 %: 94 ms p50); probed only after a short walk, a
    0.1 % filter still cost vector search 2.1-2.3x unfiltered at the median, the walk's giving
    up. The probe stops at FILTER_FIRST_MAX + 1 rows (about 6 ms when a filter is wide)."""
    if not NARROW_VECTOR or not filtered(params):
        return None
    return narrow_ids(
        params, lambda chunks: visible_sql(iv=version.pk, params=params, chunks=chunks)
    )


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
    explain: bool = False,
    rerank: bool = True,
    fusion: str | None = None,
    served_instead: Mapping[int, int] | None = None,
    english_list: bool = True,
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

    `explain`: the result also says why each hit ranks where it does (`retrieval.search.ranking`).

    `rerank`: a hybrid search's fused hits are reordered by the configured reranker (none by
    default), after the snapshot has closed; `False` skips it. The result says what happened
    (`SearchResult.rerank`); a reranker that fails leaves the fused order
    (`retrieval.search.rerank`).

    `fusion`: how a hybrid search fuses its legs (`retrieval.search.fusion.METHODS`), by default
    CANON_HYBRID_FUSION; the compatibility doors ask for the learned fusion, whose 0-1 score is
    what their thresholds mean. The learned fusion uses the parameters `kb` adopted
    (`retrieval.search.parameters`, read in the lists' snapshot), else the shipped default. It
    reads the English list as a third (`retrieval.search.english`) when the version has one and
    the query is not in Chinese, and ranks by the three lists' model then (a calibration of the
    two legs ranks by them alone).

    `served_instead` (evaluation's runs of a pending revision only; the API never passes it):
    {document id: build id}, each document served from that build of the version searched
    instead of its published one, in the same snapshot and by the same rule otherwise
    (`visibility._pointers`); a build of another document or version serves nothing. Without
    it the statements are exactly those of every other search.

    `english_list=False` leaves the English list aside as a version without one would (B8
    measures the two side by side; the API never passes it).
    """
    started = time.perf_counter()
    if index_version is not None and index_version.kb_id != kb.pk:
        raise ValueError("index_version belongs to another knowledge base")
    # The version `kb` was read with (`knowledge_base_for` selects it); after a swap, re-read.
    version = index_version or kb.active_index_version
    plan = rerank_plan(mode=mode, requested=rerank)
    while True:
        if version is None:
            version = _active_version(kb_id=kb.pk, using=using)
        learned = mode == "hybrid" and (fusion or settings.HYBRID_FUSION) == "learned"
        # The English list: only the learned fusion reads it (`retrieval.search.english`). Its
        # vector is embedded on a thread meanwhile, read when the list is.
        english = english_query_started(version, query) if learned and english_list else None
        vector = embed_query(version, query) if mode in ("vector", "hybrid") else None
        params = search_params(principal=principal, kb=kb, filters=filters)
        hybrid_depth = depth(top_k, fusion, english=english is not None)
        limit = plan.depth(hybrid_depth if mode == "hybrid" else top_k)
        if index_version is not None:
            params["candidate"] = True
        if served_instead:
            params["served_documents"] = list(served_instead)
            params["served_builds"] = list(served_instead.values())
        # Vector mode: the index walk in one statement, unless a client filter is probed first.
        walk_first = mode == "vector" and not (NARROW_VECTOR and filtered(params))
        if walk_first:
            assert vector is not None
            with one_statement(using):
                rows = approximate_rows(params, version, vector, limit)
            if len(rows) >= limit:
                hits = hits_from_rows(rows)
                why = _why(explain, mode, query, [Leg(hits, 1.0)], hits)
                return _result(kb, version, started, hits, why, Rerank(reason=plan.skipped))
        parameters: FusionModel | None = None
        with search_snapshot(using):
            if learned:
                # the knowledge base's calibration, in the snapshot its lists are read in
                parameters = adopted_parameters(kb_id=kb.pk)
                if parameters is not None and not parameters.english:
                    english = None  # a calibration of the two legs ranks by them alone
            ranked = _ranked_lists(
                kb_id=kb.pk,
                version=version,
                params=params,
                vector=vector,
                query=query if mode in ("keyword", "hybrid") else None,
                limit=limit,
                approximate=not walk_first,  # a walk that just came back short
                english=english,
            )
        if ranked is None:  # swapped since `version` was read: start again with the new one
            version = None
            continue
        hits, reranked = rerank_stage(
            plan, query=query, legs=ranked, top_k=top_k, fusion=fusion, parameters=parameters
        )
        why = _why(explain, mode, query, ranked, hits, fusion, parameters)
        return _result(kb, version, started, hits, why, reranked)


def _why(
    explain: bool,
    mode: str,
    query: str,
    legs: list[Leg],
    hits: list[Hit],
    fusion: str | None = None,
    parameters: FusionModel | None = None,
) -> Ranking | None:
    """Why `hits` rank where they do, when the caller asked (`explain`)."""
    if not explain:
        return None
    return explain_ranking(
        mode=mode, query=query, legs=legs, hits=hits, fused_by=fusion, parameters=parameters
    )


def _result(
    kb: KnowledgeBase,
    version: IndexVersion,
    started: float,
    hits: list[Hit],
    ranking: Ranking | None = None,
    rerank: Rerank | None = None,
) -> SearchResult:
    took_ms = (time.perf_counter() - started) * 1000
    return SearchResult(
        kb=kb.slug,
        index_version=version.number,
        took_ms=took_ms,
        hits=[replace(hit, kb=kb.slug) for hit in hits],
        ranking=ranking,
        rerank=rerank or Rerank(),
    )


def search_legs(
    *,
    principal: Principal,
    kb: KnowledgeBase,
    query: str,
    top_k: int = 10,
    index_version: IndexVersion | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> tuple[IndexVersion, list[Leg]]:
    """A hybrid search's legs (vector, keyword, and the English list when `search` reads it:
    a version with one, a query not in Chinese), unfused: what `search` reads for the learned
    fusion of `top_k` (`depth(top_k, "learned")`, the shipped depth, no reranker's), by the
    same statements, visibility and snapshot, starting again after a swap as it does. For
    fitting the fusion to a knowledge base's questions (`evaluation.services.calibration`):
    the lists the fused ranking is made of. Returns the version read and the lists."""
    if index_version is not None and index_version.kb_id != kb.pk:
        raise ValueError("index_version belongs to another knowledge base")
    version = index_version or kb.active_index_version
    while True:
        if version is None:
            version = _active_version(kb_id=kb.pk, using=using)
        english = english_query_started(version, query)
        vector = embed_query(version, query)
        params = search_params(principal=principal, kb=kb, filters=None)
        if index_version is not None:
            params["candidate"] = True
        with search_snapshot(using):
            ranked = _ranked_lists(
                kb_id=kb.pk,
                version=version,
                params=params,
                vector=vector,
                query=query,
                limit=depth(top_k, "learned", english=english is not None),
                english=english,
            )
        if ranked is None:  # swapped since `version` was read: start again with the new one
            version = None
            continue
        return version, ranked
