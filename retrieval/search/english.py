"""The English list (issue 38): a third list for hybrid search, read when the version has one
(`IndexVersion.english_list`) and the query is not in Chinese.

The version's chunks not in Chinese carry a second vector from a packaged model that reads
English paraphrase better than the multilingual one (`Chunk.embedding_en`, written with the
build: `ingestion.pipeline.embed`). The list is the nearest visible ones through the version's
English HNSW index (`kb.ann`), by the visibility rule of every search, in the search's snapshot;
then the English cosine of the other legs' candidates it did not list, which the three lists'
model reads too (`fusion.english_columns`). A Chinese query gets no list: the model reads no
Chinese, and the two legs' model ranks it.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import embeddings
from kb.ann import english_distance
from kb.models import IndexVersion
from retrieval import routing
from retrieval.search import shared_snapshot
from retrieval.search.hits import Hit, Leg, hits_from_rows
from retrieval.search.pools import process_pool
from retrieval.search.snapshot import fetch
from retrieval.search.vector import nearest_query, vector_literal
from textkit.text import mostly_chinese


def reads_english(version: IndexVersion, query: str) -> bool:
    """Whether a search reads the English list for `query`: the version has one and the query
    is not in Chinese."""
    return bool(version.english_list) and not mostly_chinese(query)


def english_query(version: IndexVersion, query: str) -> list[float] | None:
    """The query's English vector, or None when the list is not read for it (the version has
    none, or the query is in Chinese)."""
    return _embedded(version, query) if reads_english(version, query) else None


# A search embeds the English vector on a thread of this pool while it embeds its other vector
# and reads its other legs, which need not wait for it (B9 with the English list: the model takes
# 5-10 ms a query, as long as a leg's statement). onnxruntime and the database's socket both
# release the GIL; the thread touches no database.
POOL_THREADS = 4


def english_query_started(version: IndexVersion, query: str) -> Future[list[float]] | None:
    """`english_query` started on a thread of this process's pool, or None when the list is not
    read for `query`. The caller reads the vector with `.result()` when it reads the list, last
    (`.result()` raises what embedding raised); a future nobody reads (a calibration of the two
    legs, a swap) finishes unread."""
    if not reads_english(version, query):
        return None
    pool = process_pool("canon-english-query", POOL_THREADS)
    return pool.executor.submit(_embedded, version, query)


def _embedded(version: IndexVersion, query: str) -> list[float]:
    provider = embeddings.get_provider(
        provider=version.english_provider,
        model=version.english_model,
        dimensions=int(version.english_dimensions or 0),
    )
    return provider.embed([query])[0]


def english_list_query(
    params: dict[str, Any],
    version: IndexVersion,
    vector: list[float],
    limit: int,
    *,
    exact: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The English list's statement, as `vector.vector_query` is the vector leg's: ordered by
    the English index's expression (partial on the vector's presence, which the statement
    repeats so the planner may use it), or exactly (`exact`: an expression no index matches)."""
    return nearest_query(
        params,
        version,
        vector,
        limit,
        distance=english_distance(version),
        exact=exact,
        condition="AND c.embedding_en IS NOT NULL",
    )


def english_walk_started(
    snapshot: str,
    params: dict[str, Any],
    version: IndexVersion,
    english: Future[list[float]],
    limit: int,
) -> Future[list[tuple[Any, ...]]] | None:
    """The English list's walk started on a snapshot reader in the search's `snapshot`
    (`shared_snapshot`), once `english` (the query's vector) is embedded, so it runs while the
    other legs are read; None when no reader is idle (`english_leg` then reads it in series)."""
    return shared_snapshot.read_soon(
        snapshot,
        routing.db().alias,
        lambda: english_list_query(params, version, english.result(), limit),
    )


def english_leg(
    params: dict[str, Any],
    version: IndexVersion,
    vector: list[float],
    limit: int,
    candidates: list[Hit],
    *,
    narrow_ids: list[int] | None = None,
    walking: Future[list[tuple[Any, ...]]] | None = None,
) -> Leg:
    """The English list in the current snapshot: the approximate walk, or the exact form when
    the walk came back short (a small knowledge base) or a narrow client filter's chunks are
    known (`narrow_ids`, ranked exactly as the vector leg ranks them), and the English cosine
    of each of `candidates` (the other legs' hits) it did not list. The candidates were read in
    this snapshot by the same rule, so their cosines need no visibility of their own.
    `walking`: the walk, being read in this snapshot on another connection
    (`english_walk_started`)."""
    if narrow_ids is not None:
        params = {**params, "chunk_ids": narrow_ids}
        rows = []
    else:
        rows = shared_snapshot.read_or_fetch(
            walking, lambda: english_list_query(params, version, vector, limit)
        )
    if len(rows) < limit:
        rows = fetch(*english_list_query(params, version, vector, limit, exact=True))
    hits = hits_from_rows(rows)
    listed = {h.chunk_id for h in hits}
    others = sorted({h.chunk_id for h in candidates} - listed)
    rescored: dict[int, float] = {}
    if others:
        distance = english_distance(version)
        rescored = {
            int(cid): float(score)
            for cid, score in fetch(
                f"""
                SELECT c.id, 1 - ({distance}) FROM kb_chunk c
                WHERE c.id = ANY(%(ids)s::bigint[]) AND c.embedding_en IS NOT NULL
                """,  # noqa: S608 (a constant expression; values are bound)
                {"ids": others, "q": vector_literal(vector)},
            )
        }
    return Leg(hits, 1.0, rescored=rescored)
