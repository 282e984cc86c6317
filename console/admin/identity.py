"""The claim mapping: which value of which claim of the identity provider gives which tenant,
role, access groups and (tokens) knowledge bases (`identity.mapping`). Superusers only: a row
decides which tenant people land in, so a tenant's own admins must not be able to pull anyone
into theirs. Every change is on the audit trail (`identity.services.claim_mapping_recorded`),
and applies to each person at their next sign-in or re-check, to each token at its next
request."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext, gettext_lazy

from console.words import role_words
from identity.mapping import settings_rows
from identity.models import ClaimMapping
from identity.services import claim_mapping_recorded, mapping_snapshot

BEFORE_ATTR = "_canon_mapping_before"


class ClaimMappingForm(forms.ModelForm):
    class Meta:
        model = ClaimMapping
        fields = ["claim", "value", "tenant", "role", "access_groups", "knowledge_bases"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.instance.pk:
            self.fields["claim"].initial = settings.IDENTITY_GROUPS_CLAIM

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant, kbs = cleaned.get("tenant"), cleaned.get("knowledge_bases")
        if tenant is not None and kbs:
            foreign = sorted(kb.slug for kb in kbs if kb.tenant_id != tenant.pk)
            if foreign:
                self.add_error(
                    "knowledge_bases",
                    gettext("Not knowledge bases of %(tenant)s: %(kbs)s.")
                    % {"tenant": tenant, "kbs": ", ".join(foreign)},
                )
        return cleaned


@admin.register(ClaimMapping)
class ClaimMappingAdmin(admin.ModelAdmin):
    form = ClaimMappingForm
    list_display = ["claim", "value", "tenant", "role_shown", "groups_shown", "kbs_shown"]
    list_filter = ["claim", "role", "tenant"]
    search_fields = ["value", "claim"]
    filter_horizontal = ["knowledge_bases"]
    change_list_template = "admin/identity/claimmapping/change_list.html"

    def _superuser(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    has_view_permission = has_add_permission = _superuser
    has_change_permission = has_delete_permission = _superuser

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._superuser(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ClaimMapping]:
        return (
            super()
            .get_queryset(request)
            .select_related("tenant")
            .prefetch_related("knowledge_bases")
        )

    @admin.display(description=gettext_lazy("role"))
    def role_shown(self, mapping: ClaimMapping) -> str:
        return role_words(mapping.role) if mapping.role else "—"

    @admin.display(description=gettext_lazy("access groups"))
    def groups_shown(self, mapping: ClaimMapping) -> str:
        return ", ".join(mapping.access_groups) or "—"

    @admin.display(description=gettext_lazy("knowledge bases (tokens)"))
    def kbs_shown(self, mapping: ClaimMapping) -> str:
        kbs = ", ".join(kb.slug for kb in mapping.knowledge_bases.all())
        return kbs or gettext("all of the tenant")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The rows of CANON_IDENTITY_MAPPING above the admin's, read-only."""
        return super().changelist_view(
            request, {**(extra_context or {}), "settings_rows": settings_rows()}
        )

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        before = ClaimMapping.objects.filter(pk=obj.pk).first() if change else None
        setattr(request, BEFORE_ATTR, mapping_snapshot(before))
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        mapping = form.instance
        claim_mapping_recorded(
            mapping_id=mapping.pk,
            before=getattr(request, BEFORE_ATTR, None),
            after=mapping_snapshot(mapping),
            actor_id=request.user.pk,
        )

    def delete_model(self, request: HttpRequest, obj: Model) -> None:
        assert isinstance(obj, ClaimMapping)
        before, pk = mapping_snapshot(obj), obj.pk
        super().delete_model(request, obj)
        claim_mapping_recorded(mapping_id=pk, before=before, after=None, actor_id=request.user.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for mapping in queryset:
            self.delete_model(request, mapping)
