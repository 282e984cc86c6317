"""Users, on one page: Django's user admin with the user's tenant membership (tenant and access
groups) inline beside their roles, so setting up a content manager is one page, not three. For
a person who signs in through the identity provider, the page says where their access comes
from: which claim's value gave which tenant, role and groups at their last sign-in or re-check
(`identity.models.ExternalIdentity.grants`), and which values gave nothing."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from identity.models import ExternalIdentity
from kb.models import TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS

ACCESS_GROUPS_HELP = (
    "Comma-separated, e.g. finance,hr. The user reads documents without access groups and those "
    "behind any group listed here, in the admin and through the API; empty: only documents "
    "without groups. Superusers read every group."
)
ROLES_HELP = (
    f"What the user may do. {CONTENT_MANAGERS}: upload, retry, delete and restore documents. "
    f"{INDEX_ADMINS}: that, and approve, roll back, index versions, API keys and the dashboard. "
    "A role never widens which documents the user sees: that is the tenant membership below. "
    "Tick Staff status too, so the user may sign in to the admin."
)


class TenantMembershipForm(forms.ModelForm):
    class Meta:
        model = TenantMembership
        fields = ["user", "tenant", "access_groups"]
        help_texts = {
            "tenant": "The tenant whose knowledge bases the user works in.",
            "access_groups": ACCESS_GROUPS_HELP,
        }


class TenantMembershipInline(admin.StackedInline):
    model = TenantMembership
    form = TenantMembershipForm
    fields = ["tenant", "access_groups"]
    extra = 1
    max_num = 1
    can_delete = True
    verbose_name = "tenant membership"
    verbose_name_plural = "tenant membership (which knowledge bases and documents the user sees)"


admin.site.unregister(User)


SOURCE_HELP = (
    "Set from the identity provider at every sign-in and re-check, through the claim mapping: "
    "a role, tenant or access group changed here by hand lasts until then."
)


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

    @admin.display(description="signs in with")
    def signs_in_with(self, user: User) -> str:
        identity = _identity(user)
        return identity.get_provider_display() if identity else "local password"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "source_of_access"] if _identity(obj) else fields

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets: list[Any] = list(super().get_fieldsets(request, obj))
        if _identity(obj):
            source = (
                "Source of access",
                {"fields": ["source_of_access"], "description": SOURCE_HELP},
            )
            fieldsets.insert(1, source)
        return fieldsets

    @admin.display(description="from the identity provider")
    def source_of_access(self, user: User) -> SafeString | str:
        identity = _identity(user)
        if identity is None:
            return "Signs in with a local password."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    grant.get("claim", ""),
                    grant.get("value", ""),
                    grant.get("tenant", ""),
                    grant.get("role") or "—",
                    ", ".join(grant.get("access_groups") or []) or "—",
                    _mapping_link(grant.get("mapping_id")),
                )
                for grant in identity.grants
            ),
        )
        unmatched = ", ".join(f"{claim}={value}" for claim, value in identity.unmatched)
        return format_html(
            "<p>Signs in through {} as <code>{}</code> ({}). Last sign-in {}; last re-check {}."
            "</p>"
            '<table class="canon-source-of-access"><thead><tr><th>Claim</th><th>Value</th>'
            "<th>Gave tenant</th><th>Role</th><th>Access groups</th><th>Mapping</th></tr>"
            "</thead><tbody>{}</tbody></table><p>{}</p>",
            identity.get_provider_display(),
            identity.subject,
            identity.issuer,
            _when(identity.signed_in_at),
            _when(identity.checked_at),
            rows or format_html('<tr><td colspan="6">{}</td></tr>', "Nothing: no value matched."),
            f"Values that gave nothing: {unmatched}." if unmatched else "",
        )

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "groups":
            kwargs["help_text"] = ROLES_HELP
        return super().formfield_for_manytomany(db_field, request, **kwargs)


def _mapping_link(mapping_id: int | None) -> SafeString | str:
    if mapping_id is None:
        return "CANON_IDENTITY_MAPPING (settings)"
    url = reverse("admin:identity_claimmapping_change", args=[mapping_id])
    return format_html('<a href="{}">row {}</a>', url, mapping_id)


def _when(moment: Any) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "never"
