"""Reading question sets and runs for the admin's pages and the API.

Every read that shows documents takes the reader (`kb.access.Reader` for the admin,
`retrieval.principals.Principal` for the API): the documents it may not read appear only as
counts (`evaluation.documents`), whatever the run's requester could read. Question texts and
figures are the set's and the run's own, shown to whoever may view them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.utils.translation import gettext

from evaluation.documents import HIDDEN, READABLE, KeyView, key_views
from evaluation.metrics import METRICS
from evaluation.models import EvaluationResult, EvaluationRun, Question, QuestionSet
from kb.selectors.metadata import DocumentReader
from work.models import IngestionTask

# The figures a run's page and the quality chart show, in order (`evaluation.metrics`).
FIGURES = METRICS


def with_counts(sets: QuerySet[QuestionSet]) -> QuerySet[QuestionSet]:
    """`sets`, each with `question_count` and its latest run's id and state (`last_run_id`,
    `last_run_state`), in the one query."""
    latest = EvaluationRun.objects.filter(question_set=OuterRef("pk")).order_by(
        "-created_at", "-pk"
    )
    return sets.annotate(
        question_count=Count("questions", distinct=True),
        last_run_id=Subquery(latest.values("pk")[:1]),
        last_run_state=Subquery(latest.values("state")[:1]),
    )


def question_sets_of_kb(kb_id: int) -> QuerySet[QuestionSet]:
    """The knowledge base's sets by name, `with_counts`."""
    return with_counts(QuestionSet.objects.filter(kb_id=kb_id)).order_by("name", "pk")


@dataclass(frozen=True)
class Keys:
    """A list of document keys as one reader may see it: the keys shown (readable documents
    with their titles, deleted ones, keys no document has) and how many are hidden."""

    shown: list[KeyView]
    hidden: int

    @property
    def readable(self) -> list[KeyView]:
        return [view for view in self.shown if view.state == READABLE]


def _keys(keys: Sequence[str], views: dict[str, KeyView]) -> Keys:
    shown = [views[key] for key in keys if views[key].state != HIDDEN]
    return Keys(shown, len(keys) - len(shown))


@dataclass(frozen=True)
class QuestionRow:
    question: Question
    expected: Keys
    passage: str  # "" when none, or when it may quote a hidden document
    passage_hidden: bool


def question_rows(
    *, questions: Sequence[Question], kb_id: int, reader: DocumentReader
) -> list[QuestionRow]:
    """Questions as `reader` may see them: hidden expected documents counted, and the expected
    passage withheld from a question with any (it may quote them). One query for the keys."""
    views = key_views(
        kb_id=kb_id, keys={k for q in questions for k in q.expected_keys}, reader=reader
    )
    rows = []
    for question in questions:
        expected = _keys(question.expected_keys, views)
        withheld = bool(expected.hidden and question.expected_passage)
        rows.append(
            QuestionRow(
                question,
                expected,
                "" if withheld else question.expected_passage,
                withheld,
            )
        )
    return rows


def question_export(row: QuestionRow) -> dict[str, Any]:
    """A question as files and the API write it (`evaluation.question_files`), without what the
    reader may not see: `hidden_documents` counts its expected documents left out (an import of
    the file keeps them)."""
    question = row.question
    return {
        "id": question.external_id,
        "question": question.text,
        "expected_documents": [view.key for view in row.expected.shown],
        "expected_passage": row.passage,
        "language": question.language,
        "tag": question.tag,
        "hidden_documents": row.expected.hidden,
    }


# --- runs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStatus:
    """What a run is doing, as its page and the API say it: its state (a run whose worker gave
    up reads as failed, with the worker's reason, before anyone closes it), how many of its
    answers are written, and its error."""

    state: str
    label: str
    done: int
    total: int
    error: str

    @property
    def open(self) -> bool:
        return self.state in EvaluationRun.OPEN_STATES

    @property
    def percent(self) -> int:
        return 100 if not self.total else min(100, round(100 * self.done / self.total))


def run_status(run: EvaluationRun) -> RunStatus:
    total = run.questions_total * len(run.modes)
    done = EvaluationResult.objects.filter(run=run).count() if run.state != "queued" else 0
    state, error = run.state, run.error
    if state in EvaluationRun.OPEN_STATES:
        task = IngestionTask.objects.filter(pk=run.task_id).first() if run.task_id else None
        if task is None or task.status not in IngestionTask.OPEN_STATUSES:
            state = EvaluationRun.State.FAILED
            error = (task.last_error if task else "") or gettext("The run's worker stopped.")
    label = str(EvaluationRun.State(state).label)
    return RunStatus(state, label, done, total, error)


@dataclass(frozen=True)
class FigureRow:
    """One line of a run's table: a mode and a group ("all", "en", "tag: faq")."""

    mode: str
    group: str
    figures: dict[str, Any]

    @property
    def values(self) -> list[Any]:
        return [self.figures.get(name) for name in FIGURES]

    @property
    def passage(self) -> Any:
        """The share of expected passages found (None: no question of the row gives one)."""
        return self.figures.get("passage@10")


def run_figure_rows(run: EvaluationRun) -> list[FigureRow]:
    """The run's figures per mode: over all questions, then per language, then per tag."""
    rows: list[FigureRow] = []
    for mode in run.modes:
        summary = (run.summary or {}).get(mode)
        if not summary:
            continue
        rows.append(FigureRow(mode, "all", summary["all"]))
        rows += [FigureRow(mode, lang, f) for lang, f in summary["language"].items()]
        rows += [FigureRow(mode, f"tag: {tag}", f) for tag, f in summary["tag"].items()]
    return rows


def run_latency(run: EvaluationRun) -> list[tuple[str, Any, Any]]:
    """(mode, p50, p95) in milliseconds."""
    out = []
    for mode in run.modes:
        latency = ((run.summary or {}).get(mode) or {}).get("latency_ms") or {}
        out.append((mode, latency.get("p50"), latency.get("p95")))
    return out


@dataclass(frozen=True)
class Miss:
    """A question whose expected documents were not in the top 10 in one mode, and what came
    back instead, as the reader may see it."""

    result: EvaluationResult
    expected: Keys
    returned: Keys


def run_misses(
    *, run: EvaluationRun, reader: DocumentReader, mode: str | None = None, limit: int = 200
) -> tuple[list[Miss], int]:
    """The run's missed questions (of one mode, or all), by question, up to `limit`, and how
    many there are in all."""
    missed = EvaluationResult.objects.filter(run=run, rank__isnull=True)
    if mode:
        missed = missed.filter(mode=mode)
    total = missed.count()
    results = list(missed.order_by("external_id", "mode")[:limit])
    views = key_views(
        kb_id=run.kb_id,
        keys={k for r in results for k in [*r.expected_keys, *r.returned_keys]},
        reader=reader,
    )
    misses = [
        Miss(r, _keys(r.expected_keys, views), _keys(r.returned_keys, views)) for r in results
    ]
    return misses, total


@dataclass(frozen=True)
class ResultRow:
    result: EvaluationResult
    expected: Keys
    returned: Keys


def run_results(
    *, run: EvaluationRun, reader: DocumentReader, after: int | None, limit: int
) -> tuple[list[ResultRow], int | None]:
    """One page of the run's results by id (keyset: `after` the last id of the page before),
    and the cursor of the next page (None at the end)."""
    results = EvaluationResult.objects.filter(run=run).order_by("pk")
    if after is not None:
        results = results.filter(pk__gt=after)
    page = list(results[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    views = key_views(
        kb_id=run.kb_id,
        keys={k for r in page for k in [*r.expected_keys, *r.returned_keys]},
        reader=reader,
    )
    rows = [
        ResultRow(r, _keys(r.expected_keys, views), _keys(r.returned_keys, views)) for r in page
    ]
    return rows, (page[-1].pk if more and page else None)


# --- comparing two runs --------------------------------------------------------------------

GAINED, LOST, UP, DOWN, SAME, MISSED, ADDED, REMOVED = (
    "gained",
    "lost",
    "up",
    "down",
    "same",
    "missed",
    "added",
    "removed",
)
# How a question's rank changed, most telling first (a page lists them in this order).
CHANGES = (LOST, GAINED, DOWN, UP, ADDED, REMOVED, MISSED, SAME)


@dataclass(frozen=True)
class QuestionChange:
    """One question in one mode, before and after: its rank in each (None: missed) and what
    that is (`CHANGES`). `added` / `removed`: asked by one run only."""

    external_id: str
    text: str
    mode: str
    before: int | None
    after: int | None
    change: str


@dataclass
class RunComparison:
    """Two runs side by side: each figure of each mode both asked (before, after, after minus
    before), every question's change, the number of each kind of change per mode, and what
    makes them less comparable (`notes`: another set or set version, other settings)."""

    before: EvaluationRun
    after: EvaluationRun
    modes: list[str]
    figures: dict[str, list[tuple[str, Any, Any, Any]]] = field(default_factory=dict)
    changes: list[QuestionChange] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def of(self, *kinds: str) -> list[QuestionChange]:
        return [c for c in self.changes if c.change in kinds]


def rank_change(before: int | None, after: int | None) -> str:
    if before is None and after is None:
        return MISSED
    if before is None:
        return GAINED
    if after is None:
        return LOST
    return UP if after < before else DOWN if after > before else SAME


def _settings_notes(before: EvaluationRun, after: EvaluationRun) -> list[str]:
    notes = []
    if before.question_set_id != after.question_set_id:
        notes.append(
            gettext("The runs asked different question sets: only the questions both asked count.")
        )
    elif before.question_set_version != after.question_set_version:
        notes.append(
            gettext(
                "The question set changed between the runs (version %(before)s → %(after)s): "
                "questions asked by one run only are listed apart."
            )
            % {"before": before.question_set_version, "after": after.question_set_version}
        )
    a, b = before.search_settings or {}, after.search_settings or {}
    version_a, version_b = a.get("index_version") or {}, b.get("index_version") or {}
    differ = [
        name.replace("_", " ")
        for name in ("model", "dimensions", "chunk_size", "chunk_overlap", "pipeline_version")
        if version_a.get(name) != version_b.get(name)
    ]
    if differ:
        notes.append(
            gettext("The index versions differ in %(what)s.") % {"what": ", ".join(differ)}
        )
    if a.get("fusion") != b.get("fusion"):
        notes.append(gettext("Hybrid fused its legs differently (the fusion method or its model)."))
    if a.get("rerank") != b.get("rerank"):
        notes.append(gettext("The reranker differed."))
    return notes


def _delta(before: Any, after: Any) -> Any:
    if isinstance(before, int | float) and isinstance(after, int | float):
        return round(after - before, 4)
    return None


def run_comparison(before: EvaluationRun, after: EvaluationRun) -> RunComparison:
    """Each question's rank in `before` and in `after`, by its id, per mode both runs asked:
    gained (missed, then found), lost (found, then missed), moved up or down, the same, missed
    by both, or asked by one run only; and each figure's change. The figures are the runs'
    own, over all their questions (the notes say when the questions differ)."""
    modes = [mode for mode in after.modes if mode in before.modes]
    comparison = RunComparison(before, after, modes, notes=_settings_notes(before, after))
    ranks: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for run, side in ((before, "before"), (after, "after")):
        rows = EvaluationResult.objects.filter(run=run, mode__in=modes).values_list(
            "external_id", "mode", "rank", "text"
        )
        for external_id, mode, rank, text in rows:
            entry = ranks[(external_id, mode)]
            entry[side] = rank
            entry["text"] = text
    for (external_id, mode), entry in sorted(ranks.items()):
        if "before" not in entry:
            change = ADDED
        elif "after" not in entry:
            change = REMOVED
        else:
            change = rank_change(entry["before"], entry["after"])
        comparison.changes.append(
            QuestionChange(
                external_id,
                entry["text"],
                mode,
                entry.get("before"),
                entry.get("after"),
                change,
            )
        )
    order = {kind: n for n, kind in enumerate(CHANGES)}
    comparison.changes.sort(key=lambda c: (order[c.change], c.mode, c.external_id))
    for mode in modes:
        counts = dict.fromkeys(CHANGES, 0)
        for each in comparison.changes:
            if each.mode == mode:
                counts[each.change] += 1
        comparison.counts[mode] = counts
        a = ((before.summary or {}).get(mode) or {}).get("all") or {}
        b = ((after.summary or {}).get(mode) or {}).get("all") or {}
        comparison.figures[mode] = [
            (name, a.get(name), b.get(name), _delta(a.get(name), b.get(name))) for name in FIGURES
        ]
    return comparison


def comparable_runs(run: EvaluationRun, *, limit: int = 50) -> QuerySet[EvaluationRun]:
    """The knowledge base's other finished runs, the same set's first, newest first."""
    return (
        EvaluationRun.objects.filter(kb_id=run.kb_id, state=EvaluationRun.State.SUCCEEDED)
        .exclude(pk=run.pk)
        .select_related("question_set", "index_version")
        .order_by("-created_at", "-pk")[:limit]
    )


# --- quality over time ---------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    run_id: int
    when: Any
    value: float
    label: str  # "v3, set v2"


def quality_series(
    *, question_set: QuestionSet, metric: str, limit: int = 50
) -> dict[str, list[Point]]:
    """Per mode, `metric` over all questions of each succeeded run of the set, oldest first
    (the latest `limit` runs). A run of a pending revision is left out: it measured a knowledge
    base that search never served."""
    runs = list(
        EvaluationRun.objects.filter(question_set=question_set, state=EvaluationRun.State.SUCCEEDED)
        .exclude(target=EvaluationRun.Target.REVISION)
        .select_related("index_version")
        .order_by("-finished_at", "-pk")[:limit]
    )
    series: dict[str, list[Point]] = defaultdict(list)
    for run in reversed(runs):
        for mode, summary in (run.summary or {}).items():
            value = (summary.get("all") or {}).get(metric)
            if isinstance(value, int | float):
                version = run.index_version.number if run.index_version else "?"
                series[mode].append(
                    Point(
                        run.pk,
                        run.finished_at,
                        float(value),
                        f"v{version}, set v{run.question_set_version}",
                    )
                )
    return dict(series)
