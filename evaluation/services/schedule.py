"""Scheduled evaluation (optional per knowledge base, on its quality gate): the nightly run of
the gate's question set on the active version, started by beat's periodic job
(`evaluation.tasks.scheduled_runs`, declared in config/celery.py), and the anomaly a drop past
the gate's threshold raises on the consistency dashboard (`quality_drop_check`, when a run of
the active version finishes — after a bulk sync, say)."""

from __future__ import annotations

import logging
from datetime import datetime, time, timedelta

from django.db import transaction
from django.utils import timezone

from evaluation.gate import figure, metric_name
from evaluation.models import EvaluationRun, QualityGate
from evaluation.services.gates import GATE_MODES
from evaluation.services.runs import evaluation_request
from kb.access import Reader
from kb.services.base import ActionRefused
from work.models import AuditEvent

logger = logging.getLogger(__name__)

QUALITY_DROP = "anomaly:quality_drop"


def nightly_due_since(gate: QualityGate, now: datetime) -> datetime:
    """The time of the gate's last scheduled run slot at or before `now`: today at its hour in
    the server's time zone, or yesterday's before that hour."""
    local = timezone.localtime(now)
    day = local.date() if local.hour >= gate.nightly_hour else local.date() - timedelta(days=1)
    return timezone.make_aware(datetime.combine(day, time(gate.nightly_hour)))


def evaluation_runs_start_due(*, now: datetime | None = None) -> int:
    """Start each nightly gate's run whose slot has come and that has no scheduled run since
    (at most one a night, whoever calls: the gate's row is locked while it checks, so two
    beats, or a job sent twice, start it once). Reads every document, in every mode. Returns
    how many it started; a gate whose set cannot run (no questions, no active version) is
    skipped and logged."""
    now = now or timezone.now()
    started = 0
    for gate_id in QualityGate.objects.filter(nightly=True).values_list("pk", flat=True):
        with transaction.atomic():
            gate = (
                QualityGate.objects.select_for_update(of=("self",))
                .select_related("kb", "question_set")
                .filter(pk=gate_id, nightly=True)
                .first()
            )
            if gate is None:
                continue
            since = nightly_due_since(gate, now)
            if EvaluationRun.objects.filter(
                kb_id=gate.kb_id, scheduled=True, created_at__gte=since
            ).exists():
                continue
            try:
                _, created = evaluation_request(
                    kb=gate.kb,
                    question_set=gate.question_set,
                    modes=GATE_MODES,
                    reader=Reader(
                        tenant_id=gate.kb.tenant_id, access_groups=frozenset(), all_groups=True
                    ),
                    scheduled=True,
                )
            except ActionRefused as exc:
                logger.warning("nightly evaluation of %s not started: %s", gate.kb.slug, exc)
                continue
            started += int(created)
    return started


def quality_drop_check(run: EvaluationRun) -> AuditEvent | None:
    """After `run` succeeded: when it asked the active version with its knowledge base's gate
    set reading every document, and the gate's figure fell by more than the gate allows since
    the previous such run (same set version), raise an anomaly on the consistency dashboard
    (an escalated audit event, `anomaly:quality_drop`, dismissed there with a reason). Returns
    it, or None. Idempotent: one anomaly per run."""
    if run.target != EvaluationRun.Target.ACTIVE or not run.all_groups:
        return None
    gate = QualityGate.objects.select_related("question_set").filter(kb_id=run.kb_id).first()
    if gate is None or gate.question_set_id != run.question_set_id:
        return None
    previous = (
        EvaluationRun.objects.filter(
            question_set_id=run.question_set_id,
            question_set_version=run.question_set_version,
            target=EvaluationRun.Target.ACTIVE,
            all_groups=True,
            state=EvaluationRun.State.SUCCEEDED,
            modes__contains=[gate.mode],
            created_at__lt=run.created_at,
        )
        .exclude(pk=run.pk)
        .select_related("index_version")
        .order_by("-created_at", "-pk")
        .first()
    )
    before = figure(previous, mode=gate.mode, metric=gate.metric)
    after = figure(run, mode=gate.mode, metric=gate.metric)
    if previous is None or before is None or after is None:
        return None
    if before - after <= gate.max_drop + 1e-9:
        return None
    if AuditEvent.objects.filter(
        kind=QUALITY_DROP, subject_type="evaluation_run", subject_id=run.pk
    ).exists():
        return None
    # kept in English, as the reconciler's anomalies are
    detail = (
        f"{metric_name(gate.metric)} of {gate.mode} on {gate.question_set.name} fell from "
        f"{before:.3f} (evaluation {previous.pk}) to {after:.3f} (evaluation {run.pk}), by "
        f"{before - after:.3f}, more than the {gate.max_drop:.3f} the quality gate allows."
    )
    return AuditEvent.objects.create(
        kind=QUALITY_DROP,
        kb_id=run.kb_id,
        subject_type="evaluation_run",
        subject_id=run.pk,
        action="escalated for a person to look at",
        escalated=True,
        details={
            "detail": detail,
            "previous_run": previous.pk,
            "before": before,
            "after": after,
            "metric": gate.metric,
            "mode": gate.mode,
        },
    )
