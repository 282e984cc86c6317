"""Sync runs: asking for one (a person, the API or the schedule), closing runs whose worker gave
up, and a person's answer to deletions a run holds.

Lock order: the source row, then its runs, then source items, then documents (`kb.locks`). Each
function is one transaction and idempotent where it says so."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from kb.services.base import ActionRefused, Actor, actor_id
from sources.models import Source, SourceItem, SyncRun
from sources.services.items import item_delete
from work.models import IngestionTask
from work.outbox import task_create


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
        run.error = (
            task.last_error if task is not None and task.last_error else "The run's worker stopped."
        )
        run.deletion_note = "Nothing was deleted: the run did not finish."
        run.finished_at = timezone.now()
        run.save(update_fields=["state", "error", "deletion_note", "finished_at"])
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


def sync_deletions_confirm(*, run_id: int, actor: Actor = None) -> int:
    """Delete what the run held for confirmation — each item not seen again by a later run —
    and close the run. Returns how many documents were deleted (restorable for the retention
    window). Refused unless the run is awaiting confirmation, so a second confirm does nothing."""
    with transaction.atomic():
        run = _awaiting(run_id)
        deleted = 0
        for item_id in SourceItem.objects.filter(pending_delete_run=run).values_list(
            "pk", flat=True
        ):
            deleted += item_delete(run=run, item_id=item_id, actor=actor)
        run.deleted += deleted
        run.state = SyncRun.State.SUCCEEDED
        run.confirmed_by_id = actor_id(actor)
        run.confirmed_at = run.finished_at = timezone.now()
        run.deletion_note += f" Confirmed: {deleted} deleted."
        run.save()
    return deleted


def sync_deletions_keep(*, run_id: int, actor: Actor = None) -> int:
    """Keep the documents the run would have deleted, and close it. The next run that still
    misses them holds them again. Returns how many were kept."""
    with transaction.atomic():
        run = _awaiting(run_id)
        kept = SourceItem.objects.filter(pending_delete_run=run).update(pending_delete_run=None)
        run.state = SyncRun.State.SUCCEEDED
        run.confirmed_by_id = actor_id(actor)
        run.confirmed_at = run.finished_at = timezone.now()
        run.deletion_note += f" Kept: a person chose not to delete these {kept} documents."
        run.save()
    return kept
