"""Retention: retired index versions and superseded builds past the knowledge base's retention
window give up their chunks, in bounded batches, singleton and idempotent."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from kb import locks
from kb.ann import ann_index_drop
from kb.models import (
    Build,
    IndexVersion,
    KnowledgeBase,
    Publication,
)
from work.models import IngestionTask

GC_LOCK_KEY = 0x43616E6F6E03


GC_BATCH = 5000


def _build_give_up(build_id: int, eligible: QuerySet[Build], now: datetime) -> None:
    """Mark one build collected under its lock, if it is still eligible once the lock is held.

    A rollback locks the build too and then points a Publication at it, so the two serialize:
    the re-check after the lock sees a rollback that won, and a rollback that comes second sees
    `collected_at` and refuses. Only after this mark are the build's chunks deleted.
    """
    with transaction.atomic():
        locks.lock_build(build_id)
        eligible.filter(pk=build_id).update(collected_at=now, verified_at=None)


def retention_collect(*, max_batches: int = 20) -> int:
    """Garbage-collect what the retention window no longer protects, in bounded batches:
    chunks of superseded builds and of retired index versions (whose HNSW index is dropped).

    Never touches a build that a Publication points at, that an open task references, or that
    waits for approval (state ready). A build is first given up under its lock
    (`_build_give_up`), then its chunks are deleted, so nothing can point at a half-deleted
    build; a crash in between is finished by the next run. Singleton via an advisory lock;
    idempotent. Returns the number of chunk rows deleted.
    """
    deleted = 0
    with locks.singleton(GC_LOCK_KEY) as held:
        if not held:
            return 0
        now = timezone.now()
        for kb in KnowledgeBase.objects.all():
            cutoff = now - timedelta(days=kb.retention_days)
            for version in IndexVersion.objects.filter(
                kb=kb,
                state=IndexVersion.State.RETIRED,
                retired_at__lt=cutoff,
                collected_at__isnull=True,
            ):
                with transaction.atomic():
                    locks.lock_knowledge_base(kb.pk)
                    if KnowledgeBase.objects.filter(active_index_version=version).exists():
                        continue
                    Publication.objects.filter(index_version=version).delete()
                    Build.objects.filter(index_version=version).update(
                        state=Build.State.SUPERSEDED, updated_at=now
                    )
                    IndexVersion.objects.filter(pk=version.pk).update(collected_at=now)
            eligible = (
                Build.objects.filter(kb=kb, collected_at__isnull=True)
                .filter(
                    Q(state=Build.State.SUPERSEDED, updated_at__lt=cutoff)
                    | Q(state=Build.State.FAILED, updated_at__lt=cutoff)
                    | Q(index_version__collected_at__isnull=False)
                )
                .exclude(pk__in=Publication.objects.values("build_id"))
                .exclude(tasks__status__in=IngestionTask.OPEN_STATUSES)
            )
            for build_id in eligible.values_list("pk", flat=True)[:1000]:
                _build_give_up(build_id, eligible, now)
        # Chunks of given-up builds, including those a crashed run left behind.
        for build_id in Build.objects.filter(
            collected_at__isnull=False, chunks_written__gt=0
        ).values_list("pk", flat=True)[:1000]:
            while max_batches > 0:
                max_batches -= 1
                with connection.cursor() as cursor:
                    lexical_statistics_forget(cursor, build=build_id)
                    batch = chunks_delete(
                        cursor,
                        "SELECT id FROM kb_chunk WHERE build_id = %s LIMIT %s",
                        [build_id, GC_BATCH],
                    )
                deleted += batch
                if batch < GC_BATCH:
                    Build.objects.filter(pk=build_id).update(chunks_written=0, verified_at=None)
                    break
            if max_batches <= 0:
                return deleted
        for version_id in IndexVersion.objects.filter(collected_at__isnull=False).values_list(
            "pk", flat=True
        ):
            if not Build.objects.filter(
                index_version_id=version_id, collected_at__isnull=True
            ).exists():
                ann_index_drop(version_id=version_id)
    return deleted


def chunks_delete(cursor: Any, select_ids: str, params: list[Any]) -> int:
    """Delete the chunks `select_ids` (a constant SELECT of chunk ids) chooses, their keyword
    postings with them; returns how many chunks went. The caller gave their build up first."""
    cursor.execute(
        f"WITH gone AS MATERIALIZED ({select_ids}), "  # noqa: S608 (a constant; values are bound)
        "postings AS (DELETE FROM kb_posting WHERE chunk_id IN (SELECT id FROM gone)) "
        "DELETE FROM kb_chunk WHERE id IN (SELECT id FROM gone)",
        params,
    )
    return int(cursor.rowcount)


def lexical_statistics_forget(
    cursor: Any, *, build: int | None = None, builds_of_document: int | None = None
) -> None:
    """A given-up build leaves its index version's BM25 statistics before its chunks go."""
    if build is not None:
        cursor.execute("DELETE FROM kb_lexicalstat WHERE build_id = %s", [build])
    else:
        cursor.execute(
            "DELETE FROM kb_lexicalstat WHERE build_id IN "
            "(SELECT id FROM kb_build WHERE document_id = %s)",
            [builds_of_document],
        )
