"""Evaluation where a person decides what search serves (issue 39, item 3): a knowledge base's
quality gate (its admin, `QualityGateAdmin`), and the figures the confirmation pages show —
*Approve swap…* and *Roll back to the previous version…* (`version_quality`: the two versions'
latest runs of a chosen question set side by side, the gate's verdict, each question whose
rank changed linking to Test search with the candidate beside the active version), and a
document revision's *Approve…* (`revision_quality`: the questions expecting the document and
their ranks with that build served instead of the live one). A missing run is offered (POST
`gate_runs_view`), and the page follows its progress (`gate_progress_view`).

Writes go through `evaluation.services.gates`; the verdict is `evaluation.gate`'s, the one the
swap service itself applies. Questions are shown with their texts and ranks only: no document
a viewer may not read is named here."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, gettext_lazy

from console.admin.confirmation import require
from console.admin.evaluation_pages import RUN_MODES, search_url
from console.admin.scoping import TenantScopedAdmin
from evaluation.gate import GateVerdict, gate_of, gate_verdict, latest_run, metric_name, open_run
from evaluation.metrics import METRICS
from evaluation.models import EvaluationRun, QualityGate, Question, QuestionSet
from evaluation.selectors import (
    GAINED,
    LOST,
    RunComparison,
    question_sets_of_kb,
    run_comparison,
    run_status,
)
from evaluation.services.gates import (
    GateInvalid,
    gate_runs_request,
    gate_words,
    quality_gate_delete,
    quality_gate_save,
)
from kb.models import Build, Document, IndexVersion, KnowledgeBase
from kb.services.base import ActionRefused

# The per-question changes a confirmation page lists: found or missed since, moved.
MOVED = ("lost", "gained", "down", "up")
CHANGES_SHOWN = 100
SET_PARAMETER = "quality_set"
MODE_PARAMETER = "quality_mode"


def _admin_of(model: type[Any]) -> TenantScopedAdmin:
    model_admin = admin.site._registry[model]
    assert isinstance(model_admin, TenantScopedAdmin)
    return model_admin


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isascii() and value.isdigit() and len(value) < 19 else None


def _chosen_set(
    request: HttpRequest, sets: list[QuestionSet], preferred: QuestionSet | None
) -> QuestionSet | None:
    """The set the page shows: the one asked for, else `preferred` (the gate's), else the set
    run last, else the first."""
    asked = _int(request.GET.get(SET_PARAMETER))
    by_id = {s.pk: s for s in sets}
    if asked in by_id:
        return by_id[asked]
    if preferred is not None and preferred.pk in by_id:
        return by_id[preferred.pk]
    ran = [s for s in sets if getattr(s, "last_run_id", None)]
    if ran:
        return max(ran, key=lambda s: getattr(s, "last_run_id", 0) or 0)
    return sets[0] if sets else None


def _chosen_mode(request: HttpRequest, gate: QualityGate | None) -> str:
    asked = request.GET.get(MODE_PARAMETER)
    if asked in RUN_MODES:
        return str(asked)
    return gate.mode if gate is not None else RUN_MODES[0]


def _set_links(request: HttpRequest, sets: list[QuestionSet], chosen: QuestionSet | None) -> Any:
    query = request.GET.copy()
    links = []
    for question_set in sets:
        query[SET_PARAMETER] = str(question_set.pk)
        links.append(
            {
                "set": question_set,
                "url": f"{request.path}?{query.urlencode()}",
                "chosen": chosen is not None and question_set.pk == chosen.pk,
            }
        )
    return links


def _mode_links(request: HttpRequest, chosen: str) -> list[dict[str, Any]]:
    query = request.GET.copy()
    links = []
    for mode in RUN_MODES:
        query[MODE_PARAMETER] = mode
        links.append(
            {"mode": mode, "url": f"{request.path}?{query.urlencode()}", "chosen": mode == chosen}
        )
    return links


def _side(
    question_set: QuestionSet,
    version: IndexVersion,
    title: str,
    *,
    mode: str,
    served_build: Build | None = None,
) -> dict[str, Any]:
    """One column: a version (or the active version with a revision served instead), its
    latest run a gate may judge by, and its open one."""
    run = latest_run(
        question_set=question_set, version=version, mode=mode, served_build=served_build
    )
    running = open_run(question_set=question_set, version=version, served_build=served_build)
    return {
        "title": title,
        "version": version,
        "run": run,
        "run_url": _run_url(run.pk) if run else "",
        "open": running,
        "status": run_status(running) if running else None,
        "open_url": _run_url(running.pk) if running else "",
    }


def _run_url(run_id: int) -> str:
    return reverse("admin:evaluation_evaluationrun_change", args=[run_id])


def _figure_rows(comparison: RunComparison | None, mode: str) -> list[dict[str, Any]]:
    if comparison is None or mode not in comparison.figures:
        return []
    return [
        {"name": metric_name(name), "key": name, "before": a, "after": b, "delta": d}
        for name, a, b, d in comparison.figures[mode]
    ]


def _start_form(
    request: HttpRequest,
    kb: KnowledgeBase,
    question_set: QuestionSet | None,
    missing: list[IndexVersion],
    build: Build | None = None,
) -> dict[str, Any] | None:
    """The button that starts the missing runs, for a user who may run evaluations."""
    if (
        question_set is None
        or not missing
        or not request.user.has_perm("evaluation.run_evaluation")
    ):
        return None
    return {
        "url": reverse("admin:evaluation_qualitygate_runs"),
        "kb": kb.pk,
        "question_set": question_set.pk,
        "versions": ",".join(str(v.pk) for v in missing),
        "build": build.pk if build else "",
        "next": request.get_full_path(),
        "count": len(missing),
    }


def _progress_url(sides: list[dict[str, Any]]) -> str:
    runs = [str(side["open"].pk) for side in sides if side["open"] is not None]
    if not runs:
        return ""
    return reverse("admin:evaluation_qualitygate_progress") + "?runs=" + ",".join(runs)


def _gate_links(request: HttpRequest, kb: KnowledgeBase, gate: QualityGate | None) -> str:
    """The gate's page (to change it, or see it), or where to set one."""
    if gate is not None:
        return reverse("admin:evaluation_qualitygate_change", args=[gate.pk])
    if request.user.has_perm("evaluation.add_qualitygate"):
        return reverse("admin:evaluation_qualitygate_add") + f"?kb={kb.pk}"
    return ""


def version_quality(
    request: HttpRequest,
    kb: KnowledgeBase,
    *,
    active: IndexVersion,
    other: IndexVersion,
    rollback: bool = False,
) -> dict[str, Any] | None:
    """What *Approve swap…* (and *Roll back…*, `rollback`) shows of quality: the active
    version's and `other`'s latest runs of the chosen set side by side (figures per mode, the
    chosen mode's per-question changes, each linking to Test search with `other` beside the
    active version), the gate's verdict on a swap, and what to start when a run is missing.
    None for a user who may not view evaluation runs."""
    if not request.user.has_perm("evaluation.view_evaluationrun"):
        return None
    gate = gate_of(kb.pk)
    sets = list(question_sets_of_kb(kb.pk))
    chosen = _chosen_set(request, sets, gate.question_set if gate else None)
    mode = _chosen_mode(request, gate)
    context: dict[str, Any] = {
        "kb": kb,
        "rollback": rollback,
        "gate": gate,
        "gate_words": gate_words(gate) if gate else "",
        "gate_url": _gate_links(request, kb, gate),
        "sets": _set_links(request, sets, chosen),
        "chosen": chosen,
        "mode": mode,
        "modes": _mode_links(request, mode),
        "add_set_url": reverse("admin:evaluation_questionset_add") + f"?kb={kb.pk}",
        "verdict": None,
    }
    if chosen is None:
        return context
    active_words = gettext("active now")
    other_words = gettext("roll back to") if rollback else gettext("candidate")
    left = _side(chosen, active, active_words, mode=mode)
    right = _side(chosen, other, other_words, mode=mode)
    comparison = run_comparison(left["run"], right["run"]) if left["run"] and right["run"] else None
    verdict: GateVerdict | None = None
    if gate is not None and gate.question_set_id == chosen.pk and not rollback:
        verdict = gate_verdict(gate=gate, active=active, candidate=other)
    changes = (
        [c for c in comparison.changes if c.mode == mode and c.change in MOVED]
        if comparison
        else []
    )
    missing = [
        side["version"] for side in (left, right) if side["run"] is None and not side["open"]
    ]
    context.update(
        {
            "left": left,
            "right": right,
            "sides": [left, right],
            "comparison": comparison,
            "figures": _figure_rows(comparison, mode),
            "counts": comparison.counts.get(mode, {}) if comparison else {},
            "changes": [
                {
                    "change": change,
                    "search_url": search_url(kb.pk, change.text, change.mode, other.pk),
                }
                for change in changes[:CHANGES_SHOWN]
            ],
            "more_changes": max(0, len(changes) - CHANGES_SHOWN),
            "compare_url": (
                reverse(
                    "admin:evaluation_evaluationrun_compare",
                    args=[left["run"].pk, right["run"].pk],
                )
                if comparison
                else ""
            ),
            "verdict": verdict,
            "verdict_words": verdict.words() if verdict else "",
            "may_override": bool(
                verdict
                and verdict.refuses
                and request.user.has_perm("evaluation.override_quality_gate")
            ),
            "start": _start_form(request, kb, chosen, missing),
            "progress_url": _progress_url([left, right]),
        }
    )
    return context


def revision_quality(
    request: HttpRequest, document: Document, build: Build
) -> dict[str, Any] | None:
    """What a revision's *Approve…* shows of quality: the questions of the chosen set that
    expect `document`, and their ranks as the live knowledge base answers (the latest run of
    the active version) and with `build` served instead of the live one (the latest revision
    run of it), in the chosen mode; how many other questions moved; and what to start when a
    run is missing. None for a user who may not view runs, or when no question expects it."""
    if not request.user.has_perm("evaluation.view_evaluationrun"):
        return None
    kb = document.kb
    naming = (
        Question.objects.filter(question_set__kb=kb, expected_keys__contains=[document.key])
        .values_list("question_set_id", "external_id")
        .order_by("pk")
    )
    per_set: dict[int, set[str]] = {}
    for set_id, external_id in naming:
        per_set.setdefault(set_id, set()).add(external_id)
    if not per_set:
        return None
    gate = gate_of(kb.pk)
    sets = [s for s in question_sets_of_kb(kb.pk) if s.pk in per_set]
    chosen = _chosen_set(request, sets, gate.question_set if gate else None)
    assert chosen is not None
    mode = _chosen_mode(request, gate)
    active = kb.active_index_version
    context: dict[str, Any] = {
        "document": document,
        "build": build,
        "sets": [
            {**link, "questions": len(per_set[link["set"].pk])}
            for link in _set_links(request, sets, chosen)
        ],
        "chosen": chosen,
        "mode": mode,
        "modes": _mode_links(request, mode),
        "served": active is not None and build.index_version_id == active.pk,
    }
    if active is None or not context["served"]:
        return context
    live = _side(chosen, active, gettext("live"), mode=mode)
    instead = _side(chosen, active, gettext("with this revision"), mode=mode, served_build=build)
    comparison = (
        run_comparison(live["run"], instead["run"]) if live["run"] and instead["run"] else None
    )
    expecting = per_set[chosen.pk]
    rows: list[dict[str, Any]] = []
    others = 0
    if comparison is not None:
        for change in comparison.changes:
            if change.mode != mode:
                continue
            if change.external_id in expecting:
                rows.append({"change": change, "search_url": search_url(kb.pk, change.text, mode)})
            elif change.change in MOVED:
                others += 1
    missing = [side for side in (live, instead) if side["run"] is None and side["open"] is None]
    start = None
    if missing:
        # the live side is the active version's run; the other the revision's
        start = _start_form(
            request,
            kb,
            chosen,
            [active],
            build if any(side is instead for side in missing) else None,
        )
        if start is not None:
            start["live"] = any(side is live for side in missing)
            start["count"] = len(missing)
    context.update(
        {
            "live": live,
            "instead": instead,
            "sides": [live, instead],
            "comparison": comparison,
            "figures": _figure_rows(comparison, mode),
            "expecting": len(expecting),
            "rows": rows,
            "others_moved": others,
            "lost": sum(1 for r in rows if r["change"].change == LOST),
            "gained": sum(1 for r in rows if r["change"].change == GAINED),
            "start": start,
            "progress_url": _progress_url([live, instead]),
        }
    )
    return context


# --- the gate's own admin -------------------------------------------------------------------


class QualityGateForm(forms.ModelForm):
    metric = forms.ChoiceField(
        choices=[(m, metric_name(m)) for m in METRICS],
        initial="mrr@10",
        label=gettext_lazy("Metric"),
        help_text=gettext_lazy("The figure compared, over all questions of the set."),
    )
    mode = forms.ChoiceField(
        choices=[(m, m) for m in RUN_MODES],
        initial="hybrid",
        label=gettext_lazy("Mode"),
        help_text=gettext_lazy("The search mode whose figure is compared."),
    )

    class Meta:
        model = QualityGate
        fields = [
            "kb",
            "question_set",
            "metric",
            "mode",
            "max_drop",
            "refuse_swaps",
            "nightly",
            "nightly_hour",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kb = data.get("kb") or getattr(self.instance, "kb", None)
        question_set = data.get("question_set")
        if kb is not None and question_set is not None and question_set.kb_id != kb.pk:
            self.add_error("question_set", gettext("Choose a question set of this knowledge base."))
        if kb is not None and not self.instance.pk and QualityGate.objects.filter(kb=kb).exists():
            self.add_error("kb", gettext("This knowledge base has a quality gate already."))
        return data


@admin.register(QualityGate)
class QualityGateAdmin(TenantScopedAdmin):
    """A knowledge base's quality gate: index admins set and change it (each change on the
    timeline); content managers see it (`kb.roles`)."""

    tenant_path = "kb__tenant_id"
    form = QualityGateForm
    fields = [
        "kb",
        "question_set",
        "metric",
        "mode",
        "max_drop",
        "refuse_swaps",
        "nightly",
        "nightly_hour",
    ]
    list_display = ["knowledge_base", "what", "updated_at"]
    list_select_related = ["kb", "question_set"]
    ordering = ["kb__slug"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["kb"] if obj is not None else []

    @admin.display(description=gettext_lazy("knowledge base"), ordering="kb__slug")
    def knowledge_base(self, gate: QualityGate) -> str:
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:kb_knowledgebase_home", args=[gate.kb_id]),
            gate.kb,
        )

    @admin.display(description=gettext_lazy("gate"))
    def what(self, gate: QualityGate) -> str:
        return gate_words(gate)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """`?kb=` preselects the knowledge base, and its set run last."""
        initial: dict[str, Any] = dict(super().get_changeform_initial_data(request))
        kb_id = _int(str(initial.get("kb", "")))
        if kb_id is not None:
            sets = list(question_sets_of_kb(kb_id))
            chosen = _chosen_set(request, sets, None)
            if chosen is not None:
                initial.setdefault("question_set", chosen.pk)
        return initial

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        data = form.cleaned_data
        try:
            saved = quality_gate_save(
                kb=obj.kb,
                question_set=data["question_set"],
                metric=data["metric"],
                mode=data["mode"],
                max_drop=data["max_drop"],
                refuse_swaps=data["refuse_swaps"],
                nightly=data["nightly"],
                nightly_hour=data["nightly_hour"],
                actor=request.user,
            )
        except GateInvalid as exc:  # checked by the form; a concurrent change may still refuse
            messages.error(request, str(exc))
            return
        obj.pk = saved.pk

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # a gate has no related rows to save here

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        quality_gate_delete(gate=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for gate in queryset.select_related("question_set"):
            quality_gate_delete(gate=gate, actor=request.user)

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            path("runs/", wrap(gate_runs_view), name="evaluation_qualitygate_runs"),
            path("progress/", wrap(gate_progress_view), name="evaluation_qualitygate_progress"),
            *super().get_urls(),
        ]


def gate_runs_view(model_admin: TenantScopedAdmin, request: HttpRequest) -> HttpResponse:
    """POST kb, question_set, versions (ids, comma-separated), build (optional: a pending
    revision's build, served instead), next (the page to return to): start the runs a
    comparison lacks (`evaluation.services.gates.gate_runs_request`), reading every document."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    require(request, "evaluation.run_evaluation")
    kb: KnowledgeBase = _admin_of(KnowledgeBase).get_scoped_object_or_404(
        request, request.POST.get("kb", "")
    )
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse("admin:kb_knowledgebase_home", args=[kb.pk])
    question_set = (
        _admin_of(QuestionSet)
        .get_queryset(request)
        .filter(kb=kb, pk=_int(request.POST.get("question_set")))
        .first()
    )
    ids = [_int(part) for part in request.POST.get("versions", "").split(",")]
    versions = list(IndexVersion.objects.filter(kb=kb, pk__in=[i for i in ids if i is not None]))
    build = None
    if request.POST.get("build"):
        build = Build.objects.filter(kb=kb, pk=_int(request.POST.get("build")) or 0).first()
        document = build.document if build else None
        if (
            build is None
            or document is None
            or not _admin_of(Document).get_queryset(request).filter(pk=document.pk).exists()
        ):
            messages.error(request, gettext("That revision is not one you may evaluate."))
            return HttpResponseRedirect(back)
    if question_set is None or not versions:
        messages.error(
            request, gettext("Choose a question set and a version of this knowledge base.")
        )
        return HttpResponseRedirect(back)
    try:
        started = gate_runs_request(
            kb=kb,
            question_set=question_set,
            versions=versions,
            missing=versions,
            served_build=build,
            actor=request.user,
        )
        if build is not None and request.POST.get("live") == "1":
            # the live side of a revision's comparison: the active version itself
            started += gate_runs_request(
                kb=kb,
                question_set=question_set,
                versions=versions,
                missing=versions,
                actor=request.user,
            )
    except ActionRefused as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(back)
    new = [s.run.pk for s in started if s.created]
    if new:
        messages.success(
            request,
            gettext("Evaluation %(runs)s started; this page shows the figures when done.")
            % {"runs": ", ".join(str(pk) for pk in new)},
        )
    else:
        messages.info(request, gettext("Those runs are under way already."))
    return HttpResponseRedirect(back)


def gate_progress_view(model_admin: TenantScopedAdmin, request: HttpRequest) -> JsonResponse:
    """GET ?runs=1,2: each run's state and progress (the runs the user may view), for the
    confirmation pages' polling; `open` says whether any is still under way."""
    if not request.user.has_perm("evaluation.view_evaluationrun"):
        raise PermissionDenied(gettext("You need the permission to view evaluation runs."))
    ids = [_int(part) for part in request.GET.get("runs", "").split(",")][:10]
    runs = (
        _admin_of(EvaluationRun)
        .get_queryset(request)
        .filter(pk__in=[i for i in ids if i is not None])
    )
    out = []
    for run in runs:
        status = run_status(run)
        out.append(
            {
                "id": run.pk,
                "state": status.state,
                "label": str(status.label),
                "done": status.done,
                "total": status.total,
                "percent": status.percent,
                "error": status.error,
            }
        )
    return JsonResponse(
        {"runs": out, "open": any(r["state"] in EvaluationRun.OPEN_STATES for r in out)}
    )
