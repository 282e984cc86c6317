"""The document admin for content managers: upload documents and revisions, watch their builds
go live. Saves call `kb.services`; nothing here writes model rows directly except plain
metadata edits.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.postgres.forms import SimpleArrayField
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.urls import path, reverse
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, gettext_lazy

from console.admin import (
    bulk_actions,
    bulk_metadata,
    document_actions,
    document_metadata,
    upload_many,
)
from console.admin.document_filters import DocumentStatusFilter, KnowledgeBaseFilter
from console.admin.scoping import TenantScopedAdmin, groups_refused, may_read, request_reader
from console.admin.upload_words import key_unavailable_words, upload_refusal_words
from console.formats import accepted_kinds_words, format_words
from kb import document_states
from kb.metadata import MetadataInvalid, normalise_metadata
from kb.models import (
    Document,
    KnowledgeBase,
    Revision,
)
from kb.selectors.builds import RUNNING_BUILD_STATES, build_progress, served_now
from kb.selectors.documents import (
    approval_words,
    document_build_rows,
    document_status,
)
from kb.services.base import ActionRefused
from kb.services.documents import FIELD_WORDS, document_create, document_update, revision_create
from kb.uploads import (
    SKIPPED_ATTR,
    AcceptedUpload,
    UploadRejected,
    kept_upload,
    kept_upload_token,
    upload_accept,
)
from sources.selectors import document_source
from textkit.extract import accepted_extensions

# The accepted kinds, named in the language of the page that shows the upload field.
lazy_accepted_kinds = lazy(lambda: f"{accepted_kinds_words()}.", str)()

# What the History page (Django's LogEntry) records for a save that uploaded a file.
UPLOAD_LOG_ATTR = "_canon_upload_log"


def _file_error(request: HttpRequest, field: str, upload: Any) -> str | None:
    if field in getattr(request, SKIPPED_ATTR, set()):
        return gettext("The file is larger than the upload limit and was not stored.")
    if upload is None:
        return None
    try:
        upload._canon_accepted = upload_accept(upload)
    except UploadRejected as exc:
        return upload_refusal_words(exc)
    return None


def _accept_upload(form: Any, field: str, data: dict[str, Any], *, required: bool) -> None:
    """The file of `field`, or the one the page kept from the last try (`kept_upload`: a signed
    token of the stored file, bound to the user's session), as `form.accepted_upload`; and the
    token for the next try, so a form refused for another field (a title, a key, groups) does
    not drop the file the user chose: browsers cannot fill a file input again."""
    request = form.request
    upload = data.get(field)
    error = _file_error(request, field, upload)
    accepted: AcceptedUpload | None = None
    if upload is not None and error is None:
        accepted = upload._canon_accepted
    elif upload is None and error is None:
        token = data.get("kept_upload") or ""
        accepted = kept_upload(request, token)
        if accepted is None and token:
            error = gettext("The file you chose before is no longer kept; choose it again.")
        elif accepted is None and required:
            error = gettext("Choose a file.")
    if error:
        form.add_error(field, error)
    form.accepted_upload = accepted
    if accepted is not None:
        form.data = form.data.copy()
        form.data["kept_upload"] = kept_upload_token(request, accepted)
        kept = gettext(
            "Kept from your last try: %(name)s (%(size)s). Choose a file only to replace it."
        ) % {"name": accepted.original_name, "size": filesizeformat(accepted.stored.size)}
        # the bound field copied the help text when validation created it
        form.fields[field].help_text = form[field].help_text = kept


def upload_message(kb: KnowledgeBase, number: int, accepted: AcceptedUpload) -> str:
    """What happens to an uploaded revision next: built, then live, or, where the knowledge
    base requires approval, built and then waiting for an approver."""
    words = {"n": number, "name": accepted.original_name}
    if kb.require_approval:
        return gettext(
            "Revision %(n)s (%(name)s) uploaded; once built, it waits for %(approval)s before it "
            "goes live."
        ) % {**words, "approval": approval_words()}
    return gettext("Revision %(n)s (%(name)s) uploaded; it goes live when built.") % words


def _upload_words(accepted: AcceptedUpload, number: int) -> str:
    return gettext("uploaded %(name)s (%(size)s) as revision %(n)s") % {
        "name": accepted.original_name,
        "size": filesizeformat(accepted.stored.size),
        "n": number,
    }


def _explain_groups(form: Any) -> None:
    """Say which groups the user may assign: a document with groups is read only by holders of
    one of them, here as in the API."""
    request = form.request
    if request.user.is_superuser:
        held = gettext("any")
    else:
        reader = request_reader(request)
        held = (
            ", ".join(sorted(reader.access_groups))
            if reader and reader.access_groups
            else gettext("none")
        )
    form.fields["access_groups"].help_text = gettext(
        "Comma-separated. Only holders of one of these groups read the document, in the admin "
        "and through the API; empty: everyone in the tenant. Groups you may assign: %(held)s."
    ) % {"held": held}


class DocumentCreateForm(forms.ModelForm):
    file = forms.FileField(
        label=gettext_lazy("File"),
        required=False,
        help_text=lazy_accepted_kinds,
        widget=forms.ClearableFileInput(attrs={"accept": ",".join(accepted_extensions())}),
    )
    kept_upload = forms.CharField(required=False, widget=forms.HiddenInput)
    access_groups = SimpleArrayField(
        forms.CharField(max_length=100), required=False, label=gettext_lazy("Access groups")
    )
    metadata = document_metadata.JsonObjectField(
        label=gettext_lazy("Metadata"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "class": "vLargeTextField"}),
        help_text=gettext_lazy(
            'Optional: a JSON object, e.g. {"department": "hr", "year": 2024}, checked '
            "against the metadata fields the knowledge base declares."
        ),
    )

    class Meta:
        model = Document
        fields = ["kb", "key", "title", "access_groups"]
        labels = {"kb": gettext_lazy("Knowledge base")}

    request: HttpRequest
    accepted_upload: AcceptedUpload | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _explain_groups(self)
        self.fields["title"].required = False
        self.fields["title"].help_text = gettext("Leave empty to use the title found in the file.")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        self._key_free(data)
        if data.get("kb") and data.get("metadata"):
            try:
                normalise_metadata(data["kb"], data["metadata"])
            except MetadataInvalid as exc:
                self.add_error("metadata", str(exc))
        _accept_upload(self, "file", data, required=True)
        refused = groups_refused(self.request, data.get("access_groups") or [])
        if refused:
            self.add_error("access_groups", refused)
        return data

    def _key_free(self, data: dict[str, Any]) -> None:
        """A taken key is refused here rather than by the model's unique constraint: where the
        user may read and write the document that holds it, they are pointed to its page (its
        New revision field); where they may not — it is restricted to access groups they do not
        hold, or deleted — they get one answer for both, the API's (`key_unavailable`)."""
        kb, key = data.get("kb"), data.get("key")
        if not kb or not key:
            return
        document = Document.objects.filter(kb=kb, key=key).first()
        if document is None:
            return
        if document.deleted_at is None and may_read(self.request, document):
            url = reverse("admin:kb_document_change", args=[document.pk])
            self.add_error(
                "key",
                format_html(
                    gettext(
                        "A document with key “{}” already exists. To replace its file, upload a "
                        'new revision on <a class="new-revision-link" href="{}#id_new_revision">'
                        "its page</a>."
                    ),
                    key,
                    url,
                ),
            )
            return
        self.add_error("key", key_unavailable_words(key))


class DocumentChangeForm(forms.ModelForm):
    """The document page's form. It writes back only what the user changed on the page, never
    a value the page did not show current: each editable field carries the value the page was
    rendered with (Django's hidden initial, `initial-<field>`), and a field is edited when the
    posted value differs from it. A field not edited keeps what is stored now (the title the
    parse stage found after the page was opened, say); an edited field whose stored value moved
    since the page was rendered is refused with the value it has now, and saved on the next
    try. The save is a compare-and-set under the document lock (`document_update(seen=...)`).

    Why not refresh every field live instead: the page does refresh an untouched Title (its
    script, from the progress JSON), but a page whose script did not run, a field the user has
    begun to edit, or a change by another person would still be written back silently."""

    new_revision = forms.FileField(
        label=gettext_lazy("New revision"),
        required=False,
        help_text=gettext_lazy("Upload a new revision; the live one serves until it is ready."),
    )
    kept_upload = forms.CharField(required=False, widget=forms.HiddenInput)
    access_groups = SimpleArrayField(
        forms.CharField(max_length=100), required=False, label=gettext_lazy("Access groups")
    )

    class Meta:
        model = Document
        fields = ["title", "access_groups"]

    EDITABLE = ("title", "access_groups")
    request: HttpRequest
    accepted_upload: AcceptedUpload | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _explain_groups(self)
        # the metadata inputs (`document_metadata`) follow the same rule as title and groups
        self.metadata_names = document_metadata.add_form_fields(self, self.instance.kb)
        self.initial.update(document_metadata.initial_values(self, self.instance.metadata))
        self.editable = (*self.EDITABLE, *self.metadata_names)
        for name in self.editable:
            self.fields[name].show_hidden_initial = True
        self.edited: dict[str, Any] = {}  # field -> the value the user gave
        self.seen: dict[str, Any] = {}  # field -> the value the page showed

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        self._compare_with_the_page(data)
        self._metadata_edited()
        _accept_upload(self, "new_revision", data, required=False)
        refused = groups_refused(
            self.request, data.get("access_groups") or [], kept=self.instance.access_groups
        )
        if refused:
            self.add_error("access_groups", refused)
        return data

    def _compare_with_the_page(self, data: dict[str, Any]) -> None:
        """Sort the editable fields into edited (posted value differs from the one the page
        showed) and untouched (given the stored value back, so nothing writes it), and refuse
        an edit of a field whose stored value changed since the page was rendered. A post
        without the page's values (a script) is compared with what is stored."""
        for name in self.editable:
            if name not in data:
                continue  # invalid: its own error says why
            field = self.fields[name]
            stored = self.initial.get(name)
            initial_name = self[name].html_initial_name
            seen = stored
            if initial_name in self.data:
                try:
                    seen = field.to_python(self.data.get(initial_name))
                except forms.ValidationError:
                    seen = None
            if _comparable(data[name]) == _comparable(seen):
                data[name] = stored  # untouched: keep what is stored now
                continue
            if _comparable(seen) != _comparable(stored):
                self.add_error(
                    name,
                    gettext(
                        "Changed since you opened this page: it is now %(value)s. Check your "
                        "value and save again."
                    )
                    % {"value": _shown(stored)},
                )
                # the next save compares with the value the page now names
                posted = self.data.copy()  # type: ignore[attr-defined]  # a QueryDict
                posted[initial_name] = field.prepare_value(stored)
                self.data = posted
                continue
            self.edited[name] = data[name]
            self.seen[name] = seen

    def _metadata_edited(self) -> None:
        """The metadata to write when the user edited one of its inputs: the stored metadata
        with the edited fields replaced (an emptied input removes its field), compared and set
        as a whole by `document_update` against the stored value this form read, so a field
        the user did not touch keeps what is stored even if it changed after the page was
        shown. Keys the knowledge base does not declare are dropped once it declares any (the
        fieldset says so). A value that does not fit is an error on its input."""
        edits = {n: self.edited.pop(n) for n in list(self.edited) if n in self.metadata_names}
        for name in edits:
            self.seen.pop(name, None)
        # a post that carries none of the metadata inputs (a script, a form of an older page)
        # does not edit metadata: it would otherwise read as "every field emptied"
        carried = any(
            self[n].html_name in self.data or self[n].html_initial_name in self.data
            for n in self.metadata_names
        )
        if not edits or not carried:
            return
        stored = dict(self.instance.metadata or {})
        if document_metadata.JSON_FIELD in edits:
            metadata = edits[document_metadata.JSON_FIELD] or {}
        else:
            declared = {n[len(document_metadata.PREFIX) :] for n in self.metadata_names}
            metadata = {k: v for k, v in stored.items() if k in declared}
            for name, value in edits.items():
                key = name[len(document_metadata.PREFIX) :]
                metadata.pop(key, None)
                if document_metadata.stored_value(value) is not None:
                    metadata[key] = document_metadata.stored_value(value)
        try:
            normalise_metadata(self.instance.kb, metadata)
        except MetadataInvalid as exc:
            document_metadata.misfit_error(self, exc)
            return
        self.edited["metadata"] = metadata
        self.seen["metadata"] = stored


def _comparable(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return sorted({str(v).strip() for v in value})
    return (value or "").strip() if isinstance(value, str) or value is None else value


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(value) if value else gettext("empty")
    return f"“{value}”"


class RevisionInline(admin.TabularInline):
    model = Revision
    extra = 0
    can_delete = False
    ordering = ["-number"]
    fields = readonly_fields = (
        "number",
        "original_name",
        "kind",
        "file_size",
        "uploaded_by",
        "created_at",
        "builds",
    )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=gettext_lazy("size"))
    def file_size(self, revision: Revision) -> str:
        return filesizeformat(revision.size)

    @admin.display(description=gettext_lazy("kind of file"))
    def kind(self, revision: Revision) -> str:
        """The format as the upload pages name it ("Word (.docx)"), its media type on hover."""
        return format_html(
            '<span title="{}">{}</span>', revision.media_type, format_words(revision.media_type)
        )

    @admin.display(description=gettext_lazy("builds"))
    def builds(self, revision: Revision) -> str:
        """Each build's role (`kb.selectors.builds.build_role_of`: served now, kept for rollback,
        ...)
        and chunks, as the document's progress JSON has them; the page's script refreshes them
        from it by build id."""
        rows = [
            (p["id"], p["index_version"], p["role_kind"], p["role"], p["chunks"])
            for build, p in document_build_rows(document=revision.document)
            if build.revision_id == revision.pk
        ]
        return (
            format_html_join(
                "",
                '<div class="canon-build" data-build="{}">v{}: <b class="role canon-role-{}">{}'
                '</b> <span class="chunks">{}</span></div>',
                rows,
            )
            or "—"
        )


@admin.register(Document)
class DocumentAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    document_path = ""
    list_display = ["key", "title", "knowledge_base", "status", "progress", "updated_at"]
    list_filter = [DocumentStatusFilter, ("kb", KnowledgeBaseFilter)]
    show_facets = admin.ShowFacets.NEVER  # the status filter counts in its own labels
    search_fields = ["key", "title"]
    inlines = [RevisionInline]
    actions = [*bulk_actions.admin_actions(), bulk_metadata.set_metadata]
    readonly_fields = [
        "knowledge_base",
        "key",
        "status",
        "desired_revision",
        "deleted_at",
        "created_at",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related("kb__tenant")

    def get_list_display(self, request: HttpRequest) -> Any:
        """Without the knowledge-base column for a user who sees one knowledge base (the filter
        beside the list names it): the status line gets the room."""
        columns = list(super().get_list_display(request))
        if self.scoped_queryset(request, KnowledgeBase)[:2].count() < 2:
            columns.remove("knowledge_base")
        return columns

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["kb", "key", "title", "access_groups", "metadata", "file", "kept_upload"]
        return [
            "knowledge_base",
            "key",
            "title",
            "access_groups",
            "status",
            "desired_revision",
            "deleted_at",
            "created_at",
            "new_revision",
            "kept_upload",
        ]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """The document's fields, then (on its page) its metadata: one input per field its
        knowledge base declares, or a JSON textarea (`document_metadata`)."""
        fieldsets: list[Any] = list(super().get_fieldsets(request, obj))
        if obj is not None:
            fieldsets.append(
                (
                    gettext("Metadata"),
                    {
                        "fields": document_metadata.field_names(obj.kb),
                        "description": document_metadata.fieldset_words(obj),
                        "classes": ["canon-metadata"],
                    },
                )
            )
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else self.readonly_fields

    def get_inlines(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else super().get_inlines(request, obj)  # no revisions yet

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        kwargs["form"] = DocumentChangeForm if obj is not None else DocumentCreateForm
        kwargs["fields"] = None
        form = super().get_form(request, obj, change, **kwargs)
        # A subclass per request: a class attribute would be shared across threads.
        return type(form.__name__, (form,), {"request": request})

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """Preselect the knowledge base when the user has only one."""
        initial: dict[str, Any] = dict(super().get_changeform_initial_data(request))
        kbs = self.scoped_queryset(request, KnowledgeBase)
        only = list(kbs.values_list("pk", flat=True)[:2])
        if len(only) == 1:
            initial.setdefault("kb", only[0])
        return initial

    @admin.display(description=gettext_lazy("running builds"))
    def progress(self, document: Document) -> str:
        """A progress bar per running build; the change list's script keeps them current."""
        running = [
            b for b in build_progress(document=document) if b["state"] in RUNNING_BUILD_STATES
        ]
        bars = format_html_join(
            "",
            '<div>r{} v{}: <progress max="100" value="{}"></progress> {}</div>',
            ((b["revision"], b["index_version"], b["percent"], b["label"]) for b in running),
        )
        return format_html(
            '<span class="canon-progress" data-url="{}" data-running="{}">{}</span>',
            reverse("admin:kb_document_progress", args=[document.pk]),
            len(running),
            bars or "—",
        )

    @admin.display(description=gettext_lazy("status"))
    def status(self, document: Document) -> str:
        return document_status(document=document)

    @admin.display(description=gettext_lazy("knowledge base"), ordering="kb__slug")
    def knowledge_base(self, document: Document) -> str:
        """The knowledge base, linked to its home (the field's own label would say "Kb")."""
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:kb_knowledgebase_home", args=[document.kb_id]),
            document.kb,
        )

    def save_model(self, request: HttpRequest, obj: Document, form: Any, change: bool) -> None:
        if not change:
            accepted = form.accepted_upload
            revision = document_create(
                kb=form.cleaned_data["kb"],
                key=form.cleaned_data["key"],
                title=form.cleaned_data["title"] or "",
                access_groups=form.cleaned_data.get("access_groups") or [],
                metadata=form.cleaned_data.get("metadata") or None,
                stored=accepted.stored,
                media_type=accepted.media_type,
                original_name=accepted.original_name,
                actor=request.user,
            )
            obj.pk = revision.document_id
            obj.created_at = revision.document.created_at
            setattr(
                request,
                UPLOAD_LOG_ATTR,
                gettext("Added; %(upload)s.") % {"upload": _upload_words(accepted, 1)},
            )
            return
        # only what the user changed on the page, compared with what the page showed
        document_update(document=obj, seen=form.seen, **form.edited)
        changed = [str(FIELD_WORDS.get(name, name.replace("_", " "))) for name in form.edited]
        words = [gettext("changed %(fields)s") % {"fields": ", ".join(changed)}] if changed else []
        accepted = form.accepted_upload
        if accepted is not None:
            revision = revision_create(
                document=obj,
                stored=accepted.stored,
                media_type=accepted.media_type,
                original_name=accepted.original_name,
                actor=request.user,
            )
            messages.info(request, upload_message(obj.kb, revision.number, accepted))
            words.append(_upload_words(accepted, revision.number))
        if words:
            text = "; ".join(words)
            setattr(request, UPLOAD_LOG_ATTR, f"{text[:1].upper()}{text[1:]}.")

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return super().log_addition(request, obj, getattr(request, UPLOAD_LOG_ATTR, message))

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return super().log_change(request, obj, getattr(request, UPLOAD_LOG_ATTR, message))

    # The bulk actions' permissions (Django offers an action only to users who have them).
    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("kb.approve_build")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("kb.retry_build")

    def has_soft_delete_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("kb.soft_delete_document")

    def has_restore_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("kb.restore_document")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, with the work queues (awaiting approval, failed) and their counts above it."""
        counts = document_states.document_state_counts(self.get_queryset(request))
        queues = [
            (state, document_states.STATE_LABELS[state], counts[state])
            for state in document_states.WORK_QUEUES
        ]
        return super().changelist_view(request, {**(extra_context or {}), "work_queues": queues})

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> Any:
        # a document is one upload: "Save and add another" would drop the file's page
        extra = {**(extra_context or {}), "show_save_and_add_another": False}
        return super().add_view(request, form_url, extra)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deletes go through the delete protocol, not a cascade

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            path("upload/", wrap(upload_many.upload_many_view), name="kb_document_upload"),
            path(
                "upload/revisions/",
                wrap(upload_many.upload_revisions_view),
                name="kb_document_upload_revisions",
            ),
            path(
                "<path:object_id>/approve/<int:build_id>/",
                wrap(document_actions.approve_view),
                name="kb_document_approve",
            ),
            path(
                "<path:object_id>/rollback/<int:build_id>/",
                wrap(document_actions.rollback_view),
                name="kb_document_rollback",
            ),
            path(
                "<path:object_id>/retry/<int:build_id>/",
                wrap(document_actions.retry_view),
                name="kb_document_retry",
            ),
            path(
                "<path:object_id>/soft-delete/",
                wrap(document_actions.delete_view),
                name="kb_document_soft_delete",
            ),
            path(
                "<path:object_id>/restore/",
                wrap(document_actions.restore_view),
                name="kb_document_restore",
            ),
            path(
                "<path:object_id>/progress/",
                wrap(document_actions.progress_view),
                name="kb_document_progress",
            ),
            *super().get_urls(),
        ]

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        """Django's, with a refusal of the save (a field changed between the form's check and
        the save's compare-and-set, `document_update`) told on the page: nothing was written."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except (ActionRefused, MetadataInvalid) as exc:
            messages.error(request, gettext("Nothing was saved: %(why)s") % {"why": exc})
            return HttpResponseRedirect(request.path)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        document = self.get_object(request, unquote(object_id))
        extra = {**(extra_context or {}), "show_save_and_add_another": False}
        if document is not None:
            live = served_now(document=document)
            boxes = document_actions.document_boxes(request, document)
            boxes.pop("original")  # Django's change view sets it
            extra.update(boxes, live_build=live)
            # the source it is kept in step with, and the version of the item it took
            extra["document_source"] = document_source(document)
        return super().change_view(request, object_id, form_url, extra)
