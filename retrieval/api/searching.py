"""One search, as every door runs it: the search request core (`retrieval.api.search_request`)
calls `run_search` with SearchInput's validated data for the REST API, the MCP server and the
compatibility doors alike, so a principal gets the same knowledge bases, access groups, filters
and answers through each. Failures are raised as exceptions, which the core classifies once
(`search_failure`) and each door words its own way."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from django.db import DEFAULT_DB_ALIAS, OperationalError

import embeddings
from kb.metadata import field_specs
from kb.models import KnowledgeBase
from retrieval import routing
from retrieval.filters import parse_filter
from retrieval.metrics import SEARCH_LATENCY
from retrieval.principals import Principal
from retrieval.search.context import expansion_of, result_cited
from retrieval.search.engine import search
from retrieval.search.history import search_as_of
from retrieval.search.hits import SearchFilters, SearchResult
from retrieval.search.several import search_several
from retrieval.search.visibility import knowledge_base_for

logger = logging.getLogger("canon.api")


class HistoryNotAllowed(Exception):
    """`as_of` asked by a principal that may not read the publication history."""


class SearchUnavailable(Exception):
    """The search replica is down or unreachable: a temporary outage of search alone."""

    retry_after = 5


def retry_after_seconds(exc: embeddings.ProviderUnavailable) -> int:
    """Whole seconds to wait before asking again when the query could not be embedded."""
    wait = exc.retry_after or (exc.retry_at - time.time() if exc.retry_at else 5.0)
    return max(1, int(wait))


def _filters(data: dict[str, Any], kb: KnowledgeBase) -> SearchFilters:
    """The request's filters on `kb`; FilterError when `filter` does not fit its fields."""
    return SearchFilters(
        document_keys=tuple(data["document_keys"]) if "document_keys" in data else None,
        metadata=data.get("metadata"),
        where=(
            parse_filter(data["filter"], field_specs(kb))
            if data.get("filter") is not None
            else None
        ),
    )


def _run_several(principal: Principal, data: dict[str, Any]) -> SearchResult:
    """A search of several knowledge bases (`retrieval.search.several`); each resolved as one
    alone would be, so an unknown or forbidden one is the same KnowledgeBaseNotFound."""
    kbs = [knowledge_base_for(principal=principal, kb_ref=ref) for ref in data["kb"]]
    if len({kb.pk for kb in kbs}) != len(kbs):  # a slug and an id of one knowledge base
        kbs = list({kb.pk: kb for kb in kbs}.values())
    using = routing.search_alias()
    try:
        result = search_several(
            principal=principal,
            kbs=kbs,
            query=data["query"],
            top_k=data["top_k"],
            mode=data["mode"],
            filters={kb.pk: _filters(data, kb) for kb in kbs},
            using=using,
            rerank=data.get("rerank", True),
            score_threshold=data.get("score_threshold"),
        )
        result = result_cited(
            result, query=data["query"], expansion=expansion_of(data), using=using
        )
    except OperationalError as exc:
        if using == DEFAULT_DB_ALIAS:
            raise
        logger.exception("search replica unavailable")
        raise SearchUnavailable() from exc
    SEARCH_LATENCY.labels(mode=data["mode"]).observe(result.took_ms / 1000)
    return result


def _at_least(result: SearchResult, threshold: float | None) -> SearchResult:
    """`result` without the hits scoring below `threshold` (the mode's own score: SearchInput's
    `score_threshold` says what it is per mode)."""
    if threshold is None:
        return result
    return replace(result, hits=[hit for hit in result.hits if hit.score >= threshold])


def run_search(
    *, principal: Principal, data: dict[str, Any], fusion: str | None = None
) -> SearchResult:
    """Search as SearchInput's validated `data` asks, within the principal's scope. `fusion`:
    a hybrid search of one knowledge base now fuses so (the compatibility doors: "learned"),
    whatever CANON_HYBRID_FUSION says.

    Raises KnowledgeBaseNotFound (unknown, another tenant's, not the key's, or not on the replica
    yet: never told apart), FilterError (the filter does not fit the knowledge base's fields:
    it names the place), HistoryNotAllowed, HistoryOutOfRange (`as_of` outside the retention
    window), SearchUnavailable (the replica) and embeddings.ProviderUnavailable; an
    OperationalError of the primary itself propagates (an outage of everything)."""
    if isinstance(data["kb"], list):
        return _run_several(principal, data)
    kb = knowledge_base_for(principal=principal, kb_ref=data["kb"])
    filters = _filters(data, kb)
    using = routing.search_alias()  # the replica, when one is configured
    try:
        if data.get("as_of") is None:
            result = search(
                principal=principal,
                kb=kb,
                query=data["query"],
                top_k=data["top_k"],
                mode=data["mode"],
                filters=filters,
                using=using,
                explain=data.get("explain", False),
                rerank=data.get("rerank", True),
                fusion=fusion,
            )
        else:
            if not principal.can_read_history:
                raise HistoryNotAllowed()
            result = search_as_of(
                principal=principal,
                kb=kb,
                query=data["query"],
                as_of=data["as_of"],
                top_k=data["top_k"],
                mode=data["mode"],
                filters=filters,
                using=using,
                explain=data.get("explain", False),
                rerank=data.get("rerank", True),
            )
        # Highlights, and the passage around each hit when asked (one statement, same database).
        result = result_cited(
            _at_least(result, data.get("score_threshold")),
            query=data["query"],
            expansion=expansion_of(data),
            using=using,
        )
    except OperationalError as exc:
        if using == DEFAULT_DB_ALIAS:
            raise  # the primary itself: an outage of everything
        logger.exception("search replica unavailable")
        raise SearchUnavailable() from exc
    SEARCH_LATENCY.labels(mode=data["mode"]).observe(result.took_ms / 1000)
    return result
