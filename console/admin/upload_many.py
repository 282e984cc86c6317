"""Upload many files at once: each becomes a new document or, once the uploader has confirmed
it on a page that lists them, a new revision of the document its name matches.

A file named like a document the uploader may not write — restricted to access groups they do
not hold, or deleted — gets one answer for both (the API's `key_unavailable`), which tells
nothing about that document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy, ngettext

from console.admin.confirmation import require
from console.admin.scoping import TenantScopedAdmin, groups_refused
from console.admin.upload_words import key_unavailable_words, upload_refusal_words
from console.formats import accepted_kinds_words
from kb.models import (
    Document,
    KnowledgeBase,
)
from kb.selectors.builds import served_now
from kb.selectors.documents import awaiting_approval_words
from kb.services.base import InvalidUpload
from kb.services.documents import document_create, revision_create
from kb.uploads import (
    AcceptedUpload,
    UploadRejected,
    kept_upload,
    kept_upload_token,
    oversized_messages,
    upload_accept,
)
from textkit.extract import accepted_extensions


class UploadManyForm(forms.Form):
    kb = forms.ModelChoiceField(
        queryset=KnowledgeBase.objects.none(), label=gettext_lazy("Knowledge base")
    )
    access_groups = forms.CharField(
        label=gettext_lazy("Access groups"),
        required=False,
        help_text=gettext_lazy("Comma-separated, for new documents; only groups you hold."),
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


def key_of(name: str) -> str:
    """The document key a file's name gives: the name without its extension."""
    return name.rsplit(".", 1)[0][:255] or "upload"


def unavailable(accepted: AcceptedUpload, key: str) -> str:
    """The one answer for a key held by a document the uploader may not write, restricted or
    deleted alike: the API's words (`retrieval.api.uploads.key_unavailable`)."""
    return not_uploaded(accepted.original_name, key_unavailable_words(key))


def not_uploaded(what: str, why: str = "") -> str:
    """ "Not uploaded: name.pdf: why" (or "Not uploaded: why" when the why names the file)."""
    if why:
        return gettext("Not uploaded: %(file)s: %(why)s") % {"file": what, "why": why}
    return gettext("Not uploaded: %(why)s") % {"why": what}


def writable_document(
    model_admin: TenantScopedAdmin, request: HttpRequest, kb: KnowledgeBase, key: str
) -> tuple[Document | None, bool]:
    """The document holding `key` in `kb`, and whether the user may upload a revision of it:
    (None, True) when the key is free; (None, False) when a document the user may not read, or
    a deleted one, holds it — told apart nowhere, so no answer depends on what they may not
    read."""
    if not Document.objects.filter(kb=kb, key=key).exists():
        return None, True
    document = model_admin.get_queryset(request).filter(kb=kb, key=key).first()
    if document is None or document.deleted_at is not None:
        return None, False
    return document, True


@dataclass(frozen=True)
class Clash:
    """A file named like a document the user may write: it would become its next revision."""

    accepted: AcceptedUpload
    token: str  # the stored file, kept for this session across the confirmation
    document: Document
    served: int | None  # the revision search serves now
    next_revision: int

    @property
    def size(self) -> str:
        return filesizeformat(self.accepted.stored.size)


def upload_many_view(model_admin: TenantScopedAdmin, request: HttpRequest) -> HttpResponse:
    """Many files at once. A file whose name (without extension) matches no document becomes a
    new document at once, titled by the parse stage with the title found in the file (none is
    given here). A file whose name matches a document the user may write is only stored and
    kept (`kb.uploads.kept_upload_token`): a confirmation page lists those files with the
    documents they would become new revisions of, and `upload_revisions_view` uploads the ones
    confirmed. Each upload is in the document's History (LogEntry). Messages name each file as
    it was uploaded and never start with it (the admin capitalises a message's first letter)."""
    require(request, "kb.add_document")
    kbs = model_admin.scoped_queryset(request, KnowledgeBase)
    form = UploadManyForm(request.POST or None, kbs=kbs, request=request)
    if request.method == "POST" and form.is_valid():
        files = request.FILES.getlist("files")
        oversized = oversized_messages(request)  # refused while they streamed in
        for message in oversized:
            messages.error(request, not_uploaded(message))
        if not files and not oversized:
            messages.error(request, gettext("Choose at least one file."))
        kb = form.cleaned_data["kb"]
        groups = form.cleaned_data["access_groups"]
        clashes: list[Clash] = []
        for upload in files:
            try:
                accepted = upload_accept(upload)
            except UploadRejected as exc:
                messages.error(request, not_uploaded(upload_refusal_words(exc)))
                continue
            key = key_of(accepted.original_name)
            document, writable = writable_document(model_admin, request, kb, key)
            if not writable:
                messages.error(request, unavailable(accepted, key))
            elif document is None:
                _create(model_admin, request, kb, key, accepted, groups)
            elif not model_admin.has_change_permission(request, document):
                messages.error(
                    request,
                    not_uploaded(
                        accepted.original_name,
                        gettext(
                            "it would be a new revision of %(key)s, and you may not upload "
                            "revisions."
                        )
                        % {"key": key},
                    ),
                )
            else:
                clashes.append(_clash(request, accepted, document))
        if clashes:
            return _confirmation_page(model_admin, request, kb, clashes)
        if files:
            return HttpResponseRedirect(reverse("admin:kb_document_changelist"))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Upload files"),
        "form": form,
        "accepted_kinds": accepted_kinds_words(),
        "accept": ",".join(accepted_extensions()),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/document/upload_many.html", context)


def _create(
    model_admin: TenantScopedAdmin,
    request: HttpRequest,
    kb: KnowledgeBase,
    key: str,
    accepted: AcceptedUpload,
    groups: list[str],
) -> None:
    size = filesizeformat(accepted.stored.size)
    try:
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
    except InvalidUpload:  # created meanwhile by someone else: whose, is not ours to say
        messages.error(request, unavailable(accepted, key))
        return
    model_admin.log_addition(
        request,
        revision.document,
        gettext("Added with Upload files; uploaded %(name)s (%(size)s) as revision 1.")
        % {"name": accepted.original_name, "size": size},
    )
    messages.success(
        request,
        gettext(
            "New document %(key)s from %(name)s (%(size)s); its title is the one found in the "
            "file once it is parsed."
        )
        % {"key": key, "name": accepted.original_name, "size": size},
    )


def _clash(request: HttpRequest, accepted: AcceptedUpload, document: Document) -> Clash:
    served = served_now(document=document)
    latest = document.revisions.order_by("-number").values_list("number", flat=True).first()
    return Clash(
        accepted=accepted,
        token=kept_upload_token(request, accepted),
        document=document,
        served=served.revision.number if served else None,
        next_revision=(latest or 0) + 1,
    )


def _confirmation_page(
    model_admin: TenantScopedAdmin,
    request: HttpRequest,
    kb: KnowledgeBase,
    clashes: list[Clash],
) -> HttpResponse:
    n = len(clashes)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": ngettext(
            "%(n)s file would become a new revision", "%(n)s files would become new revisions", n
        )
        % {"n": n},
        "kb": kb,
        "clashes": clashes,
        "approval": awaiting_approval_words() if kb.require_approval else "",
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/document/upload_revisions_confirm.html", context)


def upload_revisions_view(model_admin: TenantScopedAdmin, request: HttpRequest) -> HttpResponse:
    """The confirmation's answer: each ticked file (redeemed from its kept-upload token, which
    only this user's session can) becomes a new revision of the document it was shown with, if
    that document still holds the key and the user may still write it; nothing else is uploaded.
    Refusals read as in the first step."""
    require(request, "kb.add_document")
    documents_url = reverse("admin:kb_document_changelist")
    if request.method != "POST":
        return HttpResponseRedirect(reverse("admin:kb_document_upload"))
    kb = model_admin.scoped_queryset(request, KnowledgeBase).filter(pk=_int(request, "kb")).first()
    if kb is None:
        raise Http404(gettext("Not found."))
    count = min(_int(request, "count"), 1000)
    tokens = [request.POST.get(f"token-{i}", "") for i in range(count)]
    kept = [
        (i, kept_upload(request, token), _int(request, f"document-{i}"))
        for i, token in enumerate(tokens)
    ]
    if "cancel" in request.POST:
        names = ", ".join(accepted.original_name for _, accepted, _ in kept if accepted)
        messages.info(
            request,
            gettext("Not uploaded, as you chose: %(names)s.")
            % {"names": names or gettext("nothing")},
        )
        return HttpResponseRedirect(documents_url)
    skipped = []
    for i, accepted, document_id in kept:
        if accepted is None:
            messages.error(
                request, not_uploaded(gettext("a file is no longer kept; choose it again."))
            )
            continue
        if f"replace-{i}" not in request.POST:
            skipped.append(accepted.original_name)
            continue
        _revise(model_admin, request, kb, accepted, document_id)
    if skipped:
        messages.info(
            request,
            gettext("Not uploaded, as you chose: %(names)s.") % {"names": ", ".join(skipped)},
        )
    return HttpResponseRedirect(documents_url)


def _revise(
    model_admin: TenantScopedAdmin,
    request: HttpRequest,
    kb: KnowledgeBase,
    accepted: AcceptedUpload,
    document_id: int,
) -> None:
    key = key_of(accepted.original_name)
    document, writable = writable_document(model_admin, request, kb, key)
    if not writable:
        messages.error(request, unavailable(accepted, key))
        return
    if document is None or document.pk != document_id:
        messages.error(
            request,
            not_uploaded(
                accepted.original_name,
                gettext(
                    "the document with key %(key)s is not the one you confirmed any more; upload "
                    "the file again."
                )
                % {"key": repr(key)},
            ),
        )
        return
    if not model_admin.has_change_permission(request, document):
        messages.error(
            request,
            not_uploaded(
                accepted.original_name,
                gettext("you may not upload revisions of %(key)s.") % {"key": key},
            ),
        )
        return
    size = filesizeformat(accepted.stored.size)
    try:
        revision = revision_create(
            document=document,
            stored=accepted.stored,
            media_type=accepted.media_type,
            original_name=accepted.original_name,
            actor=request.user,
        )
    except InvalidUpload:  # deleted since it was read (revision_create holds its lock)
        messages.error(request, unavailable(accepted, key))
        return
    model_admin.log_change(
        request,
        document,
        gettext("Uploaded %(name)s (%(size)s) as revision %(n)s with Upload files.")
        % {"name": accepted.original_name, "size": size, "n": revision.number},
    )
    messages.success(
        request,
        gettext("Revision %(n)s of %(key)s from %(name)s (%(size)s).")
        % {"n": revision.number, "key": key, "name": accepted.original_name, "size": size},
    )


def _int(request: HttpRequest, name: str) -> int:
    value = request.POST.get(name, "")
    return int(value) if value.isdigit() else 0
