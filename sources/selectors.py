"""Reads of sources: a knowledge base's sources with their latest run, a run's progress and where
its time went, the deletions runs hold for a person (the work queue of the home pages and the
dashboard) and the answer a person gave, and the source an item-backed document came from."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_noop

from kb.audit_kinds import SYNC_ANSWERS
from kb.models import Document
from sources.models import Source, SourceItem, SyncRun
from work.models import AuditEvent


def sources_of_kb(kb_id: int) -> QuerySet[Source]:
    """The knowledge base's sources, each annotated with its latest run's id and state."""
    latest = SyncRun.objects.filter(source=OuterRef("pk")).order_by("-created_at", "-pk")
    return (
        Source.objects.filter(kb_id=kb_id)
        .annotate(
            last_run_id=Subquery(latest.values("pk")[:1]),
            last_run_state=Subquery(latest.values("state")[:1]),
            last_run_finished=Subquery(latest.values("finished_at")[:1]),
        )
        .order_by("name")
    )


def run_progress(run: SyncRun) -> dict[str, Any]:
    """What the admin's progress bar and the API show of a run: its state, counts, and how far
    it got (listing counts up with no known total; syncing is processed of to_process)."""
    percent: int | None
    if run.state == SyncRun.State.SYNCING and run.to_process:
        percent = min(100, round(100 * run.processed / run.to_process))
    elif run.state in (SyncRun.State.QUEUED, SyncRun.State.LISTING):
        percent = 0
    elif run.state == SyncRun.State.SYNCING:
        percent = 100
    else:
        percent = 100
    return {
        "id": run.pk,
        "state": run.state,
        "state_label": run.get_state_display(),
        "percent": percent,
        "listed": run.listed,
        "to_process": run.to_process,
        "processed": run.processed,
        "counts": {
            "new": run.new,
            "changed": run.changed,
            "unchanged": run.unchanged,
            "restored": run.restored,
            "deleted": run.deleted,
            "failed": run.failed,
            "skipped": run.skipped,
            "unsupported": run.unsupported,
        },
        "deletions_planned": run.deletions_planned,
        "deletion_note": run.deletion_note,
        "listing_complete": run.listing_complete,
        "error": run.error,
        "trigger": run.trigger,
        "created_at": run.created_at.isoformat() if run.created_at else None,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "seconds": {
            "listing": round(run.seconds_listing, 3),
            "fetching": round(run.seconds_fetching, 3),
            "submitting": round(run.seconds_submitting, 3),
        },
    }


@dataclass(frozen=True)
class DocumentSource:
    source: Source
    item: SourceItem


def document_source(document: Document) -> DocumentSource | None:
    """The source and manifest row behind `document`, or None for an uploaded one."""
    item = SourceItem.objects.select_related("source").filter(document=document).first()
    return DocumentSource(item.source, item) if item is not None else None


def sync_answer(run: SyncRun) -> AuditEvent | None:
    """The person's answer to the deletions `run` held (who, when, what, why: the audit event
    `services.runs` wrote), or None."""
    return (
        AuditEvent.objects.filter(kind__in=SYNC_ANSWERS, subject_type="sync_run", subject_id=run.pk)
        .select_related("actor")
        .order_by("-id")
        .first()
    )


@dataclass(frozen=True)
class TimeSpent:
    """One part of a run's time, in seconds; `what` says what it covers. `label` and `what` are
    English, marked for the admin to translate (its run page)."""

    key: str
    label: str
    seconds: float
    what: str


def run_time_split(run: SyncRun) -> tuple[list[TimeSpent], float | None]:
    """Where a run's time went, from its request to its end (or now, while it is open): the
    parts and their total, which the parts add up to. Listing, fetching and submitting are what
    the run measured itself; the rest is read from its timestamps: waiting for a worker (request
    to first start), the run's other work (comparing with the manifest, deletions, progress
    saves, and an attempt cut short: a killed worker's time after its last save and its lease
    running out) and, for held deletions, the wait for a person's answer. The total is None
    before the run starts (nothing measured, no start)."""
    measured = run.seconds_listing + run.seconds_fetching + run.seconds_submitting
    started = run.started_at or (run.created_at if measured else None)
    if started is None:
        return [], None
    now = timezone.now()
    task_end = run.task.finished_at if run.task is not None else None
    if run.state == SyncRun.State.AWAITING_CONFIRMATION:
        work_end = task_end or now
        end = now
    elif run.confirmed_at is not None:
        work_end = task_end or run.confirmed_at
        end = run.finished_at or run.confirmed_at
    else:
        work_end = end = run.finished_at or now
    work_end = min(max(work_end, started), end)
    working = (work_end - started).total_seconds()
    parts = [
        TimeSpent(
            "waiting",
            gettext_noop("waiting for a worker"),
            max(0.0, (started - run.created_at).total_seconds()),
            gettext_noop(
                "from the request until a worker took the run (other work queued before it)"
            ),
        ),
        TimeSpent(
            "listing",
            gettext_noop("listing"),
            run.seconds_listing,
            gettext_noop("reading the source's list"),
        ),
        TimeSpent(
            "fetching",
            gettext_noop("fetching"),
            run.seconds_fetching,
            gettext_noop("reading new and changed items"),
        ),
        TimeSpent(
            "submitting",
            gettext_noop("submitting"),
            run.seconds_submitting,
            gettext_noop("checking and storing each item as a revision"),
        ),
        TimeSpent(
            "other",
            gettext_noop("the rest of the run"),
            max(0.0, working - measured),
            gettext_noop(
                "comparing with what the source held last time, deleting, saving progress, and "
                "any attempt cut short (a stopped worker's lease running out)"
            ),
        ),
    ]
    held = run.confirmed_at is not None or run.state == SyncRun.State.AWAITING_CONFIRMATION
    if held and end > work_end:
        parts.append(
            TimeSpent(
                "answer",
                gettext_noop("waiting for a person"),
                (end - work_end).total_seconds(),
                gettext_noop("the held deletions waiting to be confirmed or kept"),
            )
        )
    return parts, sum(p.seconds for p in parts)


@dataclass(frozen=True)
class HeldDeletions:
    """The deletions sync runs of one knowledge base hold for a person: how many runs, how
    many documents they would delete, and since when the oldest waits."""

    runs: int
    documents: int
    since: datetime | None


def _waiting_since() -> Coalesce:
    # A held run's work ended when its task did; its own finished_at waits for the answer.
    return Coalesce("task__finished_at", "started_at", "created_at")


def held_deletions(*, kb_ids: Iterable[int]) -> dict[int, HeldDeletions]:
    """Per knowledge base of `kb_ids` with any, the deletions its runs hold (`HeldDeletions`).
    Counts name no document. One query."""
    rows = (
        SyncRun.objects.filter(
            state=SyncRun.State.AWAITING_CONFIRMATION, source__kb_id__in=list(kb_ids)
        )
        .values("source__kb_id")
        .annotate(
            runs=Count("id", distinct=True),
            documents=Count("pending_deletes", distinct=True),
            since=Min(_waiting_since()),
        )
        .order_by("source__kb_id")
    )
    return {
        row["source__kb_id"]: HeldDeletions(row["runs"], row["documents"], row["since"])
        for row in rows
    }


def runs_holding_deletions(
    *, tenant_ids: list[int] | None, waiting_before: datetime, limit: int = 50
) -> list[SyncRun]:
    """Runs that have held deletions for a person since before `waiting_before`, the oldest
    first, each with `waiting_since` and `held` (documents) annotated; `tenant_ids` None: every
    tenant's."""
    runs = SyncRun.objects.filter(state=SyncRun.State.AWAITING_CONFIRMATION)
    if tenant_ids is not None:
        runs = runs.filter(source__kb__tenant_id__in=tenant_ids)
    return list(
        runs.annotate(waiting_since=_waiting_since(), held=Count("pending_deletes"))
        .filter(waiting_since__lt=waiting_before)
        .select_related("source__kb")
        .order_by("waiting_since", "pk")[:limit]
    )
