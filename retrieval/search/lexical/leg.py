"""The keyword leg: BM25 over the version's postings (`bm25`), or a p1 version's tsvector
ranking (`tsvector`), under the visibility rule it is given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kb.models import IndexVersion
from retrieval.search.hits import COLUMNS
from retrieval.search.lexical.bm25 import Narrow, Statistics, query_weights, ranked_rows
from retrieval.search.lexical.tsvector import tsvector_rows
from retrieval.search.visibility import visible_sql


def keyword_rows(
    params: dict[str, Any],
    version: IndexVersion,
    query: str,
    limit: int,
    narrow: Narrow | None = None,
    shared: Statistics | None = None,
) -> tuple[list[tuple[Any, ...]], float | None]:
    """The keyword leg's rows and its bound (`Leg.bound`): BM25 over the version's postings
    (`bm25`; `narrow`: the filter's chunks, when the caller probed them; `shared`: statistics
    of several versions to weigh the terms by); a p1 version, until it is replaced, keeps its
    `simple` tsvector ranking (`tsvector`), whose bound is unknown."""
    if not version.uses_postings:
        return tsvector_rows(params, version, query, limit), None
    return bm25_rows(params, version, query, limit, visible_sql, narrow, shared)


def bm25_rows(
    params: dict[str, Any],
    version: IndexVersion,
    query: str,
    limit: int,
    visible: Callable[..., str],
    narrow: Narrow | None = None,
    shared: Statistics | None = None,
) -> tuple[list[tuple[Any, ...]], float]:
    """BM25 over the version's postings, with `visible` (`visible_sql` now, `_visible_then` for
    history) as the visibility rule; and the most the whole query could score
    (`QueryWeights.bound`)."""
    weights = query_weights(version_id=version.pk, query=query, shared=shared)
    rows = ranked_rows(
        version_id=version.pk,
        weights=weights,
        params=params,
        columns=COLUMNS,
        visible=lambda chunks: visible(iv=version.pk, params=params, chunks=chunks),
        limit=limit,
        narrow=narrow,
    )
    return rows, weights.bound
