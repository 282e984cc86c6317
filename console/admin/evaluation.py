"""Question sets, their questions and evaluation runs in the admin (evaluation/).

A set's page is its name and description, its questions (hidden expected documents as counts),
its recent runs, and *Add question*, *Upload questions…*, *Export* and *Run evaluation…*
(`evaluation_pages`). A question has its own form, checked as an imported row is and saved
through `evaluation.services.question_sets`. A run's page is read-only: its progress, its
figures per mode, language and tag, its latency, the questions it missed with what came back
instead (each linking into Test search), the settings it ran with, and *Compare with…*; a
knowledge base's *Quality* page charts the figures over runs.

Index admins write sets and run evaluations; content managers see them (`kb.roles`). Every
admin is tenant-scoped through the knowledge base; documents a user may not read are counts.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import floatformat
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy, ngettext

from console.admin import evaluation_calibration, evaluation_pages
from console.admin.scoping import ReadOnlyAdmin, TenantScopedAdmin
from console.admin.sources import run_state_html
from console.words import search_mode, search_modes
from evaluation.documents import HIDDEN, key_views
from evaluation.models import EvaluationRun, Language, Question, QuestionSet
from evaluation.question_files import PASSAGE_MAX, QUESTION_MAX
from evaluation.selectors import with_counts
from evaluation.services.question_sets import (
    QuestionSetInvalid,
    QuestionsRefused,
    question_check,
    question_delete,
    question_save,
    question_set_create,
    question_set_update,
)
from kb.models import KnowledgeBase

DETECT = "auto"


class QuestionSetForm(forms.ModelForm):
    class Meta:
        model = QuestionSet
        fields = ["kb", "name", "description"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kb = data.get("kb") or getattr(self.instance, "kb", None)
        name = (data.get("name") or "").strip()
        if kb is not None and name:
            clash = QuestionSet.objects.filter(kb=kb, name=name).exclude(pk=self.instance.pk)
            if clash.exists():
                self.add_error(
                    "name",
                    gettext("%(kb)s already has a question set named %(name)s.")
                    % {"kb": kb.name, "name": repr(name)},
                )
        return data


@admin.register(QuestionSet)
class QuestionSetAdmin(TenantScopedAdmin):
    tenant_path = "kb__tenant_id"
    form = QuestionSetForm
    list_display = ["name", "knowledge_base", "questions", "version", "last_run", "updated_at"]
    list_filter = ["kb"]
    search_fields = ["name"]
    ordering = ["kb__slug", "name"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return with_counts(super().get_queryset(request).select_related("kb"))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["kb", "version"] if obj is not None else ["version"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["kb", "name", "description", "version"] if obj else ["kb", "name", "description"]

    @admin.display(description=gettext_lazy("knowledge base"), ordering="kb__slug")
    def knowledge_base(self, question_set: QuestionSet) -> str:
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:kb_knowledgebase_home", args=[question_set.kb_id]),
            question_set.kb,
        )

    @admin.display(description=gettext_lazy("questions"), ordering="question_count")
    def questions(self, question_set: QuestionSet) -> int:
        return int(getattr(question_set, "question_count", 0))

    @admin.display(description=gettext_lazy("last run"))
    def last_run(self, question_set: QuestionSet) -> str:
        run_id = getattr(question_set, "last_run_id", None)
        state = getattr(question_set, "last_run_state", None)
        if run_id is None or state is None:
            return gettext("never run")
        return run_state_html(
            state,
            str(EvaluationRun.State(state).label),
            reverse("admin:evaluation_evaluationrun_change", args=[run_id]),
        )

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """`?kb=` preselects; with one knowledge base, it is preselected."""
        initial: dict[str, Any] = dict(super().get_changeform_initial_data(request))
        only = list(self.scoped_queryset(request, KnowledgeBase).values_list("pk", flat=True)[:2])
        if len(only) == 1:
            initial.setdefault("kb", only[0])
        return initial

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        try:
            if change:
                saved = question_set_update(
                    question_set=obj,
                    name=obj.name,
                    description=obj.description,
                    actor=request.user,
                )
            else:
                saved = question_set_create(
                    kb=obj.kb, name=obj.name, description=obj.description, actor=request.user
                )
        except QuestionSetInvalid as exc:  # a concurrent one took the name after the form
            messages.error(request, str(exc))
            return
        obj.pk, obj.version = saved.pk, saved.version

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        question_set = self.get_object(request, unquote(object_id))
        extra = {**(extra_context or {}), "show_save_and_add_another": False}
        if question_set is not None:
            extra.update(evaluation_pages.question_set_context(request, question_set))
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            path(
                "add-from-search/",
                wrap(evaluation_pages.add_from_search_view),
                name="evaluation_questionset_add_from_search",
            ),
            path(
                "<path:object_id>/upload/",
                wrap(evaluation_pages.upload_view),
                name="evaluation_questionset_upload",
            ),
            path(
                "<path:object_id>/export/",
                wrap(evaluation_pages.export_view),
                name="evaluation_questionset_export",
            ),
            path(
                "<path:object_id>/run/",
                wrap(evaluation_pages.start_view),
                name="evaluation_questionset_run",
            ),
            *super().get_urls(),
        ]


class KeysField(forms.CharField):
    """Document keys, one a line."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 60})

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [line.strip() for line in str(text).splitlines() if line.strip()]


class QuestionForm(forms.ModelForm):
    """A question's fields, checked by `question_check` (as a file's row is). Expected documents
    the user may not read are neither shown nor removed (the service keeps them), nor is the
    passage of a question that has some."""

    external_id = forms.CharField(
        label=gettext_lazy("Id"),
        max_length=200,
        required=False,
        help_text=gettext_lazy("Unique in the set; empty: made from the question's words."),
    )
    text = forms.CharField(
        label=gettext_lazy("Question"),
        max_length=QUESTION_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    expected_keys = KeysField(
        label=gettext_lazy("Expected documents"),
        help_text=gettext_lazy("The keys of the documents that answer it, one a line."),
    )
    expected_passage = forms.CharField(
        label=gettext_lazy("Expected passage"),
        required=False,
        max_length=PASSAGE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=gettext_lazy("Optional: the words that answer it, as the document has them."),
    )
    language = forms.ChoiceField(
        label=gettext_lazy("Language"),
        choices=[(DETECT, gettext_lazy("detect from the question")), *Language.choices],
        initial=DETECT,
        required=False,
    )

    class Meta:
        model = Question
        fields = ["question_set", "external_id", "text", "expected_keys", "expected_passage"]
        fields += ["language", "tag"]

    request: HttpRequest  # set per request by QuestionAdmin.get_form

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden = 0
        question = self.instance if self.instance.pk else None
        if question is not None:
            reader = evaluation_pages.reader_of(self.request, question.question_set.kb)
            views = key_views(
                kb_id=question.question_set.kb_id, keys=question.expected_keys, reader=reader
            )
            shown = [k for k in question.expected_keys if views[k].state != HIDDEN]
            self.hidden = len(question.expected_keys) - len(shown)
            self.initial["expected_keys"] = shown
            if self.hidden:
                self.fields["expected_keys"].help_text = " ".join(
                    (
                        str(self.fields["expected_keys"].help_text),
                        ngettext(
                            "%(n)s more expected document you may not read stays as it is.",
                            "%(n)s more expected documents you may not read stay as they are.",
                            self.hidden,
                        )
                        % {"n": self.hidden},
                    )
                )
                passage = self.fields["expected_passage"]
                passage.disabled = True
                passage.help_text = gettext(
                    "Not shown, and kept: the question expects a document you may not read, "
                    "which the passage may quote."
                )
                self.initial["expected_passage"] = ""

    def row(self) -> dict[str, object]:
        data = self.cleaned_data
        language = data.get("language") or DETECT
        return {
            "id": data.get("external_id", ""),
            "question": data.get("text", ""),
            "expected_documents": data.get("expected_keys", []),
            "expected_passage": data.get("expected_passage", "") or "",
            "language": "" if language == DETECT else language,
            "tag": data.get("tag", ""),
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        question_set = data.get("question_set") or getattr(self.instance, "question_set", None)
        if question_set is None or self.errors:
            return data
        checked = question_check(
            question_set=question_set,
            row=self.row(),
            reader=evaluation_pages.reader_of(self.request, question_set.kb),
            question=self.instance if self.instance.pk else None,
        )
        for problem in checked.problems:
            self.add_error(None, problem.message)
        return data

    def _post_clean(self) -> None:
        """The service checks and writes (`question_save`); the model's own validation of
        fields left out of the row (language "auto") would only repeat or contradict it."""


@admin.register(Question)
class QuestionAdmin(TenantScopedAdmin):
    tenant_path = "question_set__kb__tenant_id"
    form = QuestionForm
    list_display = ["external_id", "short_text", "question_set", "language", "tag", "expected"]
    list_display_links = ["external_id", "short_text"]
    list_filter = ["question_set", "language"]
    search_fields = ["external_id", "text"]
    list_select_related = ["question_set__kb"]
    ordering = ["question_set", "pk"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["question_set"] if obj is not None else []

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The set first, then the question's own fields."""
        fields = list(super().get_fields(request, obj))
        return ["question_set", *(f for f in fields if f != "question_set")]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        # A subclass per request: a class attribute would be shared across threads.
        return type(form.__name__, (form,), {"request": request})

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return dict(super().get_changeform_initial_data(request))  # ?question_set= preselects

    @admin.display(description=gettext_lazy("question"))
    def short_text(self, question: Question) -> str:
        return question.text if len(question.text) <= 80 else f"{question.text[:77]}…"

    @admin.display(description=gettext_lazy("expected documents"))
    def expected(self, question: Question) -> str:
        return str(len(question.expected_keys))

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        return form.instance

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        question_set = form.cleaned_data.get("question_set") or obj.question_set
        try:
            saved = question_save(
                question_set=question_set,
                row=form.row(),
                reader=evaluation_pages.reader_of(request, question_set.kb),
                question=obj if change else None,
                actor=request.user,
            )
        except QuestionsRefused as exc:  # changed between the form's check and the save
            messages.error(
                request,
                gettext("Nothing was saved: %(problem)s") % {"problem": exc.checked.problems[0]},
            )
            return
        obj.pk = saved.pk
        obj.external_id = saved.external_id

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # a question has no related rows to save here

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        question_delete(question=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for question in queryset.select_related("question_set"):
            question_delete(question=question, actor=request.user)


RUN_FIELDS = ("question_set", "created_at", "started_at", "finished_at")


@admin.register(EvaluationRun)
class EvaluationRunAdmin(ReadOnlyAdmin):
    """Runs, read-only: what each asked, of which version, and how search answered."""

    tenant_path = "kb__tenant_id"
    list_display = [
        "run",
        "kb",
        "question_set",
        "target_text",
        "modes_text",
        "state_badge",
        "mrr",
        "created_at",
        "finished_at",
    ]
    list_display_links = ["run"]
    list_filter = ["kb", "question_set", "state"]
    list_select_related = ["kb", "question_set", "index_version"]
    ordering = ["-created_at", "-pk"]
    fields = RUN_FIELDS
    readonly_fields = RUN_FIELDS

    @admin.display(description=gettext_lazy("run"), ordering="pk")
    def run(self, run: EvaluationRun) -> str:
        return gettext("Evaluation %(n)s") % {"n": run.pk}

    @admin.display(description=gettext_lazy("asked"))
    def target_text(self, run: EvaluationRun) -> str:
        return evaluation_pages.target_words(run)

    @admin.display(description=gettext_lazy("modes"))
    def modes_text(self, run: EvaluationRun) -> str:
        return search_modes(run.modes)

    @admin.display(description=gettext_lazy("state"), ordering="state")
    def state_badge(self, run: EvaluationRun) -> str:
        return run_state_html(run.state, run.get_state_display())

    @admin.display(description="MRR@10")
    def mrr(self, run: EvaluationRun) -> str:
        summary = run.summary or {}
        figures = [
            f"{search_mode(mode)} " + floatformat(summary[mode].get("all", {}).get("mrr@10", 0), 3)
            for mode in run.modes
            if summary.get(mode)
        ]
        return " · ".join(figures) or "—"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        run = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if run is not None:
            extra.update(evaluation_pages.run_context(request, run))
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self) -> list[Any]:
        wrap = self.bound_view
        return [
            path(
                "quality/<int:kb_id>/calibrate/",
                wrap(evaluation_calibration.calibrate_view),
                name="evaluation_calibrate",
            ),
            path(
                "quality/<int:kb_id>/calibration/rollback/",
                wrap(evaluation_calibration.rollback_view),
                name="evaluation_calibration_rollback",
            ),
            path(
                "calibration/<int:calibration_id>/",
                wrap(evaluation_calibration.calibration_view),
                name="evaluation_calibration",
            ),
            path(
                "calibration/<int:calibration_id>/adopt/",
                wrap(evaluation_calibration.adopt_view),
                name="evaluation_calibration_adopt",
            ),
            path(
                "quality/<path:kb_id>/",
                wrap(evaluation_pages.quality_view),
                name="evaluation_quality",
            ),
            path(
                "<path:object_id>/compare/",
                wrap(evaluation_pages.compare_choose_view),
                name="evaluation_evaluationrun_compare_choose",
            ),
            path(
                "<path:object_id>/compare/<int:other_id>/",
                wrap(evaluation_pages.compare_view),
                name="evaluation_evaluationrun_compare",
            ),
            *super().get_urls(),
        ]
