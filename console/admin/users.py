"""Users, on one page: Django's user admin with the user's tenant membership (tenant and access
groups) inline beside their roles, so setting up a content manager is one page, not three. For
a person who signs in through the identity provider, the page says where their access comes
from: which claim's value gave which tenant, role and groups at their last sign-in or re-check
(`identity.models.ExternalIdentity.grants`), and which values gave nothing."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, gettext_lazy

from console.permission_words import permission_label
from console.words import role_words
from identity.models import ExternalIdentity
from kb.document_states import utc_text
from kb.models import TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS

ACCESS_GROUPS_HELP = gettext_lazy(
    "Comma-separated, e.g. finance,hr. The user reads documents without access groups and those "
    "behind any group listed here, in the admin and through the API; empty: only documents "
    "without groups. Superusers read every group."
)


def roles_help() -> str:
    return gettext(
        "What the user may do. %(content_managers)s: upload, retry, delete and restore "
        "documents. %(index_admins)s: that, and approve, roll back, index versions, API keys "
        "and the dashboard. A role never widens which documents the user sees: that is the "
        "tenant membership below. Tick Staff status too, so the user may sign in to the admin."
    ) % {
        "content_managers": role_words(CONTENT_MANAGERS),
        "index_admins": role_words(INDEX_ADMINS),
    }


class TenantMembershipForm(forms.ModelForm):
    class Meta:
        model = TenantMembership
        fields = ["user", "tenant", "access_groups"]
        help_texts = {
            "tenant": gettext_lazy("The tenant whose knowledge bases the user works in."),
            "access_groups": ACCESS_GROUPS_HELP,
        }


class TenantMembershipInline(admin.StackedInline):
    model = TenantMembership
    form = TenantMembershipForm
    fields = ["tenant", "access_groups"]
    extra = 1
    max_num = 1
    can_delete = True
    verbose_name = gettext_lazy("tenant membership")
    verbose_name_plural = gettext_lazy(
        "tenant membership (which knowledge bases and documents the user sees)"
    )


admin.site.unregister(User)
admin.site.unregister(Group)


SOURCE_HELP = gettext_lazy(
    "Set from the identity provider at every sign-in and re-check, through the claim mapping: "
    "a role, tenant or access group changed here by hand lasts until then."
)


def _permissions_field(formfield: Any) -> Any:
    """The permissions' list, each in the page's language (`permission_label`)."""
    if formfield is not None:
        formfield.label_from_instance = permission_label
        formfield.queryset = formfield.queryset.select_related("content_type")
    return formfield


@admin.register(Group)
class CanonGroupAdmin(GroupAdmin):
    """Django's, its permissions listed in the page's language."""

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        formfield = super().formfield_for_manytomany(db_field, request, **kwargs)
        return _permissions_field(formfield) if db_field.name == "permissions" else formfield


def _identity(user: User | None) -> ExternalIdentity | None:
    try:
        return user.external_identity if user is not None and user.pk else None
    except ExternalIdentity.DoesNotExist:
        return None


@admin.register(User)
class CanonUserAdmin(UserAdmin):
    """Django's, with the tenant membership inline, the roles explained, and for people of the
    identity provider the source of their access."""

    inlines = [TenantMembershipInline]
    list_display = ("username", "email", "first_name", "last_name", "is_staff", "signs_in_with")

    def get_queryset(self, request: HttpRequest) -> QuerySet[User]:
        return super().get_queryset(request).select_related("external_identity")

    @admin.display(description=gettext_lazy("signs in with"))
    def signs_in_with(self, user: User) -> str:
        identity = _identity(user)
        return identity.get_provider_display() if identity else gettext("local password")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "source_of_access"] if _identity(obj) else fields

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets: list[Any] = list(super().get_fieldsets(request, obj))
        if _identity(obj):
            source = (
                gettext("Source of access"),
                {"fields": ["source_of_access"], "description": SOURCE_HELP},
            )
            fieldsets.insert(1, source)
        return fieldsets

    @admin.display(description=gettext_lazy("from the identity provider"))
    def source_of_access(self, user: User) -> SafeString | str:
        identity = _identity(user)
        if identity is None:
            return gettext("Signs in with a local password.")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    grant.get("claim", ""),
                    grant.get("value", ""),
                    grant.get("tenant", ""),
                    role_words(grant["role"]) if grant.get("role") else "—",
                    ", ".join(grant.get("access_groups") or []) or "—",
                    _mapping_link(grant.get("mapping_id")),
                )
                for grant in identity.grants
            ),
        )
        unmatched = ", ".join(f"{claim}={value}" for claim, value in identity.unmatched)
        signs_in = format_html(
            gettext(
                "Signs in through {provider} as {subject} ({issuer}). Last sign-in {signed_in}; "
                "last re-check {checked}."
            ),
            provider=identity.get_provider_display(),
            subject=format_html("<code>{}</code>", identity.subject),
            issuer=identity.issuer,
            signed_in=_when(identity.signed_in_at),
            checked=_when(identity.checked_at),
        )
        headers = format_html_join(
            "",
            "<th>{}</th>",
            (
                (str(header),)
                for header in (
                    gettext_lazy("Claim"),
                    gettext_lazy("Value"),
                    gettext_lazy("Gave tenant"),
                    gettext_lazy("Role"),
                    gettext_lazy("Access groups"),
                    gettext_lazy("Mapping"),
                )
            ),
        )
        return format_html(
            '<p>{}</p><table class="canon-source-of-access"><thead><tr>{}</tr></thead>'
            "<tbody>{}</tbody></table><p>{}</p>",
            signs_in,
            headers,
            rows
            or format_html(
                '<tr><td colspan="6">{}</td></tr>', gettext("Nothing: no value matched.")
            ),
            gettext("Values that gave nothing: %(values)s.") % {"values": unmatched}
            if unmatched
            else "",
        )

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "groups":
            kwargs["help_text"] = roles_help()
        formfield = super().formfield_for_manytomany(db_field, request, **kwargs)
        return _permissions_field(formfield) if db_field.name == "user_permissions" else formfield


def _mapping_link(mapping_id: int | None) -> SafeString | str:
    if mapping_id is None:
        return gettext("CANON_IDENTITY_MAPPING (settings)")
    url = reverse("admin:identity_claimmapping_change", args=[mapping_id])
    return format_html('<a href="{}">{}</a>', url, gettext("row %(id)s") % {"id": mapping_id})


def _when(moment: Any) -> str:
    return utc_text(moment) if moment else gettext("never")
