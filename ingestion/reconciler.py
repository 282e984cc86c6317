"""The reconciler: finds what leases and retries did not heal, and repairs it through the normal
protocols (outbox, tasks, the switch) — never around them.

Each pass is a singleton (advisory lock), works in bounded batches over indexed columns (never a
scan of kb_chunk), and records every finding as an AuditEvent `anomaly:<kind>`. A subject gets at
most MAX_REPAIRS automatic repairs; after that it is escalated to the manual queue in the admin
and left alone. Visibility violations are never repaired automatically: they are escalated at once.
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

from ingestion.models import AuditEvent, IngestionTask, OutboxEvent
from ingestion.services import outbox_add, outbox_relay_batch, task_create
from kb import backup, locks, selectors, storage
from kb.models import Publication, Revision
from kb.verify import needed_sources, stored_file_problem

logger = logging.getLogger(__name__)

RECONCILER_LOCK_KEY = 0x43616E6F6E02
BATCH = 200
STORED_FILE_BATCH = 1000  # stats per pass; a cursor in the cache walks all revisions in turn
STORED_FILE_CURSOR = "canon:reconciler:stored-file-cursor"
MAX_REPAIRS = 3
OPEN_TASK_STATUSES = ("queued", "running", "retry_wait")


@dataclass(frozen=True)
class Finding:
    kind: str
    subject_type: str
    subject_id: int
    kb_id: int | None
    detail: str


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


def _broker_queue_length() -> int | None:
    """Messages waiting in the task queue (None: the broker cannot be asked)."""
    from config.celery import app

    try:
        with app.connection_for_write() as connection_:
            connection_.ensure_connection(max_retries=1)
            # Not passive: Redis keeps no key for an empty queue, and declaring creates none.
            channel: Any = connection_.default_channel
            declared = channel.queue_declare(queue=settings.CELERY_TASK_DEFAULT_QUEUE)
            return int(declared.message_count)
    except Exception as exc:  # the broker is down: nothing to conclude about lost messages
        logger.warning("cannot read the task queue's length: %s", exc)
        return None


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
    if not rows or _broker_queue_length() != 0:
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
    from kb.services import IncompleteBuild, build_publish

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
    from kb.services import builds_ensure

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
    if not root.exists() or backup.backup_running():
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
    with backup.storage_deletion() as allowed:
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
    pointer rows (no chunk scan) plus the chunk counts of the most recently switched builds."""
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
    for publication in Publication.objects.select_related("build__index_version").order_by(
        "-published_at"
    )[:BATCH]:
        build = publication.build
        problems = selectors.build_completeness(build_id=build.pk).problems(
            expected_count=build.expected_chunk_count,
            dimensions=build.index_version.dimensions,
            manifest=build.manifest_sha256,
        )
        if problems:
            yield Finding(
                "visibility_violation",
                "publication",
                publication.pk,
                publication.kb_id,
                "; ".join(problems),
            )


CATALOGUE: list[tuple[Callable[[], Iterator[Finding]], Repair | None]] = [
    (find_queued_without_event, repair_queued_without_event),
    (find_sent_never_claimed, repair_sent_never_claimed),
    (find_complete_build_not_switched, repair_complete_build_not_switched),
    (find_desired_revision_without_build, repair_desired_revision_without_build),
    (find_deleted_with_chunks, repair_deleted_with_chunks),
    (find_outbox_lagging, repair_outbox_lagging),
    (find_orphan_files, repair_orphan_file),
    (find_stored_file_missing, None),  # a person restores the file
    (find_visibility_violations, None),  # never fixed automatically
]


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
    from kb.services import retention_collect

    counts: dict[str, int] = {}
    with locks.singleton(RECONCILER_LOCK_KEY) as held:
        if not held:
            return counts
        for find, repair in CATALOGUE:
            for finding in list(find()):
                _handle(finding, repair)
                counts[finding.kind] = counts.get(finding.kind, 0) + 1
        collected = retention_collect()
        if collected:
            counts["retention_collected_chunks"] = collected
        AuditEvent.objects.create(
            kind="reconciler_pass",
            subject_type="reconciler",
            action=str(counts),
            details=counts,
        )
    return counts


def anomaly_retry(*, event_id: int, actor: object = None) -> str:
    """From the manual queue: close the escalation and run one more repair now."""
    event = AuditEvent.objects.get(pk=event_id, escalated=True)
    AuditEvent.objects.filter(pk=event.pk).update(resolved_at=Now())
    kind = event.kind.removeprefix("anomaly:")
    repair = dict((f.__name__.removeprefix("find_"), r) for f, r in CATALOGUE).get(kind)
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
