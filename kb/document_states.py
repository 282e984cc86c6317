"""Reads: which state a document is in, as SQL (the document list's status filter, the work
queues and their counts), and until when a deleted document can be restored.

The states are those the status line names (`kb.selectors.documents.document_status`), over the
knowledge base's active index version — the one search serves from:

- *served*: a Publication points at a build of the document in the active version and the
  document is not deleted (what `retrieval.search` serves, before the reader's groups);
- *building*, *awaiting approval*, *failed*: the build of the desired revision in the active
  version is pending or building, ready (waiting for an index admin), or failed;
- *deleted*; *not served*: not deleted and nothing served.

A document may be in more than one (served r1 while r2 awaits approval).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import formats, timezone
from django.utils.translation import gettext_lazy

from kb.access import readable_documents_q, reader_of_user
from kb.models import Build, Document, KnowledgeBase, Publication
from work.models import IngestionTask

SERVED = "served"
BUILDING = "building"
AWAITING_APPROVAL = "awaiting_approval"
FAILED = "failed"
DELETED = "deleted"
NOT_SERVED = "not_served"

STATE_LABELS = {
    SERVED: gettext_lazy("Served"),
    BUILDING: gettext_lazy("Building"),
    AWAITING_APPROVAL: gettext_lazy("Awaiting approval"),
    FAILED: gettext_lazy("Failed"),
    DELETED: gettext_lazy("Deleted"),
    NOT_SERVED: gettext_lazy("Not served"),
}
# The states someone has to act on, in the order the queues are shown.
WORK_QUEUES = (AWAITING_APPROVAL, FAILED)


def _served() -> Exists:
    return Exists(
        Publication.objects.filter(
            document_id=OuterRef("pk"), index_version_id=OuterRef("kb__active_index_version_id")
        )
    )


def _desired_build(states: list[str]) -> Exists:
    return Exists(
        Build.objects.filter(
            document_id=OuterRef("pk"),
            index_version_id=OuterRef("kb__active_index_version_id"),
            revision__number=OuterRef("desired_revision"),
            state__in=states,
        )
    )


def document_state_q(state: str) -> Q:
    """Documents in `state` (one of STATE_LABELS), as a filter on Document. Raises KeyError."""
    alive = Q(deleted_at__isnull=True)
    conditions: dict[str, Any] = {
        SERVED: alive & Q(_served()),
        BUILDING: alive & Q(_desired_build([Build.State.PENDING, Build.State.BUILDING])),
        AWAITING_APPROVAL: alive & Q(_desired_build([Build.State.READY])),
        FAILED: alive & Q(_desired_build([Build.State.FAILED])),
        DELETED: Q(deleted_at__isnull=False),
        NOT_SERVED: alive & ~Q(_served()),
    }
    condition: Q = conditions[state]
    return condition


def document_state_counts(documents: QuerySet[Document]) -> dict[str, int]:
    """How many of `documents` are in each state (STATE_LABELS' keys). One query."""
    counts: dict[str, int] = documents.aggregate(
        **{state: Count("pk", filter=document_state_q(state)) for state in STATE_LABELS}
    )
    return counts


def readable_documents_of_user(user: Any) -> QuerySet[Document]:
    """The documents a session user may see: those of their tenant whose access groups they may
    read (superusers: every document), the admin's and the API's rule."""
    documents = Document.objects.all()
    if getattr(user, "is_superuser", False):
        return documents
    reader = reader_of_user(user)
    if reader is None:
        return documents.none()
    return documents.filter(kb__tenant_id=reader.tenant_id).filter(
        readable_documents_q(access_groups=reader.access_groups, all_groups=reader.all_groups)
    )


def work_queue_counts(user: Any) -> dict[str, int]:
    """The work queues a user can see, with how many documents wait in each: {"awaiting_approval":
    n, "failed": n}, over the documents they may read. One query."""
    counts = document_state_counts(readable_documents_of_user(user))
    return {state: counts[state] for state in WORK_QUEUES}


def work_queue_counts_by_kb(kb_ids: list[int]) -> dict[int, dict[str, int]]:
    """Per knowledge base of `kb_ids`, how many of its documents wait in each work queue
    ({"awaiting_approval": n, "failed": n}), counted as its home counts them (every document,
    naming none). One query."""
    rows = (
        Document.objects.filter(kb_id__in=kb_ids)
        .values("kb_id")
        .annotate(**{state: Count("pk", filter=document_state_q(state)) for state in WORK_QUEUES})
        .order_by("kb_id")
    )
    counts = {kb_id: dict.fromkeys(WORK_QUEUES, 0) for kb_id in kb_ids}
    for row in rows:
        counts[row["kb_id"]] = {state: row[state] for state in WORK_QUEUES}
    return counts


# --- deletion and restore -------------------------------------------------------------------


def purge_delay(kb: KnowledgeBase) -> timedelta:
    """How long a deleted document stays restorable: the knowledge base's retention
    (`DELETE_PURGE_DELAY_SECONDS` overrides it, for tests and operators)."""
    configured = settings.DELETE_PURGE_DELAY_SECONDS
    if configured is not None:
        return timedelta(seconds=float(configured))
    return timedelta(days=kb.retention_days)


def restorable_until(*, document: Document, now: datetime | None = None) -> datetime | None:
    """Until when `document` can be restored: for a deleted one, when its purge is due (its
    delete task's time; None once purged); for one not deleted, if it were deleted `now`."""
    if document.purged_at is not None:
        return None
    if document.deleted_at is None:
        return (now or timezone.now()) + purge_delay(document.kb)
    due = (
        IngestionTask.objects.filter(kind=IngestionTask.Kind.DELETE, document_id=document.pk)
        .order_by("-id")
        .values_list("available_at", flat=True)
        .first()
    )
    return due or document.deleted_at + purge_delay(document.kb)


def utc_text(moment: datetime | None) -> str:
    """A moment for people, to the second, in the server's zone, in the active language's
    DATETIME_FORMAT (config/formats): "2026-12-31 10:00:05 UTC"."""
    if moment is None:
        return "—"
    return formats.date_format(timezone.localtime(moment), "DATETIME_FORMAT")
