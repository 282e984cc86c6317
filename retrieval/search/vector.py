"""The vector leg: the query's embedding and the nearest visible chunks through the version's
HNSW index, or exactly when the index walk gives up."""

from __future__ import annotations

from typing import Any

import embeddings
from kb.ann import ann_distance
from kb.models import IndexVersion
from retrieval.search.hits import COLUMNS
from retrieval.search.snapshot import (
    fetch,
)
from retrieval.search.visibility import (
    visible_sql,
)


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
    # the index's expression: vector(D) or halfvec(D)
    return nearest_query(
        params, version, vector, limit, distance=ann_distance(version), exact=exact
    )


def nearest_query(
    params: dict[str, Any],
    version: IndexVersion,
    vector: list[float],
    limit: int,
    *,
    distance: str,
    exact: bool,
    condition: str = "",
) -> tuple[str, dict[str, Any]]:
    """The visible chunks nearest `vector` by `distance` (an index's expression over %(q)s),
    with `condition` (a constant) added to the visibility rule: the vector leg's statement, and
    the English list's (`retrieval.search.english`)."""
    order = f"({distance}) + 0" if exact else distance
    sql = f"""
        SELECT {COLUMNS}, 1 - ({distance}) AS score
        {visible_sql(iv=version.pk, params=params)} {condition}
        ORDER BY {order}, c.id
        LIMIT {int(limit)}
    """
    return sql, {**params, "q": vector_literal(vector)}


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def approximate_rows(
    params: dict[str, Any], version: IndexVersion, vector: list[float], limit: int
) -> list[tuple[Any, ...]]:
    """Approximate nearest visible chunks through the version's HNSW index."""
    return fetch(*vector_query(params, version, vector, limit))


def exact_rows(
    params: dict[str, Any], version: IndexVersion, vector: list[float], limit: int
) -> list[tuple[Any, ...]]:
    """The exact form, for when the index scan gave up before finding `limit` visible rows
    (very selective filters hit hnsw.max_scan_tuples), so a filter never starves the result."""
    return fetch(*vector_query(params, version, vector, limit, exact=True))


def embed_query(version: IndexVersion, query: str) -> list[float]:
    provider = embeddings.get_provider(
        provider=version.provider, model=version.model, dimensions=version.dimensions
    )
    return provider.embed([query])[0]
