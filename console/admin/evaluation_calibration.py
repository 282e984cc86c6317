"""A knowledge base's search calibration in the admin (issue 39, item 6), from its Quality page:
*Calibrate…* (a confirmation page: which question set), the calibration's page (the candidate
beside the shipped default: held-out folds, each question's change, documents the viewer may
not read only counted), *Adopt…* (a confirmation page with the gate's verdict; an override
needs a reason and the gate's override permission) and *Roll back to the default…*.

The pages call `evaluation.services.calibration` and read `evaluation.calibration`; adopting and
rolling back need the permission to change the quality gate (index admins)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy

from console.admin.confirmation import KNOWLEDGE_BASE_TIMELINE, require
from console.admin.kb_home import kb_reader
from console.admin.scoping import NOT_FOUND, TenantScopedAdmin
from evaluation.calibration import (
    MIN_QUESTIONS,
    adopted_calibration,
    calibration_changes,
    calibration_status,
    calibration_verdict,
    change_counts,
)
from evaluation.gate import OVERRIDE_PERMISSION
from evaluation.models import Calibration, QuestionSet
from evaluation.selectors import question_sets_of_kb
from evaluation.services.calibration import (
    ADOPT_PERMISSION,
    calibration_adopt,
    calibration_request,
    calibration_roll_back,
)
from kb.models import KnowledgeBase
from kb.services.base import ActionRefused

VIEW_PERMISSION = "evaluation.view_evaluationrun"
CALIBRATE_PERMISSION = "evaluation.run_evaluation"


def _kb(request: HttpRequest, kb_id: int) -> KnowledgeBase:
    """The knowledge base, if the user may see it (the knowledge bases' scoped lookup)."""
    kb_admin = admin.site._registry[KnowledgeBase]
    assert isinstance(kb_admin, TenantScopedAdmin)
    kb: KnowledgeBase = kb_admin.get_scoped_object_or_404(request, str(kb_id))
    return kb


def _calibration(request: HttpRequest, calibration_id: int) -> Calibration:
    """The calibration, if its knowledge base is one the user may see (else 404)."""
    found = (
        Calibration.objects.select_related("question_set", "index_version", "task")
        .filter(pk=calibration_id)
        .first()
    )
    if found is None:
        raise Http404(NOT_FOUND)
    found.kb = _kb(request, found.kb_id)
    return found


def quality_url(kb_id: int) -> str:
    return reverse("admin:evaluation_quality", args=[kb_id])


def calibration_url(calibration_id: int) -> str:
    return reverse("admin:evaluation_calibration", args=[calibration_id])


def calibration_section(request: HttpRequest, kb: KnowledgeBase) -> dict[str, Any]:
    """The Quality page's calibration box: what search fuses by, the latest calibrations, and
    the actions the user may take."""
    adopted = adopted_calibration(kb.pk)
    return {
        "adopted": adopted,
        "adopted_url": calibration_url(adopted.pk) if adopted else "",
        "calibrations": [
            {"calibration": c, "url": calibration_url(c.pk)}
            for c in Calibration.objects.filter(kb=kb)
            .select_related("question_set")
            .order_by("-created_at", "-pk")[:10]
        ],
        "calibrate_url": reverse("admin:evaluation_calibrate", args=[kb.pk]),
        "rollback_url": reverse("admin:evaluation_calibration_rollback", args=[kb.pk]),
        "can_calibrate": request.user.has_perm(CALIBRATE_PERMISSION),
        "can_adopt": request.user.has_perm(ADOPT_PERMISSION),
        "min_questions": MIN_QUESTIONS,
    }


class CalibrateForm(forms.Form):
    question_set = forms.ModelChoiceField(
        queryset=QuestionSet.objects.none(), label=gettext_lazy("Question set")
    )

    def __init__(self, *args: Any, kb: KnowledgeBase, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["question_set"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = question_sets_of_kb(kb.pk)


def calibrate_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, kb_id: int
) -> HttpResponse:
    """GET: which question set, and what a calibration does. POST: it is asked for (or the
    same one found) and its page opens."""
    kb = _kb(request, kb_id)
    require(request, CALIBRATE_PERMISSION)
    form = CalibrateForm(request.POST or None, kb=kb)
    if request.method == "POST" and form.is_valid():
        try:
            calibration, created = calibration_request(
                kb=kb, question_set=form.cleaned_data["question_set"], actor=request.user
            )
        except ActionRefused as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(request.path)
        if created:
            messages.success(
                request,
                gettext("Calibration %(n)s is being computed; its page shows it when done.")
                % {"n": calibration.pk},
            )
        else:
            messages.info(
                request,
                gettext("Calibration %(n)s was asked of this set version already.")
                % {"n": calibration.pk},
            )
        return HttpResponseRedirect(calibration_url(calibration.pk))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Calibrate search for %(kb)s") % {"kb": kb.name},
        "kb": kb,
        "form": form,
        "min_questions": MIN_QUESTIONS,
        "back": quality_url(kb.pk),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/calibrate.html", context)


def calibration_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, calibration_id: int
) -> HttpResponse:
    """The candidate beside the default: held-out MRR@10 overall and per fold, and each
    question's held-out rank under both, the documents the viewer may not read counted only."""
    calibration = _calibration(request, calibration_id)
    if not request.user.has_perm(VIEW_PERMISSION):
        raise PermissionDenied(gettext("You need the permission to view evaluation runs."))
    # as the API tells it: one whose worker gave up reads as failed, with the reason, at once
    status = calibration_status(calibration)
    calibration.state, calibration.error = status.state, status.error
    changes = calibration_changes(calibration, reader=kb_reader(request, calibration.kb))
    verdict = (
        calibration_verdict(calibration) if calibration.state in Calibration.ADOPTABLE else None
    )
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Calibration %(n)s of %(set)s")
        % {"n": calibration.pk, "set": calibration.question_set.name},
        "calibration": calibration,
        "kb": calibration.kb,
        "verdict": verdict,
        "changes": [c for c in changes if c.change.change not in ("same", "missed")],
        "unchanged": sum(1 for c in changes if c.change.change in ("same", "missed")),
        "counts": change_counts(changes),
        "hidden": sum(c.hidden for c in changes),
        "adopt_url": reverse("admin:evaluation_calibration_adopt", args=[calibration.pk]),
        "rollback_url": reverse("admin:evaluation_calibration_rollback", args=[calibration.kb_id]),
        "can_adopt": request.user.has_perm(ADOPT_PERMISSION)
        and calibration.state in Calibration.ADOPTABLE,
        "can_roll_back": request.user.has_perm(ADOPT_PERMISSION)
        and calibration.state == Calibration.State.ADOPTED,
        "back": quality_url(calibration.kb_id),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/calibration.html", context)


class AdoptForm(forms.Form):
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        required=False,
        help_text=KNOWLEDGE_BASE_TIMELINE,
    )
    override_gate = forms.BooleanField(
        required=False,
        label=gettext_lazy(
            "Override the quality gate: adopt although it refuses. The reason is kept on the "
            "timeline with the figures."
        ),
    )


def adopt_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, calibration_id: int
) -> HttpResponse:
    """GET: the gate's verdict and what will change. POST: adopted (the service judges again
    under the knowledge base's lock), or the refusal shown on this page."""
    calibration = _calibration(request, calibration_id)
    require(request, ADOPT_PERMISSION)
    verdict = calibration_verdict(calibration)
    may_override = verdict.refuses and request.user.has_perm(OVERRIDE_PERMISSION)
    form = AdoptForm(request.POST or None)
    if not may_override:
        del form.fields["override_gate"]
    refused = ""
    if request.method == "POST" and form.is_valid():
        try:
            calibration_adopt(
                calibration=calibration,
                actor=request.user,
                reason=form.cleaned_data["reason"],
                override=bool(form.cleaned_data.get("override_gate")),
            )
        except ActionRefused as exc:
            refused = str(exc)
        else:
            messages.success(
                request,
                gettext("Search in %(kb)s now fuses by calibration %(n)s.")
                % {"kb": calibration.kb.name, "n": calibration.pk},
            )
            return HttpResponseRedirect(calibration_url(calibration.pk))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Adopt calibration %(n)s") % {"n": calibration.pk},
        "calibration": calibration,
        "kb": calibration.kb,
        "verdict": verdict,
        "may_override": may_override,
        "refused": refused,
        "form": form,
        "back": calibration_url(calibration.pk),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/calibration_adopt.html", context)


def rollback_view(model_admin: TenantScopedAdmin, request: HttpRequest, kb_id: int) -> HttpResponse:
    """GET: what search fuses by now, and that it will fuse by the default. POST: rolled back."""
    kb = _kb(request, kb_id)
    require(request, ADOPT_PERMISSION)
    adopted = adopted_calibration(kb.pk)
    form = AdoptForm(request.POST or None)
    del form.fields["override_gate"]
    refused = ""
    if request.method == "POST" and form.is_valid():
        try:
            calibration_roll_back(kb=kb, actor=request.user, reason=form.cleaned_data["reason"])
        except ActionRefused as exc:
            refused = str(exc)
        else:
            messages.success(
                request,
                gettext("Search in %(kb)s fuses by the shipped default again.") % {"kb": kb.name},
            )
            return HttpResponseRedirect(quality_url(kb.pk))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Roll %(kb)s back to the default fusion") % {"kb": kb.name},
        "kb": kb,
        "adopted": adopted,
        "refused": refused,
        "form": form,
        "back": quality_url(kb.pk),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/calibration_rollback.html", context)
