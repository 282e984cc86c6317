"""One search over several knowledge bases: each read through its own active index version,
all in one snapshot, the hits merged into one list that names each hit's knowledge base.

How the lists are merged (`merge_for`; `bench/quality/several_kbs.py` measured each choice,
docs/BENCHMARKS.md). Each knowledge base's hits are ranked as a search of it alone would rank
them, then merged **by score** wherever the scores measure the same thing:

- vector search over versions that embed with one provider, model and dimensions: cosines on
  one scale;
- keyword search over versions with BM25 postings: the query's terms are weighed by the
  statistics of all the versions together (`bm25.Statistics`, summed: chunks, lengths, each
  term's chunk count), as a search engine spanning several indexes does, so every knowledge
  base's BM25 is the score it would have in one index holding them all;
- hybrid search with the learned fusion (the default): its score is the fitted probability
  that the chunk answers the query, read from features that are mostly relative to each leg's
  own best (`fusion.FEATURES`), which held across two different embedding models.

Otherwise — vector search over different models, whose cosines sit on different scales; a p1
version's keyword ranking; hybrid with the `convex` or `rrf` fusion, whose scores are relative
to each knowledge base's best — **by rank**, with reciprocal rank fusion (1 / (60 + rank)):
each knowledge base's first hits come first, interleaved, which needs no common scale.
`SearchResult.merged_by` says which. A configured reranker then reorders the merged head for a
hybrid search, on its own single scale.
"""

from __future__ import annotations

import functools
import operator
import time
from concurrent.futures import Future
from dataclasses import replace

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

from kb.models import IndexVersion, KnowledgeBase
from retrieval.principals import Principal
from retrieval.search.engine import _active_version, _ranked_lists
from retrieval.search.english import english_query_started
from retrieval.search.fusion import FusionModel, depth
from retrieval.search.hits import Hit, SearchFilters, SearchResult
from retrieval.search.lexical.bm25 import Statistics, query_statistics
from retrieval.search.parameters import adopted_parameters
from retrieval.search.rerank import rerank_plan, rerank_ranked, rerank_stage
from retrieval.search.snapshot import search_snapshot
from retrieval.search.vector import embed_query
from retrieval.search.visibility import search_params
from textkit import analysis

RRF_K = 60
MERGES = ("score", "rank")


def merge_for(mode: str, versions: list[IndexVersion]) -> str:
    """How `mode` merges the lists of knowledge bases on `versions` (the module's rule)."""
    postings = _postings(versions)
    if mode == "vector":
        return "score" if len({_space(v) for v in versions}) == 1 else "rank"
    if mode == "keyword":
        return "score" if postings else "rank"
    return "score" if postings and settings.HYBRID_FUSION == "learned" else "rank"


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
    merge: str | None = None,
) -> SearchResult:
    """Top chunks visible to `principal` in any of `kbs` (each already resolved in the
    principal's scope), `filters` by knowledge base id. The query is embedded once per distinct
    embedding space, before the snapshot; then every knowledge base's lists are read in one
    repeatable-read snapshot, each proving its version active there (a keyword search reads
    the versions' statistics first, in the same snapshot). If any was swapped in between, the
    whole search starts again with the new versions. `score_threshold` drops each knowledge
    base's hits scoring below it, on its own scale, before the merge. `merge`: "score" or
    "rank", by default `merge_for` the mode and the versions (the bench compares both).

    As a search of one knowledge base does (`engine.search`): each fuses with its own adopted
    calibration, read in the snapshot, and with a reranker each list is read and fused as deep
    as the reranker's candidates, so the merged head it reorders is the best of all of them."""
    if merge is not None and merge not in MERGES:
        raise ValueError(f"unknown merge {merge!r}")
    started = time.perf_counter()
    versions: dict[int, IndexVersion | None] = {kb.pk: kb.active_index_version for kb in kbs}
    plan = rerank_plan(mode=mode, requested=rerank)
    learned = mode == "hybrid" and settings.HYBRID_FUSION == "learned"
    while True:
        for kb in kbs:
            if versions[kb.pk] is None:
                versions[kb.pk] = _active_version(kb_id=kb.pk, using=using)
        active = {pk: version for pk, version in versions.items() if version is not None}
        current = list(active.values())
        how = merge or merge_for(mode, current)
        vectors: dict[tuple[str, str, int], list[float]] = {}
        # each English space's query vector, embedded on a thread while the rest is read
        english: dict[tuple[str, str, int], Future[list[float]] | None] = {}
        if mode in ("vector", "hybrid"):
            for version in active.values():
                if learned and _english_space(version) not in english:
                    english[_english_space(version)] = english_query_started(version, query)
                space = _space(version)
                if space not in vectors:
                    vectors[space] = embed_query(version, query)
        # as deep as the deepest model any of them ranks by
        reads_english = any(v is not None for v in english.values())
        limit = plan.depth(depth(top_k, english=reads_english) if mode == "hybrid" else top_k)
        swapped = False
        with search_snapshot(using):
            shared = (
                _shared_statistics(query, current)
                if mode == "keyword" and _postings(current)
                else None
            )
            legs_by_kb = []
            calibrated: dict[int, FusionModel | None] = {}
            for kb in kbs:
                version = active[kb.pk]
                english_vector = english.get(_english_space(version))
                if learned:  # the knowledge base's calibration, in the snapshot of its lists
                    calibrated[kb.pk] = parameters = adopted_parameters(kb_id=kb.pk)
                    if parameters is not None and not parameters.english:
                        english_vector = None  # a calibration of the two legs ranks by them
                legs = _ranked_lists(
                    kb_id=kb.pk,
                    version=version,
                    params=search_params(
                        principal=principal, kb=kb, filters=(filters or {}).get(kb.pk)
                    ),
                    vector=vectors.get(_space(version)),
                    query=query if mode in ("keyword", "hybrid") else None,
                    limit=limit,
                    shared=shared,
                    english=english_vector,
                )
                if legs is None:
                    versions[kb.pk] = None
                    swapped = True
                    break
                legs_by_kb.append((kb, legs))
        if swapped:
            continue
        plain = rerank_plan(mode=mode, requested=False)
        # each list as long as the reranker's head, when there is one: it may lift any of them
        fused = max(top_k, plan.candidates) if plan.reranker is not None else top_k
        per_kb: list[tuple[KnowledgeBase, list[Hit]]] = []
        for kb, legs in legs_by_kb:
            hits, _ = rerank_stage(
                plain, query=query, legs=legs, top_k=fused, parameters=calibrated.get(kb.pk)
            )
            if score_threshold is not None:
                hits = [hit for hit in hits if hit.score >= score_threshold]
            per_kb.append((kb, [replace(hit, kb=kb.slug) for hit in hits]))
        merged = merged_lists(per_kb, how=how)
        hits, reranked = rerank_ranked(plan, query=query, hits=merged, top_k=top_k)
        return SearchResult(
            kb=kbs[0].slug,
            index_version=active[kbs[0].pk].number,
            took_ms=(time.perf_counter() - started) * 1000,
            hits=hits,
            rerank=reranked,
            knowledge_bases={kb.slug: active[kb.pk].number for kb in kbs},
            merged_by=how,
        )


def _postings(versions: list[IndexVersion]) -> bool:
    """Whether every version ranks keywords by BM25 over postings (none is a p1 version)."""
    return all(version.uses_postings for version in versions)


def _english_space(version: IndexVersion) -> tuple[str, str, int]:
    """The version's English list's space (its provider, model, dimensions; all empty when it
    has none): knowledge bases in one space share the query's English vector."""
    return (version.english_provider, version.english_model, version.english_dimensions or 0)


def _space(version: IndexVersion) -> tuple[str, str, int]:
    return (version.provider, version.model, version.dimensions)


def _shared_statistics(query: str, versions: list[IndexVersion]) -> Statistics | None:
    """The versions' statistics for the query's terms, summed (None without terms); each
    version counted once, however many knowledge bases list it."""
    terms = analysis.query_terms(query)
    if not terms:
        return None
    unique = {version.pk: version for version in versions}
    parts = [query_statistics(version_id=pk, terms=terms) for pk in unique]
    return functools.reduce(operator.add, parts)


def merged_lists(per_kb: list[tuple[KnowledgeBase, list[Hit]]], *, how: str) -> list[Hit]:
    """The knowledge bases' lists as one, best first: by score, or by reciprocal rank (the
    score becoming 1 / (60 + rank)). Ties: the better rank in its own list, then the order of
    the knowledge bases in the request."""
    keyed: list[tuple[float, int, int, Hit]] = []
    for order, (_, hits) in enumerate(per_kb):
        for rank, hit in enumerate(hits, start=1):
            score = 1.0 / (RRF_K + rank) if how == "rank" else hit.score
            keyed.append((-score, rank, order, hit))
    keyed.sort(key=lambda item: item[:3])
    if how != "rank":
        return [hit for _, _, _, hit in keyed]
    return [replace(hit, score=round(-negative, 6)) for negative, _, _, hit in keyed]
