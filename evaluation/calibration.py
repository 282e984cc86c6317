"""A knowledge base's fusion calibration, read and judged (issue 39, item 6): the candidate
beside the shipped default, question by question and fold by fold, and the gate its adoption
passes (`calibration_verdict`), the gate a swap passes (`evaluation.gate`) applied to the
calibration's own comparison. Writes are `evaluation.services.calibration`'s.

The comparison is the cross-validated one `fusion_fitting.calibrate` made: every question
ranked by a refit that never saw it, beside the default's ranking. So a candidate shown better
here is better on questions it was not fitted on, the only figures a small set can give.

Reads only."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext

from evaluation.documents import HIDDEN, key_views
from evaluation.gate import EPSILON, gate_of
from evaluation.metrics import first_rank
from evaluation.models import Calibration, QuestionSet
from evaluation.selectors import CHANGES, QuestionChange, rank_change
from kb.models import KnowledgeBase
from kb.selectors.metadata import DocumentReader
from retrieval.search import fusion
from work.models import IngestionTask

# The fewest questions a calibration is computed from, measured (B8CAL, docs/BENCHMARKS.md): on
# B8's second corpus, which the default never saw, calibrations from 5, 10 and 20 random
# questions each lost to the default on the held-out half in 2-3 draws of 20 (by up to 0.090,
# 0.034 and 0.034 MRR@10); from 40, none of 20 draws lost and 8 beat it.
MIN_QUESTIONS = 40


def default_sha256(*, english: bool = False) -> str:
    """The shipped default's fingerprint: its file's SHA-256, or for a version with the English
    list (whose default is both models, `english`) that of both files."""
    digest = hashlib.sha256(fusion.MODEL_PATH.read_bytes())
    if english:
        digest.update(fusion.ENGLISH_MODEL_PATH.read_bytes())
    return digest.hexdigest()


def adopted_calibration(kb_id: int) -> Calibration | None:
    """The calibration `kb_id` adopted (search fuses by its parameters), if any."""
    return (
        Calibration.objects.filter(kb_id=kb_id, state=Calibration.State.ADOPTED)
        .select_related("question_set", "index_version", "adopted_by")
        .first()
    )


def calibrations_of(kb_id: int, *, limit: int = 20) -> list[Calibration]:
    """`kb_id`'s calibrations, newest first."""
    return list(
        Calibration.objects.filter(kb_id=kb_id)
        .select_related("question_set", "index_version")
        .order_by("-created_at", "-pk")[:limit]
    )


# Why a calibration whose task closed without a result failed, when the task says nothing.
WORKER_STOPPED = "The calibration's worker stopped before it finished. Calibrate again."

# What a list of calibrations leaves out: the per-question rankings, fits and folds.
HEAVY_FIELDS = ("per_question", "parameters", "grid", "folds")


def calibration_page(
    kb_id: int, *, before: int | None = None, limit: int = 50
) -> tuple[list[Calibration], int | None]:
    """One page of `kb_id`'s calibrations, newest (highest id) first, from below id `before`,
    without their heavy fields (HEAVY_FIELDS); and the id the next page starts below (None:
    the last page). One query, whatever the page's size."""
    found = (
        Calibration.objects.filter(kb_id=kb_id)
        .select_related("kb", "index_version", "task")
        .defer(*HEAVY_FIELDS)
        .order_by("-pk")
    )
    if before is not None:
        found = found.filter(pk__lt=before)
    page = list(found[: limit + 1])
    return page[:limit], (page[limit - 1].pk if len(page) > limit else None)


@dataclass(frozen=True)
class CalibrationStatus:
    """What a calibration's page and the API say of its progress: its state, and why it failed.
    An open one whose task closed without a result reads as failed with the task's reason
    before the sweep (`calibrations_close_orphaned`) writes it, as a run's does
    (`evaluation.selectors.run_status`)."""

    state: str
    error: str


def calibration_status(calibration: Calibration) -> CalibrationStatus:
    """`calibration`'s state and error as they are to be told (reads its task: select it)."""
    state, error = calibration.state, calibration.error
    if state in Calibration.OPEN_STATES:
        task = calibration.task
        if task is None or task.status not in IngestionTask.OPEN_STATUSES:
            state = Calibration.State.FAILED
            error = (task.last_error if task is not None else "") or WORKER_STOPPED
    return CalibrationStatus(state, error)


@dataclass(frozen=True)
class CalibrationChange:
    """One question held out: its change (`evaluation.selectors.CHANGES`), and the documents
    each ranking put first that the viewer may read (hidden ones only counted)."""

    change: QuestionChange
    default_top: list[str]
    candidate_top: list[str]
    hidden: int


def calibration_changes(
    calibration: Calibration, *, reader: DocumentReader, shown: int = 3
) -> list[CalibrationChange]:
    """Each question's held-out rank under the default and under the candidate, most telling
    change first (`CHANGES`), with the first `shown` documents of each ranking that `reader`
    may read; the ones it may not read are a count (`hidden`), never named."""
    rows = calibration.per_question or []
    keys = {
        key
        for row in rows
        for key in (*row["default"][:shown], *row["candidate"][:shown], *row["expected"])
    }
    views = key_views(kb_id=calibration.kb_id, keys=keys, reader=reader)
    out = []
    for row in rows:
        before = first_rank(row["default"], row["expected"])
        after = first_rank(row["candidate"], row["expected"])
        change = QuestionChange(
            external_id=row["external_id"],
            text=row["text"],
            mode="hybrid",
            before=before,
            after=after,
            change=rank_change(before, after),
        )
        tops = [row["default"][:shown], row["candidate"][:shown]]
        hidden = {key for top in tops for key in top if views[key].state == HIDDEN}
        out.append(
            CalibrationChange(
                change=change,
                default_top=[key for key in tops[0] if key not in hidden],
                candidate_top=[key for key in tops[1] if key not in hidden],
                hidden=len(hidden),
            )
        )
    order = {name: n for n, name in enumerate(CHANGES)}
    out.sort(key=lambda c: (order[c.change.change], c.change.external_id))
    return out


def change_counts(changes: list[CalibrationChange]) -> dict[str, int]:
    counts = dict.fromkeys(CHANGES, 0)
    for item in changes:
        counts[item.change.change] += 1
    return {name: n for name, n in counts.items() if n}


@dataclass(frozen=True)
class CalibrationVerdict:
    """What the gate says of adopting `calibration`: its held-out MRR@10 beside the default's
    (`before`, `after`), the drop the knowledge base's quality gate allows (`max_drop`, 0
    without a gate), what makes its figures not describe the knowledge base any more
    (`stale`), and `state`: "passes", "refuses" (a drop past `max_drop`), "missing" (stale:
    computed on another set version, index version or default), or "informs" (a drop past
    `max_drop` that the knowledge base's gate, refusing no swap, lets through)."""

    calibration: Calibration
    before: float | None
    after: float | None
    max_drop: float
    stale: list[str]
    state: str

    @property
    def refuses(self) -> bool:
        return self.state in ("refuses", "missing")

    @property
    def drop(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return round(self.before - self.after, 4)

    def record(self) -> dict[str, Any]:
        """The verdict as an audit event keeps it."""
        c = self.calibration
        return {
            "calibration": c.pk,
            "question_set": c.question_set_id,
            "question_set_version": c.question_set_version,
            "index_version": c.index_version_id,
            "metric": "mrr@10",
            "held_out": True,
            "max_drop": self.max_drop,
            "before": self.before,
            "after": self.after,
            "stale": self.stale,
            "state": self.state,
        }

    def words(self) -> str:
        """The verdict in a sentence (the refusal's message, the adopt page's line)."""
        numbers = {
            "set": self.calibration.question_set.name,
            "before": f"{self.before or 0.0:.3f}",
            "after": f"{self.after or 0.0:.3f}",
            "drop": f"{self.drop or 0.0:.3f}",
            "max": f"{self.max_drop:.3f}",
        }
        if self.state == "missing":
            return gettext(
                "The calibration no longer describes this knowledge base: %(why)s. Calibrate again."
            ) % {"why": "; ".join(self.stale)}
        if self.state == "refuses":
            return (
                gettext(
                    "The quality gate refuses this calibration: held-out MRR@10 on %(set)s "
                    "drops from %(before)s (the default) to %(after)s, by %(drop)s, more than "
                    "the %(max)s allowed."
                )
                % numbers
            )
        if self.state == "informs":
            return (
                gettext(
                    "Held-out MRR@10 on %(set)s drops from %(before)s (the default) to "
                    "%(after)s, by %(drop)s, more than %(max)s; the quality gate only informs and "
                    "refuses nothing."
                )
                % numbers
            )
        return (
            gettext(
                "Held-out MRR@10 on %(set)s: %(before)s with the default, %(after)s with the "
                "calibration. The quality gate lets it through."
            )
            % numbers
        )


def calibration_stale(calibration: Calibration) -> list[str]:
    """Why the calibration's figures no longer describe its knowledge base, in words: its set
    changed, the active index version is another, or the shipped default changed."""
    why = []
    version = QuestionSet.objects.values_list("version", flat=True).get(
        pk=calibration.question_set_id
    )
    if version != calibration.question_set_version:
        why.append(
            gettext("its question set changed (version %(then)s → %(now)s)")
            % {"then": calibration.question_set_version, "now": version}
        )
    active = KnowledgeBase.objects.values_list("active_index_version_id", flat=True).get(
        pk=calibration.kb_id
    )
    if active != calibration.index_version_id:
        why.append(gettext("another index version is active"))
    english = calibration.index_version.english_list
    if calibration.default_sha256 and calibration.default_sha256 != default_sha256(english=english):
        why.append(gettext("the shipped default changed"))
    return why


def calibration_verdict(calibration: Calibration) -> CalibrationVerdict:
    """Judge adopting `calibration` as a swap is judged: refused when its held-out MRR@10 is
    below the default's by more than the knowledge base's gate allows (nothing without a
    gate), or when its figures are stale; a drop "informs" when the gate refuses no swap."""
    gate = gate_of(calibration.kb_id)
    max_drop = gate.max_drop if gate is not None else 0.0
    before, after = calibration.default_mrr, calibration.candidate_mrr
    stale = calibration_stale(calibration)
    if stale or before is None or after is None:
        state = "missing"
    elif before - after > max_drop + EPSILON:
        state = "refuses"
    else:
        state = "passes"
    if gate is not None and not gate.refuse_swaps and state == "refuses":
        state = "informs"  # a gate that refuses no swap refuses no drop; stale figures still
    return CalibrationVerdict(calibration, before, after, max_drop, stale, state)
