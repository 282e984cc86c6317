"""The keyword leg of a p1 index version (before postings): PostgreSQL's `simple` tsvector
ranked by ts_rank_cd, every term first, then any term."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kb.models import IndexVersion
from retrieval.search.hits import COLUMNS
from retrieval.search.snapshot import (
    fetch,
)
from retrieval.search.visibility import (
    visible_sql,
)
from textkit.text import lexical_terms


def tsvector_rows(
    params: dict[str, Any], version: IndexVersion, query: str, limit: int
) -> list[tuple[Any, ...]]:
    sql = f"""
        SELECT {COLUMNS}, ts_rank_cd(c.lexical, to_tsquery('simple', %(tsquery)s)) AS score
        {visible_sql(iv=version.pk, params=params)}
          AND c.lexical @@ to_tsquery('simple', %(tsquery)s)
        ORDER BY score DESC, c.id
        LIMIT %(limit)s
    """
    return first_enough(
        tsqueries(query),
        limit,
        lambda tsquery: fetch(sql, {**params, "tsquery": tsquery, "limit": limit}),
    )


def tsqueries(query: str) -> list[str]:
    """The p1 keyword leg's queries, to try in order: every term, then any term.

    Ranking is O(matching chunks), and any-term matching of common words matches nearly every
    chunk (66 ms at 4,000 chunks in docs/BENCHMARKS.md); every-term matching is both cheaper and
    what a reader expects first. Any-term answers when every-term finds fewer than top_k.
    """
    terms = lexical_terms(query)
    # Terms are word characters or CJK only (text.lexical_terms); quoting keeps them lexemes.
    quoted = list(dict.fromkeys("'" + t.replace("'", "''").replace("\\", "") + "'" for t in terms))
    if len(quoted) <= 1:
        return quoted
    return [" & ".join(quoted), " | ".join(quoted)]


def first_enough(
    tsqueries: list[str], limit: int, run: Callable[[str], list[tuple[Any, ...]]]
) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for tsquery in tsqueries:
        rows = run(tsquery)
        if len(rows) >= limit:
            break
    return rows
