"""The shapes of a search: the client's filters in; hits and the result out, and the columns
every hit row selects."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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
    heading_path: str = ""
    # For citations: the chunk's range of its build's extracted text, and its pages, slides or
    # rows ({"unit", "first", "last"[, "part"]}); None where not known.
    char_start: int | None = None
    char_end: int | None = None
    location: dict[str, Any] | None = None
    # The reranker's score when the search was reranked (`score` stays the fused score).
    rerank_score: float | None = None
    # The knowledge base's slug, when a search read several (`retrieval.search.several`).
    kb: str = ""
    document_id: int | None = None
    # Set after the search (`retrieval.search.context.hits_cited`): the matched query terms'
    # [start, end) offsets in `text`, and the passage around the hit when one was asked for.
    highlights: tuple[tuple[int, int], ...] = ()
    context: Any = None  # a retrieval.search.context.Context


@dataclass(frozen=True)
class Ranking:
    """The query's side of the explanation and, by chunk id, each hit's."""

    mode: str
    method: str | None  # the fusion method, for hybrid
    query_language: str  # "zh" or "other", as the learned fusion reads it
    keyword_bound: float | None  # the most the query's terms could score in BM25
    hits: dict[int, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "method": self.method,
            "query_language": self.query_language,
            "keyword_bound": self.keyword_bound,
        }


@dataclass(frozen=True)
class Rerank:
    """What the rerank stage did: the hits are in the reranker's order (`reranked`), or why
    not (`reason`, a short code: `retrieval.search.rerank`)."""

    reranked: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class SearchResult:
    kb: str
    index_version: int
    took_ms: float
    hits: list[Hit]
    as_of: datetime | None = None
    # as-of searches only: documents live then whose chunks are no longer retained
    unretained_documents: int | None = None
    ranking: Ranking | None = None  # why each hit ranks where it does (`explain`)
    rerank: Rerank = field(default_factory=Rerank)  # what the rerank stage did
    # A search of several knowledge bases: each one's index version, and how their lists were
    # merged ("score" or "rank": `retrieval.search.several`).
    knowledge_bases: dict[str, int] | None = None
    merged_by: str | None = None


@dataclass(frozen=True)
class SearchFilters:
    """Client filters. They are ANDed into the statement that applies the visibility rule, so
    they can only narrow what the principal sees, never widen it."""

    document_keys: tuple[str, ...] | None = None
    metadata: dict[str, Any] | None = None  # subset match on Document.metadata (jsonb @>)
    # A checked tree of Canon's filter language (`retrieval.filters`), for one knowledge base's
    # fields.
    where: Any = None


COLUMNS = (
    "c.id, c.text, c.ordinal, d.key, d.title, r.number, c.build_id, c.heading_path,"
    " c.char_start, c.char_end, c.location, d.id"
)


def hits_from_rows(rows: list[tuple[Any, ...]]) -> list[Hit]:
    return [
        Hit(
            chunk_id=r[0],
            text=r[1],
            ordinal=r[2],
            document_key=r[3],
            document_title=r[4],
            revision=r[5],
            build_id=r[6],
            heading_path=r[7],
            char_start=r[8],
            char_end=r[9],
            # Django's psycopg connection leaves jsonb as text.
            location=json.loads(r[10]) if isinstance(r[10], str) else r[10],
            document_id=r[11],
            score=float(r[12]),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class Leg:
    """One leg's ranked hits and the best score it could give this query (`bound`: 1 for
    cosine, BM25's saturation bound (k1 + 1) x the query terms' summed IDF; None when unknown,
    as for a p1 version's tsvector ranking). Fusion reads a score against its bound. A hybrid
    search's legs are the vector leg, the keyword leg and, for a version with an English list
    and a query not in Chinese, the English list."""

    hits: list[Hit]
    bound: float | None
    # The English list only (`retrieval.search.english`): its cosine of the other lists'
    # candidates that it did not list, by chunk id (none for a chunk in Chinese).
    rescored: dict[int, float] = field(default_factory=dict)

    def scores(self) -> dict[int, float]:
        """Every chunk this list scored, by id: its hits, and the others it `rescored`."""
        return {**self.rescored, **{hit.chunk_id: hit.score for hit in self.hits}}
