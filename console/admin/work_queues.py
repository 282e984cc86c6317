"""The work queues someone has to act on, gathered across the floors for the admin's pages:
documents awaiting approval and documents that failed (`kb.document_states`), and deletions that
sync runs hold for a person's confirmation (`sources.selectors.held_deletions`; `kb` may not
know sources, the console knows both).

Counts cover every document of a knowledge base, naming none, as the home's counts do; the
held deletions are offered only to users who may view sources, and link to the runs that hold
them, where those who may answer confirm or keep them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone

from console.admin.document_filters import KB_PARAMETER, DocumentStatusFilter
from kb import document_states
from kb.models import KnowledgeBase
from sources.models import Source, SyncRun
from sources.selectors import HeldDeletions, held_deletions, runs_holding_deletions

# Held deletions waiting longer than this are listed on the consistency dashboard too.
DASHBOARD_AFTER = timedelta(days=1)


@dataclass(frozen=True)
class HeldTile:
    """The home's tile of deletions held for confirmation (`HeldDeletions` with its link)."""

    documents: int
    runs: int
    since: Any
    url: str


def held_runs_url(kb_id: int) -> str:
    """The list of the knowledge base's sync runs holding deletions."""
    return (
        f"{reverse('admin:sources_syncrun_changelist')}?source__kb__id__exact={kb_id}"
        f"&state__exact={SyncRun.State.AWAITING_CONFIRMATION.value}"
    )


def may_see_held(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("sources.view_source"))


def held_tile(request: HttpRequest, kb: KnowledgeBase) -> HeldTile | None:
    """The tile for `kb`'s home: None for a user who may not view sources, or a knowledge base
    with no source (nothing could ever wait there). Two queries at most."""
    if not may_see_held(request) or not Source.objects.filter(kb=kb).exists():
        return None
    held = held_deletions(kb_ids=[kb.pk]).get(kb.pk) or HeldDeletions(0, 0, None)
    return HeldTile(held.documents, held.runs, held.since, held_runs_url(kb.pk))


def landing_queues(request: HttpRequest, kbs: list[KnowledgeBase]) -> list[dict[str, Any]]:
    """The front page's list of knowledge bases, each with its work queues and their links
    ("kb"; "awaiting_approval", "failed": counts; "held": HeldDeletions, or None when the user
    may not view sources). Two queries."""
    ids = [kb.pk for kb in kbs]
    documents = document_states.work_queue_counts_by_kb(ids)
    held = held_deletions(kb_ids=ids) if may_see_held(request) else None
    changelist = reverse("admin:kb_document_changelist")
    rows: list[dict[str, Any]] = []
    for kb in kbs:
        listed = f"{changelist}?{KB_PARAMETER}={kb.pk}&{DocumentStatusFilter.parameter_name}="
        rows.append(
            {
                "kb": kb,
                "awaiting_approval": documents[kb.pk][document_states.AWAITING_APPROVAL],
                "awaiting_url": listed + document_states.AWAITING_APPROVAL,
                "failed": documents[kb.pk][document_states.FAILED],
                "failed_url": listed + document_states.FAILED,
                "held": None if held is None else held.get(kb.pk, HeldDeletions(0, 0, None)),
                "held_url": held_runs_url(kb.pk),
            }
        )
    return rows


def long_held_runs(*, tenant_ids: list[int] | None) -> list[SyncRun]:
    """The runs whose held deletions have waited longer than DASHBOARD_AFTER, oldest first
    (each annotated with `waiting_since` and `held`), for the consistency dashboard."""
    return runs_holding_deletions(
        tenant_ids=tenant_ids, waiting_before=timezone.now() - DASHBOARD_AFTER
    )
