"""Admin pages that change what search serves. Each is a confirmation page (GET shows what will
change, POST with a reason does it), checks its permission, and finds its objects through the
tenant-scoped admin (`TenantScopedAdmin.get_scoped_object_or_404`), so a malformed id, a missing
one, another tenant's and a document behind access groups the user does not hold are the same
404. The work is done by kb.services.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse

from kb import selectors, services
from kb.admin.confirmation import confirm, require
from kb.admin.scoping import TenantScopedAdmin
from kb.models import (
    Build,
    Document,
)


def _document(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> Document:
    document: Document = model_admin.get_scoped_object_or_404(request, object_id)
    return document


def _change_url(document: Document) -> str:
    return reverse("admin:kb_document_change", args=[document.pk])


def approve_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, build_id: str
) -> HttpResponse:
    require(request, "kb.approve_build")
    document = _document(model_admin, request, object_id)
    candidate = get_object_or_404(
        Build.objects.select_related("revision"), pk=build_id, document=document
    )
    live = selectors.live_build(document=document)
    diff = selectors.build_diff(candidate=candidate, live=live)

    def perform(reason: str, expected: int | None) -> str:
        services.build_approve(
            build_id=candidate.pk,
            actor=request.user,
            reason=reason,
            expected_live_build_id=expected,
        )
        return f"Revision {candidate.revision.number} is live."

    return confirm(
        model_admin,
        request,
        title=f"Approve revision {candidate.revision.number} of {document}",
        summary={"document": document, "diff": diff, "candidate": candidate, "live": live},
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
    target = get_object_or_404(
        Build.objects.select_related("revision"), pk=build_id, document=document
    )
    live = selectors.live_build(document=document)
    diff = selectors.build_diff(candidate=target, live=live)

    def perform(reason: str, expected: int | None) -> str:
        services.document_rollback(
            document_id=document.pk,
            build_id=target.pk,
            actor=request.user,
            reason=reason,
            expected_live_build_id=expected,
        )
        return f"Rolled back to revision {target.revision.number}."

    return confirm(
        model_admin,
        request,
        title=f"Roll {document} back to revision {target.revision.number}",
        summary={"document": document, "diff": diff, "candidate": target, "live": live},
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
    build = get_object_or_404(
        Build.objects.select_related("revision"), pk=build_id, document=document
    )

    def perform(reason: str, expected: int | None) -> str:
        services.build_retry(build_id=build.pk, actor=request.user)
        return f"Build {build.pk} queued again."

    return confirm(
        model_admin,
        request,
        title=f"Retry the build of revision {build.revision.number} of {document}",
        summary={"facts": [("state", build.state), ("error", build.error or "—")]},
        expected=None,
        perform=perform,
        back=_change_url(document),
    )


def delete_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    require(request, "kb.soft_delete_document")
    document = _document(model_admin, request, object_id)
    live = selectors.live_build(document=document)

    def perform(reason: str, expected: int | None) -> str:
        services.document_delete(document_id=document.pk, actor=request.user, reason=reason)
        return f"{document} is deleted; search no longer returns it."

    return confirm(
        model_admin,
        request,
        title=f"Delete {document}",
        summary={
            "facts": [
                ("live now", f"revision {live.revision.number}" if live else "nothing"),
                ("after", "invisible to search at once; restorable during the retention window"),
            ]
        },
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
        services.document_restore(document_id=document.pk, actor=request.user, reason=reason)
        return f"{document} is restored."

    return confirm(
        model_admin,
        request,
        title=f"Restore {document}",
        summary={"facts": [("deleted at", document.deleted_at)]},
        expected=None,
        perform=perform,
        back=_change_url(document),
    )


def progress_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> JsonResponse:
    document = _document(model_admin, request, object_id)
    # status line, what is served, and every build's progress and role: one reading
    return JsonResponse(selectors.document_progress(document=document))
