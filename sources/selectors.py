"""Reads of sources: a knowledge base's sources with their latest run, a run's progress, and the
source an item-backed document came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from kb.models import Document
from sources.models import Source, SourceItem, SyncRun


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
