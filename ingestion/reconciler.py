"""The reconciler: finds what leases and retries did not heal, and repairs it through the normal
protocols (outbox, tasks, the switch) — never around them.

Each pass is a singleton (advisory lock) and works in three levels (seed 002; `kb.audit`), each
bounded, so a pass costs the same at 50M chunks as at 50k:

- event level, every pass: outbox lag, waiting tasks whose event died or was never claimed, and
  the figures (pending events, oldest pending age, dead letters of waiting tasks);
- document level: the state checks below in batches over indexed columns, the seal queue (each
  verified build read in full once, about RECONCILER_SEAL_CHUNKS chunks a pass) and one slice of
  the document walk (RECONCILER_SLICE_DOCUMENTS documents, every invariant of `kb_verify`);
- shard level: RECONCILER_SHARD_BUILDS builds' summaries per pass, read chunk by chunk only in
  the windows where they disagree (at most RECONCILER_DEEP_WINDOWS).

Every finding is recorded as an AuditEvent `anomaly:<kind>`, once per subject and pass. A subject
gets at most MAX_REPAIRS automatic repairs; after that it is escalated to the manual queue in the
admin and left alone. Visibility violations and damaged chunks are never repaired
automatically: they are escalated at once. The pass's figures per level are in its
`reconciler_pass` AuditEvent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from ingestion.relay import outbox_relay_batch
from kb import audit, locks, storage
from kb.completeness import IncompleteBuild
from kb.models import Revision
from kb.services.documents import builds_ensure
from kb.services.publication import build_publish
from kb.services.retention import retention_collect
from kb.storage_lock import backup_running, storage_deletion
from kb.verify import needed_sources, stored_file_problem
from work import broker
from work.models import AuditEvent, IngestionTask, OutboxEvent
from work.outbox import outbox_add, task_create

logger = logging.getLogger(__name__)

RECONCILER_LOCK_KEY = 0x43616E6F6E02
BATCH = 200
STORED_FILE_BATCH = 1000  # stats per pass; a cursor in the cache walks all revisions in turn
STORED_FILE_CURSOR = "canon:reconciler:stored-file-cursor"
MAX_REPAIRS = 3


@dataclass(frozen=True)
class Finding:
    kind: str
    subject_type: str
    subject_id: int
    kb_id: int | None
    detail: str
    document_id: int | None = None  # when known: one finding per document and pass


Repair = Callable[[Finding], str]


def _rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


# --- the catalogue: each check yields findings, each repair returns what it did ------------


def find_queued_without_event() -> Iterator[Finding]:
    for task_id, kb_id, status in _rows(
        """
        SELECT t.id, t.kb_id, t.status FROM ingestion_ingestiontask t
        WHERE t.status IN ('queued', 'retry_wait')
          AND NOT EXISTS (
              SELECT 1 FROM ingestion_outboxevent e
              WHERE e.task_id = t.id AND e.dead_at IS NULL
                AND (e.published_at IS NULL OR e.published_at >= t.updated_at))
        ORDER BY t.id LIMIT %s
        """,
        [BATCH],
    ):
        yield Finding(
            "queued_without_event",
            "task",
            int(task_id),
            int(kb_id),
            f"{status} task has no pending outbox event",
        )


def _send_again(finding: Finding) -> bool:
    """A new outbox event for the finding's task, if it still waits to run (under its lock)."""
    with transaction.atomic():
        task = IngestionTask.objects.select_for_update().get(pk=finding.subject_id)
        if task.status not in ("queued", "retry_wait"):
            return False
        outbox_add(task=task)
    return True


def repair_queued_without_event(finding: Finding) -> str:
    return "added an outbox event" if _send_again(finding) else "no longer queued"


def find_sent_never_claimed() -> Iterator[Finding]:
    """A queued task whose message went out RECONCILER_UNCLAIMED_SECONDS ago and was never
    claimed, while the broker's queue is empty: its message is nowhere a worker will look soon. A
    worker that took it died before claiming (Redis keeps such a message unacked for the
    visibility timeout, 40 minutes), or Redis lost it. While the queue holds messages, a backlog
    explains the wait and nothing is found. Sending again is harmless: claiming a task that is
    no longer queued does nothing."""
    threshold = timezone.now() - timedelta(seconds=settings.RECONCILER_UNCLAIMED_SECONDS)
    rows = _rows(
        """
        SELECT t.id, t.kb_id, max(e.published_at) FROM ingestion_ingestiontask t
        JOIN ingestion_outboxevent e ON e.task_id = t.id AND e.published_at >= t.updated_at
        WHERE t.status IN ('queued', 'retry_wait') AND t.updated_at < %s
          AND NOT EXISTS (
              SELECT 1 FROM ingestion_outboxevent u
              WHERE u.task_id = t.id AND u.published_at IS NULL AND u.dead_at IS NULL)
        GROUP BY t.id, t.kb_id HAVING max(e.published_at) < %s
        ORDER BY t.id LIMIT %s
        """,
        [threshold, threshold, BATCH],
    )
    if not rows or broker.queue_length() != 0:
        return
    for task_id, kb_id, sent_at in rows:
        yield Finding(
            "sent_never_claimed",
            "task",
            int(task_id),
            int(kb_id),
            f"sent at {sent_at:%H:%M:%S}, never claimed, and the task queue is empty",
        )


def repair_sent_never_claimed(finding: Finding) -> str:
    return "sent again (added an outbox event)" if _send_again(finding) else "claimed meanwhile"


def find_complete_build_not_switched() -> Iterator[Finding]:
    """A complete build of the desired revision that nothing will switch: no open task, and
    either still *building* (the worker died between the last write and the switch, and its task
    was closed) or *ready* in a knowledge base that does not require approval."""
    for build_id, kb_id in _rows(
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
    for document_id, kb_id, version_id, revision_id in _rows(
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
    for document_id, kb_id in _rows(
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


def find_outbox_lagging() -> Iterator[Finding]:
    threshold = timezone.now() - timedelta(seconds=settings.RECONCILER_OUTBOX_LAG_SECONDS)
    for event in (
        OutboxEvent.objects.filter(
            published_at__isnull=True, dead_at__isnull=True, available_at__lt=threshold
        )
        .select_related("task")
        .order_by("available_at", "id")[:BATCH]
    ):
        yield Finding(
            "outbox_lagging",
            "outbox_event",
            event.pk,
            event.task.kb_id if event.task else None,
            f"unpublished since {event.available_at:%H:%M:%S}: {event.last_error[:200]}",
        )


def repair_outbox_lagging(finding: Finding) -> str:
    sent = outbox_relay_batch()
    return f"ran the relay: {sent} sent"


def find_orphan_files() -> Iterator[Finding]:
    """Source files no Revision names, older than the grace period (a crash between storing the
    bytes and committing the upload). Scans at most BATCH files per pass; none while a backup
    runs (it holds the storage lock, and the repair would not delete)."""
    root = storage.storage_root() / "sources"
    if not root.exists() or backup_running():
        return
    grace = time.time() - settings.RECONCILER_ORPHAN_GRACE_SECONDS
    seen = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            seen += 1
            if seen > BATCH * 10:
                return
            path = Path(dirpath) / name
            relative = str(path.relative_to(storage.storage_root()))
            if path.stat().st_mtime > grace:
                continue
            if Revision.objects.filter(storage_path=relative).exists():
                continue
            yield Finding("orphan_file", "file", 0, None, relative)


def repair_orphan_file(finding: Finding) -> str:
    path = storage.absolute_path(finding.detail)
    with storage_deletion() as allowed:
        if not allowed:
            return "kept: a backup is running"
        if Revision.objects.filter(storage_path=finding.detail).exists():
            return "referenced meanwhile"
        # An upload reusing the file refreshes its mtime under this lock before it commits.
        grace = time.time() - settings.RECONCILER_ORPHAN_GRACE_SECONDS
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime > grace:
                return "reused meanwhile"
        path.unlink(missing_ok=True)
    return "deleted the file"


def find_stored_file_missing() -> Iterator[Finding]:
    """The source file of a revision a document still needs (desired, or behind a published
    build) is missing or has the wrong size: typically a database restored without its storage.
    Search keeps serving the published chunks (they are complete, in the database); what breaks
    is building the document again, so a person must put the file back (restore storage from the
    backup). Checks STORED_FILE_BATCH revisions per pass, resuming where the last pass stopped."""
    try:
        after = int(cache.get(STORED_FILE_CURSOR) or 0)
    except Exception:  # the cache is Redis; losing the cursor only restarts the walk
        after = 0
    rows = needed_sources(after=after, limit=STORED_FILE_BATCH)
    with contextlib.suppress(Exception):
        cache.set(STORED_FILE_CURSOR, rows[-1][0] if len(rows) == STORED_FILE_BATCH else 0, None)
    for revision_id, document_id, kb_id, path, sha256, size in rows:
        problem = stored_file_problem(path, sha256, size)
        if problem:
            yield Finding(
                "stored_file_missing",
                "revision",
                int(revision_id),
                int(kb_id),
                f"{problem} (document {document_id}, {path})",
            )


def find_visibility_violations() -> Iterator[Finding]:
    """A pointer to a build that is not live, not of its document, or incomplete. Checks the
    pointer rows (no chunk scan), then reads in full the verified builds not yet sealed (about
    RECONCILER_SEAL_CHUNKS chunks, oldest first): a new build is read once, shortly after it
    was verified; the shard summaries watch it from then on."""
    for publication_id, kb_id, detail in _rows(
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
    _figures["document"]["builds_sealed"] = sealed
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
    _figures["document"].update(
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
    _figures["shard"].update(
        windows=result.summaries,
        disagreeing=[str(s) for s in result.disagreeing[:20]],
        deep_checked_builds=result.deep_checked_builds,
        through_build=result.through_build,
        wrapped=result.wrapped,
    )
    yield from _damage_findings(result.damaged)


def event_figures() -> dict[str, Any]:
    """The event level's numbers, from indexed reads: events waiting to be sent and the age of
    the oldest, and dead letters whose task still waits (queued_without_event sends those
    again)."""
    ((pending, oldest),) = _rows(
        """
        SELECT count(*), extract(epoch FROM now() - min(available_at)) FROM ingestion_outboxevent
        WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now()
        """,
        [],
    )
    ((dead,),) = _rows(
        """
        SELECT count(*) FROM ingestion_ingestiontask t
        JOIN ingestion_outboxevent e ON e.task_id = t.id
        WHERE t.status IN ('queued', 'retry_wait') AND e.dead_at IS NOT NULL
        """,
        [],
    )
    return {
        "outbox_pending": int(pending),
        "outbox_oldest_seconds": round(float(oldest), 1) if oldest is not None else 0.0,
        "dead_letters_of_waiting_tasks": int(dead),
    }


EVENT, DOCUMENT, SHARD = "event", "document", "shard"


@dataclass(frozen=True)
class Check:
    """One row of the catalogue: the level it runs at, the finding kind its repair handles (the
    kind an escalated anomaly is recorded under, `anomaly:<kind>`), the check and its repair."""

    level: str
    kind: str
    find: Callable[[], Iterator[Finding]]
    repair: Repair | None


CATALOGUE: list[Check] = [
    Check(EVENT, "queued_without_event", find_queued_without_event, repair_queued_without_event),
    Check(EVENT, "sent_never_claimed", find_sent_never_claimed, repair_sent_never_claimed),
    Check(
        DOCUMENT,
        "complete_build_not_switched",
        find_complete_build_not_switched,
        repair_complete_build_not_switched,
    ),
    Check(
        DOCUMENT,
        "desired_revision_without_build",
        find_desired_revision_without_build,
        repair_desired_revision_without_build,
    ),
    Check(DOCUMENT, "deleted_with_chunks", find_deleted_with_chunks, repair_deleted_with_chunks),
    Check(EVENT, "outbox_lagging", find_outbox_lagging, repair_outbox_lagging),
    Check(DOCUMENT, "orphan_file", find_orphan_files, repair_orphan_file),
    # A person restores the file.
    Check(DOCUMENT, "stored_file_missing", find_stored_file_missing, None),
    # Never fixed automatically; these checks yield several kinds (visibility_violation, ...).
    Check(DOCUMENT, "visibility_violation", find_visibility_violations, None),
    Check(DOCUMENT, "invariant_violation", find_invariant_violations, None),
    Check(SHARD, "shard_disagreement", find_shard_disagreements, None),
]
# The repair of each finding kind, by the kind an escalation is recorded under.
REPAIRS: dict[str, Repair] = {check.kind: check.repair for check in CATALOGUE if check.repair}
# Per-level figures of the pass in progress (the pass is a singleton).
_figures: dict[str, dict[str, Any]] = {EVENT: {}, DOCUMENT: {}, SHARD: {}}


def _previous(finding: Finding) -> Any:
    events = AuditEvent.objects.filter(
        kind=f"anomaly:{finding.kind}", subject_type=finding.subject_type
    )
    if finding.subject_type == "file":
        return events.filter(details__detail=finding.detail)
    return events.filter(subject_id=finding.subject_id)


def _handle(finding: Finding, repair: Repair | None) -> str:
    """Repair (bounded) or escalate one finding, and record it."""
    previous = _previous(finding)
    if previous.filter(escalated=True, resolved_at__isnull=True).exists():
        return "already escalated"
    attempts = previous.count() + 1
    escalate = repair is None or attempts > MAX_REPAIRS
    action = "escalated for a person to look at" if escalate or repair is None else repair(finding)
    AuditEvent.objects.create(
        kind=f"anomaly:{finding.kind}",
        subject_type=finding.subject_type,
        subject_id=finding.subject_id if finding.subject_type != "file" else None,
        kb_id=finding.kb_id,
        action=action,
        attempts=attempts,
        escalated=escalate,
        details={"detail": finding.detail},
    )
    if escalate:
        logger.error(
            "anomaly escalated: %s %s: %s", finding.kind, finding.subject_id, finding.detail
        )
    return action


def reconcile() -> dict[str, int]:
    """One pass over the catalogue; returns findings per kind. A second reconciler running at the
    same time does nothing (advisory lock)."""
    counts: dict[str, int] = {}
    with locks.singleton(RECONCILER_LOCK_KEY) as held:
        if not held:
            return counts
        for level in _figures.values():
            level.clear()
        _figures[EVENT].update(event_figures())
        seen: set[tuple[str, str, int, str]] = set()
        documents: set[int] = set()
        for check in CATALOGUE:
            started = time.perf_counter()
            for finding in list(check.find()):
                subject = (finding.kind, finding.subject_type, finding.subject_id, finding.detail)
                if finding.subject_type != "file":
                    subject = (*subject[:3], "")
                if subject in seen or (
                    finding.kind == "invariant_violation" and finding.document_id in documents
                ):
                    continue  # found this pass already, by another level
                seen.add(subject)
                if finding.document_id is not None:
                    documents.add(finding.document_id)
                _handle(finding, check.repair)
                counts[finding.kind] = counts.get(finding.kind, 0) + 1
            spent = _figures[check.level].get("ms", 0.0) + (time.perf_counter() - started) * 1000
            _figures[check.level]["ms"] = round(spent, 1)
        collected = retention_collect()
        if collected:
            counts["retention_collected_chunks"] = collected
        AuditEvent.objects.create(
            kind="reconciler_pass",
            subject_type="reconciler",
            action=str(counts),
            details={**counts, "levels": _figures},
        )
    return counts


def anomaly_retry(*, event_id: int, actor: object = None) -> str:
    """From the manual queue: close the escalation and run one more repair now."""
    event = AuditEvent.objects.get(pk=event_id, escalated=True)
    AuditEvent.objects.filter(pk=event.pk).update(resolved_at=Now())
    kind = event.kind.removeprefix("anomaly:")
    repair = REPAIRS.get(kind)
    if repair is None:
        return "this anomaly has no automatic repair; fix it by hand"
    finding = Finding(
        kind,
        event.subject_type,
        event.subject_id or 0,
        event.kb_id,
        str(event.details.get("detail", "")),
    )
    return repair(finding)


def anomaly_dismiss(*, event_id: int, reason: str, actor: object = None) -> None:
    AuditEvent.objects.filter(pk=event_id, escalated=True).update(
        resolved_at=Now(), action=f"dismissed: {reason}"
    )
