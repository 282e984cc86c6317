"""One HNSW index per index version: a partial expression index over that version's chunks.

    CREATE INDEX CONCURRENTLY kb_chunk_hnsw_iv<N> ON kb_chunk
        USING hnsw ((embedding::vector(D)) vector_cosine_ops) WHERE index_version_id = <N>

The embedding column is an untyped `vector` (versions differ in dimensions), so the index casts
to the version's D; a search must repeat the same cast and predicate for the planner to use it
(`retrieval.selectors`). Built concurrently so writes to other versions never wait; inside a
transaction (tests) it falls back to a plain CREATE INDEX.
"""

from __future__ import annotations

from django.db import connection

from kb.models import IndexVersion

OPCLASS = {"cosine": "vector_cosine_ops", "l2": "vector_l2_ops", "ip": "vector_ip_ops"}
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64


def ann_index_name(version_id: int) -> str:
    return f"kb_chunk_hnsw_iv{int(version_id)}"


def ann_index_ensure(*, version_id: int) -> str:
    """Create the version's HNSW index if it does not exist; idempotent. Returns its name."""
    version = IndexVersion.objects.get(pk=version_id)
    name = ann_index_name(version.pk)
    concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
    with connection.cursor() as cursor:
        # A concurrent build that crashed leaves an INVALID index behind: drop and rebuild it.
        cursor.execute(
            "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE c.relname = %s",
            [name],
        )
        row = cursor.fetchone()
        if row is not None and row[0]:
            return name
        if row is not None:
            cursor.execute(f"DROP INDEX {concurrently} IF EXISTS {name}")
        cursor.execute(
            f"CREATE INDEX {concurrently} IF NOT EXISTS {name} ON kb_chunk "
            f"USING hnsw ((embedding::vector({int(version.dimensions)})) "
            f"{OPCLASS[version.metric]}) "
            f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) "
            f"WHERE index_version_id = {int(version.pk)}"
        )
    return name


def ann_index_drop(*, version_id: int) -> None:
    """Drop a collected version's index; idempotent."""
    concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX {concurrently} IF EXISTS {ann_index_name(version_id)}")
