"""Index-version pages of a knowledge base: create a new version, approve its swap, roll back to
the previous one. Confirmation pages like the document actions (`document_actions`).
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from ingestion import providers
from kb import selectors, services
from kb.admin.confirmation import confirm, require
from kb.admin.scoping import TenantScopedAdmin, readable_filter
from kb.models import (
    Document,
    IndexVersion,
    KnowledgeBase,
)


def _provider_choices() -> list[tuple[str, str]]:
    """Every provider this installation can run (sentence-transformers only with its extra)."""
    return [(spec.name, spec.label) for spec in providers.provider_specs() if spec.available()]


class IndexVersionForm(forms.Form):
    """Provider, model and dimensions of a new index version. A blank model or dimension takes
    the provider's default; a model whose dimension is known must be given exactly that one."""

    provider = forms.ChoiceField(choices=_provider_choices)
    model = forms.CharField(max_length=200, required=False)
    dimensions = forms.IntegerField(min_value=1, max_value=16000, required=False)
    chunk_size = forms.IntegerField(min_value=50, max_value=20000)
    chunk_overlap = forms.IntegerField(min_value=0, max_value=5000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        specs = [spec for spec in providers.provider_specs() if spec.available()]
        self.fields["provider"].widget.attrs["data-defaults"] = json.dumps(
            {spec.name: [spec.default_model, spec.default_dimensions] for spec in specs}
        )
        self.fields["model"].help_text = "Blank: " + "; ".join(
            f"{spec.name} → {spec.default_model}" for spec in specs
        )
        self.fields["dimensions"].help_text = (
            "Must be what the model returns. Blank: the model's own ("
            + "; ".join(f"{spec.name} → {spec.default_dimensions}" for spec in specs)
            + ")."
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("chunk_overlap", 0) * 2 >= data.get("chunk_size", 0):
            raise forms.ValidationError("The overlap must be less than half the chunk size.")
        name = data.get("provider")
        if not name:
            return data
        spec = providers.provider_spec(name)
        model = (data.get("model") or "").strip() or spec.default_model
        dimensions = data.get("dimensions") or spec.models.get(model, spec.default_dimensions)
        data["model"], data["dimensions"] = model, dimensions
        problem = spec.dimension_problem(model, dimensions)
        if problem:
            self.add_error("model" if model not in spec.models else "dimensions", problem)
        if name == providers.LOCAL_PROVIDER:
            path = providers.local_model_path(model)
            if not path.is_dir():
                self.add_error(
                    "model", f"No local model at {path}: put the model directory there first."
                )
        return data


def _kb(model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str) -> KnowledgeBase:
    require(request, "kb.manage_index_versions")
    kb: KnowledgeBase = model_admin.get_scoped_object_or_404(request, object_id)
    return kb


def _kb_url(kb: KnowledgeBase) -> str:
    return reverse("admin:kb_knowledgebase_change", args=[kb.pk])


def index_version_create_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    kb = _kb(model_admin, request, object_id)
    active = kb.active_index_version
    initial = {
        "provider": active.provider if active else providers.HASH_PROVIDER,
        "model": active.model if active else "",
        "dimensions": active.dimensions if active else None,
        "chunk_size": active.chunk_size if active else 800,
        "chunk_overlap": active.chunk_overlap if active else 100,
    }
    form = IndexVersionForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        version = services.index_version_create(
            kb_id=kb.pk, actor=request.user, **form.cleaned_data
        )
        messages.success(
            request,
            f"Index version {version.number} is building; the active version keeps serving.",
        )
        return HttpResponseRedirect(_kb_url(kb))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"New index version for {kb}",
        "form": form,
        "kb": kb,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/knowledgebase/index_version_form.html", context)


def index_version_swap_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, version_id: str
) -> HttpResponse:
    kb = _kb(model_admin, request, object_id)
    version = get_object_or_404(IndexVersion, pk=version_id, kb=kb)
    named = readable_filter(request)
    progress = selectors.index_version_progress(version=version, named=named)
    gaps = services.index_version_coverage_gaps(version=version)

    def perform(reason: str, expected: int | None) -> str:
        services.index_version_activate(
            version_id=version.pk,
            actor=request.user,
            reason=reason,
            expected_active_id=expected,
        )
        return f"Index version {version.number} is active."

    return confirm(
        model_admin,
        request,
        title=f"Make index version {version.number} active for {kb}",
        summary={
            "facts": [
                ("now active", kb.active_index_version),
                ("candidate", version),
                ("documents built", f"{progress.live} of {progress.total}"),
                ("coverage", "complete" if not gaps else f"{len(gaps)} missing"),
            ],
            "problems": _gaps_named(kb, gaps, named)[:50] + progress.failed[:50],
        },
        expected=kb.active_index_version_id,
        perform=perform,
        back=_kb_url(kb),
        danger=bool(gaps),
    )


def _gaps_named(kb: KnowledgeBase, gaps: list[str], named: Q | None) -> list[str]:
    """The coverage gaps ("<key>: ...") with those of documents outside `named` counted, not
    named: a swap covers every document, but the user reads only some of them."""
    if named is None:
        return gaps
    hidden = tuple(
        f"{key}: "
        for key in Document.objects.filter(kb=kb).exclude(named).values_list("key", flat=True)
    )
    shown = [gap for gap in gaps if not gap.startswith(hidden)] if hidden else gaps
    if len(shown) < len(gaps):
        shown.append(
            f"{len(gaps) - len(shown)} missing in documents of access groups you do not hold"
        )
    return shown


def index_version_rollback_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    kb = _kb(model_admin, request, object_id)
    previous = (
        IndexVersion.objects.filter(kb=kb, state=IndexVersion.State.RETIRED)
        .order_by("-retired_at")
        .first()
    )
    if previous is None:
        raise Http404("There is no retired index version to roll back to.")

    def perform(reason: str, expected: int | None) -> str:
        services.index_version_activate(
            version_id=previous.pk,
            actor=request.user,
            reason=reason,
            expected_active_id=expected,
            action="rollback",
        )
        return f"Index version {previous.number} is active again."

    return confirm(
        model_admin,
        request,
        title=f"Roll {kb} back to index version {previous.number}",
        summary={"facts": [("now active", kb.active_index_version), ("roll back to", previous)]},
        expected=kb.active_index_version_id,
        perform=perform,
        back=_kb_url(kb),
        danger=True,
    )
