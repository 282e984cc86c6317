"""The keyword leg: Okapi BM25 over the version's postings, inside PostgreSQL, in the search's
snapshot.

    score(chunk) = sum over query terms t of
        idf(t) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg_length))
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))

N, df and avg_length are the index version's statistics (`kb.models.LexicalStat`, summed over
its retained builds), read in the same snapshot as the chunks.

Latency is bounded whatever the query: for each term the search reads at most `depth`
postings, best first, from the (version, term, impact DESC) index; keeps the most promising of
those candidates by an upper bound on their score (what was read, plus for each term whose list
was cut the last impact read, as MaxScore does); and ranks those exactly (every query term's tf
looked up by primary key). A chunk therefore competes when it is among the best `depth` chunks
for at least one query term, which every chunk in a top 10 is in practice; a common word never
makes a search rank every chunk that contains it. When that finds fewer than `limit` rows the
caller may see (a narrow scope, filters), `ranked_rows` reads deeper and ranks more, up to every
posting of the terms.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from retrieval import routing
from textkit import analysis

# How much deeper each retry reads when a narrow scope starves the candidates.
DEEPEN = 8
# How many candidates are ranked exactly, per result wanted (at least RANKED_MIN).
RANKED_PER_RESULT = 4
RANKED_MIN = 100


@dataclass(frozen=True)
class QueryWeights:
    """A query's terms that occur in the version, with their IDF, and the version's statistics.
    `absent_idf`: the summed IDF the query's other terms would have (no chunk contains them):
    what a chunk misses of the query counts against it in the leg's bound (`bound`)."""

    terms: list[str]
    idfs: list[float]
    dfs: list[int]
    avg_length: float
    absent_idf: float = 0.0

    @property
    def bound(self) -> float:
        """The most any chunk could score for the whole query, BM25's saturation bound:
        (k1 + 1) x the IDF of every query term, present or not (0 without terms)."""
        return (analysis.K1 + 1) * math.fsum([*self.idfs, self.absent_idf])

    @property
    def max_df(self) -> int:
        return max(self.dfs, default=0)

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


@dataclass(frozen=True)
class Statistics:
    """A version's statistics for a query's terms: its retained chunks, their summed length,
    and each term's chunk count (df) where it is above 0."""

    chunks: int
    length: int
    dfs: dict[str, int]

    def __add__(self, other: Statistics) -> Statistics:
        dfs = dict(self.dfs)
        for term, df in other.dfs.items():
            dfs[term] = dfs.get(term, 0) + df
        return Statistics(self.chunks + other.chunks, self.length + other.length, dfs)


def query_statistics(*, version_id: int, terms: list[str]) -> Statistics:
    """The version's statistics for `terms` (one statement, which also sets the transaction up
    for `candidates_query`)."""
    with routing.db().cursor() as cursor:
        cursor.execute(_STATISTICS, [version_id, ["", *terms]])
        stats = {row[0]: (int(row[1]), int(row[2])) for row in cursor.fetchall()}
    chunks, length = stats.pop("", (0, 0))
    return Statistics(chunks, length, {t: df for t, (df, _) in stats.items() if df > 0})


def query_weights(*, version_id: int, query: str, shared: Statistics | None = None) -> QueryWeights:
    """The query's terms with their IDF from the version's statistics. Terms no retained chunk
    of the version contains are dropped: they cannot match.

    `shared`: statistics summed over several versions (a keyword search of several knowledge
    bases, `retrieval.search.several`): the IDFs, average length and bound are then theirs, as
    if the versions were one index, so BM25 scores compare across them; the terms kept and
    their `dfs` (how deep to read) stay this version's."""
    terms = analysis.query_terms(query)
    if not terms:
        return QueryWeights([], [], [], 1.0)
    own = query_statistics(version_id=version_id, terms=terms)
    stats = shared or own
    present = [t for t in terms if own.dfs.get(t, 0) > 0]
    return QueryWeights(
        terms=present,
        idfs=[idf(chunks=stats.chunks, df=stats.dfs[t]) for t in present],
        dfs=[own.dfs[t] for t in present],
        avg_length=(stats.length / stats.chunks) if stats.chunks else 1.0,
        # What the query's other terms weigh (no chunk of this version holds them, though
        # another version's may) counts against the leg's bound.
        absent_idf=math.fsum(
            idf(chunks=stats.chunks, df=stats.dfs.get(t, 0)) for t in terms if t not in present
        ),
    )


def candidates_query(*, version_id: int, visible: Callable[[str], str] | None = None) -> str:
    """The `bm25_keep` most promising chunks for the query, from the best `bm25_depth` postings
    of each term (the (version, term, impact DESC) index, read best first under a LIMIT, from
    the index alone), ordered by an upper bound on their score as MaxScore bounds it: the
    impacts read, plus, for every term whose postings were cut (`bm25_cut`) and that did not
    list the chunk, that term's last impact read, since no chunk left unread can weigh more.
    Bounded by terms x depth whatever the terms' frequency.

    With `visible` (a filtered search whose first candidates were too few), only chunks the
    caller may see are kept: the candidates read are looked up by primary key and put through
    the visibility rule before the cut to `bm25_keep`, so a filter that leaves a tenth of the
    chunks does not leave a tenth of the kept candidates. The visibility rule reads only the
    chunk's id, build, version and knowledge base (and the document, for history)."""
    if visible is not None:
        keep = f"""
        , bounded AS MATERIALIZED (
            SELECT k.id, k.build_id, k.index_version_id, k.kb_id, k.document_id,
                   bounds.read + t.total - bounds.covered AS bound, bounds.read
            FROM bounds JOIN kb_chunk k ON k.id = bounds.chunk_id,
                 (SELECT sum(floor) AS total FROM floors) t
        )
        SELECT c.id
        {visible("bounded")}
        ORDER BY c.bound DESC, c.read DESC, c.id
        LIMIT %(bm25_keep)s
        """  # noqa: S608 (constant fragments; values are bound)
    else:
        keep = """
        SELECT bounds.chunk_id
        FROM bounds, (SELECT sum(floor) AS total FROM floors) t
        ORDER BY bounds.read + t.total - bounds.covered DESC, bounds.read DESC, bounds.chunk_id
        LIMIT %(bm25_keep)s
        """
    return f"""
        WITH q AS (
            SELECT * FROM unnest(%(bm25_terms)s::text[], %(bm25_idfs)s::float8[],
                                 %(bm25_cut)s::boolean[]) WITH ORDINALITY AS q(term, idf, cut, n)
        ),
        best AS (
            SELECT q.n, q.idf * b.impact AS weight, b.chunk_id
            FROM q CROSS JOIN LATERAL (
                SELECT p.chunk_id, p.impact FROM kb_posting p
                WHERE p.index_version_id = {int(version_id)} AND p.term = q.term
                ORDER BY p.impact DESC
                LIMIT %(bm25_depth)s
            ) b
        ),
        floors AS (
            SELECT best.n, CASE WHEN bool_or(q.cut) THEN min(best.weight) ELSE 0 END AS floor
            FROM best JOIN q ON q.n = best.n GROUP BY best.n
        ),
        bounds AS (
            SELECT best.chunk_id, sum(best.weight) AS read, sum(floors.floor) AS covered
            FROM best JOIN floors ON floors.n = best.n GROUP BY best.chunk_id
        )
        {keep}
    """  # noqa: S608 (an integer and constant fragments; values are bound)


# The chunk columns the visibility rule and the hits read (`retrieval.search.hits`).
_CHUNK_COLUMNS = (
    "id, text, ordinal, build_id, heading_path, char_start, char_end, location, kb_id,"
    " index_version_id, document_id"
)


def ranking_query(*, columns: str, visible: Callable[[str], str]) -> str:
    """Exact BM25 of the candidates `bm25_ids` that the caller may see, best first.

    The candidates are scored first, in a materialised CTE driven by the chunks' primary key,
    each query term's tf read by the postings' primary key (chunk, term); then `visible(rel)`,
    the FROM/WHERE of the visibility rule with chunk alias `c` bound to relation `rel`, keeps
    those the caller may see. So the plan is the same whatever the planner guesses about the
    id array: a few hundred primary-key reads, never a walk of the visible chunks."""
    k1, b = float(analysis.K1), float(analysis.B)
    return f"""
        WITH q AS (
            SELECT * FROM unnest(%(bm25_terms)s::text[], %(bm25_idfs)s::float8[]) AS q(term, idf)
        ),
        scored AS MATERIALIZED (
            SELECT {", ".join("c." + col for col in _CHUNK_COLUMNS.split(", "))}, (
                SELECT sum(q.idf * p.tf * {k1 + 1} / (p.tf + {k1} * (
                           {1 - b} + {b} * c.lexical_length / %(bm25_avg)s)))
                FROM q JOIN kb_posting p ON p.chunk_id = c.id AND p.term = q.term
            ) AS score
            FROM kb_chunk c
            WHERE c.id = ANY(%(bm25_ids)s::bigint[])
        )
        SELECT {columns}, c.score
        {visible("scored")}
          AND c.score IS NOT NULL
        ORDER BY c.score DESC, c.id
        LIMIT %(limit)s
    """  # noqa: S608 (floats and constant fragments; values are bound)


# A client filter that leaves at most this many visible chunks is ranked filter-first.
FILTER_FIRST_MAX = 5000
# A wider one whose first candidates are too few retries them filtered (B15 compares both).
FILTER_CANDIDATES = True


def filtered(params: dict[str, Any]) -> bool:
    """Whether the search carries a client filter (beyond the visibility rule)."""
    return any(params.get(name) is not None for name in ("filter_sql", "document_keys", "metadata"))


@dataclass(frozen=True)
class Narrow:
    """What `narrow_ids` found: the ids of the chunks a client filter leaves visible, or None
    when it leaves more than FILTER_FIRST_MAX."""

    ids: list[int] | None


def narrow_ids(params: dict[str, Any], visible: Callable[[str], str]) -> Narrow:
    """The ids of the chunks the caller may see under its filters, when there are at most
    FILTER_FIRST_MAX of them (one statement that stops at one more). B15
    (docs/BENCHMARKS.md): with a 1 % filter the candidates read best-first were nearly all
    filtered out, and deepening until enough were visible took 0.4-1.5 s at 100,000 chunks."""
    with routing.db().cursor() as cursor:
        cursor.execute(
            f"SELECT c.id {visible('kb_chunk')} LIMIT {FILTER_FIRST_MAX + 1}",
            params,
        )
        ids = [row[0] for row in cursor.fetchall()]
    return Narrow(ids if len(ids) <= FILTER_FIRST_MAX else None)


def ranked_rows(
    *,
    version_id: int,
    weights: QueryWeights,
    params: dict[str, Any],
    columns: str,
    visible: Callable[[str], str],
    limit: int,
    narrow: Narrow | None = None,
) -> list[tuple[Any, ...]]:
    """The top `limit` visible chunks by BM25, in the caller's snapshot, in two statements: the
    most promising candidates (`candidates_query`), then the exact ranking of those the caller
    may see (`ranking_query`). Deeper (and wider) only when that found fewer than
    `limit` visible rows while some term had more postings than were read. Under a client
    filter, `narrow` is `narrow_ids` as the caller already probed it in this snapshot (a
    hybrid search shares it with its vector leg), else probed here."""
    if not weights:
        return []
    ranking = ranking_query(columns=columns, visible=visible)
    if narrow is None and filtered(params):
        narrow = narrow_ids(params, visible)
    narrow_list = narrow.ids if narrow is not None else None
    if narrow_list is not None:
        # A filter that leaves few chunks: rank every one of them that holds a query term,
        # exactly; reading the terms' best postings first would mostly find others.
        with routing.db().cursor() as cursor:
            cursor.execute(
                ranking,
                {
                    **params,
                    "bm25_terms": weights.terms,
                    "bm25_idfs": weights.idfs,
                    "bm25_avg": weights.avg_length,
                    "limit": limit,
                    "bm25_ids": narrow_list,
                },
            )
            return cursor.fetchall()
    candidates = candidates_query(version_id=version_id)
    # Under a wide filter, a short first read is retried at the same depth with the filter
    # applied to the candidates (B15: 10 % filter, keyword p95 4.1x -> 2.1x unfiltered) before
    # reading deeper; applied from the start it cost a 50 % filter 0.9x -> 2.5x.
    retry_filtered = FILTER_CANDIDATES and filtered(params)
    depth = max(settings.KEYWORD_CANDIDATES, limit)
    keep = max(RANKED_PER_RESULT * limit, RANKED_MIN)
    bound = {
        **params,
        "bm25_terms": weights.terms,
        "bm25_idfs": weights.idfs,
        "bm25_avg": weights.avg_length,
        "limit": limit,
    }
    while True:
        cut = [df > depth for df in weights.dfs]
        with routing.db().cursor() as cursor:
            cursor.execute(
                candidates, {**bound, "bm25_depth": depth, "bm25_cut": cut, "bm25_keep": keep}
            )
            ids = [row[0] for row in cursor.fetchall()]
            cursor.execute(ranking, {**bound, "bm25_ids": ids})
            rows = cursor.fetchall()
        if len(rows) >= limit or (not any(cut) and len(ids) < keep):
            return rows
        if retry_filtered:
            candidates = candidates_query(version_id=version_id, visible=visible)
            retry_filtered = False
            continue
        depth *= DEEPEN
        keep *= DEEPEN
