"""API keys: the plaintext is shown once, at creation; only its hash is stored."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.postgres.forms import SimpleArrayField
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy, ngettext

from console.admin.scoping import TenantScopedAdmin, groups_refused
from retrieval.models import ApiKey
from retrieval.principals import api_key_create


class ApiKeyForm(forms.ModelForm):
    access_groups = SimpleArrayField(forms.CharField(max_length=100), required=False)

    class Meta:
        model = ApiKey
        fields = [
            "tenant",
            "name",
            "knowledge_bases",
            "access_groups",
            "can_read_history",
            "can_manage_sources",
            "expires_at",
        ]

    request: HttpRequest

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # A key reads what its groups allow: one may give it only groups one holds.
        refused = groups_refused(
            self.request,
            data.get("access_groups") or [],
            kept=self.instance.access_groups,
            document=False,
        )
        if refused:
            self.add_error("access_groups", refused)
        # Likewise a key manages sources only if its maker may.
        granted = data.get("can_manage_sources") and not self.instance.can_manage_sources
        if granted and not self.request.user.has_perm("sources.change_source"):
            self.add_error(
                "can_manage_sources",
                gettext("You may only give a key what you may do: you cannot change sources."),
            )
        tenant = data.get("tenant")
        if tenant is None:
            return data
        foreign = [kb for kb in data.get("knowledge_bases") or [] if kb.tenant_id != tenant.pk]
        if foreign:
            self.add_error(
                "knowledge_bases",
                gettext("Not knowledge bases of %(tenant)s: %(kbs)s.")
                % {"tenant": tenant, "kbs": ", ".join(str(kb) for kb in foreign)},
            )
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    """Keys of the user's tenant; the tenant and knowledge-base choices are the user's own
    (`TenantScopedAdmin.scoped_queryset`)."""

    form = ApiKeyForm
    list_display = [
        "name",
        "prefix",
        "tenant",
        "can_read_history",
        "can_manage_sources",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    ]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        # A subclass per request: a class attribute would be shared across threads.
        return type(form.__name__, (form,), {"request": request})

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key, plaintext = api_key_create(
            tenant=form.cleaned_data["tenant"],
            name=form.cleaned_data["name"],
            knowledge_bases=form.cleaned_data.get("knowledge_bases") or [],
            access_groups=form.cleaned_data.get("access_groups") or [],
            expires_at=form.cleaned_data.get("expires_at"),
            can_read_history=bool(form.cleaned_data.get("can_read_history")),
            can_manage_sources=bool(form.cleaned_data.get("can_manage_sources")),
        )
        obj.pk, obj.prefix, obj.key_hash, obj.created_at = (
            key.pk,
            key.prefix,
            key.key_hash,
            key.created_at,
        )
        obj._state.adding = False
        messages.warning(
            request,
            gettext("Copy this key now; it is not shown again: %(key)s") % {"key": plaintext},
        )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        if change:
            super().save_related(request, form, formsets, change)
        # On creation api_key_create has saved the knowledge bases already.

    @admin.action(description=gettext_lazy("Revoke selected keys"))
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.success(
            request, ngettext("Revoked %(n)s key.", "Revoked %(n)s keys.", count) % {"n": count}
        )
