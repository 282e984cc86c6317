"""The shapes of a search: the client's filters in; hits and the result out, and the columns
every hit row selects."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class SearchResult:
    kb: str
    index_version: int
    took_ms: float
    hits: list[Hit]
    as_of: datetime | None = None
    # as-of searches only: documents live then whose chunks are no longer retained
    unretained_documents: int | None = None


@dataclass(frozen=True)
class SearchFilters:
    """Client filters. They are ANDed into the statement that applies the visibility rule, so
    they can only narrow what the principal sees, never widen it."""

    document_keys: tuple[str, ...] | None = None
    metadata: dict[str, Any] | None = None  # subset match on Document.metadata (jsonb @>)


COLUMNS = "c.id, c.text, c.ordinal, d.key, d.title, r.number, c.build_id, c.heading_path"


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
            score=float(r[8]),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class Leg:
    """One leg's ranked hits and the best score it could give this query (`bound`: 1 for
    cosine, BM25's saturation bound (k1 + 1) x the query terms' summed IDF; None when unknown,
    as for a p1 version's tsvector ranking). Fusion reads a score against its bound."""

    hits: list[Hit]
    bound: float | None
