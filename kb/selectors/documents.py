"""Reads of documents: what search serves for each (`live_build`), its status in words, and its
builds with what each is for."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy

from kb import audit_kinds
from kb.failures import build_error_words
from kb.models import (
    Build,
    Document,
    KnowledgeBase,
    Publication,
)
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, role_noun, roles_with
from kb.selectors.builds import (
    build_progress_of,
    build_role_of,
    builds_with_roles,
    live_build,
)
from work.models import AuditEvent


def knowledge_bases_for_tenant(*, tenant_id: int) -> QuerySet[KnowledgeBase]:
    return KnowledgeBase.objects.filter(tenant_id=tenant_id).order_by("slug")


# Who approves, in each phrase that names them (a role's noun does not translate word by word).
_AWAITING = {
    INDEX_ADMINS: gettext_lazy("awaiting approval by an index admin"),
    CONTENT_MANAGERS: gettext_lazy("awaiting approval by a content manager"),
}
_APPROVAL = {
    INDEX_ADMINS: gettext_lazy("approval by an index admin"),
    CONTENT_MANAGERS: gettext_lazy("approval by a content manager"),
}


def awaiting_approval_words() -> str:
    """ "awaiting approval by an index admin": who approves, from the roles (`kb.roles`)."""
    approvers = roles_with("kb.approve_build")
    if not approvers:
        return gettext("awaiting approval")
    known = _AWAITING.get(approvers[-1])
    if known is not None:
        return str(known)
    return gettext("awaiting approval by %(approver)s") % {"approver": role_noun(approvers[-1])}


def approval_words() -> str:
    """ "approval by an index admin": what an uploaded revision waits for."""
    approvers = roles_with("kb.approve_build")
    if not approvers:
        return gettext("approval")
    known = _APPROVAL.get(approvers[-1])
    if known is not None:
        return str(known)
    return gettext("approval by %(approver)s") % {"approver": role_noun(approvers[-1])}


def document_status(*, document: Document) -> str:
    """One line for people: what is live (what search serves now, `served_now`), and what is
    happening to the desired revision; for a deleted document, that nothing is served and which
    revision is kept for restore."""
    if document.deleted_at is not None:
        kept = (
            Publication.objects.filter(
                document=document, index_version_id=document.kb.active_index_version_id
            )
            .values_list("build__revision__number", flat=True)
            .first()
        )
        if kept:
            return gettext("deleted · nothing served · r%(n)s kept for restore") % {"n": kept}
        return gettext("deleted · nothing served")
    live = live_build(document=document)
    parts = [gettext("live r%(n)s") % {"n": live.revision.number} if live else gettext("not live")]
    if document.desired_revision and (
        live is None or live.revision.number != document.desired_revision
    ):
        pending = (
            Build.objects.filter(
                document=document,
                revision__number=document.desired_revision,
                index_version_id=document.kb.active_index_version_id,
            )
            .only("state", "error", "error_code", "error_params")
            .first()
        )
        if pending is not None:
            # The glossary's words (docs/ADMIN_GUIDE.md), not the model's state names.
            state = {"pending": gettext("queued"), "ready": awaiting_approval_words()}.get(
                pending.state
            ) or str(STATE_WORDS.get(pending.state, pending.state))
            detail = (
                f": {build_error_words(pending)}"
                if pending.state == Build.State.FAILED and pending.error
                else ""
            )
            parts.append(f"r{document.desired_revision} {state}{detail}")
    return " · ".join(parts)


def document_build_rows(*, document: Document) -> list[tuple[Build, dict[str, Any]]]:
    """Per build of `document`, newest revision first: the build and its progress
    (`build_progress_of`) with its role ("role", "role_kind"; a current failure's role is only
    "failed", its error being the build's "error") and, once it is not running, its chunks
    ("6/6 chunks"; while it runs the role says "embedding 3/6"). One query."""
    builds = builds_with_roles(Build.objects.filter(document=document)).order_by(
        "-revision__number", "index_version__number"
    )
    now = timezone.now()
    rows = []
    for build in builds:
        role = build_role_of(build=build, now=now)
        progress = build_progress_of(build=build)
        if role.kind == "building":
            chunks = ""
        elif progress["expected"] is None:
            chunks = str(progress["label"])  # "— (failed before chunking)": no figures
        else:
            chunks = gettext("%(label)s chunks") % {"label": progress["label"]}
        # A current failure is just "failed" here: the page says its error once per build, in
        # the Builds box's error column (and the status line), not again in every role.
        label = gettext("failed") if role.kind == "failed" else role.label
        rows.append(
            (
                build,
                {
                    **progress,
                    "role": label,
                    "role_kind": role.kind,
                    "chunks": chunks,
                    # the stored state in words, for the role's tooltip
                    "state_label": str(STATE_WORDS.get(build.state, build.state)),
                },
            )
        )
    return rows


def document_progress(
    *, document: Document, rows: list[tuple[Build, dict[str, Any]]] | None = None
) -> dict[str, Any]:
    """Everything the document page shows about state, from one reading: the title (the parse
    stage may put the file's own), the status line, the build served now and every build's
    progress and role (`document_build_rows`, or `rows` already read from it, so that the
    progress JSON's figures and its rendered Builds rows are one reading). The page is
    rendered from it and its script refreshes every box from it (the progress JSON)."""
    if rows is None:
        rows = document_build_rows(document=document)
    served = next((p for _, p in rows if p["role_kind"] == "served"), None)
    return {
        "title": document.title,
        "status": document_status(document=document),
        "served": ({k: served[k] for k in ("id", "revision", "index_version")} if served else None),
        "builds": [p for _, p in rows],
    }


# A build's stored state in words (the tooltip of its role on the document page).
STATE_WORDS: dict[str, Any] = {
    Build.State.PENDING: gettext_lazy("pending"),
    Build.State.BUILDING: gettext_lazy("building"),
    Build.State.READY: gettext_lazy("ready"),
    Build.State.LIVE: gettext_lazy("live"),
    Build.State.SUPERSEDED: gettext_lazy("superseded"),
    Build.State.FAILED: gettext_lazy("failed"),
}


@dataclass(frozen=True)
class HistoryRow:
    """One line of a document's History: a pointer change (publish, approve, rollback, delete,
    restore), a retry, a bulk metadata edit or a person's answer to a sync's held deletions,
    with who (None: the pipeline), why, and what it changed (`detail`)."""

    created_at: datetime
    action: str
    revision_number: int | None
    actor: Any
    reason: str
    detail: str = ""


# How the History names the audit events of people's actions (`kb.audit_kinds`).
_AUDIT_ACTIONS = {
    "build_retry": "retry",
    audit_kinds.METADATA_SET: "metadata set",
    audit_kinds.SYNC_DELETIONS_CONFIRMED: "deletion confirmed",
    audit_kinds.SYNC_DELETIONS_KEPT: "kept (not deleted)",
}


def document_history(*, document: Document, limit: int = 50) -> list[HistoryRow]:
    """The document's History, newest first: its PublicationEvents, and the audit events of what
    people did to it with the reason their confirmation page asked for: retries of its builds,
    bulk metadata edits, answers to the deletions a sync run held (an answer covers several
    documents: found by its list of them). Two queries, and one for the builds' revisions."""
    events = [
        HistoryRow(
            e.created_at,
            e.action,
            e.revision_number or (e.build.revision.number if e.build else None),
            e.actor,
            e.reason,
        )
        for e in document.events.select_related("actor", "build__revision").order_by("-id")[:limit]
    ]
    builds = dict(Build.objects.filter(document=document).values_list("pk", "revision__number"))
    audited = AuditEvent.objects.filter(
        Q(kind="build_retry", subject_type="build", subject_id__in=list(builds))
        | Q(kind=audit_kinds.METADATA_SET, subject_type="document", subject_id=document.pk)
        | Q(
            kind__in=audit_kinds.SYNC_ANSWERS,
            subject_type="sync_run",
            details__documents__contains=[document.pk],
        )
    )
    people = [
        HistoryRow(
            a.detected_at,
            _AUDIT_ACTIONS[a.kind],
            builds.get(a.subject_id or 0) if a.subject_type == "build" else None,
            a.actor,
            str((a.details or {}).get("reason", "")),
            "" if a.kind == "build_retry" else a.action,
        )
        for a in audited.select_related("actor").order_by("-id")[:limit]
    ]
    rows = sorted(events + people, key=lambda row: row.created_at, reverse=True)
    return rows[:limit]
