"""Reads of knowledge-base state. No function here writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from kb.models import Build, Document, IndexVersion, KnowledgeBase, Publication

LIVE_INDEX_VERSION_STATES = (
    IndexVersion.State.BUILDING,
    IndexVersion.State.READY,
    IndexVersion.State.ACTIVE,
)


def live_index_versions(*, kb_id: int) -> QuerySet[IndexVersion]:
    """Index versions that must receive a build of every new revision: the active one, the
    candidates, and retired ones still retained (so rolling back to them never serves stale
    text)."""
    retention_days = KnowledgeBase.objects.values_list("retention_days", flat=True).get(pk=kb_id)
    cutoff = timezone.now() - timedelta(days=retention_days)
    return (
        IndexVersion.objects.filter(kb_id=kb_id)
        .filter(
            Q(state__in=LIVE_INDEX_VERSION_STATES)
            | Q(state=IndexVersion.State.RETIRED, retired_at__gte=cutoff, collected_at__isnull=True)
        )
        .order_by("number")
    )


def knowledge_bases_for_tenant(*, tenant_id: int) -> QuerySet[KnowledgeBase]:
    return KnowledgeBase.objects.filter(tenant_id=tenant_id).order_by("slug")


def live_build_id(*, document: Document, index_version_id: int | None) -> int | None:
    return (
        Publication.objects.filter(document=document, index_version_id=index_version_id)
        .values_list("build_id", flat=True)
        .first()
    )


def live_build(*, document: Document) -> Build | None:
    """The build search serves for this document now (None if nothing is live or deleted)."""
    if document.deleted_at is not None:
        return None
    kb = document.kb
    publication = (
        Publication.objects.select_related("build__revision")
        .filter(document=document, index_version_id=kb.active_index_version_id)
        .first()
    )
    return publication.build if publication else None


@dataclass(frozen=True)
class Completeness:
    chunk_count: int
    embedded_count: int
    distinct_ordinals: int
    min_ordinal: int | None
    max_ordinal: int | None
    min_dimensions: int | None
    max_dimensions: int | None
    manifest_sha256: str | None

    def problems(self, *, expected_count: int | None, dimensions: int, manifest: str) -> list[str]:
        """Reasons this build may not be switched live; empty when complete."""
        problems = []
        if expected_count is None:
            problems.append("the expected chunk count is unknown")
        elif self.chunk_count != expected_count:
            problems.append(f"{self.chunk_count} of {expected_count} chunks are written")
        if self.embedded_count != self.chunk_count:
            problems.append(f"{self.chunk_count - self.embedded_count} chunks have no embedding")
        if self.distinct_ordinals != self.chunk_count or (
            self.chunk_count and (self.min_ordinal != 0 or self.max_ordinal != self.chunk_count - 1)
        ):
            problems.append("chunk ordinals are not exactly 0..n-1")
        if self.chunk_count and (
            self.min_dimensions != dimensions or self.max_dimensions != dimensions
        ):
            problems.append(
                f"embedding dimensions {self.min_dimensions}..{self.max_dimensions} "
                f"differ from the index version's {dimensions}"
            )
        if self.chunk_count and self.manifest_sha256 != manifest:
            problems.append("the manifest hash of the written chunks does not match")
        return problems


def build_completeness(*, build_id: int) -> Completeness:
    """Facts about a build's chunks, read in the caller's transaction (and snapshot)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*), count(embedding), count(DISTINCT ordinal), min(ordinal), max(ordinal),
                   min(vector_dims(embedding)), max(vector_dims(embedding)),
                   encode(sha256(convert_to(coalesce(
                       string_agg(content_hash, ',' ORDER BY ordinal), ''), 'UTF8')), 'hex')
            FROM kb_chunk WHERE build_id = %s
            """,
            [build_id],
        )
        row = cursor.fetchone()
    assert row is not None
    return Completeness(*row)


def manifest_of(content_hashes: list[str]) -> str:
    """The manifest hash the database computes in `build_completeness`, computed in Python."""
    import hashlib

    return hashlib.sha256(",".join(content_hashes).encode()).hexdigest()


def document_status(*, document: Document) -> str:
    """One line for people: what is live, and what is happening to the desired revision."""
    if document.deleted_at is not None:
        return "deleted"
    live = live_build(document=document)
    parts = [f"live r{live.revision.number}" if live else "not live"]
    if document.desired_revision and (
        live is None or live.revision.number != document.desired_revision
    ):
        pending = (
            Build.objects.filter(
                document=document,
                revision__number=document.desired_revision,
                index_version_id=document.kb.active_index_version_id,
            )
            .only("state", "error")
            .first()
        )
        if pending is not None:
            state = {"ready": "awaiting approval"}.get(pending.state, pending.state)
            detail = (
                f": {pending.error}"
                if pending.state == Build.State.FAILED and pending.error
                else ""
            )
            parts.append(f"r{document.desired_revision} {state}{detail}")
    return " · ".join(parts)
