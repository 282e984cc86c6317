"""One search over several knowledge bases: each read through its own active index version,
all in one snapshot, the hits merged into one list that names each hit's knowledge base.

How the lists are merged: each knowledge base's hits are first ranked as a search of it alone
would rank them (its legs fused). Scores are comparable across knowledge bases only where they
measure the same thing: a vector or hybrid search over versions that embed with the same
provider, model and dimensions gives cosines (and fused scores) on one scale, so those lists
merge by score. Otherwise — keyword search, whose BM25 depends on each knowledge base's own term
statistics, or versions embedding with different models — they merge by rank, with reciprocal
rank fusion (1 / (60 + rank)): the first hits of each knowledge base come first, interleaved,
which needs no common scale. `SearchResult.merged_by` says which. A configured reranker then
reorders the merged head for a hybrid search, on its own single scale.
"""

from __future__ import annotations

import time
from dataclasses import replace

from django.db import DEFAULT_DB_ALIAS

from kb.models import IndexVersion, KnowledgeBase
from retrieval.principals import Principal
from retrieval.search.engine import _active_version, _ranked_lists
from retrieval.search.fusion import depth
from retrieval.search.hits import Hit, SearchFilters, SearchResult
from retrieval.search.rerank import rerank_plan, rerank_ranked, rerank_stage
from retrieval.search.snapshot import search_snapshot
from retrieval.search.vector import embed_query
from retrieval.search.visibility import search_params

RRF_K = 60


def search_several(
    *,
    principal: Principal,
    kbs: list[KnowledgeBase],
    query: str,
    top_k: int = 10,
    mode: str = "hybrid",
    filters: dict[int, SearchFilters] | None = None,
    using: str = DEFAULT_DB_ALIAS,
    rerank: bool = True,
    score_threshold: float | None = None,
) -> SearchResult:
    """Top chunks visible to `principal` in any of `kbs` (each already resolved in the
    principal's scope), `filters` by knowledge base id. The query is embedded once per distinct
    embedding space, before the snapshot; then every knowledge base's lists are read in one
    repeatable-read snapshot, each proving its version active there. If any was swapped in
    between, the whole search starts again with the new versions. `score_threshold` drops each
    knowledge base's hits scoring below it, on its own scale, before the merge."""
    started = time.perf_counter()
    versions: dict[int, IndexVersion | None] = {kb.pk: kb.active_index_version for kb in kbs}
    limit = depth(top_k) if mode == "hybrid" else top_k
    while True:
        for kb in kbs:
            if versions[kb.pk] is None:
                versions[kb.pk] = _active_version(kb_id=kb.pk, using=using)
        active = {pk: version for pk, version in versions.items() if version is not None}
        vectors: dict[tuple[str, str, int], list[float]] = {}
        if mode in ("vector", "hybrid"):
            for version in active.values():
                space = _space(version)
                if space not in vectors:
                    vectors[space] = embed_query(version, query)
        per_kb: list[tuple[KnowledgeBase, list[Hit]]] = []
        swapped = False
        with search_snapshot(using):
            legs_by_kb = []
            for kb in kbs:
                version = active[kb.pk]
                legs = _ranked_lists(
                    kb_id=kb.pk,
                    version=version,
                    params=search_params(
                        principal=principal, kb=kb, filters=(filters or {}).get(kb.pk)
                    ),
                    vector=vectors.get(_space(version)),
                    query=query if mode in ("keyword", "hybrid") else None,
                    limit=limit,
                )
                if legs is None:
                    versions[kb.pk] = None
                    swapped = True
                    break
                legs_by_kb.append((kb, legs))
        if swapped:
            continue
        plain = rerank_plan(mode=mode, requested=False)
        for kb, legs in legs_by_kb:
            hits, _ = rerank_stage(plain, query=query, legs=legs, top_k=top_k)
            if score_threshold is not None:
                hits = [hit for hit in hits if hit.score >= score_threshold]
            per_kb.append((kb, [replace(hit, kb=kb.slug) for hit in hits]))
        by_score = mode != "keyword" and len({_space(v) for v in active.values()}) == 1
        merged = _merged(per_kb, by_score=by_score)
        plan = rerank_plan(mode=mode, requested=rerank)
        hits, reranked = rerank_ranked(plan, query=query, hits=merged, top_k=top_k)
        return SearchResult(
            kb=kbs[0].slug,
            index_version=active[kbs[0].pk].number,
            took_ms=(time.perf_counter() - started) * 1000,
            hits=hits,
            rerank=reranked,
            knowledge_bases={kb.slug: active[kb.pk].number for kb in kbs},
            merged_by="score" if by_score else "rank",
        )


def _space(version: IndexVersion) -> tuple[str, str, int]:
    return (version.provider, version.model, version.dimensions)


def _merged(per_kb: list[tuple[KnowledgeBase, list[Hit]]], *, by_score: bool) -> list[Hit]:
    """The knowledge bases' lists as one: by score, or by reciprocal rank (ties: the order
    of the knowledge bases in the request, then rank)."""
    keyed: list[tuple[float, int, int, Hit]] = []
    for order, (_, hits) in enumerate(per_kb):
        for rank, hit in enumerate(hits, start=1):
            score = hit.score if by_score else 1.0 / (RRF_K + rank)
            keyed.append((-score, rank if not by_score else 0, order, hit))
    keyed.sort(key=lambda item: item[:3])
    if by_score:
        return [hit for _, _, _, hit in keyed]
    return [replace(hit, score=round(-negative, 6)) for negative, _, _, hit in keyed]
