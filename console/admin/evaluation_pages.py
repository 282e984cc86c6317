"""The evaluation admin's own pages (`console.admin.evaluation` mounts them): a set's upload
with its report, export, *Run evaluation…*, Test search's "this hit answers the question", a
run's page, *Compare with…* and a knowledge base's *Quality* page.

Every view finds its objects through the scoped admin lookups (another tenant's, a malformed
and a missing id get one answer) and checks its permission; what a user may not read is a
count. Writes go through `evaluation.services`."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, gettext_lazy, pgettext

from console.admin.confirmation import require
from console.admin.evaluation_calibration import calibration_section
from console.admin.evaluation_charts import legend, line_chart
from console.admin.kb_home import kb_reader
from console.admin.scoping import TenantScopedAdmin
from console.words import SEARCH_MODE
from evaluation.documents import READABLE, KeyView
from evaluation.models import EvaluationRun, QuestionSet
from evaluation.question_files import MAX_FILE_BYTES, Checked, FileUnreadable, read_file
from evaluation.selectors import (
    FIGURES,
    Keys,
    comparable_runs,
    quality_series,
    question_export,
    question_rows,
    question_sets_of_kb,
    run_comparison,
    run_figure_rows,
    run_latency,
    run_misses,
    run_status,
)
from evaluation.services.question_sets import (
    QuestionsRefused,
    question_add_from_hit,
    questions_check,
    questions_import,
)
from evaluation.services.runs import evaluation_request
from kb.access import Reader
from kb.models import IndexVersion, KnowledgeBase
from kb.selectors.index_versions import (
    index_version_progress,
    index_version_status,
    live_index_versions,
)
from kb.services.base import ActionRefused
from retrieval.search.engine import MODES

# The modes in the order pages show them: the API's default first.
RUN_MODES = ("hybrid", "keyword", "vector")
assert set(RUN_MODES) == set(MODES)

QUESTIONS_SHOWN = 200
RECENT_RUNS = 10
MISSES_SHOWN = 200
UPLOAD_MAX_AGE_SECONDS = 3600
# The figures the Quality page charts, in its order.
CHARTED = ("mrr@10", "hit@1", "hit@10", "ndcg@10", "recall@10")


def reader_of(request: HttpRequest, kb: KnowledgeBase) -> Reader:
    """Who reads `kb`'s evaluation pages: the user's tenant and groups (a superuser: all)."""
    return kb_reader(request, kb)


def _admin_of(model: type[Any]) -> TenantScopedAdmin:
    model_admin = admin.site._registry[model]
    assert isinstance(model_admin, TenantScopedAdmin)
    return model_admin


def _set_url(question_set: QuestionSet) -> str:
    return reverse("admin:evaluation_questionset_change", args=[question_set.pk])


def _run_url(run_id: int) -> str:
    return reverse("admin:evaluation_evaluationrun_change", args=[run_id])


def _quality_url(kb_id: int, question_set_id: int | None = None) -> str:
    url = reverse("admin:evaluation_quality", args=[kb_id])
    return f"{url}?set={question_set_id}" if question_set_id else url


def search_url(kb_id: int, query: str, mode: str = "hybrid", compare: int | None = None) -> str:
    """Test search of `kb_id` with the query filled in (and `compare`: that index version's
    column beside the active one's)."""
    params: dict[str, Any] = {"query": query, "mode": mode}
    if compare is not None:
        params["compare"] = compare
    return reverse("admin:kb_knowledgebase_search", args=[kb_id]) + "?" + urlencode(params)


def target_words(run: EvaluationRun) -> str:
    """What the run asked: "the active version (v3)", "candidate v4"."""
    number = run.index_version.number if run.index_version_id and run.index_version else None
    if run.target == EvaluationRun.Target.ACTIVE:
        return (
            gettext("the active version (v%(n)s)") % {"n": number}
            if number
            else gettext("the active version")
        )
    if run.target == EvaluationRun.Target.REVISION:
        # the document is not named: the run's page is read by who may not read it
        return gettext("v%(n)s with a pending revision served instead") % {"n": number}
    return gettext("index version v%(n)s") % {"n": number}


def run_mrr(run: EvaluationRun) -> list[tuple[str, float]]:
    """(mode, MRR@10 over all questions) of a finished run."""
    out = []
    for mode in run.modes:
        value = (((run.summary or {}).get(mode) or {}).get("all") or {}).get("mrr@10")
        if isinstance(value, int | float):
            out.append((mode, float(value)))
    return out


def _documents(keys: Keys) -> list[dict[str, Any]]:
    """Keys shown on a page: a readable document as its title, linked; others as their key."""
    return [_document(view) for view in keys.shown]


def _document(view: KeyView) -> dict[str, Any]:
    if view.state == READABLE and view.document_id is not None:
        return {
            "title": view.title or view.key,
            "key": view.key,
            "url": reverse("admin:kb_document_change", args=[view.document_id]),
            "state": view.state,
        }
    note = gettext("deleted") if view.state == "deleted" else gettext("no such document")
    return {"title": view.key, "key": view.key, "url": "", "state": view.state, "note": note}


# --- a question set's page ----------------------------------------------------------------


def question_set_context(request: HttpRequest, question_set: QuestionSet) -> dict[str, Any]:
    """What a set's page shows beside its fields."""
    kb = question_set.kb
    questions = list(question_set.questions.order_by("pk")[: QUESTIONS_SHOWN + 1])
    rows = question_rows(
        questions=questions[:QUESTIONS_SHOWN], kb_id=kb.pk, reader=reader_of(request, kb)
    )
    runs = list(
        question_set.runs.select_related("index_version").order_by("-created_at", "-pk")[
            :RECENT_RUNS
        ]
    )
    can_change = request.user.has_perm("evaluation.change_questionset")
    return {
        "question_set": question_set,
        "question_rows": [
            {
                "row": row,
                "expected": _documents(row.expected),
                "url": reverse("admin:evaluation_question_change", args=[row.question.pk]),
                "search_url": search_url(kb.pk, row.question.text),
            }
            for row in rows
        ],
        "more_questions": len(questions) > QUESTIONS_SHOWN,
        "question_count": question_set.questions.count(),
        "questions_url": reverse("admin:evaluation_question_changelist")
        + f"?question_set__id__exact={question_set.pk}",
        "recent_runs": [
            {
                "run": run,
                "target": target_words(run),
                "status": run_status(run),
                "mrr": run_mrr(run),
            }
            for run in runs
        ],
        "can_change": can_change,
        "can_add_question": request.user.has_perm("evaluation.add_question"),
        "can_run": request.user.has_perm("evaluation.run_evaluation"),
        "add_question_url": reverse("admin:evaluation_question_add")
        + f"?question_set={question_set.pk}",
        "quality_url": _quality_url(kb.pk, question_set.pk),
    }


# --- upload -------------------------------------------------------------------------------


class UploadForm(forms.Form):
    file = forms.FileField(
        label=gettext_lazy("Questions file"),
        help_text=gettext_lazy(
            "A .jsonl file (one question a line: id, question, expected_documents, "
            "expected_passage, language, tag) or a .csv file with those columns (several expected "
            "documents separated by |). UTF-8, at most 2 MB."
        ),
    )
    replace = forms.BooleanField(
        required=False,
        label=gettext_lazy("Replace the set's questions"),
        help_text=gettext_lazy(
            "Ticked: the set's questions become the file's. Unticked: the file's are "
            "added, or update the questions with their ids."
        ),
    )


def _upload_salt(request: HttpRequest, question_set: QuestionSet) -> str:
    """The report's token is this user's, in this session, for this set."""
    session_key = getattr(getattr(request, "session", None), "session_key", "")
    return f"evaluation-upload:{question_set.pk}:{request.user.pk}:{session_key}"


def upload_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    """GET: the upload form. POST a file: checked; imported when it has no problem, else the
    report, with the choice to import its valid rows (the file's text kept in a token signed
    for this user's session: nothing is stored meanwhile)."""
    question_set: QuestionSet = model_admin.get_scoped_object_or_404(request, object_id)
    require(request, "evaluation.change_questionset")
    form = UploadForm(request.POST or None, request.FILES or None)
    report: Checked | None = None
    token = ""
    if request.method == "POST" and request.POST.get("token"):
        try:
            kept = signing.loads(
                request.POST["token"],
                salt=_upload_salt(request, question_set),
                max_age=UPLOAD_MAX_AGE_SECONDS,
            )
        except signing.BadSignature:
            messages.error(
                request, gettext("That report is too old or not yours: upload the file again.")
            )
            return HttpResponseRedirect(request.path)
        raw = read_file(kept["content"].encode(), kept["name"])
        return _import(request, question_set, raw, replace=kept["replace"], valid_only=True)
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            if upload.size > MAX_FILE_BYTES:
                raise FileUnreadable(gettext("The file is larger than 2 MB; split it."))
            data = upload.read()
            raw = read_file(data, upload.name or "")
        except FileUnreadable as exc:
            form.add_error("file", str(exc))
        else:
            replace = form.cleaned_data["replace"]
            report = questions_check(
                question_set=question_set, raw=raw, reader=reader_of(request, question_set.kb)
            )
            if report.ok:
                return _import(request, question_set, raw, replace=replace, valid_only=False)
            token = signing.dumps(
                {"name": upload.name, "content": data.decode("utf-8-sig"), "replace": replace},
                salt=_upload_salt(request, question_set),
                compress=True,
            )
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Upload questions to %(set)s") % {"set": question_set.name},
        "question_set": question_set,
        "form": form,
        "report": report,
        "token": token,
        "back": _set_url(question_set),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/upload.html", context)


def _import(
    request: HttpRequest,
    question_set: QuestionSet,
    raw: Any,
    *,
    replace: bool,
    valid_only: bool,
) -> HttpResponse:
    reader = reader_of(request, question_set.kb)
    checked = questions_check(question_set=question_set, raw=raw, reader=reader)
    try:
        outcome = questions_import(
            question_set=question_set,
            checked=checked,
            reader=reader,
            replace=replace,
            valid_only=valid_only,
            actor=request.user,
        )
    except QuestionsRefused as exc:
        messages.error(
            request,
            gettext("Nothing was imported: %(problem)s") % {"problem": exc.checked.problems[0]},
        )
        return HttpResponseRedirect(
            reverse("admin:evaluation_questionset_upload", args=[question_set.pk])
        )
    messages.success(request, gettext("Imported: %(outcome)s") % {"outcome": outcome.sentence()})
    return HttpResponseRedirect(_set_url(question_set))


def export_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    """The set as a JSONL file an upload reads back; documents the user may not read are left
    out and counted (`hidden_documents`), and an upload of the file keeps them."""
    question_set: QuestionSet = model_admin.get_scoped_object_or_404(request, object_id)
    if not model_admin.has_view_permission(request, question_set):
        raise PermissionDenied(gettext("You need the permission to view question sets."))
    rows = question_rows(
        questions=list(question_set.questions.order_by("pk")),
        kb_id=question_set.kb_id,
        reader=reader_of(request, question_set.kb),
    )
    body = "".join(json.dumps(question_export(row), ensure_ascii=False) + "\n" for row in rows)
    response = HttpResponse(body, content_type="application/jsonl; charset=utf-8")
    name = f"{question_set.kb.slug}-questions-{question_set.pk}-v{question_set.version}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


# --- run an evaluation ----------------------------------------------------------------------


class StartForm(forms.Form):
    modes = forms.MultipleChoiceField(
        label=gettext_lazy("Modes"),
        choices=[(m, SEARCH_MODE[m]) for m in RUN_MODES],
        initial=list(RUN_MODES),
        widget=forms.CheckboxSelectMultiple,
        help_text=gettext_lazy("Every question is asked in each mode ticked."),
    )
    version = forms.TypedChoiceField(
        coerce=int,
        empty_value=None,
        required=False,
        label=gettext_lazy("Index version"),
        help_text=gettext_lazy(
            "The active version (pinned when the run starts), or another version still "
            "built for: a candidate before its swap, or a retired one kept for rollback."
        ),
    )

    def __init__(self, *args: Any, versions: list[tuple[int | str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        version = self.fields["version"]
        assert isinstance(version, forms.TypedChoiceField)
        version.choices = versions


def _version_choices(kb: KnowledgeBase) -> list[tuple[int | str, str]]:
    active = kb.active_index_version
    choices: list[tuple[int | str, str]] = [
        (
            "",
            gettext("the active version (v%(n)s)") % {"n": active.number}
            if active
            else gettext("the active version"),
        )
    ]
    for version in live_index_versions(kb_id=kb.pk).order_by("-number"):
        if version.pk == kb.active_index_version_id:
            continue
        status = index_version_status(
            version=version, progress=index_version_progress(version=version), kb=kb
        )
        choices.append(
            (
                version.pk,
                gettext("v%(n)s (%(status)s: %(model)s, chunks %(size)s/%(overlap)s)")
                % {
                    "n": version.number,
                    "status": status.label,
                    "model": version.model,
                    "size": version.chunk_size,
                    "overlap": version.chunk_overlap,
                },
            )
        )
    return choices


def start_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    """GET: which modes and which index version. POST: the run is queued (or the same one,
    still open, is found) and its page opens."""
    question_set: QuestionSet = model_admin.get_scoped_object_or_404(request, object_id)
    require(request, "evaluation.run_evaluation")
    kb = question_set.kb
    form = StartForm(request.POST or None, versions=_version_choices(kb))
    if request.method == "POST" and form.is_valid():
        chosen = form.cleaned_data.get("version")
        version = IndexVersion.objects.filter(kb=kb, pk=chosen).first() if chosen else None
        try:
            run, created = evaluation_request(
                kb=kb,
                question_set=question_set,
                modes=form.cleaned_data["modes"],
                reader=reader_of(request, kb),
                index_version=version,
                actor=request.user,
            )
        except ActionRefused as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(request.path)
        if created:
            messages.success(
                request,
                gettext("Evaluation %(n)s is queued; its figures appear here.") % {"n": run.pk},
            )
        else:
            messages.info(
                request,
                gettext("Evaluation %(n)s asks the same and is still open.") % {"n": run.pk},
            )
        return HttpResponseRedirect(_run_url(run.pk))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Run an evaluation of %(set)s") % {"set": question_set.name},
        "question_set": question_set,
        "question_count": question_set.questions.count(),
        "form": form,
        "back": _set_url(question_set),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/start_run.html", context)


# --- from Test search -----------------------------------------------------------------------


def search_answer_context(request: HttpRequest, kb: KnowledgeBase) -> dict[str, Any] | None:
    """What Test search needs to offer "this hit answers the question" on each hit: the form's
    address and the knowledge base's sets; None for a user who may not change sets."""
    if not request.user.has_perm("evaluation.change_questionset"):
        return None
    return {
        "url": reverse("admin:evaluation_questionset_add_from_search"),
        "sets": list(question_sets_of_kb(kb.pk)),
        "add_set_url": reverse("admin:evaluation_questionset_add") + f"?kb={kb.pk}",
    }


def add_from_search_view(model_admin: TenantScopedAdmin, request: HttpRequest) -> HttpResponse:
    """POST kb, question_set, query, document_key (and `next`, the Test search page to return
    to): the query becomes a question of the set answered by the hit's document, or the
    document joins the question the set asks already."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    require(request, "evaluation.change_questionset")
    kb: KnowledgeBase = _admin_of(KnowledgeBase).get_scoped_object_or_404(
        request, request.POST.get("kb", "")
    )
    question_set = (
        model_admin.get_queryset(request)
        .filter(kb=kb, pk=_int(request.POST.get("question_set")))
        .first()
    )
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse("admin:kb_knowledgebase_search", args=[kb.pk])
    if question_set is None:
        messages.error(request, gettext("Choose a question set of this knowledge base."))
        return HttpResponseRedirect(back)
    try:
        question, created = question_add_from_hit(
            question_set=question_set,
            query=request.POST.get("query", ""),
            document_key=request.POST.get("document_key", ""),
            reader=reader_of(request, kb),
            actor=request.user,
        )
    except QuestionsRefused as exc:
        messages.error(
            request,
            gettext("Not added: %(problem)s") % {"problem": exc.checked.problems[0].message},
        )
        return HttpResponseRedirect(back)
    words = (
        gettext("Question %(id)s added to %(set)s.")
        if created
        else gettext("Question %(id)s already in %(set)s.")
    )
    messages.success(request, words % {"id": question.external_id, "set": question_set.name})
    return HttpResponseRedirect(back)


def _mode_order(mode: str) -> int:
    return RUN_MODES.index(mode) if mode in RUN_MODES else len(RUN_MODES)


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) < 19 else None


# --- a run's page ---------------------------------------------------------------------------


def _settings_rows(run: EvaluationRun) -> list[tuple[str, str]]:
    settings = run.search_settings or {}
    version = settings.get("index_version") or {}
    fusion = settings.get("fusion") or {}
    rerank = settings.get("rerank") or {}
    rows = []
    if version:
        rows += [
            (gettext("index version"), f"v{version.get('number')}"),
            (
                gettext("model"),
                f"{version.get('provider')}/{version.get('model')}, "
                f"{version.get('dimensions')}d {version.get('metric')}",
            ),
            (
                gettext("chunking"),
                gettext("%(size)s characters, %(overlap)s overlap")
                % {"size": version.get("chunk_size"), "overlap": version.get("chunk_overlap")},
            ),
            (gettext("pipeline"), str(version.get("pipeline_version"))),
        ]
    if fusion:
        rows.append(
            (
                gettext("hybrid fusion"),
                gettext("%(method)s (model %(sha)s…)")
                % {"method": fusion.get("method"), "sha": str(fusion.get("model_sha256"))[:12]},
            )
        )
    if rerank:
        rows.append(
            (
                gettext("reranker"),
                f"{rerank.get('protocol')} {rerank.get('model')}".strip()
                if rerank.get("configured")
                else pgettext("reranker", "none"),
            )
        )
    if settings.get("top_k"):
        rows.append((gettext("top k"), str(settings["top_k"])))
    return rows


def _compare_version(run: EvaluationRun) -> int | None:
    """The version test search should put beside the active one for a run's questions."""
    if run.index_version_id and run.index_version_id != run.kb.active_index_version_id:
        return run.index_version_id
    return None


def run_context(request: HttpRequest, run: EvaluationRun) -> dict[str, Any]:
    """What a run's page shows."""
    reader = reader_of(request, run.kb)
    mode = request.GET.get("mode") if request.GET.get("mode") in run.modes else None
    misses, missed = run_misses(run=run, reader=reader, mode=mode, limit=MISSES_SHOWN)
    compare = _compare_version(run)
    status = run_status(run)
    return {
        "run": run,
        "status": status,
        "target": target_words(run),
        "figures": FIGURES,
        "figure_rows": run_figure_rows(run),
        "latency": run_latency(run),
        "misses": [
            {
                "miss": miss,
                "expected": _documents(miss.expected),
                "returned": _documents(miss.returned),
                "search_url": search_url(run.kb_id, miss.result.text, miss.result.mode, compare),
            }
            for miss in misses
        ],
        "missed": missed,
        "miss_mode": mode,
        "settings_rows": _settings_rows(run),
        "quality_url": _quality_url(run.kb_id, run.question_set_id),
        "compare_url": reverse("admin:evaluation_evaluationrun_compare_choose", args=[run.pk]),
        "set_url": _set_url(run.question_set),
        "title": gettext("Evaluation %(n)s of %(set)s") % {"n": run.pk, "set": run.question_set},
    }


# --- comparing two runs ---------------------------------------------------------------------


def _run_pair(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> EvaluationRun:
    run: EvaluationRun = model_admin.get_scoped_object_or_404(request, object_id)
    if not model_admin.has_view_permission(request, run):
        raise PermissionDenied(gettext("You need the permission to view evaluation runs."))
    return run


def compare_choose_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str
) -> HttpResponse:
    """The knowledge base's other finished runs to compare this one with."""
    run = _run_pair(model_admin, request, object_id)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Compare evaluation %(n)s with…") % {"n": run.pk},
        "run": run,
        "others": [
            {
                "run": other,
                "target": target_words(other),
                "url": reverse("admin:evaluation_evaluationrun_compare", args=[other.pk, run.pk]),
            }
            for other in comparable_runs(run)
        ],
        "back": _run_url(run.pk),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/compare_choose.html", context)


def compare_view(
    model_admin: TenantScopedAdmin, request: HttpRequest, object_id: str, other_id: int
) -> HttpResponse:
    """Run `object_id` (before) beside run `other_id` (after): figures and each question's
    change, each linking into Test search."""
    before = _run_pair(model_admin, request, object_id)
    after = model_admin.get_scoped_object_or_404(request, str(other_id))
    if after.kb_id != before.kb_id:
        raise PermissionDenied(gettext("Only runs of one knowledge base can be compared."))
    comparison = run_comparison(before, after)
    compare = _compare_version(after) or _compare_version(before)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Evaluation %(before)s → %(after)s")
        % {"before": before.pk, "after": after.pk},
        "comparison": comparison,
        "before_target": target_words(before),
        "after_target": target_words(after),
        "changes": [
            {
                "change": change,
                "search_url": search_url(before.kb_id, change.text, change.mode, compare),
            }
            for change in comparison.changes
            if change.change not in ("same", "missed")
        ],
        "unchanged": sum(1 for c in comparison.changes if c.change in ("same", "missed")),
        # one line per figure, each mode's before, after and change side by side
        "figure_rows": [
            (name, [comparison.figures[mode][n][1:] for mode in comparison.modes])
            for n, name in enumerate(FIGURES)
        ],
        "before_url": _run_url(before.pk),
        "after_url": _run_url(after.pk),
        "swap_url": reverse("admin:evaluation_evaluationrun_compare", args=[after.pk, before.pk]),
        "back": _run_url(before.pk),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/compare.html", context)


# --- quality over time ----------------------------------------------------------------------


def quality_view(model_admin: TenantScopedAdmin, request: HttpRequest, kb_id: str) -> HttpResponse:
    """A knowledge base's figures over its runs, one chart per figure, one line per mode, for
    one question set at a time (runs of different sets do not compare)."""
    kb: KnowledgeBase = _admin_of(KnowledgeBase).get_scoped_object_or_404(request, kb_id)
    if not model_admin.has_view_permission(request):
        raise PermissionDenied(gettext("You need the permission to view evaluation runs."))
    sets = list(question_sets_of_kb(kb.pk))
    chosen_id = _int(request.GET.get("set"))
    chosen = next((s for s in sets if s.pk == chosen_id), None)
    if chosen is None:
        # the set run last (`question_sets_of_kb` annotates each set's last run), else the first
        latest = {s.pk: getattr(s, "last_run_id", None) or 0 for s in sets}
        ran = [s for s in sets if latest[s.pk]]
        chosen = max(ran, key=lambda s: latest[s.pk]) if ran else (sets[0] if sets else None)
    charts = []
    runs: list[EvaluationRun] = []
    if chosen is not None:
        for metric in CHARTED:
            found = quality_series(question_set=chosen, metric=metric)
            # the modes in the pages' order, whatever order each run asked them in
            series = {mode: found[mode] for mode in sorted(found, key=_mode_order)}
            if series:
                charts.append(
                    {
                        "metric": metric,
                        "svg": line_chart(metric=metric, series=series, run_url=_run_url),
                        "legend": legend(list(series)),
                    }
                )
        runs = list(
            EvaluationRun.objects.filter(question_set=chosen)
            .select_related("index_version")
            .order_by("-created_at", "-pk")[:50]
        )
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Quality of %(kb)s") % {"kb": kb.name},
        "kb": kb,
        "sets": [{"set": s, "url": _quality_url(kb.pk, s.pk)} for s in sets],
        "chosen": chosen,
        "charts": charts,
        "runs": [
            {
                "run": run,
                "target": target_words(run),
                "mrr": run_mrr(run),
            }
            for run in runs
        ],
        "home_url": reverse("admin:kb_knowledgebase_home", args=[kb.pk]),
        "can_run": request.user.has_perm("evaluation.run_evaluation"),
        "calibration": calibration_section(request, kb),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/evaluation/quality.html", context)
