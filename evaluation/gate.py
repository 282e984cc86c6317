"""A knowledge base's quality gate (`QualityGate`): the figures that judge a swap, and the check
the swap service runs (`quality_gate_check`, registered in `kb.services.index_versions.
SWAP_CHECKS` by `evaluation.apps`, so the admin, any API and any script swap through it alike).

The gate compares the latest finished runs of its question set — at the set's current version,
asking its mode, reading every document (`all_groups`, so the verdict does not depend on who
started them) — of the active version and of the version to be swapped in. A swap is refused
when the candidate's figure is lower by more than `max_drop`, or when either run is missing; a
person with `evaluation.override_quality_gate` may swap anyway, giving a reason, which is kept
as its own audit event on the knowledge base's timeline (`kb.audit_kinds`). A rollback is never
refused: it returns to a version that served before.

Reads only, but for the override's audit event, which the check writes in the swap's own
transaction (so a swap that fails later records no override)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import PermissionsMixin
from django.db.models import Q, QuerySet
from django.utils import translation
from django.utils.translation import gettext

from evaluation.models import EvaluationRun, QualityGate, QuestionSet
from kb.audit_kinds import QUALITY_GATE_OVERRIDDEN
from kb.models import Build, IndexVersion, KnowledgeBase
from kb.services.base import ActionRefused, Actor, actor_id
from work.models import AuditEvent

OVERRIDE_PERMISSION = "evaluation.override_quality_gate"
# Figures closer than this are equal (they are stored rounded to 4 digits).
EPSILON = 1e-9


def gate_of(kb_id: int) -> QualityGate | None:
    return QualityGate.objects.select_related("question_set").filter(kb_id=kb_id).first()


def gate_runs(
    *,
    question_set: QuestionSet,
    version: IndexVersion,
    served_build: Build | None = None,
) -> QuerySet[EvaluationRun]:
    """The runs a gate may judge by, newest first: of `question_set` at its current version,
    reading every document, asking `version` (with `served_build` served instead, or none)."""
    runs = EvaluationRun.objects.filter(
        question_set=question_set,
        question_set_version=question_set.version,
        all_groups=True,
        served_build=served_build,
    )
    if served_build is None:
        runs = runs.exclude(target=EvaluationRun.Target.REVISION)
    asks = Q(index_version=version)
    if KnowledgeBase.objects.filter(pk=version.kb_id, active_index_version=version).exists():
        # an active run not started yet has no version: it will pin the active one
        asks |= Q(index_version__isnull=True, target=EvaluationRun.Target.ACTIVE)
    return runs.filter(asks).order_by("-created_at", "-pk")


def latest_run(
    *,
    question_set: QuestionSet,
    version: IndexVersion,
    mode: str | None = None,
    served_build: Build | None = None,
) -> EvaluationRun | None:
    """The latest succeeded run a gate may judge by (`gate_runs`) that asked `mode`."""
    runs = gate_runs(question_set=question_set, version=version, served_build=served_build).filter(
        state=EvaluationRun.State.SUCCEEDED, index_version=version
    )
    if mode:
        runs = runs.filter(modes__contains=[mode])
    return runs.select_related("index_version", "question_set").first()


def open_run(
    *, question_set: QuestionSet, version: IndexVersion, served_build: Build | None = None
) -> EvaluationRun | None:
    """A run a gate may judge by that is still queued or running, if any."""
    return (
        gate_runs(question_set=question_set, version=version, served_build=served_build)
        .filter(state__in=EvaluationRun.OPEN_STATES)
        .first()
    )


def figure(run: EvaluationRun | None, *, mode: str, metric: str) -> float | None:
    """`metric` of `mode` over all questions of a finished run."""
    if run is None:
        return None
    value = (((run.summary or {}).get(mode) or {}).get("all") or {}).get(metric)
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class GateVerdict:
    """What a gate says of swapping `candidate` in for `active`: both runs and figures, and
    `state` — "passes", "refuses" (a drop past the threshold), "missing" (a run to judge by is
    missing), or "informs" (the gate refuses nothing: `refuse_swaps` is off)."""

    gate: QualityGate
    active: IndexVersion
    candidate: IndexVersion
    active_run: EvaluationRun | None
    candidate_run: EvaluationRun | None
    before: float | None
    after: float | None
    state: str

    @property
    def drop(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return round(self.before - self.after, 4)

    @property
    def refuses(self) -> bool:
        return self.state in ("refuses", "missing")

    def record(self) -> dict[str, Any]:
        """The verdict as an audit event keeps it."""
        return {
            "question_set": self.gate.question_set_id,
            "question_set_name": self.gate.question_set.name,
            "question_set_version": self.gate.question_set.version,
            "metric": self.gate.metric,
            "mode": self.gate.mode,
            "max_drop": self.gate.max_drop,
            "before": self.before,
            "after": self.after,
            "before_run": self.active_run.pk if self.active_run else None,
            "after_run": self.candidate_run.pk if self.candidate_run else None,
            "state": self.state,
        }

    def words(self) -> str:
        """The verdict in a sentence (the refusal's message, the swap page's line)."""
        gate = self.gate
        what = {
            "metric": metric_name(gate.metric),
            "mode": gate.mode,
            "set": gate.question_set.name,
            "active": self.active.number,
            "candidate": self.candidate.number,
            "max": f"{gate.max_drop:.3f}",
        }
        if self.before is None or self.after is None:
            missing = [
                f"v{version.number}"
                for version, run in (
                    (self.active, self.active_run),
                    (self.candidate, self.candidate_run),
                )
                if run is None
            ]
            return gettext(
                "The quality gate needs a finished run of %(set)s (version %(set_version)s, "
                "reading every document, in %(mode)s) on %(missing)s to judge the swap of "
                "v%(candidate)s."
            ) % {**what, "set_version": gate.question_set.version, "missing": " and ".join(missing)}
        drop = self.drop or 0.0
        numbers = {
            **what,
            "before": f"{self.before:.3f}",
            "after": f"{self.after:.3f}",
            "drop": f"{drop:.3f}",
        }
        if self.state == "refuses":
            return (
                gettext(
                    "The quality gate refuses v%(candidate)s: %(metric)s of %(mode)s on %(set)s "
                    "drops from %(before)s (v%(active)s) to %(after)s, by %(drop)s, more than the "
                    "%(max)s allowed."
                )
                % numbers
            )
        if drop > gate.max_drop + EPSILON:  # a gate that refuses nothing
            return (
                gettext(
                    "%(metric)s of %(mode)s on %(set)s drops from %(before)s (v%(active)s) to "
                    "%(after)s (v%(candidate)s), by %(drop)s, more than %(max)s; the quality gate "
                    "only informs and refuses no swap."
                )
                % numbers
            )
        if drop > EPSILON:
            return (
                gettext(
                    "%(metric)s of %(mode)s on %(set)s drops from %(before)s (v%(active)s) to "
                    "%(after)s (v%(candidate)s), by %(drop)s: within the %(max)s the quality gate "
                    "allows."
                )
                % numbers
            )
        return (
            gettext(
                "%(metric)s of %(mode)s on %(set)s: %(before)s (v%(active)s), %(after)s "
                "(v%(candidate)s). The quality gate lets it through."
            )
            % numbers
        )


# Figures as people write them (`evaluation.metrics.METRICS` are their keys).
METRIC_NAMES = {"mrr@10": "MRR@10", "ndcg@10": "nDCG@10"}


def metric_name(metric: str) -> str:
    return METRIC_NAMES.get(metric, metric)


def gate_verdict(
    *, gate: QualityGate, active: IndexVersion, candidate: IndexVersion
) -> GateVerdict:
    """Judge swapping `candidate` in for `active` by the gate's latest runs (`latest_run`)."""
    question_set = gate.question_set
    runs = [
        latest_run(question_set=question_set, version=version, mode=gate.mode)
        for version in (active, candidate)
    ]
    before, after = (figure(run, mode=gate.mode, metric=gate.metric) for run in runs)
    if before is None or after is None:
        state = "missing"
    elif before - after > gate.max_drop + EPSILON:
        state = "refuses"
    else:
        state = "passes"
    if not gate.refuse_swaps:
        state = "informs"
    return GateVerdict(gate, active, candidate, runs[0], runs[1], before, after, state)


def quality_gate_check(
    *,
    kb: KnowledgeBase,
    version: IndexVersion,
    previous: IndexVersion | None,
    action: str,
    actor: Actor,
    reason: str,
    override: bool,
    **_: Any,
) -> dict[str, Any] | None:
    """The swap service's check (`kb.services.index_versions.SWAP_CHECKS`), run under the
    knowledge base's lock in the swap's transaction. Refuses (ActionRefused, the verdict's
    words) a swap the gate refuses, unless `override` by an actor with the permission and a
    reason: then writes the override's audit event. Returns the verdict for the swap's own
    audit event. A rollback, or a knowledge base without a gate or an active version, passes
    unjudged."""
    if action != "swap" or previous is None:
        return None
    gate = gate_of(kb.pk)
    if gate is None:
        return None
    verdict = gate_verdict(gate=gate, active=previous, candidate=version)
    record = verdict.record()
    if not verdict.refuses:
        return {"quality_gate": record}
    if not override:
        raise ActionRefused(
            verdict.words() + " " + gettext("An index admin may override it, giving a reason.")
        )
    if not isinstance(actor, PermissionsMixin) or not actor.has_perm(OVERRIDE_PERMISSION):
        raise ActionRefused(
            gettext(
                "Only a person with the permission to override the quality gate (an index "
                "admin) may swap in a version it refuses."
            )
        )
    if not reason.strip():
        raise ActionRefused(gettext("Say why you override the quality gate."))
    with translation.override("en"):  # the audit trail's words, whoever's language asked
        words = verdict.words()
    AuditEvent.objects.create(
        kind=QUALITY_GATE_OVERRIDDEN,
        kb=kb,
        subject_type="index_version",
        subject_id=version.pk,
        action=words,
        actor_id=actor_id(actor),
        details={"reason": reason, "previous_id": previous.pk, "quality_gate": record},
    )
    return {"quality_gate": {**record, "overridden": True}}
