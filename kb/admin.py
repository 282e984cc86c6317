"""The admin for content managers: upload documents and revisions, watch their builds go live.

Every queryset, choice and filter is scoped to the user's tenant and, where rows show a
document, to the documents whose access groups the user may read: the API's rule, from the same
`kb.selectors` (superusers see all). Saves call `kb.services`; nothing here writes model rows
directly except plain metadata edits.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import get_fields_from_path, unquote
from django.contrib.postgres.forms import SimpleArrayField
from django.core.exceptions import ImproperlyConfigured
from django.db.models import BooleanField, DateField, Model, Q, QuerySet
from django.http import Http404, HttpRequest
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from kb import admin_views, selectors, services
from kb.models import (
    Build,
    Document,
    IndexVersion,
    KnowledgeBase,
    PublicationEvent,
    Revision,
    Tenant,
    TenantMembership,
)
from kb.uploads import SKIPPED_ATTR, UploadRejected, upload_accept

READER_ATTR = "_canon_admin_reader"
NOT_FOUND = "Not found."  # one answer for missing, malformed, another tenant's and restricted


def request_reader(request: HttpRequest) -> selectors.Reader | None:
    """The user's tenant and access groups, as the API sees the same user
    (`kb.selectors.reader_of_user`), read once per request."""
    if not hasattr(request, READER_ATTR):
        setattr(request, READER_ATTR, selectors.reader_of_user(request.user))
    reader: selectors.Reader | None = getattr(request, READER_ATTR)
    return reader


def user_tenant_id(request: HttpRequest) -> int | None:
    reader = request_reader(request)
    return reader.tenant_id if reader else None


def user_tenant_ids(request: HttpRequest) -> list[int]:
    tenant_id = user_tenant_id(request)
    return [tenant_id] if tenant_id else []


def readable_filter(request: HttpRequest, *, path: str = "") -> Q | None:
    """The documents (or rows reaching one through `path`) whose content the user may see, by
    their access groups; None when that is all of them (superusers)."""
    if request.user.is_superuser:
        return None
    reader = request_reader(request)
    if reader is None:
        return Q(pk__in=[])
    if reader.all_groups:
        return None
    return selectors.readable_documents_q(
        access_groups=reader.access_groups, all_groups=False, path=path
    )


def may_read(request: HttpRequest, document: Document) -> bool:
    """`readable_filter` for one document already loaded."""
    if request.user.is_superuser:
        return True
    reader = request_reader(request)
    return reader is not None and selectors.may_read_groups(
        groups=document.access_groups,
        access_groups=reader.access_groups,
        all_groups=reader.all_groups,
    )


def groups_refused(
    request: HttpRequest, groups: list[str], *, kept: Any = (), document: bool = True
) -> str | None:
    """Why `request`'s user may not put a document (or, `document=False`, an API key) behind
    `groups` (None if they may): only groups they hold, besides those it has already (`kept`),
    and never a document so that they could not read it back; as the API allows."""
    if request.user.is_superuser:
        return None
    reader = request_reader(request)
    held = reader.access_groups if reader else frozenset()
    foreign = selectors.access_groups_not_held(
        groups=set(groups) - set(kept), access_groups=held, all_groups=False
    )
    if foreign:
        return f"You may only assign access groups you hold; not: {', '.join(foreign)}."
    if document and not selectors.may_read_groups(
        groups=groups, access_groups=held, all_groups=False
    ):
        return "Keep a group you hold, or none: you could not read the document otherwise."
    return None


class TenantScopedAdmin(admin.ModelAdmin):
    """Every row, choice and filter option this admin offers is one the user may see: rows of
    their tenant (through `tenant_path`, a lookup to Tenant's id) and, where a row shows a
    document's content (`document_path`: "" for documents, else the lookup to the document),
    only documents whose access groups they may read, the API's rule. Superusers see all.

    Every view of one object finds it with `get_scoped_object_or_404`, so a malformed id, an id
    that does not exist, another tenant's and a restricted document's get the same answer."""

    tenant_path = "tenant_id"
    document_path: str | None = None

    def bound_view(self, view: Any) -> Any:
        """An admin view function `view(model_admin, request, ...)`, behind the admin's login."""
        return self.admin_site.admin_view(partial(view, self))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)
        if request.user.is_superuser:
            return qs
        reader = request_reader(request)
        if reader is None:
            return qs.none()
        qs = qs.filter(**{self.tenant_path: reader.tenant_id})
        readable = (
            None
            if self.document_path is None
            else readable_filter(request, path=self.document_path)
        )
        return qs if readable is None else qs.filter(readable)

    def get_scoped_object_or_404(self, request: HttpRequest, object_id: str) -> Any:
        """The row `object_id` names, if the user may see it; else Http404, whatever the
        reason (Django's `get_object` converts the id with the key field's `to_python`)."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(NOT_FOUND)
        return obj

    def scoped_queryset(self, request: HttpRequest, model: type[Model]) -> QuerySet[Any]:
        """The rows of `model` the user may see: its own admin's queryset. Choices, filter
        options and lookups of related rows come from here; a model without a tenant-scoped
        admin (users, say) offers its rows to superusers only."""
        related = self.admin_site._registry.get(model)
        if isinstance(related, TenantScopedAdmin):
            return related.get_queryset(request)
        rows: QuerySet[Any] = model._default_manager.all()
        return rows if request.user.is_superuser else rows.none()

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("queryset", self.scoped_queryset(request, db_field.related_model))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("queryset", self.scoped_queryset(request, db_field.related_model))
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def get_list_filter(self, request: HttpRequest) -> Any:
        """Relation filters offer only related rows the user may see (Django's own offer every
        row of the related model); a filter on a plain field across a relation would list the
        values of every tenant, so it is refused."""
        return [scoped_list_filter(self.model, entry) for entry in super().get_list_filter(request)]


class ScopedRelatedFieldListFilter(admin.RelatedFieldListFilter):
    """A relation's filter whose choices are the related rows the user may see."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        ordering = self.field_admin_ordering(field, request, model_admin)
        visible = model_admin.scoped_queryset(request, field.related_model)
        return field.get_choices(
            include_blank=False,
            ordering=ordering,
            limit_choices_to={"pk__in": visible.values("pk")},
        )


def scoped_list_filter(model: type[Model], entry: Any) -> Any:
    """`entry` of a list_filter, with relation fields given the scoped filter."""
    if not isinstance(entry, str | tuple) or (
        isinstance(entry, tuple) and issubclass(entry[1], ScopedRelatedFieldListFilter)
    ):
        return entry  # a SimpleListFilter (its lookups are its own), or already scoped
    name = entry if isinstance(entry, str) else entry[0]
    fields = get_fields_from_path(model, name)
    if fields[-1].is_relation:
        return (name, ScopedRelatedFieldListFilter)
    plain = not (fields[-1].choices or isinstance(fields[-1], BooleanField | DateField))
    if len(fields) > 1 and plain:
        raise ImproperlyConfigured(f"list_filter {name!r} would list every tenant's values.")
    return entry


def _file_error(request: HttpRequest, field: str, upload: Any) -> str | None:
    if field in getattr(request, SKIPPED_ATTR, set()):
        return "The file is larger than the upload limit and was not stored."
    if upload is None:
        return None
    try:
        upload._canon_accepted = upload_accept(upload)
    except UploadRejected as exc:
        return str(exc)
    return None


def _explain_groups(form: Any) -> None:
    """Say which groups the user may assign: a document with groups is read only by holders of
    one of them, here as in the API."""
    request = form.request
    if request.user.is_superuser:
        held = "any"
    else:
        reader = request_reader(request)
        held = (
            ", ".join(sorted(reader.access_groups)) if reader and reader.access_groups else "none"
        )
    form.fields["access_groups"].help_text = (
        "Comma-separated. Only holders of one of these groups read the document, in the admin "
        f"and through the API; empty: everyone in the tenant. Groups you may assign: {held}."
    )


class DocumentCreateForm(forms.ModelForm):
    file = forms.FileField(help_text="PDF, DOCX, HTML, Markdown or plain text.")
    access_groups = SimpleArrayField(forms.CharField(max_length=100), required=False)

    class Meta:
        model = Document
        fields = ["kb", "key", "title", "access_groups"]

    request: HttpRequest

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _explain_groups(self)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        error = _file_error(self.request, "file", data.get("file"))
        if error:
            self.add_error("file", error)
        refused = groups_refused(self.request, data.get("access_groups") or [])
        if refused:
            self.add_error("access_groups", refused)
        return data


class DocumentChangeForm(forms.ModelForm):
    new_revision = forms.FileField(
        required=False, help_text="Upload a new revision; the live one serves until it is ready."
    )
    access_groups = SimpleArrayField(forms.CharField(max_length=100), required=False)

    class Meta:
        model = Document
        fields = ["title", "access_groups"]

    request: HttpRequest

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _explain_groups(self)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        error = _file_error(self.request, "new_revision", data.get("new_revision"))
        if error:
            self.add_error("new_revision", error)
        refused = groups_refused(
            self.request, data.get("access_groups") or [], kept=self.instance.access_groups
        )
        if refused:
            self.add_error("access_groups", refused)
        return data


class RevisionInline(admin.TabularInline):
    model = Revision
    extra = 0
    can_delete = False
    ordering = ["-number"]
    fields = readonly_fields = (
        "number",
        "original_name",
        "media_type",
        "size",
        "uploaded_by",
        "created_at",
        "builds",
    )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="builds")
    def builds(self, revision: Revision) -> str:
        rows = [
            (
                p["index_version"],
                p["state"],
                p["label"],
                f" — {p['error']}" if p["error"] else "",
            )
            for p in (
                selectors.build_progress_of(build=b)
                for b in revision.builds.select_related("index_version").order_by(
                    "index_version__number"
                )
            )
        ]
        return format_html_join("", "<div>v{}: <b>{}</b> ({} chunks){}</div>", rows) or "—"


@admin.register(Document)
class DocumentAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    document_path = ""
    list_display = ["key", "title", "kb", "status", "progress", "updated_at"]
    list_filter = ["kb"]
    search_fields = ["key", "title"]
    inlines = [RevisionInline]
    readonly_fields = ["kb", "key", "status", "desired_revision", "deleted_at", "created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related("kb__tenant")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["kb", "key", "title", "access_groups", "file"]
        return [
            "kb",
            "key",
            "title",
            "access_groups",
            "status",
            "desired_revision",
            "deleted_at",
            "created_at",
            "new_revision",
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else self.readonly_fields

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

    @admin.display(description="running builds")
    def progress(self, document: Document) -> str:
        """A progress bar per running build; the change list's script keeps them current."""
        running = [
            b
            for b in selectors.build_progress(document=document)
            if b["state"] in selectors.RUNNING_BUILD_STATES
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

    @admin.display(description="status")
    def status(self, document: Document) -> str:
        return selectors.document_status(document=document)

    def save_model(self, request: HttpRequest, obj: Document, form: Any, change: bool) -> None:
        if not change:
            accepted = form.cleaned_data["file"]._canon_accepted
            revision = services.document_create(
                kb=form.cleaned_data["kb"],
                key=form.cleaned_data["key"],
                title=form.cleaned_data["title"],
                access_groups=form.cleaned_data.get("access_groups") or [],
                stored=accepted.stored,
                media_type=accepted.media_type,
                original_name=accepted.original_name,
                actor=request.user,
            )
            obj.pk = revision.document_id
            obj.created_at = revision.document.created_at
            return
        services.document_update(
            document=obj,
            title=form.cleaned_data["title"],
            access_groups=form.cleaned_data.get("access_groups") or [],
        )
        upload = form.cleaned_data.get("new_revision")
        if upload is not None:
            accepted = upload._canon_accepted
            revision = services.revision_create(
                document=obj,
                stored=accepted.stored,
                media_type=accepted.media_type,
                original_name=accepted.original_name,
                actor=request.user,
            )
            messages.info(request, f"Revision {revision.number} uploaded; it goes live when built.")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deletes go through the delete protocol, not a cascade

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            path("upload/", wrap(admin_views.upload_many_view), name="kb_document_upload"),
            path(
                "<path:object_id>/approve/<int:build_id>/",
                wrap(admin_views.approve_view),
                name="kb_document_approve",
            ),
            path(
                "<path:object_id>/rollback/<int:build_id>/",
                wrap(admin_views.rollback_view),
                name="kb_document_rollback",
            ),
            path(
                "<path:object_id>/retry/<int:build_id>/",
                wrap(admin_views.retry_view),
                name="kb_document_retry",
            ),
            path(
                "<path:object_id>/soft-delete/",
                wrap(admin_views.delete_view),
                name="kb_document_soft_delete",
            ),
            path(
                "<path:object_id>/restore/",
                wrap(admin_views.restore_view),
                name="kb_document_restore",
            ),
            path(
                "<path:object_id>/progress/",
                wrap(admin_views.progress_view),
                name="kb_document_progress",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        document = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if document is not None:
            live = selectors.live_build(document=document)
            extra.update(
                builds=[
                    (b, selectors.build_progress_of(build=b))
                    for b in selectors.document_builds(document=document)
                ],
                live_build=live,
                history=document.events.select_related("actor", "build__revision").order_by("-id")[
                    :50
                ],
                can_approve=request.user.has_perm("kb.approve_build"),
                can_rollback=request.user.has_perm("kb.rollback_document"),
                can_retry=request.user.has_perm("kb.retry_build"),
                can_delete=request.user.has_perm("kb.soft_delete_document"),
                can_restore=request.user.has_perm("kb.restore_document"),
            )
        return super().change_view(request, object_id, form_url, extra)


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(TenantScopedAdmin):
    list_display = ["slug", "name", "tenant", "active_index_version", "require_approval"]
    fields = [
        "tenant",
        "name",
        "slug",
        "description",
        "require_approval",
        "retention_days",
        "active_index_version",
    ]
    readonly_fields = ["active_index_version"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return (
            ["active_index_version"] if obj is None else ["tenant", "slug", "active_index_version"]
        )

    def save_model(self, request: HttpRequest, obj: KnowledgeBase, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created = services.knowledge_base_create(
            tenant=obj.tenant,
            name=obj.name,
            slug=obj.slug,
            require_approval=obj.require_approval,
        )
        obj.pk = created.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            path(
                "<path:object_id>/index-versions/new/",
                wrap(admin_views.index_version_create_view),
                name="kb_indexversion_new",
            ),
            path(
                "<path:object_id>/index-versions/<int:version_id>/activate/",
                wrap(admin_views.index_version_swap_view),
                name="kb_indexversion_activate",
            ),
            path(
                "<path:object_id>/index-versions/rollback/",
                wrap(admin_views.index_version_rollback_view),
                name="kb_indexversion_rollback",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        kb = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if kb is not None:
            versions = [
                (v, selectors.index_version_progress(version=v, named=readable_filter(request)))
                for v in kb.index_versions.order_by("-number")
            ]
            extra.update(
                versions=versions,
                can_manage_versions=request.user.has_perm("kb.manage_index_versions"),
                has_retired=any(v.state == IndexVersion.State.RETIRED for v, _ in versions),
            )
        return super().change_view(request, object_id, form_url, extra)


@admin.register(IndexVersion)
class IndexVersionAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    list_display = ["kb", "number", "state", "provider", "model", "dimensions", "created_at"]
    readonly_fields = [f.name for f in IndexVersion._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Build)
class BuildAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    document_path = "document"
    list_display = [
        "id",
        "document",
        "revision_number",
        "index_version",
        "state",
        "progress",
        "updated_at",
    ]
    list_filter = ["state"]
    list_select_related = ["document", "revision", "index_version__kb__tenant"]
    readonly_fields = [f.name for f in Build._meta.fields]

    @admin.display(description="revision")
    def revision_number(self, build: Build) -> int:
        return build.revision.number

    @admin.display(description="chunks")
    def progress(self, build: Build) -> str:
        return format_html("{}", selectors.build_progress_of(build=build)["label"])

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PublicationEvent)
class PublicationEventAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    document_path = "document"
    list_display = ["created_at", "action", "document", "revision_number", "build", "actor"]
    list_filter = ["action"]
    readonly_fields = [f.name for f in PublicationEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = "id"
    list_display = ["slug", "name", "created_at"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser


@admin.register(TenantMembership)
class TenantMembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "access_groups"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser
