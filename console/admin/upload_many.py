"""Upload many files at once: each becomes a document or a new revision of one."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import reverse

from console.admin.confirmation import require
from console.admin.scoping import TenantScopedAdmin, groups_refused
from kb.models import (
    Document,
    KnowledgeBase,
)
from kb.services.base import InvalidUpload
from kb.services.documents import document_create, revision_create
from kb.uploads import UploadRejected, oversized_messages, upload_accept


class UploadManyForm(forms.Form):
    kb = forms.ModelChoiceField(queryset=KnowledgeBase.objects.none())
    access_groups = forms.CharField(
        required=False, help_text="Comma-separated, for new documents; only groups you hold."
    )

    def __init__(self, *args: Any, kbs: Any, request: HttpRequest, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kb"].queryset = kbs  # type: ignore[attr-defined]
        self.request = request
        only = list(kbs.values_list("pk", flat=True)[:2])
        if len(only) == 1:  # preselect the only knowledge base, as Add does
            self.fields["kb"].initial = only[0]

    def clean_access_groups(self) -> list[str]:
        raw = self.cleaned_data.get("access_groups") or ""
        groups = sorted({g.strip() for g in raw.split(",") if g.strip()})
        refused = groups_refused(self.request, groups)
        if refused:
            raise forms.ValidationError(refused)
        return groups


def upload_many_view(model_admin: TenantScopedAdmin, request: HttpRequest) -> HttpResponse:
    """Many files at once: a file whose name (without extension) matches a document key becomes
    a new revision of it; any other file a new document, titled by the parse stage with the title
    found in the file (none is given here). Each upload is in the document's History (LogEntry).
    Messages name each file as it was uploaded and never start with it (the admin capitalises a
    message's first letter)."""
    require(request, "kb.add_document")
    kbs = model_admin.scoped_queryset(request, KnowledgeBase)
    form = UploadManyForm(request.POST or None, kbs=kbs, request=request)
    if request.method == "POST" and form.is_valid():
        files = request.FILES.getlist("files")
        oversized = oversized_messages(request)  # refused while they streamed in
        for message in oversized:
            messages.error(request, f"Not uploaded: {message}")
        if not files and not oversized:
            messages.error(request, "Choose at least one file.")
        kb = form.cleaned_data["kb"]
        groups = form.cleaned_data["access_groups"]
        visible = model_admin.get_queryset(request)
        for upload in files:
            try:
                accepted = upload_accept(upload)
            except UploadRejected as exc:
                messages.error(request, f"Not uploaded: {exc}")
                continue
            key = accepted.original_name.rsplit(".", 1)[0][:255] or "upload"
            document = visible.filter(kb=kb, key=key).first()
            if document is None and Document.objects.filter(kb=kb, key=key).exists():
                # the key is taken: say so, as the API does, without showing the document
                messages.error(
                    request,
                    f"Not uploaded: {accepted.original_name}: a document with key {key!r} exists "
                    "and is restricted to access groups you do not hold.",
                )
                continue
            try:
                size = filesizeformat(accepted.stored.size)
                if document is None:
                    revision = document_create(
                        kb=kb,
                        key=key,
                        title="",  # none given: the parse stage puts the file's own title
                        stored=accepted.stored,
                        media_type=accepted.media_type,
                        original_name=accepted.original_name,
                        access_groups=groups,
                        actor=request.user,
                    )
                    model_admin.log_addition(
                        request,
                        revision.document,
                        f"Added with Upload files; uploaded {accepted.original_name} ({size}) "
                        "as revision 1.",
                    )
                    messages.success(
                        request,
                        f"New document {key} from {accepted.original_name} ({size}); its title "
                        "is the one found in the file once it is parsed.",
                    )
                else:
                    revision = revision_create(
                        document=document,
                        stored=accepted.stored,
                        media_type=accepted.media_type,
                        original_name=accepted.original_name,
                        actor=request.user,
                    )
                    model_admin.log_change(
                        request,
                        document,
                        f"Uploaded {accepted.original_name} ({size}) as revision "
                        f"{revision.number} with Upload files.",
                    )
                    messages.success(
                        request,
                        f"Revision {revision.number} of {key} from {accepted.original_name} "
                        f"({size}).",
                    )
            except InvalidUpload as exc:
                messages.error(request, f"Not uploaded: {accepted.original_name}: {exc}")
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
