"""Document- and shard-level checks: complete builds never switched, desired revisions without
a build, deleted documents still holding chunks, visibility violations and damaged chunks (from
the audit's seals, walk and shard summaries; never repaired automatically)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ingestion.reconciler.findings import (
    BATCH,
    Finding,
    fetch_rows,
    pass_figures,
)
from kb import audit, locks
from kb.completeness import IncompleteBuild
from kb.models import Revision
from kb.services.documents import builds_ensure
from kb.services.publication import build_publish
from work.models import IngestionTask
from work.outbox import task_create


def find_complete_build_not_switched() -> Iterator[Finding]:
    """A complete build of the desired revision that nothing will switch: no open task, and
    either still *building* (the worker died between the last write and the switch, and its task
    was closed) or *ready* in a knowledge base that does not require approval."""
    for build_id, kb_id in fetch_rows(
        """
        SELECT b.id, b.kb_id FROM kb_build b
        JOIN kb_document d ON d.id = b.document_id
        JOIN kb_revision r ON r.id = b.revision_id
        JOIN kb_knowledgebase k ON k.id = b.kb_id
        WHERE (b.state = 'building' OR (b.state = 'ready' AND NOT k.require_approval))
          AND b.expected_chunk_count > 0 AND b.chunks_written = b.expected_chunk_count
          AND d.deleted_at IS NULL AND d.desired_revision = r.number
          AND NOT EXISTS (SELECT 1 FROM ingestion_ingestiontask t
                          WHERE t.build_id = b.id
                            AND t.status IN ('queued', 'running', 'retry_wait'))
        ORDER BY b.id LIMIT %s
        """,
        [BATCH],
    ):
        yield Finding(
            "complete_build_not_switched",
            "build",
            int(build_id),
            int(kb_id),
            "complete build of the desired revision was never switched",
        )


def repair_complete_build_not_switched(finding: Finding) -> str:
    try:
        result = build_publish(build_id=finding.subject_id)
    except IncompleteBuild as exc:
        return f"not switched: {exc}"
    return f"switch: {result.outcome.value}"


def find_desired_revision_without_build() -> Iterator[Finding]:
    for document_id, kb_id, version_id, revision_id in fetch_rows(
        """
        SELECT d.id, d.kb_id, iv.id, r.id FROM kb_document d
        JOIN kb_revision r ON r.document_id = d.id AND r.number = d.desired_revision
        JOIN kb_indexversion iv ON iv.kb_id = d.kb_id
        JOIN kb_knowledgebase k ON k.id = d.kb_id
        WHERE d.deleted_at IS NULL AND iv.collected_at IS NULL
          AND (iv.state IN ('building', 'ready', 'active')
               OR (iv.state = 'retired'
                   AND iv.retired_at >= now() - make_interval(days => k.retention_days)))
          AND NOT EXISTS (SELECT 1 FROM kb_build b
                          WHERE b.revision_id = r.id AND b.index_version_id = iv.id)
        ORDER BY d.id LIMIT %s
        """,
        [BATCH],
    ):
        yield Finding(
            "desired_revision_without_build",
            "document",
            int(document_id),
            int(kb_id),
            f"revision id {revision_id} has no build in index version id {version_id}",
        )


def repair_desired_revision_without_build(finding: Finding) -> str:
    with transaction.atomic():
        document = locks.lock_document(finding.subject_id)
        if document.deleted_at is not None or document.desired_revision is None:
            return "document deleted meanwhile"
        revision = Revision.objects.get(document=document, number=document.desired_revision)
        created = builds_ensure(document=document, revision=revision)
    return f"created {created} build(s) and task(s)"


def find_deleted_with_chunks() -> Iterator[Finding]:
    """Deleted past the purge time, chunks still there, and no purge task on its way."""
    for document_id, kb_id in fetch_rows(
        """
        SELECT d.id, d.kb_id FROM kb_document d
        WHERE d.deleted_at IS NOT NULL AND d.purged_at IS NULL AND d.deleted_at < %s
          AND EXISTS (SELECT 1 FROM kb_chunk c WHERE c.document_id = d.id)
          AND NOT EXISTS (SELECT 1 FROM ingestion_ingestiontask t
                          WHERE t.document_id = d.id AND t.kind = 'delete'
                            AND t.status IN ('queued', 'running', 'retry_wait'))
        ORDER BY d.id LIMIT %s
        """,
        [timezone.now() - timedelta(seconds=_purge_delay_floor()), BATCH],
    ):
        yield Finding(
            "deleted_with_chunks",
            "document",
            int(document_id),
            int(kb_id),
            "deleted document still has chunks and no purge is scheduled",
        )


def _purge_delay_floor() -> float:
    configured = settings.DELETE_PURGE_DELAY_SECONDS
    return float(configured) if configured is not None else 0.0


def repair_deleted_with_chunks(finding: Finding) -> str:
    with transaction.atomic():
        document = locks.lock_document(finding.subject_id)
        if document.deleted_at is None:
            return "restored meanwhile"
        task_create(kind=IngestionTask.Kind.DELETE, kb_id=document.kb_id, document_id=document.pk)
    return "scheduled the purge"


def find_visibility_violations() -> Iterator[Finding]:
    """A pointer to a build that is not live, not of its document, or incomplete. Checks the
    pointer rows (no chunk scan), then reads in full the verified builds not yet sealed (about
    RECONCILER_SEAL_CHUNKS chunks, oldest first): a new build is read once, shortly after it
    was verified; the shard summaries watch it from then on."""
    for publication_id, kb_id, detail in fetch_rows(
        """
        SELECT p.id, p.kb_id, 'points at build ' || b.id || ' in state ' || b.state
        FROM kb_publication p JOIN kb_build b ON b.id = p.build_id
        WHERE b.state <> 'live' OR b.document_id <> p.document_id
           OR b.index_version_id <> p.index_version_id OR b.expected_chunk_count IS NULL
        ORDER BY p.id LIMIT %s
        """,
        [BATCH],
    ):
        yield Finding(
            "visibility_violation", "publication", int(publication_id), int(kb_id), str(detail)
        )
    damaged, sealed = audit.seal_pending(chunk_budget=settings.RECONCILER_SEAL_CHUNKS)
    pass_figures["document"]["builds_sealed"] = sealed
    yield from _damage_findings(damaged)


def _damage_findings(checks: list[audit.BuildCheck]) -> Iterator[Finding]:
    """A live build whose chunks do not match its manifest is a visibility violation (of its
    publication); a retained one, which a rollback may point at, is damaged."""
    for check in checks:
        detail = "; ".join(check.problems)
        if check.publication_id is not None:
            yield Finding(
                "visibility_violation",
                "publication",
                int(check.publication_id),
                check.kb_id,
                detail,
                check.document_id,
            )
        else:
            yield Finding(
                "retained_build_damaged",
                "build",
                check.build_id,
                check.kb_id,
                detail,
                check.document_id,
            )


# Checks of the document walk that other finders report under their own kinds.
_WALK_ELSEWHERE = {"stored-file", "task-can-run", "active-index-version"}


_WALK_BUILD_CHECKS = {"live-build-complete", "retained-build-complete"}


def find_invariant_violations() -> Iterator[Finding]:
    """One slice of the document walk (`kb.audit.audit_slice`, cursor "reconciler"): every
    invariant `kb_verify` checks, for the next RECONCILER_SLICE_DOCUMENTS documents. A damaged
    build is read again and reported as the seal queue would; the rest per document."""
    result = audit.audit_slice(
        walker="reconciler", size=settings.RECONCILER_SLICE_DOCUMENTS, global_checks=False
    )
    pass_figures["document"].update(
        walk_pass=result.pass_number,
        walk_documents=result.documents,
        walk_through=list(result.through),
        walk_ms=round(result.seconds * 1000, 1),
    )
    builds = sorted(
        {v.build_id for v in result.violations if v.check in _WALK_BUILD_CHECKS and v.build_id}
    )
    yield from _damage_findings([c for c in audit.builds_check(builds) if c.problems])
    by_document: dict[tuple[int, int], list[str]] = {}
    for v in result.violations:
        if v.check in _WALK_ELSEWHERE or v.check in _WALK_BUILD_CHECKS:
            continue
        if v.document_id is not None and v.kb_id is not None:
            by_document.setdefault((v.kb_id, v.document_id), []).append(str(v))
    for (kb_id, document_id), details in by_document.items():
        yield Finding(
            "invariant_violation", "document", document_id, kb_id, "; ".join(details), document_id
        )


def find_shard_disagreements() -> Iterator[Finding]:
    """The next RECONCILER_SHARD_BUILDS builds' window summaries (`kb.audit.shard_slice`); the
    windows that disagree are read chunk by chunk and their damaged builds reported."""
    result = audit.shard_slice(
        builds=settings.RECONCILER_SHARD_BUILDS, deep_windows=settings.RECONCILER_DEEP_WINDOWS
    )
    pass_figures["shard"].update(
        windows=result.summaries,
        disagreeing=[str(s) for s in result.disagreeing[:20]],
        deep_checked_builds=result.deep_checked_builds,
        through_build=result.through_build,
        wrapped=result.wrapped,
    )
    yield from _damage_findings(result.damaged)
