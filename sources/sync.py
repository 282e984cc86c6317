"""A sync run, executed by a worker under its task's lease (`ingestion.pipeline.run`
dispatches kind "sync" here): list the source, compare with the manifest, submit what changed,
delete what is gone — carefully.

1. **List.** Every item the kind yields is compared with its manifest row (`SourceItem`): same
   version, not gone → unchanged, never fetched. A `Problem`'s path counts as present.
2. **Submit.** Each new or changed item is fetched (outside any transaction), passed through the
   upload checks and stored, then submitted in one fenced transaction
   (`services.items.item_submit`) that writes the revision and the item's version together.
3. **Delete.** Only after a complete listing: a failed or cut-short listing, or any problem that
   may hide items, deletes nothing and says why. Deletions over the source's threshold share
   (and over `SOURCES_DELETE_HOLD_MIN`), or an empty listing where the last run saw items, wait
   for a person (`services.runs.sync_deletions_confirm`).

Idempotent and resumable: a run killed anywhere is run again by the sweeper on the same
`SyncRun`; items it already submitted are found at their new version and counted as what they
were, so nothing is submitted twice and no deletion is missed. Counts and progress are written
at most once a second (`PROGRESS_SECONDS`), each write fenced."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from ingestion.task_outcomes import task_succeed
from kb.metadata import field_specs
from kb.uploads import UploadRejected
from sources.kinds.base import (
    Item,
    ItemProblem,
    Kind,
    ListingFailed,
    Problem,
    SourceError,
    SourceUnavailable,
)
from sources.kinds.registry import kind_for
from sources.metadata_map import mapped_metadata
from sources.models import Source, SourceItem, SyncRun
from sources.secrets import SecretsUnavailable
from sources.services.items import (
    CHANGED,
    FAILED,
    NEW,
    RESTORED,
    SKIPPED,
    UNCHANGED,
    Outcome,
    document_key,
    item_accept,
    item_delete,
    item_submit,
)
from work import faults
from work.leases import Lease, fenced
from work.models import IngestionTask

logger = logging.getLogger(__name__)

PROGRESS_SECONDS = 1.0
DELETED = "deleted"
PROBLEMS_KEPT = 500
KEY_MAX = 255
SEEN_BATCH = 5000


@dataclass
class Tally:
    """A run's counts as it goes; written to the SyncRun row by `_save`."""

    listed: int = 0
    to_process: int = 0
    processed: int = 0
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            (NEW, CHANGED, RESTORED, UNCHANGED, SKIPPED, FAILED, DELETED), 0
        )
    )
    problems: list[dict[str, str]] = field(default_factory=list)
    seconds: dict[str, float] = field(
        default_factory=lambda: {"listing": 0.0, "fetching": 0.0, "submitting": 0.0}
    )

    def problem(self, path: str, outcome: str, reason: str) -> None:
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append({"path": path, "outcome": outcome, "reason": reason[:500]})


@dataclass(frozen=True)
class Result:
    state: str
    error: str = ""
    note: str = ""  # about deletions: why none, or why they wait
    complete: bool = True  # the listing was complete


def sync_execute(*, task: IngestionTask, lease: Lease) -> str:
    """Run (or resume) the sync run of `task`; returns its final state."""
    run = SyncRun.objects.select_related("source__kb").get(task_id=task.pk)
    tally = Tally()
    with fenced(lease):
        if not run.source.enabled:
            _close(
                run, tally, SyncRun.State.CANCELLED, error="The source was paused.", complete=False
            )
            task_succeed(lease=lease)
            return run.state
        run.state = SyncRun.State.LISTING
        run.started_at = run.started_at or timezone.now()
        run.save(update_fields=["state", "started_at"])
    try:
        kind = kind_for(run.source)
    except (SecretsUnavailable, SourceError) as exc:
        with fenced(lease):
            _close(run, tally, SyncRun.State.FAILED, error=str(exc), complete=False)
            task_succeed(lease=lease)
        return run.state
    try:
        result = _sync(run=run, kind=kind, lease=lease, tally=tally)
    finally:
        kind.close()
    with fenced(lease):
        _close(
            run, tally, result.state, error=result.error, note=result.note, complete=result.complete
        )
        task_succeed(lease=lease)
    logger.info(
        "sync finished: %s",
        result.state,
        extra={"sync_run": run.pk, "source": run.source_id, **tally.counts},
    )
    return result.state


def _sync(*, run: SyncRun, kind: Kind, lease: Lease, tally: Tally) -> Result:
    """The run's work, and how it ended."""
    source = run.source
    manifest = {row.path: row for row in SourceItem.objects.filter(source=source)}
    previous = {
        path: {**row.state, "version": row.version}
        for path, row in manifest.items()
        if row.gone_at is None and row.version
    }
    started = time.monotonic()
    items, present, incomplete, error = _listing(kind, previous, tally, run, lease)
    tally.seconds["listing"] = time.monotonic() - started

    work: list[Item] = []
    seen_unchanged: list[int] = []
    state_changed: list[SourceItem] = []
    for item in items:
        row = manifest.get(item.path)
        if (
            row is not None
            and row.gone_at is None
            and row.document_id is not None
            and row.version == item.version
        ):
            # Unchanged, or submitted by an earlier attempt of this very run.
            done_here = row.last_seen_run_id == run.pk and row.last_outcome
            tally.counts[row.last_outcome if done_here else UNCHANGED] += 1
            if not done_here:
                seen_unchanged.append(row.pk)
            if row.state != dict(item.state):
                row.state = dict(item.state)
                state_changed.append(row)
        else:
            work.append(item)
    tally.to_process = len(work)
    with fenced(lease):
        # Seen by this run: a deletion a person confirms later skips what a later run saw. One
        # plain UPDATE per batch: a no-op sync of 10,000 items spent 5 s in bulk_update's CASE.
        for start in range(0, len(seen_unchanged), SEEN_BATCH):
            SourceItem.objects.filter(pk__in=seen_unchanged[start : start + SEEN_BATCH]).update(
                last_seen_run=run, last_outcome=UNCHANGED
            )
        SourceItem.objects.bulk_update(state_changed, ["state"], batch_size=1000)
        run.state = SyncRun.State.SYNCING
        _save(run, tally)

    specs = field_specs(source.kb)
    last_saved = time.monotonic()
    for item in work:
        try:
            outcome = _item_take(run, kind, item, specs, lease, tally)
        except SourceUnavailable as exc:
            return Result(
                SyncRun.State.FAILED,
                error=f"The source stopped answering part-way: {exc}",
                note="Nothing was deleted: the run stopped before it finished.",
                complete=not incomplete,
            )
        tally.counts[outcome.kind] += 1
        faults.sync_after_item(tally.processed + 1)
        if outcome.reason:
            tally.problem(item.path, outcome.kind, outcome.reason)
        tally.processed += 1
        if time.monotonic() - last_saved >= PROGRESS_SECONDS:
            with fenced(lease):
                _save(run, tally)
            last_saved = time.monotonic()
            if not Source.objects.filter(pk=source.pk, enabled=True).exists():
                return Result(
                    SyncRun.State.CANCELLED,
                    error="The source was paused part-way.",
                    note="Nothing was deleted: the run stopped before it finished.",
                    complete=not incomplete,
                )

    faults.sync_before_deletions()
    note = _deletions(
        run=run,
        manifest=manifest,
        present=present,
        listed=len(items),
        incomplete=incomplete,
        lease=lease,
        tally=tally,
    )
    complete = not incomplete
    if error:
        return Result(SyncRun.State.FAILED, error=error, note=note, complete=complete)
    if run.state == SyncRun.State.AWAITING_CONFIRMATION:
        return Result(SyncRun.State.AWAITING_CONFIRMATION, note=note, complete=complete)
    return Result(SyncRun.State.SUCCEEDED, note=note, complete=complete)


def _listing(
    kind: Kind,
    previous: dict[str, dict[str, object]],
    tally: Tally,
    run: SyncRun,
    lease: Lease,
) -> tuple[list[Item], set[str], str, str]:
    """Every item listed, every path present (items and problems), why the listing may be
    incomplete ("" when it is complete) and the listing's error ("" when none)."""
    items: list[Item] = []
    present: set[str] = set()
    incomplete = error = ""
    last_saved = time.monotonic()
    try:
        for entry in kind.listing(previous):
            if isinstance(entry, Problem):
                if entry.path:
                    present.add(entry.path)
                tally.counts[SKIPPED] += 1
                tally.problem(entry.path, SKIPPED, entry.reason)
                if entry.incomplete and not incomplete:
                    incomplete = entry.reason
                continue
            if len(document_key(run.source, entry.path)) > KEY_MAX:
                present.add(entry.path)
                tally.counts[SKIPPED] += 1
                tally.problem(entry.path, SKIPPED, f"the path is longer than {KEY_MAX} characters")
                continue
            items.append(entry)
            present.add(entry.path)
            tally.listed += 1
            if time.monotonic() - last_saved >= PROGRESS_SECONDS:
                with fenced(lease):
                    _save(run, tally)
                last_saved = time.monotonic()
    except ListingFailed as exc:
        error = f"The listing failed: {exc}"
        incomplete = str(exc)
    return items, present, incomplete, error


def _item_take(
    run: SyncRun, kind: Kind, item: Item, specs: dict[str, Any], lease: Lease, tally: Tally
) -> Outcome:
    """Fetch, check and store one item, then submit it (fenced). SourceUnavailable stops the
    run; any other trouble with the item is its outcome."""
    started = time.monotonic()
    metadata_found = dict(item.metadata)
    try:
        if item.content is not None:
            data = item.content
        else:
            fetched = kind.fetch(item)
            data = fetched.data
            metadata_found.update(fetched.metadata)
        accepted = item_accept(item, data)
    except ItemProblem as exc:
        return Outcome(FAILED, str(exc))
    except UploadRejected as exc:
        if exc.status == 503:
            raise SourceUnavailable(str(exc)) from None
        return Outcome(FAILED, str(exc))
    finally:
        tally.seconds["fetching"] += time.monotonic() - started
    metadata, notes = mapped_metadata(metadata_found, run.source.metadata_map, specs)
    started = time.monotonic()
    try:
        with fenced(lease):
            outcome = item_submit(run=run, item=item, accepted=accepted, metadata=metadata)
    finally:
        tally.seconds["submitting"] += time.monotonic() - started
    if notes and not outcome.reason:
        return Outcome(outcome.kind, "metadata left out: " + "; ".join(notes))
    return outcome


def _deletions(
    *,
    run: SyncRun,
    manifest: dict[str, SourceItem],
    present: set[str],
    listed: int,
    incomplete: str,
    lease: Lease,
    tally: Tally,
) -> str:
    """Delete the documents of items no longer at the source, or hold them for a person, or
    delete nothing; returns the note saying which and why."""
    gone = [
        row
        for path, row in manifest.items()
        if path not in present and row.gone_at is None and row.document_id is not None
    ]
    if not gone:
        return ""
    if incomplete:
        return (
            f"Nothing was deleted ({len(gone)} items not seen): the listing was incomplete: "
            f"{incomplete}"
        )
    live = sum(1 for row in manifest.values() if row.gone_at is None and row.document_id)
    share = 100 * len(gone) / live
    hold = ""
    if listed == 0:
        hold = f"the listing was empty where the last run saw {live} items"
    elif (
        share > run.source.delete_threshold_percent
        and len(gone) >= settings.SOURCES_DELETE_HOLD_MIN
    ):
        hold = (
            f"{len(gone)} of {live} documents ({share:.0f} %) would be deleted, over the "
            f"source's threshold of {run.source.delete_threshold_percent} %"
        )
    if hold:
        with fenced(lease):
            # An older run still waiting holds the same items; this run's list replaces it.
            SyncRun.objects.filter(
                source=run.source, state=SyncRun.State.AWAITING_CONFIRMATION
            ).exclude(pk=run.pk).update(
                state=SyncRun.State.CANCELLED,
                deletion_note=f"Superseded by sync run {run.pk}, which holds its deletions.",
                finished_at=timezone.now(),
            )
            SourceItem.objects.filter(source=run.source, pending_delete_run__isnull=False).update(
                pending_delete_run=None
            )
            SourceItem.objects.filter(pk__in=[row.pk for row in gone]).update(
                pending_delete_run=run
            )
            run.state = SyncRun.State.AWAITING_CONFIRMATION
            run.deletions_planned = len(gone)
            run.save(update_fields=["state", "deletions_planned"])
        return f"Deletions wait for confirmation: {hold}."
    for row in gone:
        with fenced(lease):
            if item_delete(run=run, item_id=row.pk):
                tally.counts[DELETED] += 1
    return ""


def _save(run: SyncRun, tally: Tally) -> None:
    run.listed = tally.listed
    run.to_process = tally.to_process
    run.processed = tally.processed
    for name in (NEW, CHANGED, RESTORED, UNCHANGED, SKIPPED, FAILED, DELETED):
        setattr(run, name, tally.counts[name])
    run.problems = tally.problems
    run.seconds_listing = tally.seconds["listing"]
    run.seconds_fetching = tally.seconds["fetching"]
    run.seconds_submitting = tally.seconds["submitting"]
    run.save()


def _close(
    run: SyncRun, tally: Tally, state: str, *, error: str = "", note: str = "", complete: bool
) -> None:
    """Caller holds the run's lease (fenced)."""
    _save(run, tally)
    run.state = state
    run.error = error[:4000]
    run.deletion_note = note
    run.listing_complete = complete
    run.finished_at = None if state == SyncRun.State.AWAITING_CONFIRMATION else timezone.now()
    run.save()
    Source.objects.filter(pk=run.source_id).update(next_sync_at=_next_sync(run))


def _next_sync(run: SyncRun) -> datetime | None:
    minutes = run.source.sync_every_minutes
    return timezone.now() + timedelta(minutes=minutes) if minutes else None
