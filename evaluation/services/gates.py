"""Writes of quality gates (`evaluation.models.QualityGate`, judged by `evaluation.gate`): set,
change or remove a knowledge base's gate, each an audit event on its timeline; and start the
runs a gate (or a revision's approval) judges by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.utils import translation
from django.utils.translation import gettext

from evaluation.gate import metric_name, open_run
from evaluation.metrics import METRICS
from evaluation.models import EvaluationRun, QualityGate, QuestionSet
from evaluation.services.runs import evaluation_request
from kb import locks
from kb.access import Reader
from kb.audit_kinds import QUALITY_GATE_CHANGED
from kb.models import Build, IndexVersion, KnowledgeBase
from kb.services.base import ActionRefused, Actor, actor_id
from work.models import AuditEvent

# The modes a gate's runs ask, in the pages' order (the quality chart draws each).
GATE_MODES = ("hybrid", "keyword", "vector")


class GateInvalid(ValueError):
    """A gate that cannot be saved; `field` names the form's field, the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def gate_words(gate: QualityGate) -> str:
    """What a gate does, in a sentence (its audit event's action, its admin's list)."""
    words = gettext("%(metric)s of %(mode)s on %(set)s may drop by at most %(max)s") % {
        "metric": metric_name(gate.metric),
        "mode": gate.mode,
        "set": gate.question_set.name,
        "max": f"{gate.max_drop:.3f}",
    }
    words += "; " + (
        gettext("refuses a swap that drops more")
        if gate.refuse_swaps
        else gettext("refuses no swap")
    )
    if gate.nightly:
        words += "; " + gettext("nightly run at %(hour)02d:00") % {"hour": gate.nightly_hour}
    return words


def _recorded(gate: QualityGate) -> str:
    """`gate_words` as the audit trail keeps them: in English, whoever's language asked."""
    with translation.override("en"):
        return gate_words(gate)


def quality_gate_save(
    *,
    kb: KnowledgeBase,
    question_set: QuestionSet,
    metric: str = "mrr@10",
    mode: str = "hybrid",
    max_drop: float = 0.02,
    refuse_swaps: bool = True,
    nightly: bool = False,
    nightly_hour: int = 2,
    actor: Actor = None,
) -> QualityGate:
    """Set or change `kb`'s gate (one per knowledge base) and record it on the timeline (an
    audit event saying what it is now, and what it was). Raises GateInvalid. Takes the
    knowledge base's row lock, which a swap takes first too: a swap judges by the gate before
    or after the change, never half of it."""
    if question_set.kb_id != kb.pk:
        raise GateInvalid("question_set", gettext("Choose a question set of this knowledge base."))
    if metric not in METRICS:
        raise GateInvalid("metric", gettext("Choose one of %(m)s.") % {"m": ", ".join(METRICS)})
    if mode not in GATE_MODES:
        raise GateInvalid("mode", gettext("Choose hybrid, keyword or vector."))
    if not 0.0 <= max_drop <= 1.0:
        raise GateInvalid("max_drop", gettext("A drop is between 0 and 1."))
    if not 0 <= nightly_hour <= 23:
        raise GateInvalid("nightly_hour", gettext("An hour is 0 to 23."))
    with transaction.atomic():
        locks.lock_knowledge_base(kb.pk)
        gate = QualityGate.objects.filter(kb=kb).select_related("question_set").first()
        before = _recorded(gate) if gate is not None else ""
        gate = gate or QualityGate(kb=kb)
        gate.question_set = question_set
        gate.metric, gate.mode, gate.max_drop = metric, mode, max_drop
        gate.refuse_swaps, gate.nightly, gate.nightly_hour = refuse_swaps, nightly, nightly_hour
        gate.updated_by_id = actor_id(actor)
        gate.save()
        after = _recorded(gate)
        if after != before:
            AuditEvent.objects.create(
                kind=QUALITY_GATE_CHANGED,
                kb=kb,
                subject_type="quality_gate",
                subject_id=gate.pk,
                action=after,
                actor_id=actor_id(actor),
                details={"before": before, "after": after},
            )
    return gate


def quality_gate_delete(*, gate: QualityGate, actor: Actor = None) -> None:
    """Remove a gate: swaps are judged by coverage alone again. An audit event says so."""
    with transaction.atomic():
        kb = locks.lock_knowledge_base(gate.kb_id)
        before = _recorded(gate)
        QualityGate.objects.filter(pk=gate.pk).delete()
        AuditEvent.objects.create(
            kind=QUALITY_GATE_CHANGED,
            kb=kb,
            subject_type="quality_gate",
            subject_id=gate.pk,
            action=f"removed (it said: {before})",
            actor_id=actor_id(actor),
            details={"before": before, "after": ""},
        )


@dataclass(frozen=True)
class Started:
    """A run a gate judges by: started now (`created`), or found open already."""

    run: EvaluationRun
    created: bool


def gate_runs_request(
    *,
    kb: KnowledgeBase,
    question_set: QuestionSet,
    versions: Sequence[IndexVersion],
    served_build: Build | None = None,
    missing: Sequence[IndexVersion] = (),
    actor: Actor = None,
) -> list[Started]:
    """Start the runs a gate's comparison lacks: for each of `missing` (a subset of
    `versions`), every question of `question_set` in every mode, reading every document (a
    gate's verdict must not depend on who asked), with `served_build` served instead when
    given (then for its version only). A run already open for that side is returned instead
    of a second. Refused (ActionRefused) as `evaluation_request` refuses."""
    everything = Reader(tenant_id=kb.tenant_id, access_groups=frozenset(), all_groups=True)
    wanted = {version.pk for version in missing}
    started = []
    for version in versions:
        if version.pk not in wanted:
            continue
        found = open_run(question_set=question_set, version=version, served_build=served_build)
        if found is not None:
            started.append(Started(found, False))
            continue
        if served_build is not None and served_build.index_version_id != version.pk:
            raise ActionRefused(gettext("That build is of another index version."))
        run, created = evaluation_request(
            kb=kb,
            question_set=question_set,
            modes=GATE_MODES,
            reader=everything,
            index_version=None if served_build is not None else version,
            served_build=served_build,
            actor=actor,
        )
        started.append(Started(run, created))
    return started
