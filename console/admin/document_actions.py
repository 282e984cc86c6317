"""Admin pages that change what search serves. Each is a confirmation page (GET shows what will
change, POST with a reason does it), checks its permission, and finds its objects through the
tenant-scoped admin (`TenantScopedAdmin.get_scoped_object_or_404`), so a malformed id, a missing
one, another tenant's and a document behind access groups the user does not hold are the same
404. The work is done by kb.services.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.translation import gettext, ngettext

from console.admin.confirmation import confirm, require
from console.admin.evaluation_gates import revision_quality
from console.admin.scoping import TenantScopedAdmin
from console.words import build_state
from kb import document_states
from kb.diff import chunk_diff
from kb.document_states import utc_text
from kb.failures import build_error_words
from kb.models import (
    Build,
    Document,
)
from kb.selectors.builds import served_now
from kb.selectors.documents import document_build_rows, document_history, document_progress
from kb.services.documents import build_retry, document_delete, document_restore
from kb.services.publication import build_approve, document_rollback


def _document(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> Document:
    document: Document = model_admin.get_scoped_object_or_404(request, object_id)
    return document


def _change_url(document: Document) -> str:
    return reverse("admin:kb_document_change", args=[document.pk])


def _revision_text(build: Build | None) -> str:
    """A build for people: its revision, when and by whom it was uploaded, its chunks (no ids)."""
    if build is None:
        return gettext("nothing")
    revision = build.revision
    words = {"n": revision.number, "at": utc_text(revision.created_at)}
    if revision.uploaded_by:
        text = gettext("revision %(n)s · uploaded %(at)s by %(who)s") % {
            **words,
            "who": revision.uploaded_by,
        }
    else:
        text = gettext("revision %(n)s · uploaded %(at)s") % words
    chunks = build.expected_chunk_count
    if chunks is not None:
        text += " · " + ngettext("%(n)s chunk", "%(n)s chunks", chunks) % {"n": chunks}
    return text


def _log(
    model_admin: TenantScopedAdmin, request: HttpRequest, document: Document, text: str
) -> None:
    """The document's History page (Django's LogEntry) records every action taken here."""
    model_admin.log_change(request, document, text)


def _with_reason(text: str, reason: str) -> str:
    return (
        gettext("%(action)s: %(reason)s") % {"action": text, "reason": reason} if reason else text
    )


def _candidate(document: Document, build_id: str) -> Build:
    return get_object_or_404(
        Build.objects.select_related("revision__uploaded_by", "index_version"),
        pk=build_id,
        document=document,
    )


def approve_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, build_id: str
) -> HttpResponse:
    require(request, "kb.approve_build")
    document = _document(model_admin, request, object_id)
    candidate = _candidate(document, build_id)
    live = served_now(document=document)

    def perform(reason: str, expected: int | None) -> str:
        build_approve(
            build_id=candidate.pk,
            actor=request.user,
            reason=reason,
            expected_live_build_id=expected,
        )
        _log(
            model_admin,
            request,
            document,
            _with_reason(
                gettext("Approved revision %(n)s") % {"n": candidate.revision.number}, reason
            ),
        )
        return gettext("Revision %(n)s is live.") % {"n": candidate.revision.number}

    return confirm(
        model_admin,
        request,
        title=gettext("Approve revision %(n)s of %(document)s")
        % {"n": candidate.revision.number, "document": document},
        summary={
            "document": document,
            "diff": chunk_diff(candidate=candidate, live=live),
            "live_text": _revision_text(live),
            "after_label": gettext("after approval"),
            "after_text": _revision_text(candidate),
            # the questions expecting this document, ranked with this build served instead
            "quality": revision_quality(request, document, candidate),
        },
        expected=live.pk if live else None,
        perform=perform,
        back=_change_url(document),
        template="admin/kb/confirm_approve.html",
    )


def rollback_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, build_id: str
) -> HttpResponse:
    require(request, "kb.rollback_document")
    document = _document(model_admin, request, object_id)
    target = _candidate(document, build_id)
    live = served_now(document=document)

    def perform(reason: str, expected: int | None) -> str:
        document_rollback(
            document_id=document.pk,
            build_id=target.pk,
            actor=request.user,
            reason=reason,
            expected_live_build_id=expected,
        )
        _log(
            model_admin,
            request,
            document,
            _with_reason(
                gettext("Rolled back to revision %(n)s") % {"n": target.revision.number}, reason
            ),
        )
        return gettext("Rolled back to revision %(n)s.") % {"n": target.revision.number}

    return confirm(
        model_admin,
        request,
        title=gettext("Roll %(document)s back to revision %(n)s")
        % {"document": document, "n": target.revision.number},
        summary={
            "document": document,
            "diff": chunk_diff(candidate=target, live=live),
            "live_text": _revision_text(live),
            "after_label": gettext("after the rollback"),
            "after_text": _revision_text(target),
            "consequence": gettext(
                "Search serves revision %(n)s again at once, and it becomes the desired "
                "revision: newer revisions waiting for approval are set aside."
            )
            % {"n": target.revision.number},
        },
        expected=live.pk if live else None,
        perform=perform,
        back=_change_url(document),
        template="admin/kb/confirm_approve.html",
        danger=True,
    )


def retry_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, build_id: str
) -> HttpResponse:
    require(request, "kb.retry_build")
    document = _document(model_admin, request, object_id)
    build = _candidate(document, build_id)

    def perform(reason: str, expected: int | None) -> str:
        build_retry(build_id=build.pk, actor=request.user, reason=reason)
        _log(
            model_admin,
            request,
            document,
            _with_reason(
                gettext("Retried the build of revision %(n)s in v%(v)s")
                % {"n": build.revision.number, "v": build.index_version.number},
                reason,
            ),
        )
        return gettext("The build of revision %(n)s is queued again.") % {
            "n": build.revision.number
        }

    return confirm(
        model_admin,
        request,
        title=gettext("Retry the build of revision %(n)s of %(document)s")
        % {"n": build.revision.number, "document": document},
        summary={
            "facts": [
                (
                    gettext("build"),
                    gettext("%(revision)s · index version %(v)s")
                    % {"revision": _revision_text(build), "v": build.index_version.number},
                ),
                (gettext("state"), build_state(build.state)),
                (gettext("error"), build_error_words(build) or "—"),
                (
                    gettext("after"),
                    gettext("built again from the start with a fresh attempt budget"),
                ),
            ]
        },
        expected=None,
        perform=perform,
        back=_change_url(document),
    )


def delete_facts(document: Document) -> list[tuple[str, str]]:
    """What a delete of `document` changes and until when it can be undone."""
    live = served_now(document=document)
    delay = document_states.purge_delay(document.kb)
    return [
        (gettext("served now"), _revision_text(live)),
        (gettext("after"), gettext("search stops returning it when you confirm")),
        (
            gettext("restorable until"),
            gettext("%(until)s (%(delay)s from now: the knowledge base's retention)")
            % {
                "until": utc_text(document_states.restorable_until(document=document)),
                "delay": _duration(delay),
            },
        ),
        (
            gettext("at purge"),
            gettext(
                "its chunks and pointers are removed for good and a restore is refused; the "
                "document, its revisions and its history stay as a record"
            ),
        ),
    ]


def _duration(delay: timedelta) -> str:
    seconds = int(delay.total_seconds())
    if seconds % 86400 == 0:
        days = seconds // 86400
        return ngettext("%(n)s day", "%(n)s days", days) % {"n": days}
    if seconds % 3600 == 0:
        return gettext("%(n)s h") % {"n": seconds // 3600}
    return gettext("%(n)s s") % {"n": seconds}


def delete_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    require(request, "kb.soft_delete_document")
    document = _document(model_admin, request, object_id)

    def perform(reason: str, expected: int | None) -> str:
        document_delete(document_id=document.pk, actor=request.user, reason=reason)
        _log(model_admin, request, document, _with_reason(gettext("Deleted"), reason))
        document.refresh_from_db()
        until = utc_text(document_states.restorable_until(document=document))
        return gettext(
            "%(document)s is deleted; search no longer returns it. Restorable until %(until)s."
        ) % {"document": document, "until": until}

    return confirm(
        model_admin,
        request,
        title=gettext("Delete %(document)s") % {"document": document},
        summary={"facts": delete_facts(document)},
        expected=None,
        perform=perform,
        back=_change_url(document),
        danger=True,
    )


def restore_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    require(request, "kb.restore_document")
    document = _document(model_admin, request, object_id)

    def perform(reason: str, expected: int | None) -> str:
        document_restore(document_id=document.pk, actor=request.user, reason=reason)
        _log(model_admin, request, document, _with_reason(gettext("Restored"), reason))
        return gettext("%(document)s is restored.") % {"document": document}

    return confirm(
        model_admin,
        request,
        title=gettext("Restore %(document)s") % {"document": document},
        summary={
            "facts": [
                (gettext("deleted at"), utc_text(document.deleted_at)),
                (
                    gettext("restorable until"),
                    utc_text(document_states.restorable_until(document=document))
                    if document.deleted_at
                    else "—",
                ),
                (
                    gettext("after"),
                    gettext("search serves its kept revision again when you confirm"),
                ),
            ]
        },
        expected=None,
        perform=perform,
        back=_change_url(document),
    )


HISTORY_ROWS = 50


def document_boxes(
    request: HttpRequest,
    document: Document,
    rows: list[tuple[Build, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """What the document page's Builds and History boxes are rendered from, with the user's
    actions: the page and its progress JSON use this one function, so what the page shows live
    is what a reload would show. `rows`: the builds already read (`document_build_rows`)."""
    user = request.user
    return {
        "original": document,
        # each build's progress and role, as the progress JSON refreshes them
        "builds": document_build_rows(document=document) if rows is None else rows,
        "history": document_history(document=document, limit=HISTORY_ROWS),
        "can_approve": user.has_perm("kb.approve_build"),
        "can_rollback": user.has_perm("kb.rollback_document"),
        "can_retry": user.has_perm("kb.retry_build"),
        "can_delete": user.has_perm("kb.soft_delete_document"),
        "can_restore": user.has_perm("kb.restore_document"),
    }


def progress_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> JsonResponse:
    """The document page's live state: status line, what is served, every build's progress and
    role (one reading), and the Builds and History boxes as the page renders them."""
    document = _document(model_admin, request, object_id)
    # The builds are read once, for the figures and the rendered rows alike: two readings let a
    # failure committing between them show a row whose role still said "parsing" beside its
    # Retry…. History is read after them: the page stops polling once the progress says nothing
    # is building, so History must be at least as new (read the other way round, a publish
    # committing between the reads left it saying "Nothing published yet").
    rows = document_build_rows(document=document)
    progress = document_progress(document=document, rows=rows)
    boxes = document_boxes(request, document, rows)
    return JsonResponse(
        {
            **progress,
            "builds_html": render_to_string(
                "admin/kb/document/_build_rows.html", boxes, request=request
            ),
            "history_html": render_to_string(
                "admin/kb/document/_history_rows.html", boxes, request=request
            ),
        }
    )
