"""Users, on one page: Django's user admin with the user's tenant membership (tenant and access
groups) inline beside their roles, so setting up a content manager is one page, not three."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.http import HttpRequest

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


@admin.register(User)
class CanonUserAdmin(UserAdmin):
    """Django's, with the tenant membership inline and the roles explained."""

    inlines = [TenantMembershipInline]

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "groups":
            kwargs["help_text"] = ROLES_HELP
        return super().formfield_for_manytomany(db_field, request, **kwargs)
