"""The keyword leg: Okapi BM25 over the version's postings, inside PostgreSQL, in the search's
snapshot.

    score(chunk) = sum over query terms t of
        idf(t) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg_length))
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))

N, df and avg_length are the index version's statistics (`kb.models.LexicalStat`, summed over
its retained builds), read in the same snapshot as the chunks.

Latency is bounded whatever the query: for each term the statement reads at most `depth`
postings, best first, from the (version, term, impact DESC) index, and ranks only the union of
those candidates, exactly (every query term's tf looked up by primary key). A chunk therefore
competes when it is among the best `depth` chunks for at least one query term, which every
chunk in a top 10 is in practice; a common word never makes a search rank every chunk that
contains it. When the candidates hold fewer than `limit` rows the caller may see (a narrow
scope, filters), `ranked_rows` reads deeper, up to every posting of the terms.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

from ingestion import analysis

# How much deeper each retry reads when a narrow scope starves the candidates.
DEEPEN = 8


@dataclass(frozen=True)
class QueryWeights:
    """A query's terms that occur in the version, with their IDF, and the version's statistics."""

    terms: list[str]
    idfs: list[float]
    max_df: int
    avg_length: float

    def __bool__(self) -> bool:
        return bool(self.terms)


# For the rest of the transaction: read a term's postings best first through the index, never
# all of them through a bitmap and a sort. The planner estimates every term at the average
# frequency, which would make it sort the postings of a common word.
_BEST_FIRST = "set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)"

_STATISTICS = (
    f"SELECT term, sum(chunks)::bigint, sum(length)::bigint, {_BEST_FIRST} "  # noqa: S608 (a constant)
    "FROM kb_lexicalstat WHERE index_version_id = %s AND term = ANY(%s) GROUP BY term"
)


def idf(*, chunks: int, df: int) -> float:
    return math.log(1 + (chunks - df + 0.5) / (df + 0.5))


def query_weights(*, version_id: int, query: str) -> QueryWeights:
    """The query's terms with their IDF from the version's statistics (one statement, which
    also sets the transaction up for `candidates_query`). Terms no retained chunk of the version
    contains are dropped: they cannot match."""
    terms = analysis.query_terms(query)
    if not terms:
        return QueryWeights([], [], 0, 1.0)
    with connection.cursor() as cursor:
        cursor.execute(
            _STATISTICS,
            [version_id, ["", *terms]],
        )
        stats = {row[0]: (int(row[1]), int(row[2])) for row in cursor.fetchall()}
    total_chunks, total_length = stats.pop("", (0, 0))
    present = [t for t in terms if stats.get(t, (0, 0))[0] > 0]
    return QueryWeights(
        terms=present,
        idfs=[idf(chunks=total_chunks, df=stats[t][0]) for t in present],
        max_df=max((stats[t][0] for t in present), default=0),
        avg_length=(total_length / total_chunks) if total_chunks else 1.0,
    )


def candidates_query(*, version_id: int) -> str:
    """The best `bm25_depth` postings of each term, read from the (version, term, impact DESC)
    index: the chunks that may rank. Bounded by terms x depth whatever the terms' frequency."""
    return f"""
        SELECT DISTINCT best.chunk_id
        FROM unnest(%(bm25_terms)s::text[]) AS q(term)
        CROSS JOIN LATERAL (
            SELECT p.chunk_id FROM kb_posting p
            WHERE p.index_version_id = {int(version_id)} AND p.term = q.term
            ORDER BY p.impact DESC
            LIMIT %(bm25_depth)s
        ) best
    """  # noqa: S608 (an integer; values are bound)


def ranking_query(*, columns: str, visible: Callable[[str], str]) -> str:
    """Exact BM25 of the candidates `bm25_ids` that the caller may see, best first.

    `visible(join)` returns the FROM/WHERE that applies the visibility rule to chunk alias `c`,
    with `join` joined in; the candidates' ids restrict `c`, so the statement is driven by the
    chunk's primary key from a few hundred ids, and each candidate's tf of every query term is
    read by the postings' primary key (chunk, term)."""
    k1, b = float(analysis.K1), float(analysis.B)
    scored = f"""
        JOIN (
            SELECT p.chunk_id,
                   sum(q.idf * p.tf * {k1 + 1} / (p.tf + {k1} * (
                       {1 - b} + {b} * sc.lexical_length / %(bm25_avg)s))) AS score
            FROM kb_posting p
            JOIN unnest(%(bm25_terms)s::text[], %(bm25_idfs)s::float8[]) AS q(term, idf)
                 ON q.term = p.term
            JOIN kb_chunk sc ON sc.id = p.chunk_id
            WHERE p.chunk_id = ANY(%(bm25_ids)s::bigint[])
              AND p.term = ANY(%(bm25_terms)s::text[])
            GROUP BY p.chunk_id
        ) s ON s.chunk_id = c.id AND c.id = ANY(%(bm25_ids)s::bigint[])
    """  # noqa: S608 (floats; values are bound)
    return f"""
        SELECT {columns}, s.score
        {visible(scored)}
        ORDER BY s.score DESC, c.id
        LIMIT %(limit)s
    """


def ranked_rows(
    *,
    version_id: int,
    weights: QueryWeights,
    params: dict[str, Any],
    columns: str,
    visible: Callable[[str], str],
    limit: int,
) -> list[tuple[Any, ...]]:
    """The top `limit` visible chunks by BM25: the bounded read first, deeper only when the
    candidates held too few visible rows and some term had more postings than were read.

    Two statements in the caller's snapshot: the candidates, then their ranking."""
    if not weights:
        return []
    candidates = candidates_query(version_id=version_id)
    ranking = ranking_query(columns=columns, visible=visible)
    depth = max(settings.KEYWORD_CANDIDATES, limit)
    bound = {
        **params,
        "bm25_terms": weights.terms,
        "bm25_idfs": weights.idfs,
        "bm25_avg": weights.avg_length,
        "limit": limit,
    }
    while True:
        with connection.cursor() as cursor:
            cursor.execute(candidates, {**bound, "bm25_depth": depth})
            ids = [row[0] for row in cursor.fetchall()]
            cursor.execute(ranking, {**bound, "bm25_ids": ids})
            rows = cursor.fetchall()
        if len(rows) >= limit or depth >= weights.max_df:
            return rows
        depth *= DEEPEN
