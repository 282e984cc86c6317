"""Writes of fusion calibrations (issue 39, item 6; read and judged by `evaluation.calibration`):
ask for one, compute it, adopt it through the gate a swap passes, roll back to the default.

A calibration refits the learned fusion on a question set's questions with the fitting code
the shipped default was fitted with (`retrieval.search.fusion_fitting.calibrate`: toward the
default's weights, the strength chosen by cross-validation, the default kept unless the
held-out folds beat it by more than noise). Each question's legs are read by the search
service's own code at the shipped depth (`retrieval.search.engine.search_legs`), reading every
document, as a gate's runs read. Adopting writes the parameters where search reads them
(`retrieval.models.FusionCalibration`); rolling back deletes them, so search fuses by the
default again. Both are audit events on the knowledge base's timeline.

Computing is leased work, as an evaluation run is: `calibration_request` writes the calibration,
its IngestionTask (kind "calibration") and the task's outbox event in one transaction; a worker
claims the task (`work.leases.task_claim`) and runs `calibration_execute` under its heartbeat; a
worker killed mid-compute stops renewing, so the lease sweeper (`ingestion.sweeper.lease_sweep`,
beat every 15 s) hands the task to another worker, which computes the calibration again from
the start (it is deterministic and writes nothing until its result), or dead-letters it past
its attempt cap; `calibrations_close_orphaned` (beat's evaluation job, and every request) then
fails a calibration whose task is closed, with the task's reason.

Refusals are `CalibrationRefused` (an ActionRefused) with a short code the API answers with."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager

from django.contrib.auth.models import PermissionsMixin
from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext

from evaluation.calibration import (
    MIN_QUESTIONS,
    WORKER_STOPPED,
    calibration_verdict,
    default_sha256,
)
from evaluation.gate import OVERRIDE_PERMISSION
from evaluation.models import Calibration, Question, QuestionSet
from evaluation.services.orphans import orphans_close
from ingestion.pipeline.stages import TerminalError
from ingestion.task_outcomes import task_succeed
from kb import locks
from kb.audit_kinds import (
    FUSION_CALIBRATION_ADOPTED,
    FUSION_CALIBRATION_ROLLED_BACK,
    QUALITY_GATE_OVERRIDDEN,
)
from kb.models import IndexVersion, KnowledgeBase
from kb.services.base import ActionRefused, Actor, actor_id
from retrieval.models import FusionCalibration
from retrieval.principals import Principal
from retrieval.search import fusion
from retrieval.search.engine import search_legs
from retrieval.search.fusion_fitting import Example, calibrate, example_of_hits, parameters_of
from retrieval.search.hits import Leg
from work import faults
from work.leases import Lease, LeaseLost, fenced
from work.models import AuditEvent, IngestionTask
from work.outbox import task_create

logger = logging.getLogger(__name__)

# Who may adopt a calibration or roll it back: who may change the quality gate (index admins).
ADOPT_PERMISSION = "evaluation.change_qualitygate"
TOP_K = 10

# The codes of `CalibrationRefused`.
PERMISSION_DENIED = "permission_denied"
REASON_REQUIRED = "reason_required"
QUALITY_GATE_REFUSED = "quality_gate_refused"
CALIBRATION_STALE = "calibration_stale"
TOO_FEW_QUESTIONS = "too_few_questions"
NO_ACTIVE_VERSION = "no_active_version"
CONFLICT = "conflict"  # the calibration's or the knowledge base's state does not allow it


class CalibrationRefused(ActionRefused):
    """A calibration refused, in words (the message) and in a short code the API answers with
    (the constants above; `evaluation.api.calibrations` maps them to statuses)."""

    def __init__(self, message: str, *, code: str = CONFLICT) -> None:
        super().__init__(message)
        self.code = code


def calibration_request(
    *, kb: KnowledgeBase, question_set: QuestionSet, actor: Actor = None
) -> tuple[Calibration, bool]:
    """Ask for `kb`'s calibration on `question_set`, computed in the background as leased
    work: the calibration, its task (kind "calibration", run by `calibration_execute`) and the
    task's outbox event are written in one transaction, so it is computed exactly when it is
    committed.

    Idempotent per (set, set version, active index version): asking again returns the
    calibration asked before (computing, computed, adopted...) unless it failed; one whose task
    closed without a result is failed first (`calibrations_close_orphaned`), so asking again
    starts anew. Returns (calibration, created). Refused (CalibrationRefused, saying why) for a
    set of another knowledge base, a knowledge base with no active version, or a set of fewer
    than MIN_QUESTIONS questions. Takes the set's row lock (no key), as a run's request does,
    so the set's version cannot move between the count and the row."""
    if question_set.kb_id != kb.pk:
        raise CalibrationRefused(gettext("That question set belongs to another knowledge base."))
    with transaction.atomic():
        locked = QuestionSet.objects.select_for_update(no_key=True).get(pk=question_set.pk)
        calibrations_close_orphaned(question_set=locked)
        active = KnowledgeBase.objects.values_list("active_index_version_id", flat=True).get(
            pk=kb.pk
        )
        if active is None:
            raise CalibrationRefused(
                gettext("%(kb)s has no active index version to calibrate.") % {"kb": kb.name},
                code=NO_ACTIVE_VERSION,
            )
        count = Question.objects.filter(question_set=locked).count()
        if count < MIN_QUESTIONS:
            raise CalibrationRefused(
                gettext(
                    "%(set)s has %(n)s questions; a calibration needs at least %(min)s. With "
                    "fewer, its held-out folds cannot tell a better ranking from noise: add "
                    "questions first."
                )
                % {"set": locked.name, "n": count, "min": MIN_QUESTIONS},
                code=TOO_FEW_QUESTIONS,
            )
        found = (
            Calibration.objects.filter(
                question_set=locked,
                question_set_version=locked.version,
                index_version_id=active,
            )
            .exclude(state=Calibration.State.FAILED)
            .first()
        )
        if found is not None:
            return found, False
        calibration = Calibration.objects.create(
            kb=kb,
            question_set=locked,
            question_set_version=locked.version,
            index_version_id=active,
            task=task_create(kind=IngestionTask.Kind.CALIBRATION, kb_id=kb.pk),
            requested_by_id=actor_id(actor),
        )
    return calibration, True


def calibrations_close_orphaned(*, question_set: QuestionSet | None = None) -> int:
    """Fail the open (queued or computing) calibrations whose task is closed without a result
    (dead after its attempts: its worker was killed or timed out on every one; failed) or
    gone, with the task's reason, so their page says why and asking again starts anew. A
    calibration whose task is still open (queued, running, waiting to retry) is left alone:
    the lease sweeper requeues it. Returns how many it failed. Idempotent: each is failed by a
    conditional UPDATE on its open state, so a worker finishing meanwhile wins or loses
    whole. Beat runs it (`evaluation.tasks.scheduled_runs`), and so does every request."""
    calibrations = Calibration.objects.all()
    if question_set is not None:
        calibrations = calibrations.filter(question_set=question_set)
    return orphans_close(
        calibrations,
        open_states=Calibration.OPEN_STATES,
        failed=Calibration.State.FAILED,
        finished_field="computed_at",
        default_reason=WORKER_STOPPED,
    )


def calibration_examples(
    *,
    kb: KnowledgeBase,
    version: IndexVersion,
    questions: list[Question],
    lease: Lease | None = None,
) -> list[Example]:
    """Each question's legs as a hybrid search of `version` reads them for top 10 (the search
    service's code, the shipped depth), reading every document, as fitting examples. Runs
    its searches outside any transaction of its own (each search has its snapshot). Stops
    (LeaseLost) as soon as `lease`'s heartbeat finds it lost: another worker computes it."""
    everything = Principal(
        tenant_id=kb.tenant_id,
        kb_ids=frozenset({kb.pk}),
        access_groups=frozenset(),
        all_groups=True,
    )
    examples = []
    for number, question in enumerate(questions, start=1):
        if lease is not None and lease.lost.is_set():
            raise LeaseLost(f"lease on task {lease.task_id} was lost")
        _, (vector, keyword, *rest) = search_legs(
            principal=everything, kb=kb, query=question.text, top_k=TOP_K, index_version=version
        )
        # a version with the English list: its examples hold its columns (empty for a question
        # in Chinese, which search reads no list for)
        english = (rest[0] if rest else Leg([], 1.0)) if version.english_list else None
        examples.append(
            example_of_hits(
                id=question.external_id,
                query=question.text,
                vector=vector.hits,
                keyword=keyword.hits,
                keyword_bound=keyword.bound or 0.0,
                answers=question.expected_keys,
                english=english,
            )
        )
        faults.calibration_after_legs(number)
    return examples


def calibration_execute(*, task: IngestionTask, lease: Lease) -> str:
    """The runner of a task of kind "calibration" (`ingestion.pipeline.run.TASK_RUNNERS`,
    registered by `evaluation.apps`), under the task's lease and heartbeat: computes the
    task's calibration (`calibration_compute`) and returns its state ("gone" when the
    calibration was deleted, "not_open" when there was nothing left to compute). Either way
    the task succeeds, fenced."""
    calibration_id = (
        Calibration.objects.filter(task_id=task.pk).values_list("pk", flat=True).first()
    )
    if calibration_id is None:
        with fenced(lease):
            task_succeed(lease=lease)
        return "gone"
    done = calibration_compute(calibration_id=calibration_id, lease=lease)
    return done.state if done is not None else "not_open"


def calibration_compute(*, calibration_id: int, lease: Lease | None = None) -> Calibration | None:
    """Compute a calibration asked for: read every question's legs, calibrate, store the
    candidate (or that the default was kept) with its folds and each question's held-out
    rankings. Returns it, or None when it is gone or no longer queued or computing.

    `lease`: its task's, when a worker computes it (`calibration_execute`): every write is
    fenced by it (a worker that lost its lease writes nothing), and the task succeeds in the
    transaction that writes the result. None: computed in this process outside its task (a
    shell, a test), unfenced.

    Claimed by a conditional UPDATE (queued or computing → computing: the task's lease says
    which worker may; a task the sweeper handed to another worker after its first died
    computes again from the start); deterministic (the questions in their id order,
    `calibrate`'s fixed folds), so two computations of one calibration write the same, and
    nothing is written before the result, so a killed attempt leaves nothing half-written.
    Reading the legs may fail and be retried by the task (a provider or a database down); a
    fit that fails fails the calibration at once with the reason (TerminalError: the same
    examples would fail again). The result is written only while the row is still computing
    and the set still at the version asked; a set that changed meanwhile fails it, saying so."""
    with _writing(lease):
        claimed = Calibration.objects.filter(
            pk=calibration_id, state__in=Calibration.OPEN_STATES
        ).update(state=Calibration.State.RUNNING)
        if not claimed and lease is not None:
            task_succeed(lease=lease)  # nothing left to compute
    if not claimed:
        return None
    calibration = Calibration.objects.select_related("kb", "index_version", "question_set").get(
        pk=calibration_id
    )
    questions = list(
        Question.objects.filter(question_set_id=calibration.question_set_id).order_by("pk")
    )
    examples = calibration_examples(
        kb=calibration.kb, version=calibration.index_version, questions=questions, lease=lease
    )
    try:
        if calibration.index_version.english_list:
            # the three lists' model refitted, measured against what search serves
            found = calibrate(examples, fusion.english_model(), default=fusion.model())
        else:
            found = calibrate(examples, fusion.model())
    except Exception as exc:  # the same examples would fail again: the row's to say
        logger.exception("calibration %s failed", calibration_id)
        message = str(exc) or exc.__class__.__name__
        with _writing(lease):
            _fail(calibration_id, message)
        raise TerminalError("calibration_failed", message) from exc
    by_id = {q.external_id: q for q in questions}
    per_question = [
        {
            "question": by_id[qid].pk,
            "external_id": qid,
            "text": by_id[qid].text,
            "expected": list(by_id[qid].expected_keys),
            "default": default,
            "candidate": candidate,
        }
        for qid, (default, candidate) in sorted(found.held_out.items())
    ]
    n = sum(fold.n for fold in found.folds) or 1
    with _writing(lease):
        version = QuestionSet.objects.values_list("version", flat=True).get(
            pk=calibration.question_set_id
        )
        if version != calibration.question_set_version:
            _fail(
                calibration_id,
                f"The question set changed while the calibration was computed (version "
                f"{calibration.question_set_version} → {version}). Calibrate again.",
            )
        else:
            Calibration.objects.filter(pk=calibration_id, state=Calibration.State.RUNNING).update(
                state=(
                    Calibration.State.DEFAULT_KEPT
                    if found.kept_default
                    else Calibration.State.CANDIDATE
                ),
                default_sha256=default_sha256(english=calibration.index_version.english_list),
                parameters=parameters_of(found.model, l2=found.l2, questions=found.questions),
                l2=found.l2,
                questions=found.questions,
                teaching=found.teaching,
                default_mrr=round(sum(f.default_mrr * f.n for f in found.folds) / n, 4),
                candidate_mrr=round(sum(f.candidate_mrr * f.n for f in found.folds) / n, 4),
                folds=[vars(fold) for fold in found.folds],
                grid=found.grid,
                per_question=per_question,
                error="",
                computed_at=timezone.now(),
            )
        if lease is not None:
            task_succeed(lease=lease)
    return Calibration.objects.get(pk=calibration_id)


def _writing(lease: Lease | None) -> AbstractContextManager[None]:
    """A transaction fenced by `lease` (see `work.leases.fenced`), or a plain one without."""
    return fenced(lease) if lease is not None else transaction.atomic()


def _fail(calibration_id: int, error: str) -> None:
    Calibration.objects.filter(pk=calibration_id, state__in=Calibration.OPEN_STATES).update(
        state=Calibration.State.FAILED, error=error[:4000], computed_at=timezone.now()
    )


def _may(actor: Actor, permission: str) -> bool:
    """A person's permission; no actor (a script, a shell) may."""
    if actor is None:
        return True
    return isinstance(actor, PermissionsMixin) and actor.has_perm(permission)


def calibration_adopt(
    *,
    calibration: Calibration,
    actor: Actor = None,
    reason: str = "",
    override: bool = False,
) -> Calibration:
    """Make search fuse `calibration.kb`'s hybrid searches by the calibration's parameters.

    Judged by the gate a swap passes (`evaluation.calibration.calibration_verdict`: the
    held-out comparison on its set against the knowledge base's gate's allowed drop, and
    refused when stale): refused (CalibrationRefused, the verdict's words) unless `override` by an
    actor with the gate's override permission and a `reason`, which is then its own audit
    event (QUALITY_GATE_OVERRIDDEN), as a swap's override is. Refused too for an actor without
    ADOPT_PERMISSION, and for a calibration that is not adoptable (computing, failed, the
    default kept, adopted already).

    One transaction, under the knowledge base's row lock (`kb.locks`, the order a swap takes
    it in) then the calibration's: writes the parameters search reads
    (`retrieval.models.FusionCalibration`), marks a calibration adopted before as replaced,
    and writes the adoption's audit event (FUSION_CALIBRATION_ADOPTED), all or nothing."""
    if not _may(actor, ADOPT_PERMISSION):
        raise CalibrationRefused(
            gettext("Only a person who may change the quality gate may adopt a calibration."),
            code=PERMISSION_DENIED,
        )
    with transaction.atomic():
        kb = locks.lock_knowledge_base(calibration.kb_id)
        locked = (
            Calibration.objects.select_for_update(of=("self",))
            .select_related("question_set")
            .get(pk=calibration.pk)
        )
        if locked.state == Calibration.State.ADOPTED:
            raise CalibrationRefused(gettext("This calibration is adopted already."))
        if locked.state == Calibration.State.DEFAULT_KEPT:
            raise CalibrationRefused(
                gettext(
                    "This calibration kept the default: no refit beat it on the held-out folds "
                    "by more than noise, so there is nothing to adopt."
                )
            )
        if locked.state not in Calibration.ADOPTABLE:
            raise CalibrationRefused(
                gettext("A %(state)s calibration cannot be adopted.")
                % {"state": locked.get_state_display()}
            )
        verdict = calibration_verdict(locked)
        record = verdict.record()
        if verdict.refuses:
            if not override:
                raise CalibrationRefused(
                    verdict.words()
                    + " "
                    + gettext("An index admin may override it, giving a reason."),
                    code=CALIBRATION_STALE if verdict.state == "missing" else QUALITY_GATE_REFUSED,
                )
            if not _may(actor, OVERRIDE_PERMISSION):
                raise CalibrationRefused(
                    gettext(
                        "Only a person with the permission to override the quality gate (an "
                        "index admin) may adopt a calibration it refuses."
                    ),
                    code=PERMISSION_DENIED,
                )
            if not reason.strip():
                raise CalibrationRefused(
                    gettext("Say why you override the quality gate."), code=REASON_REQUIRED
                )
            with translation.override("en"):  # the audit trail's words
                words = verdict.words()
            AuditEvent.objects.create(
                kind=QUALITY_GATE_OVERRIDDEN,
                kb=kb,
                subject_type="calibration",
                subject_id=locked.pk,
                action=words,
                actor_id=actor_id(actor),
                details={"reason": reason, "quality_gate": record},
            )
            record = {**record, "overridden": True}
        now = timezone.now()
        Calibration.objects.filter(kb=kb, state=Calibration.State.ADOPTED).update(
            state=Calibration.State.REPLACED, ended_at=now
        )
        FusionCalibration.objects.update_or_create(
            kb=kb, defaults={"parameters": locked.parameters, "calibration_id": locked.pk}
        )
        locked.state = Calibration.State.ADOPTED
        locked.adopted_by_id = actor_id(actor)
        locked.adopted_at = now
        locked.ended_at = None
        locked.save(update_fields=["state", "adopted_by", "adopted_at", "ended_at"])
        AuditEvent.objects.create(
            kind=FUSION_CALIBRATION_ADOPTED,
            kb=kb,
            subject_type="calibration",
            subject_id=locked.pk,
            action=(
                f"adopted calibration {locked.pk} of {locked.question_set.name} "
                f"(held-out MRR@10 {verdict.before or 0.0:.3f} → {verdict.after or 0.0:.3f})"
            ),
            actor_id=actor_id(actor),
            details={"reason": reason, "quality_gate": record, "l2": locked.l2},
        )
    return locked


def calibration_roll_back(
    *, kb: KnowledgeBase, actor: Actor = None, reason: str = ""
) -> list[Calibration]:
    """Make search fuse `kb`'s hybrid searches by the shipped default again: deletes the
    adopted parameters, marks the adopted calibration rolled back (it may be adopted again),
    writes the audit event (FUSION_CALIBRATION_ROLLED_BACK), and returns the calibrations it
    rolled back. Never gated: it returns to what search did before. Refused for an actor
    without ADOPT_PERMISSION, and when search uses the default already (so a second rollback
    changes nothing). One transaction under the knowledge base's row lock."""
    if not _may(actor, ADOPT_PERMISSION):
        raise CalibrationRefused(
            gettext("Only a person who may change the quality gate may roll a calibration back."),
            code=PERMISSION_DENIED,
        )
    with transaction.atomic():
        locks.lock_knowledge_base(kb.pk)
        deleted, _ = FusionCalibration.objects.filter(kb=kb).delete()
        adopted = list(
            Calibration.objects.select_for_update().filter(kb=kb, state=Calibration.State.ADOPTED)
        )
        if not deleted and not adopted:
            raise CalibrationRefused(gettext("Search already uses the default fusion here."))
        now = timezone.now()
        for calibration in adopted:
            calibration.state = Calibration.State.ROLLED_BACK
            calibration.ended_at = now
            calibration.save(update_fields=["state", "ended_at"])
        AuditEvent.objects.create(
            kind=FUSION_CALIBRATION_ROLLED_BACK,
            kb=kb,
            subject_type="calibration",
            subject_id=adopted[0].pk if adopted else None,
            action="rolled the fusion back to the shipped default",
            actor_id=actor_id(actor),
            details={"reason": reason, "calibrations": [c.pk for c in adopted]},
        )
    return adopted
