"""One HNSW index per index version: a partial expression index over that version's chunks.

    CREATE INDEX CONCURRENTLY kb_chunk_hnsw_iv<N> ON kb_chunk
        USING hnsw ((embedding::vector(D)) vector_cosine_ops) WHERE index_version_id = <N>

The embedding column is an untyped `vector` (versions differ in dimensions), so the index casts
to the version's D; a search must repeat the same cast and predicate for the planner to use it
(`ann_distance`, used by `retrieval.search.vector`). A version with `vector_storage = "halfvec"`
casts to `halfvec(D)` and uses the halfvec operator class: its graph holds 2-byte floats, half
the index of `vector`, while the heap keeps the full-precision vector (exact re-checks, history
and rollbacks read it). Built concurrently so writes to other versions never wait; inside a
transaction (tests) it falls back to a plain CREATE INDEX.

A version with an English list (`IndexVersion.english_list`) has a second index beside it, over
its English vectors, partial on their presence too (Chinese chunks have none):

    CREATE INDEX CONCURRENTLY kb_chunk_hnsw_en_iv<N> ON kb_chunk
        USING hnsw ((embedding_en::vector(E)) vector_cosine_ops)
        WHERE index_version_id = <N> AND embedding_en IS NOT NULL

Both are built, reported and dropped together: the version's vector index is ready when both
are (`ann_index_state`).

When the index is built is `kb.ann_build`'s decision (a new version's after its bulk load).
"""

from __future__ import annotations

from django.db import connection

from kb.models import IndexVersion

OPCLASS = {
    ("vector", "cosine"): "vector_cosine_ops",
    ("vector", "l2"): "vector_l2_ops",
    ("vector", "ip"): "vector_ip_ops",
    ("halfvec", "cosine"): "halfvec_cosine_ops",
    ("halfvec", "l2"): "halfvec_l2_ops",
    ("halfvec", "ip"): "halfvec_ip_ops",
}
OPERATOR = {"cosine": "<=>", "l2": "<->", "ip": "<#>"}
STORAGES = ("vector", "halfvec")
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64


def ann_index_name(version_id: int) -> str:
    return f"kb_chunk_hnsw_iv{int(version_id)}"


def english_index_name(version_id: int) -> str:
    return f"kb_chunk_hnsw_en_iv{int(version_id)}"


def english_cast(version: IndexVersion) -> str:
    """The type the version's English index is built on: `vector(E)`."""
    return f"vector({int(version.english_dimensions or 0)})"


def english_distance(
    version: IndexVersion, *, column: str = "c.embedding_en", query: str = "%(q)s"
) -> str:
    """The cosine distance expression the version's English index serves."""
    cast = english_cast(version)
    return f"{column}::{cast} <=> {query}::{cast}"


def ann_cast(version: IndexVersion) -> str:
    """The type the version's index is built on: `vector(D)` or `halfvec(D)`."""
    storage = version.vector_storage if version.vector_storage in STORAGES else "vector"
    return f"{storage}({int(version.dimensions)})"


def ann_distance(
    version: IndexVersion, *, column: str = "c.embedding", query: str = "%(q)s"
) -> str:
    """The distance expression the version's index serves (`column` and `query` are constants
    of the caller's SQL): `c.embedding::halfvec(D) <=> %(q)s::halfvec(D)` for a halfvec version."""
    cast = ann_cast(version)
    return f"{column}::{cast} {OPERATOR[version.metric]} {query}::{cast}"


def _index_state(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE c.relname = %s",
            [name],
        )
        row = cursor.fetchone()
    if row is None:
        return "missing"
    return "ready" if row[0] else "building"


def _index_names(version_id: int) -> list[str]:
    """The version's vector indexes: its own, and its English list's when it has one."""
    english = IndexVersion.objects.filter(pk=version_id).exclude(english_provider="").exists()
    return [ann_index_name(version_id), *([english_index_name(version_id)] if english else [])]


def ann_index_state(version_id: int) -> str:
    """ "ready" (valid), "building" (exists, not valid yet: a concurrent build in progress, or a
    crashed one the next build drops) or "missing"; for a version with an English list, the
    state of the two indexes together (ready when both are, missing when either is)."""
    states = {_index_state(name) for name in _index_names(version_id)}
    for state in ("missing", "building"):
        if state in states:
            return state
    return "ready"


def ann_index_ready(version_id: int) -> bool:
    return ann_index_state(version_id) == "ready"


def ann_index_ensure(*, version_id: int) -> str:
    """Create the version's HNSW index if it does not exist; idempotent. Returns its name.

    An invalid index is dropped and rebuilt: the caller must make sure no other session is
    building it at the same time (`kb.ann_build` holds the version's advisory lock)."""
    version = IndexVersion.objects.get(pk=version_id)
    storage = version.vector_storage if version.vector_storage in STORAGES else "vector"
    indexes = {
        ann_index_name(version.pk): (
            f"(embedding::{ann_cast(version)}) {OPCLASS[storage, version.metric]}",
            f"index_version_id = {int(version.pk)}",
        )
    }
    if version.english_list:
        indexes[english_index_name(version.pk)] = (
            f"(embedding_en::{english_cast(version)}) vector_cosine_ops",
            f"index_version_id = {int(version.pk)} AND embedding_en IS NOT NULL",
        )
    for name, (expression, predicate) in indexes.items():
        _index_ensure(name, expression, predicate)
    return ann_index_name(version.pk)


def _index_ensure(name: str, expression: str, predicate: str) -> None:
    concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
    state = _index_state(name)
    if state == "ready":
        return
    with connection.cursor() as cursor:
        # A concurrent build that crashed leaves an INVALID index behind: drop and rebuild it.
        if state == "building":
            cursor.execute(f"DROP INDEX {concurrently} IF EXISTS {name}")
        if not concurrently:
            # In a transaction, deferred foreign-key checks of rows written in it would make
            # CREATE INDEX refuse ("pending trigger events"): run them now.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(
            f"CREATE INDEX {concurrently} IF NOT EXISTS {name} ON kb_chunk USING hnsw "
            f"({expression}) WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) "
            f"WHERE {predicate}"
        )
        if not concurrently:
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def ann_index_drop(*, version_id: int) -> None:
    """Drop a collected version's indexes (its English list's too); idempotent."""
    concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
    with connection.cursor() as cursor:
        for name in (ann_index_name(version_id), english_index_name(version_id)):
            cursor.execute(f"DROP INDEX {concurrently} IF EXISTS {name}")
