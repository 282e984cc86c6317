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
`SyncRun`; items it already submitted are found at their new version, so nothing is submitted
twice and no deletion is missed. Its counts are what all its attempts did: each item's outcome
is written on its manifest row with the write it counts (`SourceItem.last_outcome`), and the
counts are read from there; the time split and problems carry over from attempt to attempt.
Progress is written at most once a second (`PROGRESS_SECONDS`), each write fenced.

Canon's own file store failing is not the source's fault: the run waits for it with its task
(`kb.storage.StorageUnavailable`, as a build does) and goes on by itself."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext_noop

from ingestion.task_outcomes import task_succeed
from kb.failures import reason_record
from kb.metadata import field_specs
from kb.models import Document
from kb.storage import StorageUnavailable
from kb.uploads import UploadRejected
from sources.deletion_notes import (
    HELD_EMPTY,
    HELD_OVER_THRESHOLD,
    INCOMPLETE,
    STOPPED,
    SUPERSEDED,
    note_fields,
    note_set,
)
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
    OUTCOMES,
    RESTORED,
    SKIPPED,
    UNCHANGED,
    UNSUPPORTED,
    Outcome,
    document_key,
    item_accept,
    item_delete,
    item_held_back,
    item_outcome_record,
    item_submit,
)
from textkit.extract.registry import EXTENSIONS
from textkit.reasons import Reason, reason
from work import faults
from work.leases import Lease, fenced
from work.models import IngestionTask

logger = logging.getLogger(__name__)

PROGRESS_SECONDS = 1.0
PROBLEMS_KEPT = 500
KEY_MAX = 255
SEEN_BATCH = 5000
ERROR_MAX_CHARS = 4000
PROBLEM_MAX_CHARS = 500

# Why a run failed, stopped or waits (`SyncRun.error`, its code and values beside it). `detail`:
# what the source's kind said (its declared reason, worded again on the page; else its English)
# or the store's own words (an exception's text), kept as they are.
LISTING_FAILED = reason("sync.listing_failed", gettext_noop("The listing failed: %(detail)s"))
PAUSED = reason("sync.paused", gettext_noop("The source was paused."))
PAUSED_PART_WAY = reason("sync.paused_part_way", gettext_noop("The source was paused part-way."))
SOURCE_STOPPED = reason(
    "sync.source_stopped", gettext_noop("The source stopped answering part-way: %(detail)s")
)
WAITING_FOR_STORE = reason(
    "sync.waiting_for_store",
    gettext_noop(
        "Waiting for Canon's file store, which cannot be reached (%(detail)s); the run goes on "
        "by itself when it answers. Nothing was deleted."
    ),
)
# Why an item was skipped (the run's problems); `notes`: what `mapped_metadata` said, in English.
PATH_TOO_LONG = reason(
    "sync.path_too_long", gettext_noop("the path is longer than %(limit)s characters")
)
NOT_SUPPORTED = reason("sync.not_supported", gettext_noop("skipped: not a supported kind of file"))
METADATA_LEFT_OUT = reason("sync.metadata_left_out", gettext_noop("metadata left out: %(notes)s"))

# Why, as a run or a problem keeps it: plain English, a declared reason, or an exception (its
# English, and its reason when it carries one: `SourceError`, `UploadRejected`).
Why = str | Reason | Exception


def why_fields(why: Why, *, max_chars: int) -> tuple[str, str, dict[str, Any], str]:
    """`why` as a row keeps it: its English (bounded), its reason's code and values ("" and {}
    for none) and the file its English names first ("" for none)."""
    if isinstance(why, Reason):
        declared: Reason | None = why
    else:
        declared = getattr(why, "reason", None) if isinstance(why, Exception) else None
    code, values = reason_record(
        declared if isinstance(declared, Reason) else None, max_chars=max_chars
    )
    file_name = str(getattr(why, "file_name", "") or "") if isinstance(why, Exception) else ""
    return str(why)[:max_chars], code, values, file_name


@dataclass
class Tally:
    """A run's figures as it goes, written to the SyncRun row by `_save`. Item counts are read
    from the manifest there; what the tally keeps is what no item row says: problems of the
    listing itself, how far the run got, the time split and the problems' words, all carried
    over from the run's earlier attempts (`resumed`)."""

    listed: int = 0
    to_process: int = 0
    processed: int = 0
    listing_skipped: int = 0  # this attempt's listing problems (no item row of their own)
    carried_listing_skipped: int = 0  # the most an earlier attempt's listing had
    problems: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(
        default_factory=lambda: {"listing": 0.0, "fetching": 0.0, "submitting": 0.0}
    )

    @classmethod
    def resumed(cls, run: SyncRun) -> Tally:
        """The tally of a run's earlier attempts (empty for a new run)."""
        done = _outcome_counts(run)
        return cls(
            listed=run.listed,
            to_process=run.to_process,
            processed=run.processed,
            carried_listing_skipped=max(0, run.skipped - done[SKIPPED]),
            problems=list(run.problems or []),
            seconds={
                "listing": run.seconds_listing,
                "fetching": run.seconds_fetching,
                "submitting": run.seconds_submitting,
            },
        )

    def problem(self, path: str, outcome: str, why: Why) -> None:
        """Say what happened to `path`: in English, and for a declared reason its code and
        values (and the file its English names first) beside it; a path said before (by an
        earlier attempt) is said again in the latest words, not twice."""
        english, code, values, file_name = why_fields(why, max_chars=PROBLEM_MAX_CHARS)
        entry: dict[str, Any] = {"path": path, "outcome": outcome, "reason": english}
        if code:
            entry.update(code=code, params=values)
            if file_name:
                entry["file"] = file_name
        for index, old in enumerate(self.problems):
            if old["path"] == path and (path or old["reason"] == entry["reason"]):
                self.problems[index] = entry
                return
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(entry)


def _outcome_counts(run: SyncRun) -> dict[str, int]:
    """How many items the run has taken, by outcome: one per item, whichever attempt took it."""
    counts = dict.fromkeys(OUTCOMES, 0)
    rows = (
        SourceItem.objects.filter(last_seen_run=run)
        .values_list("last_outcome")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for outcome, number in rows:
        if outcome in counts:
            counts[outcome] = number
    return counts


@dataclass(frozen=True)
class Result:
    state: str
    error: Why = ""
    note: Reason | None = None  # about deletions: why none, or why they wait
    complete: bool = True  # the listing was complete


def sync_execute(*, task: IngestionTask, lease: Lease) -> str:
    """Run (or resume) the sync run of `task`; returns its final state."""
    run = SyncRun.objects.select_related("source__kb").get(task_id=task.pk)
    tally = Tally.resumed(run)
    with fenced(lease):
        if not run.source.enabled:
            _close(run, tally, SyncRun.State.CANCELLED, error=PAUSED(), complete=False)
            task_succeed(lease=lease)
            return run.state
        run.state = SyncRun.State.LISTING
        run.started_at = run.started_at or timezone.now()
        # an earlier attempt's wait for the file store is over
        run.error, run.error_reason, run.error_params = "", "", {}
        run.save(update_fields=["state", "started_at", "error", "error_reason", "error_params"])
    try:
        kind = kind_for(run.source)
    except (SecretsUnavailable, SourceError) as exc:
        with fenced(lease):
            _close(run, tally, SyncRun.State.FAILED, error=exc, complete=False)
            task_succeed(lease=lease)
        return run.state
    try:
        result = _sync(run=run, kind=kind, lease=lease, tally=tally)
    except StorageUnavailable as exc:
        with fenced(lease):
            _save(run, tally)
            _error_set(run, WAITING_FOR_STORE(detail=str(exc)))
            run.save(update_fields=["error", "error_reason", "error_params"])
        raise  # the task waits for the store without spending an attempt (pipeline.run)
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
        extra={"sync_run": run.pk, "source": run.source_id, **_outcome_counts(run)},
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
    tally.seconds["listing"] += time.monotonic() - started

    work: list[Item] = []
    seen: dict[str, list[int]] = {UNCHANGED: [], UNSUPPORTED: []}
    state_changed: list[SourceItem] = []
    done_before = 0  # taken by an earlier attempt of this run
    for item in items:
        row = manifest.get(item.path)
        if row is None or row.gone_at is not None or row.version != item.version:
            work.append(item)
        elif row.last_seen_run_id == run.pk and row.last_outcome not in (UNCHANGED, UNSUPPORTED):
            done_before += 1  # submitted by an earlier attempt: counted by its row
        elif row.document_id is not None:
            seen[UNCHANGED].append(row.pk)
        elif row.last_outcome == UNSUPPORTED:
            seen[UNSUPPORTED].append(row.pk)  # said when first met; counted, not said again
        else:
            work.append(item)
            continue
        if row is not None and row.version == item.version and row.state != dict(item.state):
            row.state = dict(item.state)
            state_changed.append(row)
    tally.to_process = done_before + len(work)
    tally.processed = done_before
    with fenced(lease):
        # Seen by this run: a deletion a person confirms later skips what a later run saw. One
        # plain UPDATE per batch: a no-op sync of 10,000 items spent 5 s in bulk_update's CASE.
        for kind_seen, ids in seen.items():
            for start in range(0, len(ids), SEEN_BATCH):
                SourceItem.objects.filter(pk__in=ids[start : start + SEEN_BATCH]).update(
                    last_seen_run=run, last_outcome=kind_seen
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
                error=SOURCE_STOPPED(detail=exc.why),
                note=STOPPED(),
                complete=not incomplete,
            )
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
                    error=PAUSED_PART_WAY(),
                    note=STOPPED(),
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
    if error is not None:
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
) -> tuple[list[Item], set[str], str | Reason, Reason | None]:
    """Every item listed, every path present (items and problems), why the listing may be
    incomplete ("" when it is complete: the kind's reason, or its English) and the listing's
    error (None when none)."""
    items: list[Item] = []
    present: set[str] = set()
    incomplete: str | Reason = ""
    error: Reason | None = None
    last_saved = time.monotonic()
    listed_before = tally.listed  # by an earlier attempt of the run
    tally.listed = tally.listing_skipped = 0
    try:
        for entry in kind.listing(previous):
            if isinstance(entry, Problem):
                if entry.path:
                    present.add(entry.path)
                tally.listing_skipped += 1
                tally.problem(entry.path, SKIPPED, entry.declared or entry.reason)
                if entry.incomplete and not incomplete:
                    incomplete = entry.declared or entry.reason
                continue
            if len(document_key(run.source, entry.path)) > KEY_MAX:
                present.add(entry.path)
                tally.listing_skipped += 1
                tally.problem(entry.path, SKIPPED, PATH_TOO_LONG(limit=KEY_MAX))
                continue
            items.append(entry)
            present.add(entry.path)
            tally.listed += 1
            if time.monotonic() - last_saved >= PROGRESS_SECONDS:
                with fenced(lease):
                    _save(run, tally)
                last_saved = time.monotonic()
    except ListingFailed as exc:
        error = LISTING_FAILED(detail=exc.why)
        incomplete = exc.why
        tally.listed = max(tally.listed, listed_before)
    return items, present, incomplete, error


def _supported(item: Item) -> bool:
    """Whether the item's name is of a kind Canon reads (its bytes are checked later)."""
    name = item.file_name.lower()
    return any(name.endswith(suffix) for suffix in EXTENSIONS)


def _item_take(
    run: SyncRun, kind: Kind, item: Item, specs: dict[str, Any], lease: Lease, tally: Tally
) -> Outcome:
    """Fetch, check and store one item, then submit it (fenced); or record why not. Nothing is
    fetched for an item of a kind Canon does not read, or whose document a person deleted.
    SourceUnavailable stops the run and StorageUnavailable makes it wait; any other trouble
    with the item is its outcome."""
    if not _supported(item):
        with fenced(lease):
            said = SourceItem.objects.filter(
                source=run.source, path=item.path, last_outcome=UNSUPPORTED
            ).exists()
            outcome = Outcome(UNSUPPORTED, "" if said else NOT_SUPPORTED())
            item_outcome_record(run=run, item=item, outcome=outcome)
        return outcome
    with fenced(lease):
        held_back = item_held_back(run=run, item=item)
    if held_back is not None:
        return held_back
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
    except (ItemProblem, UploadRejected) as exc:
        if isinstance(exc, UploadRejected) and exc.status == 503:
            # Canon's own store, not the source: wait for it as a build does.
            raise StorageUnavailable(str(exc)) from None
        outcome = Outcome(FAILED, exc)
        with fenced(lease):
            item_outcome_record(run=run, item=item, outcome=outcome)
        return outcome
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
        return Outcome(outcome.kind, METADATA_LEFT_OUT(notes="; ".join(notes)))
    return outcome


def _deletions(
    *,
    run: SyncRun,
    manifest: dict[str, SourceItem],
    present: set[str],
    listed: int,
    incomplete: str | Reason,
    lease: Lease,
    tally: Tally,
) -> Reason | None:
    """Delete the documents of items no longer at the source, or hold them for a person, or
    delete nothing; returns the note saying which and why. An item whose document a person
    deleted already is only marked gone (its document stays the person's to restore), and is
    neither a deletion nor counted against the threshold."""
    deleted_by_people = set(
        Document.objects.filter(source_item__source=run.source, deleted_at__isnull=False)
        .exclude(source_item__gone_at__isnull=False)
        .values_list("pk", flat=True)
    )
    tracked = [row for row in manifest.values() if row.gone_at is None and row.document_id]
    gone = [row for row in tracked if row.path not in present]
    if not gone:
        return None
    if incomplete:
        return INCOMPLETE(items=len(gone), detail=incomplete)
    for row in gone:
        if row.document_id in deleted_by_people:
            with fenced(lease):
                outcome = item_delete(run=run, item_id=row.pk)
            if outcome is not None and outcome.reason:
                tally.problem(row.path, outcome.kind, outcome.reason)
    gone = [row for row in gone if row.document_id not in deleted_by_people]
    if not gone:
        return None
    live = sum(1 for row in tracked if row.document_id not in deleted_by_people)
    share = 100 * len(gone) / live
    hold: Reason | None = None
    if listed == 0:
        hold = HELD_EMPTY(items=live)
    elif (
        share > run.source.delete_threshold_percent
        and len(gone) >= settings.SOURCES_DELETE_HOLD_MIN
    ):
        hold = HELD_OVER_THRESHOLD(
            gone=len(gone),
            live=live,
            share=int(f"{share:.0f}"),  # rounded as the note always said it
            threshold=run.source.delete_threshold_percent,
        )
    if hold is not None:
        with fenced(lease):
            # An older run still waiting holds the same items; this run's list replaces it.
            SyncRun.objects.filter(
                source=run.source, state=SyncRun.State.AWAITING_CONFIRMATION
            ).exclude(pk=run.pk).update(
                state=SyncRun.State.CANCELLED,
                **note_fields(SUPERSEDED(run=str(run.pk))),
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
        return hold
    for row in gone:
        with fenced(lease):
            outcome = item_delete(run=run, item_id=row.pk)
        if outcome is not None and outcome.reason:  # a person deleted it meanwhile
            tally.problem(row.path, outcome.kind, outcome.reason)
    return None


def _save(run: SyncRun, tally: Tally) -> None:
    """Write the run's figures: item counts from the manifest (every attempt's), the rest from
    the tally. Caller holds the run's lease (fenced)."""
    counts = _outcome_counts(run)
    counts[SKIPPED] += max(tally.listing_skipped, tally.carried_listing_skipped)
    for name in OUTCOMES:
        setattr(run, name, counts[name])
    # At least what the manifest says was taken: an attempt whose listing failed saw none of
    # what an earlier attempt took.
    taken = sum(counts[name] for name in (NEW, CHANGED, RESTORED, FAILED))
    run.processed = max(tally.processed, taken)
    run.to_process = max(tally.to_process, run.processed)
    run.listed = tally.listed
    run.problems = tally.problems
    run.seconds_listing = tally.seconds["listing"]
    run.seconds_fetching = tally.seconds["fetching"]
    run.seconds_submitting = tally.seconds["submitting"]
    run.save()


def _error_set(run: SyncRun, why: Why) -> None:
    """Set why the run failed, stopped or waits: its English, and a declared reason's code and
    values beside it."""
    run.error, run.error_reason, run.error_params, _ = why_fields(why, max_chars=ERROR_MAX_CHARS)


def _close(
    run: SyncRun,
    tally: Tally,
    state: str,
    *,
    error: Why = "",
    note: Reason | None = None,
    complete: bool,
) -> None:
    """Caller holds the run's lease (fenced)."""
    _save(run, tally)
    run.state = state
    _error_set(run, error)
    note_set(run, note)
    run.listing_complete = complete
    run.finished_at = None if state == SyncRun.State.AWAITING_CONFIRMATION else timezone.now()
    run.save()
    Source.objects.filter(pk=run.source_id).update(next_sync_at=_next_sync(run))


def _next_sync(run: SyncRun) -> datetime | None:
    minutes = run.source.sync_every_minutes
    return timezone.now() + timedelta(minutes=minutes) if minutes else None
