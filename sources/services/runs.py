"""Sync runs: asking for one (a person, the API or the schedule), closing runs whose worker gave
up, and a person's answer to deletions a run holds.

Lock order: the source row, then its runs, then source items, then documents (`kb.locks`). Each
function is one transaction and idempotent where it says so."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_noop

from kb.audit_kinds import SYNC_DELETIONS_CONFIRMED, SYNC_DELETIONS_KEPT
from kb.services.base import ActionRefused, Actor, actor_id
from sources.deletion_notes import CONFIRMED, KEPT, NOT_FINISHED, note_add, note_set
from sources.models import Source, SourceItem, SyncRun
from sources.services.items import DELETED, item_delete
from textkit.reasons import reason
from work.models import AuditEvent, IngestionTask
from work.outbox import task_create

# Why a run was closed when its task was gone or closed without its words (`_close_orphaned`).
RUN_WORKER_STOPPED = reason("sync.worker_stopped", gettext_noop("The sync run's worker stopped."))


def sync_request(
    *, source: Source, trigger: str = SyncRun.Trigger.MANUAL, actor: Actor = None
) -> tuple[SyncRun, bool]:
    """Start a sync run of `source`, or return the one already open (idempotent: a second "Sync
    now" or a beat that fires twice finds the first). Returns (run, created). Refused with
    ActionRefused for a paused source."""
    with transaction.atomic():
        locked = Source.objects.select_for_update(no_key=True).get(pk=source.pk)
        _close_orphaned(locked)
        open_run = SyncRun.objects.filter(source=locked, state__in=SyncRun.OPEN_STATES).first()
        if open_run is not None:
            return open_run, False
        if not locked.enabled:
            raise ActionRefused(f"{locked.name} is paused; resume it to sync it.")
        task = task_create(kind=IngestionTask.Kind.SYNC, kb_id=locked.kb_id)
        run = SyncRun.objects.create(
            source=locked, task=task, trigger=trigger, requested_by_id=actor_id(actor)
        )
    return run, True


def _close_orphaned(source: Source) -> int:
    """Open runs whose task is closed (dead after its attempts, failed) or gone are failed with
    the task's reason, so the source can sync again. Caller holds the source lock."""
    closed = 0
    for run in SyncRun.objects.filter(source=source, state__in=SyncRun.OPEN_STATES).select_related(
        "task"
    ):
        task = run.task
        if task is not None and task.status in IngestionTask.OPEN_STATUSES:
            continue
        run.state = SyncRun.State.FAILED
        if task is not None and task.last_error:  # the task's reason, when it kept one
            run.error = task.last_error
            run.error_reason, run.error_params = task.last_error_reason, task.last_error_params
        else:
            run.error = RUN_WORKER_STOPPED.english
            run.error_reason, run.error_params = RUN_WORKER_STOPPED.code, {}
        note_set(run, NOT_FINISHED())
        run.finished_at = timezone.now()
        run.save(
            update_fields=[
                "state",
                "error",
                "error_reason",
                "error_params",
                "deletion_note",
                "deletion_note_reasons",
                "finished_at",
            ]
        )
        closed += 1
    return closed


def syncs_start_due(*, now: datetime | None = None) -> int:
    """Periodic: a run for every enabled, scheduled source whose time has come (never synced:
    at once), and orphaned runs closed. Returns how many runs were started."""
    now = now or timezone.now()
    started = 0
    due = Source.objects.filter(enabled=True, sync_every_minutes__isnull=False).filter(
        Q(next_sync_at__isnull=True) | Q(next_sync_at__lte=now)
    )
    for source in due:
        _, created = sync_request(source=source, trigger=SyncRun.Trigger.SCHEDULE)
        started += created
    for source in Source.objects.filter(runs__state__in=SyncRun.OPEN_STATES).distinct():
        with transaction.atomic():
            _close_orphaned(Source.objects.select_for_update(no_key=True).get(pk=source.pk))
    return started


def _awaiting(run_id: int) -> SyncRun:
    run = SyncRun.objects.select_for_update(no_key=True).select_related("source").get(pk=run_id)
    if run.state != SyncRun.State.AWAITING_CONFIRMATION:
        raise ActionRefused(
            f"Sync run {run.pk} holds no deletions (it is {run.get_state_display()})."
        )
    return run


def sync_deletions_confirm(*, run_id: int, actor: Actor = None, reason: str = "") -> int:
    """Delete what the run held for confirmation — each item not seen again by a later run —
    and close the run. Returns how many documents were deleted (restorable for the retention
    window). The answer is recorded with `reason` (`audit_kinds.SYNC_DELETIONS_CONFIRMED`,
    naming the documents deleted), for the run's page, the timeline and each document's
    History. Refused unless the run is awaiting confirmation, so a second confirm does
    nothing."""
    with transaction.atomic():
        run = _awaiting(run_id)
        deleted_ids: list[int] = []
        for item_id, document_id in SourceItem.objects.filter(pending_delete_run=run).values_list(
            "pk", "document_id"
        ):
            outcome = item_delete(run=run, item_id=item_id, actor=actor)
            if outcome is not None and outcome.kind == DELETED:
                deleted_ids.append(document_id)
        deleted = len(deleted_ids)
        run.deleted += deleted
        run.state = SyncRun.State.SUCCEEDED
        run.confirmed_by_id = actor_id(actor)
        run.confirmed_at = run.finished_at = timezone.now()
        note_add(run, CONFIRMED(deleted=deleted))
        run.save()
        _answer_record(
            run,
            kind=SYNC_DELETIONS_CONFIRMED,
            action=f"{deleted} document{'s' if deleted != 1 else ''} deleted",
            document_ids=deleted_ids,
            actor=actor,
            reason=reason,
        )
    return deleted


def sync_deletions_keep(*, run_id: int, actor: Actor = None, reason: str = "") -> int:
    """Keep the documents the run would have deleted, and close it. The next run that still
    misses them holds them again. Returns how many were kept; the answer is recorded with
    `reason` as a confirmation's is (`audit_kinds.SYNC_DELETIONS_KEPT`)."""
    with transaction.atomic():
        run = _awaiting(run_id)
        held = SourceItem.objects.filter(pending_delete_run=run)
        kept_ids = [d for d in held.values_list("document_id", flat=True) if d is not None]
        kept = held.update(pending_delete_run=None)
        run.state = SyncRun.State.SUCCEEDED
        run.confirmed_by_id = actor_id(actor)
        run.confirmed_at = run.finished_at = timezone.now()
        note_add(run, KEPT(kept=kept))
        run.save()
        _answer_record(
            run,
            kind=SYNC_DELETIONS_KEPT,
            action=f"{kept} document{'s' if kept != 1 else ''} kept",
            document_ids=kept_ids,
            actor=actor,
            reason=reason,
        )
    return kept


def _answer_record(
    run: SyncRun, *, kind: str, action: str, document_ids: list[int], actor: Actor, reason: str
) -> None:
    AuditEvent.objects.create(
        kind=kind,
        kb_id=run.source.kb_id,
        subject_type="sync_run",
        subject_id=run.pk,
        action=f"sync run {run.pk} of {run.source.name}: {action}",
        actor_id=actor_id(actor),
        details={"reason": reason, "documents": sorted(document_ids)},
    )
