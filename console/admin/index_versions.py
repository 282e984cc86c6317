"""Index-version pages of a knowledge base: create a new version, compare it with the active one,
approve its swap once it covers the knowledge base, roll back to the previous one. Confirmation
pages like the document actions (`document_actions`), with the two versions' settings and figures
side by side (`kb.selectors.index_versions.index_version_comparison`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy

import embeddings
from console.admin.confirmation import KNOWLEDGE_BASE_TIMELINE, confirm, require
from console.admin.evaluation_gates import version_quality
from console.admin.scoping import TenantScopedAdmin, readable_filter
from kb.models import (
    Document,
    IndexVersion,
    KnowledgeBase,
)
from kb.selectors.index_versions import (
    Coverage,
    CoverageEntry,
    VersionProgress,
    VersionStatus,
    index_version_comparison,
    index_version_progress,
    index_version_rollback_target,
    index_version_settings,
    index_version_status,
)
from kb.services.base import ActionRefused
from kb.services.index_versions import (
    english_list_default,
    english_list_fields,
    index_version_activate,
    index_version_create,
)


def _provider_choices() -> list[tuple[str, str]]:
    """Every provider this installation can run (sentence-transformers only with its extra)."""
    return [(spec.name, spec.label) for spec in embeddings.provider_specs() if spec.available()]


class IndexVersionForm(forms.Form):
    """Provider, model and dimensions of a new index version. A blank model or dimension takes
    the provider's default; a model whose dimension is known must be given exactly that one."""

    provider = forms.ChoiceField(choices=_provider_choices, label=gettext_lazy("Provider"))
    model = forms.CharField(max_length=200, required=False, label=gettext_lazy("Model"))
    dimensions = forms.IntegerField(
        min_value=1, max_value=16000, required=False, label=gettext_lazy("Dimensions")
    )
    chunk_size = forms.IntegerField(min_value=50, max_value=20000, label=gettext_lazy("Chunk size"))
    chunk_overlap = forms.IntegerField(
        min_value=0, max_value=5000, label=gettext_lazy("Chunk overlap")
    )
    vector_storage = forms.ChoiceField(
        label=gettext_lazy("Vector storage"),
        choices=[
            ("vector", gettext_lazy("vector: 4-byte floats")),
            ("halfvec", gettext_lazy("halfvec: 2-byte floats, half the vector index")),
        ],
        initial="vector",
        required=False,  # a form posted without it (older pages, scripts) keeps "vector"
        help_text=gettext_lazy(
            "What the version's vector index holds; the chunks keep their full vectors "
            "either way. halfvec stores each number in 2 bytes instead of 4, so the index takes "
            "half the memory (1,365 instead of 2,730 bytes a chunk at 512 dimensions). Measured "
            "here on 10,000 real chunks, search found the same nearest chunks with both (recall "
            "0.94); at a million generated vectors, where the larger index no longer fitted in "
            "memory, halfvec answered in half the time, its recall 0.01 lower."
        ),
    )
    english_list = forms.BooleanField(
        label=gettext_lazy("English list"),
        required=False,
        help_text=gettext_lazy(
            "Also embed each passage not in Chinese with the packaged English model "
            "(all-MiniLM-L6-v2), which hybrid search reads as a third list for questions not "
            "in Chinese. Measured on two corpora, each fitted on one and tested on the other: "
            "English questions found their answer higher (MRR@10 0.565 to 0.612 and 0.595 to "
            "0.664), Chinese ones as before. It costs about ten times the CPU per English "
            "passage to build, 1.5 KB per passage and about 13 ms of CPU per question."
        ),
    )
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        required=False,
        help_text=KNOWLEDGE_BASE_TIMELINE,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        specs = [spec for spec in embeddings.provider_specs() if spec.available()]
        self.fields["provider"].widget.attrs["data-defaults"] = json.dumps(
            {spec.name: [spec.default_model, spec.default_dimensions] for spec in specs}
        )
        self.fields["model"].help_text = gettext("Blank: %(defaults)s") % {
            "defaults": "; ".join(f"{spec.name} → {spec.default_model}" for spec in specs)
        }
        self.fields["dimensions"].help_text = gettext(
            "Must be what the model returns. Blank: the model's own (%(defaults)s)."
        ) % {"defaults": "; ".join(f"{spec.name} → {spec.default_dimensions}" for spec in specs)}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        data["vector_storage"] = data.get("vector_storage") or "vector"
        if data.get("chunk_overlap", 0) * 2 >= data.get("chunk_size", 0):
            raise forms.ValidationError(
                gettext("The overlap must be less than half the chunk size.")
            )
        name = data.get("provider")
        if not name:
            return data
        spec = embeddings.provider_spec(name)
        model = (data.get("model") or "").strip() or spec.default_model
        dimensions = data.get("dimensions") or spec.models.get(model, spec.default_dimensions)
        data["model"], data["dimensions"] = model, dimensions
        problem = spec.dimension_problem(model, dimensions)
        if problem:
            self.add_error("model" if model not in spec.models else "dimensions", problem)
        try:  # the service's own refusal, shown on the field
            english_list_fields(provider=name, english_list=bool(data.get("english_list")))
        except ActionRefused as refused:
            self.add_error("english_list", str(refused))
        if name == embeddings.LOCAL_PROVIDER:
            path = embeddings.local_model_path(model)
            if not path.is_dir():
                self.add_error(
                    "model",
                    gettext("No local model at %(path)s: put the model directory there first.")
                    % {"path": path},
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
        "provider": active.provider if active else embeddings.HASH_PROVIDER,
        "model": active.model if active else "",
        "dimensions": active.dimensions if active else None,
        "chunk_size": active.chunk_size if active else 800,
        "chunk_overlap": active.chunk_overlap if active else 100,
        "vector_storage": active.vector_storage if active else "vector",
        # what the active version has, else what a new version of its model gets by default
        "english_list": bool(
            active and (active.english_list or english_list_default(active.provider))
        ),
    }
    form = IndexVersionForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        version = index_version_create(kb_id=kb.pk, actor=request.user, **form.cleaned_data)
        messages.success(
            request,
            gettext("Index version %(n)s is building; the active version keeps serving.")
            % {"n": version.number},
        )
        return HttpResponseRedirect(_kb_url(kb))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("New index version for %(kb)s") % {"kb": kb},
        "form": form,
        "kb": kb,
        "back": _kb_url(kb),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/kb/knowledgebase/index_version_form.html", context)


@dataclass(frozen=True)
class VersionRow:
    """One row of a knowledge base's index-version list."""

    version: IndexVersion
    progress: VersionProgress
    status: VersionStatus
    settings: list[tuple[str, str]]


def index_version_rows(kb: KnowledgeBase, request: HttpRequest) -> list[VersionRow]:
    """The knowledge base's index versions, newest first, with their coverage (failures named
    only in documents the user may read), status and settings."""
    named = readable_filter(request)
    rows = []
    for version in kb.index_versions.order_by("-number"):
        progress = index_version_progress(version=version, named=named)
        rows.append(
            VersionRow(
                version=version,
                progress=progress,
                status=index_version_status(version=version, progress=progress, kb=kb),
                settings=index_version_settings(version),
            )
        )
    return rows


@dataclass(frozen=True)
class NamedCoverage:
    """A version's `Coverage` as one reader may see it: the entries of documents they may read,
    and how many of each list are in documents they may not (counted, never named)."""

    building: list[CoverageEntry]
    building_hidden: int  # being built, in documents the reader may not read
    building_more: int  # being built, past the first few named (`RUNNING_NAMED`)
    blocking: list[CoverageEntry]
    blocking_hidden: int
    tolerated: list[CoverageEntry]
    tolerated_hidden: int


def coverage_named(coverage: Coverage | None, named: Q | None) -> NamedCoverage | None:
    if coverage is None:
        return None
    entries = coverage.building + coverage.blocking + coverage.tolerated
    ids = {e.document_id for e in entries}
    if named is not None and ids:
        ids = set(Document.objects.filter(pk__in=ids).filter(named).values_list("pk", flat=True))

    def shown(rows: list[CoverageEntry]) -> list[CoverageEntry]:
        return [e for e in rows if e.document_id in ids]

    building, blocking, tolerated = (
        shown(coverage.building),
        shown(coverage.blocking),
        shown(coverage.tolerated),
    )
    return NamedCoverage(
        building=building,
        building_hidden=len(coverage.building) - len(building),
        building_more=coverage.running - len(coverage.building),
        blocking=blocking,
        blocking_hidden=len(coverage.blocking) - len(blocking),
        tolerated=tolerated,
        tolerated_hidden=len(coverage.tolerated) - len(tolerated),
    )


def index_version_swap_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, version_id: str
) -> HttpResponse:
    """The comparison of the active version with `version_id`, and the swap's confirmation once
    the candidate serves every document the active version serves (`index_version_coverage`):
    documents whose desired revision failed in both are named there, linked, as served by
    neither before and after. Before that (or for a version that cannot be swapped in) the page
    shows the comparison, the progress and what keeps the swap back, each document with its way
    out; a POST is refused."""
    kb = _kb(model_admin, request, object_id)
    version = get_object_or_404(IndexVersion, pk=version_id, kb=kb)
    named = readable_filter(request)
    progress = index_version_progress(version=version, named=named)
    status = index_version_status(version=version, progress=progress, kb=kb)
    summary = {
        "kb": kb,
        "status": status,
        "progress": progress,
        "comparison": index_version_comparison(active=kb.active_index_version, candidate=version),
        "coverage": coverage_named(progress.coverage, named),
    }
    if not status.swappable:
        if request.method == "POST":
            messages.error(
                request,
                gettext("Index version %(n)s cannot be swapped in: %(why)s.")
                % {"n": version.number, "why": status.label},
            )
            return HttpResponseRedirect(_kb_url(kb))
        context = {
            **model_admin.admin_site.each_context(request),
            "title": gettext("Compare index version %(n)s with the active one")
            % {"n": version.number},
            "summary": summary,
            "back": _kb_url(kb),
            "opts": model_admin.model._meta,
        }
        return TemplateResponse(
            request, "admin/kb/knowledgebase/index_version_compare.html", context
        )

    def perform(reason: str, expected: int | None) -> str:
        index_version_activate(
            version_id=version.pk,
            actor=request.user,
            reason=reason,
            expected_active_id=expected,
            # the quality gate's refusal set aside, with the reason (`evaluation.gate`)
            override=request.POST.get("override_gate") == "1",
        )
        return gettext("Index version %(n)s is active.") % {"n": version.number}

    if kb.active_index_version is not None:
        summary["quality"] = version_quality(
            request, kb, active=kb.active_index_version, other=version
        )

    return confirm(
        model_admin,
        request,
        title=gettext("Make index version %(n)s active for %(kb)s")
        % {"n": version.number, "kb": kb},
        summary=summary,
        expected=kb.active_index_version_id,
        perform=perform,
        back=_kb_url(kb),
        template="admin/kb/knowledgebase/confirm_swap.html",
        danger=True,
        reason_help=KNOWLEDGE_BASE_TIMELINE,
        refused=request.get_full_path(),  # a gate's refusal is answered on this page
    )


def index_version_rollback_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    """Back to `kb.selectors.index_versions.index_version_rollback_target` (named on the page and
    its link);
    with none, nothing to confirm."""
    kb = _kb(model_admin, request, object_id)
    previous = index_version_rollback_target(kb=kb)
    if previous is None:
        messages.error(
            request, gettext("There is no earlier retained index version to roll back to.")
        )
        return HttpResponseRedirect(_kb_url(kb))

    def perform(reason: str, expected: int | None) -> str:
        index_version_activate(
            version_id=previous.pk,
            actor=request.user,
            reason=reason,
            expected_active_id=expected,
            action="rollback",
        )
        return gettext("Index version %(n)s is active again.") % {"n": previous.number}

    named = readable_filter(request)
    progress = index_version_progress(version=previous, named=named)
    return confirm(
        model_admin,
        request,
        title=gettext("Roll %(kb)s back to index version %(n)s") % {"kb": kb, "n": previous.number},
        summary={
            "kb": kb,
            "status": index_version_status(version=previous, progress=progress, kb=kb),
            "progress": progress,
            "comparison": index_version_comparison(
                active=kb.active_index_version, candidate=previous
            ),
            "coverage": coverage_named(progress.coverage, named),
            "rollback": True,
            "quality": version_quality(
                request, kb, active=kb.active_index_version, other=previous, rollback=True
            )
            if kb.active_index_version is not None
            else None,
        },
        expected=kb.active_index_version_id,
        perform=perform,
        back=_kb_url(kb),
        template="admin/kb/knowledgebase/confirm_swap.html",
        danger=True,
        reason_help=KNOWLEDGE_BASE_TIMELINE,
    )
