"""Input and output serializers of evaluation's API. They check shapes and sizes; what a question
may be (known documents, duplicates, languages) is `evaluation.question_files.check`'s to say,
so a file, a list and a form get the same words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework import serializers

from evaluation.calibration import (
    MIN_QUESTIONS,
    CalibrationChange,
    CalibrationStatus,
    CalibrationVerdict,
    change_counts,
)
from evaluation.models import (
    EXTERNAL_ID_MAX,
    KEY_MAX,
    PASSAGE_MAX,
    QUESTION_MAX,
    TAG_MAX,
    Calibration,
    EvaluationRun,
)
from evaluation.question_files import MAX_EXPECTED, MAX_QUESTIONS
from evaluation.selectors import (
    CHANGES,
    MISSED,
    SAME,
    Keys,
    ResultRow,
    RunComparison,
    RunStatus,
)
from retrieval.api.serializers import CursorPageOutput, DocumentPageInput
from retrieval.search.engine import MODES

# Values the views compute for an output (not model fields): set on the instance.
STATUS_ATTR = "_canon_status"
COUNT_ATTR = "question_count"


class QuestionSetInput(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True)


class QuestionSetOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kb = serializers.CharField(source="kb.slug")
    name = serializers.CharField()
    description = serializers.CharField()
    version = serializers.IntegerField(
        help_text="Goes up with every change of the set's questions; a run says which it asked."
    )
    questions = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_questions(self, question_set: Any) -> int:
        count = getattr(question_set, COUNT_ATTR, None)
        return int(count) if count is not None else int(question_set.questions.count())


class QuestionSetListOutput(serializers.Serializer):
    results = QuestionSetOutput(many=True)


class QuestionInput(serializers.Serializer):
    """One question, in the fields files use too (`evaluation.question_files`)."""

    id = serializers.CharField(
        max_length=EXTERNAL_ID_MAX,
        required=False,
        allow_blank=True,
        help_text="Unique in the set; a question with this id is updated. Empty: made from "
        "the question's words.",
    )
    question = serializers.CharField(max_length=QUESTION_MAX, trim_whitespace=False)
    expected_documents = serializers.ListField(
        child=serializers.CharField(max_length=KEY_MAX),
        max_length=MAX_EXPECTED,
        help_text="The keys of the documents that answer it (documents this key may read).",
    )
    expected_passage = serializers.CharField(
        max_length=PASSAGE_MAX, required=False, allow_blank=True
    )
    language = serializers.CharField(
        max_length=16,
        required=False,
        allow_blank=True,
        help_text="en or zh; empty: detected from the question.",
    )
    tag = serializers.CharField(max_length=TAG_MAX, required=False, allow_blank=True)


class QuestionsInput(serializers.Serializer):
    questions = serializers.ListField(child=QuestionInput(), max_length=MAX_QUESTIONS)
    valid_only = serializers.BooleanField(
        default=False,
        help_text="Write the valid questions and leave out the others (their problems are in "
        "the answer). false: any problem refuses the whole request with a 400.",
    )


class QuestionOutput(serializers.Serializer):
    id = serializers.CharField()
    question = serializers.CharField()
    expected_documents = serializers.ListField(
        child=serializers.CharField(),
        help_text="The keys of the expected documents this key may see.",
    )
    expected_passage = serializers.CharField(
        help_text="Empty when the question has none, or when it expects a document this key "
        "may not read (the passage may quote it)."
    )
    language = serializers.CharField()
    tag = serializers.CharField()
    hidden_documents = serializers.IntegerField(
        help_text="Expected documents this key may not read: counted, never named. An import "
        "of this question keeps them."
    )


class QuestionListOutput(serializers.Serializer):
    question_set = serializers.IntegerField()
    version = serializers.IntegerField()
    results = QuestionOutput(many=True)


class QuestionFileInput(serializers.Serializer):
    file = serializers.FileField(
        help_text="A .jsonl file (one question object per line) or a .csv file (a header line: "
        "id, question, expected_documents (keys separated by |), expected_passage, language, "
        "tag), UTF-8, at most 2 MB."
    )
    replace = serializers.BooleanField(
        default=False,
        help_text="true: the set's questions become the file's (others are removed); false: "
        "the file's are added, or update those with their ids.",
    )
    valid_only = serializers.BooleanField(
        default=False, help_text="Write the valid rows and leave out the others."
    )


class ImportOutput(serializers.Serializer):
    added = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    removed = serializers.IntegerField()
    skipped = serializers.IntegerField(help_text="Rows left out for their problems.")
    version = serializers.IntegerField(help_text="The set's version after the import.")
    problems = serializers.ListField(
        child=serializers.CharField(), help_text="What was wrong with each row left out."
    )


class EvaluationInput(serializers.Serializer):
    question_set = serializers.IntegerField(
        min_value=1, max_value=2**63 - 1, help_text="The id of one of the knowledge base's sets."
    )
    modes = serializers.ListField(
        child=serializers.ChoiceField(choices=MODES),
        min_length=1,
        max_length=len(MODES),
        default=["hybrid"],
    )
    index_version = serializers.IntegerField(
        min_value=1,
        max_value=2**31 - 1,
        required=False,
        allow_null=True,
        help_text="The number of the index version to ask (a candidate, or a retired one still "
        "kept); empty: the active version when the run starts.",
    )


class EvaluationOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kb = serializers.CharField(source="kb.slug")
    question_set = serializers.IntegerField(source="question_set_id")
    question_set_version = serializers.IntegerField()
    target = serializers.ChoiceField(choices=EvaluationRun.Target.choices)
    index_version = serializers.SerializerMethodField(
        help_text="The number of the version asked (null until an active target starts)."
    )
    modes = serializers.ListField(child=serializers.ChoiceField(choices=MODES))
    state = serializers.SerializerMethodField()
    done = serializers.SerializerMethodField(help_text="Answers written (questions x modes).")
    total = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    summary = serializers.DictField(
        child=serializers.JSONField(),
        help_text="Per mode: the figures over all questions (`all`), per language and per tag "
        "(n, hit@1, hit@5, hit@10, mrr@10, ndcg@10, recall@5, recall@10; passage@10 where "
        "questions give a passage) and latency_ms p50/p95.",
    )
    search_settings = serializers.DictField(
        child=serializers.JSONField(),
        help_text="The index version's settings, the fusion method and its model's SHA-256, "
        "the reranker and top_k, as the run's worker had them.",
    )
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def _status(self, run: Any) -> RunStatus:
        status: RunStatus = getattr(run, STATUS_ATTR)
        return status

    def get_index_version(self, run: Any) -> int | None:
        return run.index_version.number if run.index_version_id else None

    def get_state(self, run: Any) -> str:
        return self._status(run).state

    def get_done(self, run: Any) -> int:
        return self._status(run).done

    def get_total(self, run: Any) -> int:
        return self._status(run).total

    def get_error(self, run: Any) -> str:
        return self._status(run).error


class EvaluationPageInput(DocumentPageInput):
    """`cursor` is the `next_cursor` of the previous page."""


class EvaluationPageOutput(CursorPageOutput):
    item = EvaluationOutput
    results = EvaluationOutput(many=True)
    next_cursor = serializers.CharField(allow_null=True)


def _shown(keys: Keys) -> list[str]:
    return [view.key for view in keys.shown]


class ResultOutput(serializers.Serializer):
    question = serializers.CharField(help_text="The question's id.")
    text = serializers.CharField()
    mode = serializers.CharField()
    language = serializers.CharField()
    tag = serializers.CharField()
    rank = serializers.IntegerField(
        allow_null=True,
        help_text="The rank of its first expected document among the documents of the top 10 "
        "hits; null: missed.",
    )
    expected_documents = serializers.ListField(child=serializers.CharField())
    hidden_expected = serializers.IntegerField(
        help_text="Expected documents this key may not read."
    )
    returned_documents = serializers.ListField(
        child=serializers.CharField(),
        help_text="The documents of the top 10 hits this key may read, best first.",
    )
    hidden_returned = serializers.IntegerField(
        help_text="Documents of the top 10 hits this key may not read."
    )
    passage_found = serializers.BooleanField(allow_null=True)
    latency_ms = serializers.FloatField()

    def to_representation(self, instance: Any) -> Any:
        row: ResultRow = instance
        result = row.result
        return {
            "question": result.external_id,
            "text": result.text,
            "mode": result.mode,
            "language": result.language,
            "tag": result.tag,
            "rank": result.rank,
            "expected_documents": _shown(row.expected),
            "hidden_expected": row.expected.hidden,
            "returned_documents": _shown(row.returned),
            "hidden_returned": row.returned.hidden,
            "passage_found": result.passage_found,
            "latency_ms": result.latency_ms,
        }


class ResultPageInput(DocumentPageInput):
    """`cursor` is the `next_cursor` of the previous page."""


class ResultPageOutput(CursorPageOutput):
    item = ResultOutput
    results = ResultOutput(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class FigureChangeOutput(serializers.Serializer):
    figure = serializers.CharField()
    before = serializers.FloatField(allow_null=True)
    after = serializers.FloatField(allow_null=True)
    change = serializers.FloatField(allow_null=True, help_text="after minus before")


class QuestionChangeOutput(serializers.Serializer):
    question = serializers.CharField(help_text="The question's id.")
    text = serializers.CharField()
    mode = serializers.CharField()
    before = serializers.IntegerField(allow_null=True, help_text="Its rank before; null: missed.")
    after = serializers.IntegerField(allow_null=True, help_text="Its rank after; null: missed.")
    change = serializers.ChoiceField(
        choices=list(CHANGES),
        help_text="lost (found, then missed), gained (missed, then found), down, up, added / "
        "removed (asked by one run only), missed (by both), same.",
    )


class ModeComparisonOutput(serializers.Serializer):
    mode = serializers.CharField()
    figures = FigureChangeOutput(many=True)
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="How many questions changed each way."
    )


class ComparisonOutput(serializers.Serializer):
    """Two runs side by side (`evaluation.selectors.run_comparison`)."""

    before = serializers.IntegerField(help_text="The first run's id.")
    after = serializers.IntegerField(help_text="The second run's id.")
    modes = ModeComparisonOutput(many=True, help_text="Per mode both runs asked.")
    changes = QuestionChangeOutput(
        many=True, help_text="Every question whose rank changed, most telling first."
    )
    unchanged = serializers.IntegerField(help_text="Answers of the same rank, or missed by both.")
    notes = serializers.ListField(
        child=serializers.CharField(),
        help_text="What makes the runs less comparable (other sets, set versions, settings).",
    )

    def to_representation(self, instance: Any) -> Any:
        comparison: RunComparison = instance
        steady = (SAME, MISSED)
        return {
            "before": comparison.before.pk,
            "after": comparison.after.pk,
            "modes": [
                {
                    "mode": mode,
                    "figures": [
                        {"figure": name, "before": a, "after": b, "change": d}
                        for name, a, b, d in comparison.figures[mode]
                    ],
                    "counts": comparison.counts[mode],
                }
                for mode in comparison.modes
            ],
            "changes": [
                {
                    "question": c.external_id,
                    "text": c.text,
                    "mode": c.mode,
                    "before": c.before,
                    "after": c.after,
                    "change": c.change,
                }
                for c in comparison.changes
                if c.change not in steady
            ],
            "unchanged": sum(1 for c in comparison.changes if c.change in steady),
            "notes": comparison.notes,
        }


# --- calibrations (evaluation.api.calibrations) ---------------------------------------------


class CalibrationInput(serializers.Serializer):
    question_set = serializers.IntegerField(
        min_value=1,
        max_value=2**63 - 1,
        help_text=f"The id of one of the knowledge base's sets, of at least {MIN_QUESTIONS} "
        "questions.",
    )


class CalibrationOutput(serializers.Serializer):
    """A calibration without its figures' detail (the list's rows)."""

    id = serializers.IntegerField()
    kb = serializers.CharField(source="kb.slug")
    question_set = serializers.IntegerField(source="question_set_id")
    question_set_version = serializers.IntegerField()
    index_version = serializers.IntegerField(
        source="index_version.number", help_text="The number of the version whose legs it read."
    )
    state = serializers.SerializerMethodField(
        help_text="queued, running (computing), candidate (a refit beat the default: it may be "
        "adopted), default_kept (none did: nothing to adopt), failed, adopted, rolled_back, "
        "replaced (another was adopted after it)."
    )
    error = serializers.SerializerMethodField(help_text="Why it failed; empty otherwise.")
    questions = serializers.IntegerField(help_text="Questions it was computed from.")
    l2 = serializers.FloatField(
        allow_null=True,
        help_text="The strength toward the default cross-validation chose; null: the default "
        "kept (or not computed yet).",
    )
    default_mrr = serializers.FloatField(
        allow_null=True, help_text="Held-out MRR@10 over every question with the shipped default."
    )
    candidate_mrr = serializers.FloatField(
        allow_null=True,
        help_text="Held-out MRR@10 over every question with the calibration (each ranked by a "
        "refit that never saw it).",
    )
    created_at = serializers.DateTimeField()
    computed_at = serializers.DateTimeField(allow_null=True)
    adopted_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was rolled back or replaced."
    )

    def get_state(self, calibration: Any) -> str:
        status: CalibrationStatus = getattr(calibration, STATUS_ATTR)
        return status.state

    def get_error(self, calibration: Any) -> str:
        status: CalibrationStatus = getattr(calibration, STATUS_ATTR)
        return status.error


class CalibrationPageInput(DocumentPageInput):
    """`cursor` is the `next_cursor` of the previous page."""


class CalibrationPageOutput(CursorPageOutput):
    item = CalibrationOutput
    results = CalibrationOutput(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class FoldOutput(serializers.Serializer):
    n = serializers.IntegerField(help_text="Its questions.")
    default_mrr = serializers.FloatField()
    candidate_mrr = serializers.FloatField()


class CalibrationChangeOutput(serializers.Serializer):
    question = serializers.CharField(help_text="The question's id.")
    text = serializers.CharField()
    default = serializers.IntegerField(
        allow_null=True, help_text="Its held-out rank with the default; null: missed."
    )
    candidate = serializers.IntegerField(
        allow_null=True, help_text="Its held-out rank with the calibration; null: missed."
    )
    change = serializers.ChoiceField(
        choices=list(CHANGES),
        help_text="lost (found, then missed), gained (missed, then found), down, up (only "
        "these: the others are counted in `unchanged`).",
    )
    default_documents = serializers.ListField(
        child=serializers.CharField(),
        help_text="The first documents the default ranked that this key may read.",
    )
    candidate_documents = serializers.ListField(
        child=serializers.CharField(),
        help_text="The first documents the calibration ranked that this key may read.",
    )
    hidden_documents = serializers.IntegerField(
        help_text="Documents of either ranking this key may not read: counted, never named."
    )


class CalibrationVerdictOutput(serializers.Serializer):
    state = serializers.CharField(
        help_text="passes; refuses (held-out MRR@10 drops past the quality gate's allowance); "
        "missing (stale: computed on another set version, index version or default); informs "
        "(a drop the gate lets through, refusing no swap).",
    )
    words = serializers.CharField(help_text="The verdict in a sentence.")
    metric = serializers.CharField(help_text="mrr@10, held out.")
    default = serializers.FloatField(allow_null=True)
    candidate = serializers.FloatField(allow_null=True)
    drop = serializers.FloatField(allow_null=True, help_text="default minus candidate")
    max_drop = serializers.FloatField(help_text="The gate's allowance (0 without a gate).")
    stale = serializers.ListField(
        child=serializers.CharField(), help_text="Why its figures no longer describe the base."
    )


@dataclass(frozen=True)
class CalibrationReport:
    """What `CalibrationDetailOutput` shows: the calibration (its status set on it), its
    changes as `reader` may see them, and the verdict (None unless adoptable)."""

    calibration: Calibration
    changes: list[CalibrationChange]
    verdict: CalibrationVerdict | None


class CalibrationDetailOutput(CalibrationOutput):
    """A calibration with its figures: the folds, each question whose held-out rank changed,
    and the quality gate's verdict on adopting it (`evaluation.calibration`)."""

    teaching = serializers.IntegerField(
        help_text="Questions whose answer either leg found: the ones a refit learns from."
    )
    folds = FoldOutput(many=True, help_text="The five held-out folds.")
    changes = CalibrationChangeOutput(
        many=True, help_text="Every question whose held-out rank changed, most telling first."
    )
    unchanged = serializers.IntegerField(
        help_text="Questions of the same rank under both, or missed by both."
    )
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="How many questions changed each way."
    )
    hidden_documents = serializers.IntegerField(
        help_text="Documents of the rankings shown this key may not read, over all questions."
    )
    verdict = CalibrationVerdictOutput(
        allow_null=True,
        help_text="The quality gate's verdict on adopting it; null unless it may be adopted "
        "(candidate, rolled_back, replaced).",
    )

    def to_representation(self, instance: Any) -> Any:
        report: CalibrationReport = instance
        body = dict(CalibrationOutput(report.calibration).data)
        steady = (SAME, MISSED)
        verdict = report.verdict
        body.update(
            teaching=report.calibration.teaching,
            folds=[FoldOutput(fold).data for fold in report.calibration.folds or []],
            changes=[
                {
                    "question": c.change.external_id,
                    "text": c.change.text,
                    "default": c.change.before,
                    "candidate": c.change.after,
                    "change": c.change.change,
                    "default_documents": c.default_top,
                    "candidate_documents": c.candidate_top,
                    "hidden_documents": c.hidden,
                }
                for c in report.changes
                if c.change.change not in steady
            ],
            unchanged=sum(1 for c in report.changes if c.change.change in steady),
            counts=change_counts(report.changes),
            hidden_documents=sum(c.hidden for c in report.changes),
            verdict=(
                {
                    "state": verdict.state,
                    "words": verdict.words(),
                    "metric": "mrr@10",
                    "default": verdict.before,
                    "candidate": verdict.after,
                    "drop": verdict.drop,
                    "max_drop": verdict.max_drop,
                    "stale": verdict.stale,
                }
                if verdict is not None
                else None
            ),
        )
        return body


class CalibrationAdoptInput(serializers.Serializer):
    override = serializers.BooleanField(
        default=False,
        help_text="Adopt although the quality gate refuses it: needs `reason`, and an admin "
        "session of a user with evaluation.override_quality_gate (an API key may not).",
    )
    reason = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        default="",
        help_text="Kept on the knowledge base's timeline.",
    )


class CalibrationRollBackInput(serializers.Serializer):
    reason = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        default="",
        help_text="Kept on the knowledge base's timeline.",
    )


class CalibrationRollBackOutput(serializers.Serializer):
    kb = serializers.CharField()
    rolled_back = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The calibrations rolled back; hybrid search fuses by the shipped default.",
    )
