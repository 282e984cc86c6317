"""Admin pages that change what search serves. Each is a confirmation page (GET shows what will
change, POST with a reason does it), checks its permission, and finds its objects through the
tenant-scoped admin (`TenantScopedAdmin.get_scoped_object_or_404`), so a malformed id, a missing
one, another tenant's and a document behind access groups the user does not hold are the same
404. The work is done by kb.services."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from ingestion import providers
from kb import selectors, services
from kb.models import Build, Document, IndexVersion, KnowledgeBase
from kb.uploads import UploadRejected, oversized_messages, upload_accept

if TYPE_CHECKING:
    from kb.admin import TenantScopedAdmin


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Why? Kept in the document's history.",
    )
    expected = forms.IntegerField(widget=forms.HiddenInput, required=False)


def _require(request: HttpRequest, perm: str) -> None:
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"You need the permission {perm}.")


def _document(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> Document:
    document: Document = model_admin.get_scoped_object_or_404(request, object_id)
    return document


def _confirm(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    *,
    title: str,
    summary: dict[str, Any],
    expected: int | None,
    perform: Callable[[str, int | None], str],
    back: str,
    template: str = "admin/kb/confirm_action.html",
    danger: bool = False,
) -> HttpResponse:
    """GET: the confirmation page. POST: validate the reason, perform, report, redirect back."""
    form = ReasonForm(request.POST or None, initial={"expected": expected})
    if request.method == "POST" and form.is_valid():
        try:
            message = perform(form.cleaned_data["reason"], form.cleaned_data.get("expected"))
        except services.ActionRefused as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, message)
        return HttpResponseRedirect(back)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "summary": summary,
        "form": form,
        "back": back,
        "danger": danger,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, template, context)


def _change_url(document: Document) -> str:
    return reverse("admin:kb_document_change", args=[document.pk])


def approve_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, build_id: str
) -> HttpResponse:
    _require(request, "kb.approve_build")
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

    return _confirm(
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
    _require(request, "kb.rollback_document")
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

    return _confirm(
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
    _require(request, "kb.retry_build")
    document = _document(model_admin, request, object_id)
    build = get_object_or_404(
        Build.objects.select_related("revision"), pk=build_id, document=document
    )

    def perform(reason: str, expected: int | None) -> str:
        services.build_retry(build_id=build.pk, actor=request.user)
        return f"Build {build.pk} queued again."

    return _confirm(
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
    _require(request, "kb.soft_delete_document")
    document = _document(model_admin, request, object_id)
    live = selectors.live_build(document=document)

    def perform(reason: str, expected: int | None) -> str:
        services.document_delete(document_id=document.pk, actor=request.user, reason=reason)
        return f"{document} is deleted; search no longer returns it."

    return _confirm(
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
    _require(request, "kb.restore_document")
    document = _document(model_admin, request, object_id)

    def perform(reason: str, expected: int | None) -> str:
        services.document_restore(document_id=document.pk, actor=request.user, reason=reason)
        return f"{document} is restored."

    return _confirm(
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
    return JsonResponse(
        {
            "status": selectors.document_status(document=document),
            "builds": selectors.build_progress(document=document),
        }
    )


class UploadManyForm(forms.Form):
    kb = forms.ModelChoiceField(queryset=KnowledgeBase.objects.none())
    access_groups = forms.CharField(
        required=False, help_text="Comma-separated, for new documents; only groups you hold."
    )

    def __init__(self, *args: Any, kbs: Any, request: HttpRequest, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kb"].queryset = kbs  # type: ignore[attr-defined]
        self.request = request

    def clean_access_groups(self) -> list[str]:
        from kb.admin import groups_refused

        raw = self.cleaned_data.get("access_groups") or ""
        groups = sorted({g.strip() for g in raw.split(",") if g.strip()})
        refused = groups_refused(self.request, groups)
        if refused:
            raise forms.ValidationError(refused)
        return groups


def upload_many_view(model_admin: TenantScopedAdmin, request: HttpRequest) -> HttpResponse:
    """Many files at once: a file whose name (without extension) matches a document key becomes
    a new revision of it; any other file a new document."""
    _require(request, "kb.add_document")
    kbs = model_admin.scoped_queryset(request, KnowledgeBase)
    form = UploadManyForm(request.POST or None, kbs=kbs, request=request)
    if request.method == "POST" and form.is_valid():
        files = request.FILES.getlist("files")
        oversized = oversized_messages(request)  # refused while they streamed in
        for message in oversized:
            messages.error(request, message)
        if not files and not oversized:
            messages.error(request, "Choose at least one file.")
        kb = form.cleaned_data["kb"]
        groups = form.cleaned_data["access_groups"]
        visible = model_admin.get_queryset(request)
        for upload in files:
            try:
                accepted = upload_accept(upload)
            except UploadRejected as exc:
                messages.error(request, str(exc))
                continue
            key = accepted.original_name.rsplit(".", 1)[0][:255] or "upload"
            document = visible.filter(kb=kb, key=key).first()
            if document is None and Document.objects.filter(kb=kb, key=key).exists():
                # the key is taken: say so, as the API does, without showing the document
                messages.error(
                    request,
                    f"{accepted.original_name}: a document with key {key!r} exists and is "
                    "restricted to access groups you do not hold.",
                )
                continue
            try:
                if document is None:
                    services.document_create(
                        kb=kb,
                        key=key,
                        title=key,
                        stored=accepted.stored,
                        media_type=accepted.media_type,
                        original_name=accepted.original_name,
                        access_groups=groups,
                        actor=request.user,
                    )
                    messages.success(request, f"{accepted.original_name}: new document {key}.")
                else:
                    revision = services.revision_create(
                        document=document,
                        stored=accepted.stored,
                        media_type=accepted.media_type,
                        original_name=accepted.original_name,
                        actor=request.user,
                    )
                    messages.success(
                        request, f"{accepted.original_name}: revision {revision.number} of {key}."
                    )
            except services.InvalidUpload as exc:
                messages.error(request, f"{accepted.original_name}: {exc}")
        if files:
            return HttpResponseRedirect(reverse("admin:kb_document_changelist"))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Upload files",
        "form": form,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/document/upload_many.html", context)


# --- index versions ------------------------------------------------------------------------


def _provider_choices() -> list[tuple[str, str]]:
    """Every provider this installation can run (sentence-transformers only with its extra)."""
    return [(spec.name, spec.label) for spec in providers.provider_specs() if spec.available()]


class IndexVersionForm(forms.Form):
    """Provider, model and dimensions of a new index version. A blank model or dimension takes
    the provider's default; a model whose dimension is known must be given exactly that one."""

    provider = forms.ChoiceField(choices=_provider_choices)
    model = forms.CharField(max_length=200, required=False)
    dimensions = forms.IntegerField(min_value=1, max_value=16000, required=False)
    chunk_size = forms.IntegerField(min_value=50, max_value=20000)
    chunk_overlap = forms.IntegerField(min_value=0, max_value=5000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        specs = [spec for spec in providers.provider_specs() if spec.available()]
        self.fields["provider"].widget.attrs["data-defaults"] = json.dumps(
            {spec.name: [spec.default_model, spec.default_dimensions] for spec in specs}
        )
        self.fields["model"].help_text = "Blank: " + "; ".join(
            f"{spec.name} → {spec.default_model}" for spec in specs
        )
        self.fields["dimensions"].help_text = (
            "Must be what the model returns. Blank: the model's own ("
            + "; ".join(f"{spec.name} → {spec.default_dimensions}" for spec in specs)
            + ")."
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("chunk_overlap", 0) * 2 >= data.get("chunk_size", 0):
            raise forms.ValidationError("The overlap must be less than half the chunk size.")
        name = data.get("provider")
        if not name:
            return data
        spec = providers.provider_spec(name)
        model = (data.get("model") or "").strip() or spec.default_model
        dimensions = data.get("dimensions") or spec.models.get(model, spec.default_dimensions)
        data["model"], data["dimensions"] = model, dimensions
        problem = spec.dimension_problem(model, dimensions)
        if problem:
            self.add_error("model" if model not in spec.models else "dimensions", problem)
        if name == providers.LOCAL_PROVIDER:
            path = providers.local_model_path(model)
            if not path.is_dir():
                self.add_error(
                    "model", f"No local model at {path}: put the model directory there first."
                )
        return data


def _kb(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> KnowledgeBase:
    _require(request, "kb.manage_index_versions")
    kb: KnowledgeBase = model_admin.get_scoped_object_or_404(request, object_id)
    return kb


def _kb_url(kb: KnowledgeBase) -> str:
    return reverse("admin:kb_knowledgebase_change", args=[kb.pk])


def index_version_create_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    kb = _kb(model_admin, request, object_id)
    active = kb.active_index_version
    initial = {
        "provider": active.provider if active else providers.HASH_PROVIDER,
        "model": active.model if active else "",
        "dimensions": active.dimensions if active else None,
        "chunk_size": active.chunk_size if active else 800,
        "chunk_overlap": active.chunk_overlap if active else 100,
    }
    form = IndexVersionForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        version = services.index_version_create(
            kb_id=kb.pk, actor=request.user, **form.cleaned_data
        )
        messages.success(
            request,
            f"Index version {version.number} is building; the active version keeps serving.",
        )
        return HttpResponseRedirect(_kb_url(kb))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"New index version for {kb}",
        "form": form,
        "kb": kb,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/knowledgebase/index_version_form.html", context)


def index_version_swap_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, version_id: str
) -> HttpResponse:
    from kb.admin import readable_filter

    kb = _kb(model_admin, request, object_id)
    version = get_object_or_404(IndexVersion, pk=version_id, kb=kb)
    named = readable_filter(request)
    progress = selectors.index_version_progress(version=version, named=named)
    gaps = services.index_version_coverage_gaps(version=version)

    def perform(reason: str, expected: int | None) -> str:
        services.index_version_activate(
            version_id=version.pk,
            actor=request.user,
            reason=reason,
            expected_active_id=expected,
        )
        return f"Index version {version.number} is active."

    return _confirm(
        model_admin,
        request,
        title=f"Make index version {version.number} active for {kb}",
        summary={
            "facts": [
                ("now active", kb.active_index_version),
                ("candidate", version),
                ("documents built", f"{progress.live} of {progress.total}"),
                ("coverage", "complete" if not gaps else f"{len(gaps)} missing"),
            ],
            "problems": _gaps_named(kb, gaps, named)[:50] + progress.failed[:50],
        },
        expected=kb.active_index_version_id,
        perform=perform,
        back=_kb_url(kb),
        danger=bool(gaps),
    )


def _gaps_named(kb: KnowledgeBase, gaps: list[str], named: Q | None) -> list[str]:
    """The coverage gaps ("<key>: ...") with those of documents outside `named` counted, not
    named: a swap covers every document, but the user reads only some of them."""
    if named is None:
        return gaps
    hidden = tuple(
        f"{key}: "
        for key in Document.objects.filter(kb=kb).exclude(named).values_list("key", flat=True)
    )
    shown = [gap for gap in gaps if not gap.startswith(hidden)] if hidden else gaps
    if len(shown) < len(gaps):
        shown.append(
            f"{len(gaps) - len(shown)} missing in documents of access groups you do not hold"
        )
    return shown


def index_version_rollback_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    kb = _kb(model_admin, request, object_id)
    previous = (
        IndexVersion.objects.filter(kb=kb, state=IndexVersion.State.RETIRED)
        .order_by("-retired_at")
        .first()
    )
    if previous is None:
        raise Http404("There is no retired index version to roll back to.")

    def perform(reason: str, expected: int | None) -> str:
        services.index_version_activate(
            version_id=previous.pk,
            actor=request.user,
            reason=reason,
            expected_active_id=expected,
            action="rollback",
        )
        return f"Index version {previous.number} is active again."

    return _confirm(
        model_admin,
        request,
        title=f"Roll {kb} back to index version {previous.number}",
        summary={"facts": [("now active", kb.active_index_version), ("roll back to", previous)]},
        expected=kb.active_index_version_id,
        perform=perform,
        back=_kb_url(kb),
        danger=True,
    )
