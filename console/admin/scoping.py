"""Tenant and access-group scoping for every admin page.

Every queryset, choice and filter is scoped to the user's tenant and, where rows show a
document, to the documents whose access groups the user may read: the API's rule, from the same
`kb.access` (superusers see all). `TenantScopedAdmin.get_scoped_object_or_404` is the one
object lookup of every custom view, so a malformed id, a missing one, another tenant's and a
restricted document get the same answer.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IS_POPUP_VAR
from django.contrib.admin.utils import get_fields_from_path, unquote
from django.core.exceptions import ImproperlyConfigured
from django.db.models import BooleanField, DateField, Model, Q, QuerySet
from django.http import Http404, HttpRequest
from django.utils.text import capfirst
from django.utils.translation import gettext

from kb.access import (
    Reader,
    access_groups_clearing_refused,
    access_groups_not_held,
    may_read_groups,
    readable_documents_q,
    reader_of_user,
)
from kb.models import (
    Document,
)

READER_ATTR = "_canon_admin_reader"
NOT_FOUND = "Not found."  # one answer for missing, malformed, another tenant's and restricted


def request_reader(request: HttpRequest) -> Reader | None:
    """The user's tenant and access groups, as the API sees the same user
    (`kb.access.reader_of_user`), read once per request."""
    if not hasattr(request, READER_ATTR):
        setattr(request, READER_ATTR, reader_of_user(request.user))
    reader: Reader | None = getattr(request, READER_ATTR)
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
    return readable_documents_q(access_groups=reader.access_groups, all_groups=False, path=path)


def may_read(request: HttpRequest, document: Document) -> bool:
    """`readable_filter` for one document already loaded."""
    if request.user.is_superuser:
        return True
    reader = request_reader(request)
    return reader is not None and may_read_groups(
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
    foreign = access_groups_not_held(
        groups=set(groups) - set(kept), access_groups=held, all_groups=False
    )
    if foreign:
        return gettext("You may only assign access groups you hold; not: %(groups)s.") % {
            "groups": ", ".join(foreign)
        }
    if document and not may_read_groups(groups=groups, access_groups=held, all_groups=False):
        return gettext("Keep a group you hold, or none: you could not read the document otherwise.")
    if document:
        return access_groups_clearing_refused(
            before=kept, after=groups, access_groups=held, all_groups=False
        )
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

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> Any:
        """A list is titled by what it lists ("Documents"), not Django's "Select document to
        change" (kept in a popup, where one is picked)."""
        if IS_POPUP_VAR in request.GET:
            return super().changelist_view(request, extra_context)
        title = capfirst(str(self.model._meta.verbose_name_plural))
        return super().changelist_view(request, {"title": title, **(extra_context or {})})

    def get_list_filter(self, request: HttpRequest) -> Any:
        """Relation filters offer only related rows the user may see (Django's own offer every
        row of the related model); a filter on a plain field across a relation would list the
        values of every tenant, so it is refused."""
        return [scoped_list_filter(self.model, entry) for entry in super().get_list_filter(request)]


class ReadOnlyAdmin(TenantScopedAdmin):
    """A scoped admin of records that only the product writes (events, chunks, tasks): they can
    be looked at, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


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
