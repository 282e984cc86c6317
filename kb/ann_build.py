"""Bulk builds of a new index version: its chunks first, its vector index after.

A new (not yet active) index version is created without its HNSW index, so each of its builds
writes chunk rows at the speed of plain B-tree inserts instead of one HNSW graph insert per chunk.
Once every build of the version is written (none pending or building), `ann_index_build` builds
the version's index once, `CREATE INDEX CONCURRENTLY` with parallel maintenance workers — a bulk
graph build that sorts and links in memory instead of one search per inserted chunk. Only then
can the version be swapped in (`kb.services.index_versions.index_version_activate` refuses
before, and `kb.selectors.index_versions.index_version_status` says "building index").

Who calls it: the worker that finished a version's last build
(`ingestion.pipeline.run.task_execute`, through `ann_index_after_build`: inline for a small version,
else by sending the `build_ann_index` task), and a periodic job
(`ingestion.tasks.build_ann_indexes`) for a version with no builds at all, or whose index build died
with its worker (a crashed concurrent build leaves an INVALID index, dropped and rebuilt here).

Uploads during the build still land in the version: a build written before the index exists is
one more bulk-loaded row set the index build will read; one written while `CONCURRENTLY` runs is
covered by its second pass; one after, by a normal insert.

The active version always keeps its index: `knowledge_base_create` builds the first version's
index at once (it serves from birth), and a version whose index is missing while it is active is
due at once, whatever is still building.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from kb.ann import ann_index_ensure, ann_index_name, ann_index_state
from kb.models import IndexVersion
from work.models import AuditEvent

logger = logging.getLogger(__name__)

# pg_try_advisory_lock(int, int): "Cano" and the version id; one builder per version.
ANN_BUILD_LOCK_CLASS = 0x43616E6F

_DUE = """
    SELECT v.id
    FROM kb_indexversion v JOIN kb_knowledgebase k ON k.id = v.kb_id
    WHERE v.collected_at IS NULL AND v.state <> 'failed'
      AND (NOT EXISTS (
              SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
              WHERE c.relname = 'kb_chunk_hnsw_iv' || v.id AND i.indisvalid)
           OR (v.english_provider <> '' AND NOT EXISTS (
              SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
              WHERE c.relname = 'kb_chunk_hnsw_en_iv' || v.id AND i.indisvalid)))
      AND (k.active_index_version_id = v.id
           OR NOT EXISTS (SELECT 1 FROM kb_build b
                          WHERE b.index_version_id = v.id AND b.state IN ('pending', 'building')))
"""


def ann_index_due(*, version_id: int) -> bool:
    """Whether the version's index should be built now: it lacks a valid index (its own, or its
    English list's when it has one), it is neither
    collected nor failed, and either it is active (it must never serve without one) or all its
    builds are written."""
    with connection.cursor() as cursor:
        cursor.execute(_DUE + " AND v.id = %s", [version_id])
        return cursor.fetchone() is not None


def ann_indexes_due() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(_DUE + " ORDER BY v.id")
        return [row[0] for row in cursor.fetchall()]


@contextlib.contextmanager
def _version_lock(version_id: int) -> Iterator[bool]:
    """A session-level advisory lock per version (CREATE INDEX CONCURRENTLY cannot run inside a
    transaction); it goes with the connection if the worker dies mid-build."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [ANN_BUILD_LOCK_CLASS, version_id])
        row = cursor.fetchone()
    held = bool(row and row[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_unlock(%s, %s)", [ANN_BUILD_LOCK_CLASS, version_id]
                )


@contextlib.contextmanager
def _maintenance_session() -> Iterator[None]:
    """This session's memory and parallel workers for one index build (pgvector >= 0.6 builds
    HNSW in parallel; the graph must fit in maintenance_work_mem or the build slows down a lot)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('maintenance_work_mem', %s, false), "
            "set_config('max_parallel_maintenance_workers', %s, false)",
            [settings.ANN_BUILD_MAINTENANCE_WORK_MEM, str(settings.ANN_BUILD_PARALLEL_WORKERS)],
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET maintenance_work_mem; RESET max_parallel_maintenance_workers")


def ann_index_build(*, version_id: int) -> str:
    """Build the version's HNSW index if it is due; returns "built", "ready" (it already was),
    "not_due" (builds still being written), "busy" (another session is building it) or "gone".

    Idempotent and single-flight: the version's advisory lock is held for the whole build, so
    two workers never build it twice, and the due check is repeated under it. Runs outside any
    transaction in production (CONCURRENTLY: writes to the table never wait); inside one (tests)
    `ann_index_ensure` falls back to a plain CREATE INDEX."""
    with _version_lock(version_id) as held:
        if not held:
            return "busy"
        version = IndexVersion.objects.filter(pk=version_id).first()
        if version is None:
            return "gone"
        if ann_index_state(version_id) == "ready":
            return "ready"
        if not ann_index_due(version_id=version_id):
            return "not_due"
        started = time.perf_counter()
        with _maintenance_session():
            ann_index_ensure(version_id=version_id)
        seconds = round(time.perf_counter() - started, 3)
        AuditEvent.objects.create(
            kind="index_version_ann_built",
            kb_id=version.kb_id,
            subject_type="index_version",
            subject_id=version.pk,
            action=f"v{version.number}: vector index {ann_index_name(version.pk)} built "
            f"in {seconds:.1f} s",
            resolved_at=timezone.now(),
            details={
                "seconds": seconds,
                "vector_storage": version.vector_storage,
                "parallel_workers": settings.ANN_BUILD_PARALLEL_WORKERS,
                "maintenance_work_mem": settings.ANN_BUILD_MAINTENANCE_WORK_MEM,
            },
        )
        logger.info("vector index of index version %s built in %.1f s", version_id, seconds)
        return "built"


def ann_index_after_build(*, build_id: int) -> str | None:
    """After a build task ends: if it was the last open build of a version without its index,
    build the index — here, in this worker, when the version has at most
    ANN_BUILD_INLINE_CHUNKS chunks (a second's work, less than a trip through the broker), else
    by its own task (`build_ann_index`: no lease, no task time limit of a build). Never raises:
    the build itself is done, and the periodic job retries a failed index build."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT index_version_id FROM kb_build WHERE id = %s", [build_id])
            row = cursor.fetchone()
        if row is None or not ann_index_due(version_id=row[0]):
            return None  # the common case: the version has its index
        version_id = row[0]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(sum(chunks_written), 0) FROM kb_build WHERE index_version_id = %s",
                [version_id],
            )
            (chunks,) = cursor.fetchone() or (0,)
        if chunks <= settings.ANN_BUILD_INLINE_CHUNKS:
            # Inside a caller's transaction (tests) a failure must not abort it: a savepoint.
            inside = (
                transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
            )
            with inside:
                return ann_index_build(version_id=version_id)
        ann_index_build_soon(version_id=version_id)
        return "sent"
    except Exception:
        logger.exception("vector index after build %s failed; the periodic job retries", build_id)
        return None


def ann_indexes_build() -> dict[int, str]:
    """Every due version's index, one after the other (the periodic job)."""
    return {version_id: ann_index_build(version_id=version_id) for version_id in ann_indexes_due()}


def ann_index_build_soon(*, version_id: int) -> None:
    """Ask a worker to build the version's index now (a version with no builds is due at once);
    sent by name, after commit. If the broker is down the periodic job does it instead."""
    from celery import current_app

    try:
        current_app.send_task("ingestion.tasks.build_ann_index", args=[version_id], retry=False)
    except Exception:
        logger.warning(
            "could not send the index build of version %s; the periodic job will", version_id
        )
