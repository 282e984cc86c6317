"""An evaluation run, executed by a worker under its task's lease (`ingestion.pipeline.run`
dispatches kind "evaluation" here): every question of the set asked of one index version in
each mode, through the search the API runs (`retrieval.search.engine.search`, no second ranking
path), then the figures (`evaluation.metrics`).

1. **Start.** The first attempt pins the version (the active one when the run asked for it:
   a swap during the run does not mix two versions' answers) and records the settings that make
   runs comparable: the version's, the fusion method and its model file's hash, the reranker,
   top_k.
2. **Ask.** Question by question, mode by mode (after one unrecorded search per mode and
   language, `_warm_up`): the search runs outside any transaction, as a principal that reads
   what the requester could (`EvaluationRun.access_groups`), explain off;
   its result is written in one fenced transaction (`work.leases.fenced`). A run killed anywhere
   is resumed by the sweeper on the same row and skips what is written, so its figures equal an
   uninterrupted run's.
3. **Sum up.** The figures are computed from the results alone, fenced, with the task's success;
   a run of the active version whose gate figure fell past the knowledge base's quality gate
   since the previous one raises an anomaly (`evaluation.services.schedule.quality_drop_check`).

A run of a pending revision (target "revision") asks the active version with that revision's
build served instead of its document's live one (`search(served_instead=...)`), and fails,
saying so, if the build is no longer complete and kept.

The set must not change while the run goes on: a run that finds the set at another version than
it started with fails, saying so (its figures would mix two sets). An embedding provider that is
down makes the task wait without spending an attempt, as a build's does."""

from __future__ import annotations

import hashlib
import logging
import re

from django.conf import settings
from django.utils import timezone

from evaluation import metrics
from evaluation.models import EvaluationResult, EvaluationRun, Question, QuestionSet
from evaluation.services.runs import SERVABLE
from evaluation.services.schedule import quality_drop_check
from ingestion.task_outcomes import task_succeed
from kb.models import IndexVersion, KnowledgeBase
from kb.selectors.index_versions import index_version_settings_record
from retrieval.models import FusionCalibration
from retrieval.principals import Principal
from retrieval.search import fusion
from retrieval.search.engine import search
from retrieval.search.hits import SearchResult
from work import faults
from work.leases import Lease, fenced
from work.models import IngestionTask

logger = logging.getLogger(__name__)

_SPACE = re.compile(r"\s+")


def evaluation_execute(*, task: IngestionTask, lease: Lease) -> str:
    """Run (or resume) the evaluation run of `task`; returns its final state."""
    run = EvaluationRun.objects.select_related(
        "kb", "question_set", "served_build__document", "served_build__revision"
    ).get(task_id=task.pk)
    if run.state not in EvaluationRun.OPEN_STATES:
        with fenced(lease):
            task_succeed(lease=lease)
        return run.state
    with fenced(lease):
        problem = _start(run)
        if problem:
            _close(run, lease, state=EvaluationRun.State.FAILED, error=problem)
            return run.state
    assert run.index_version is not None
    questions = list(Question.objects.filter(question_set_id=run.question_set_id).order_by("pk"))
    done = set(EvaluationResult.objects.filter(run=run).values_list("question_id", "mode"))
    principal = _principal(run)
    _warm_up(run, principal, [q for q in questions if (q.pk, run.modes[-1]) not in done])
    written = 0
    for question in questions:
        for mode in run.modes:
            if (question.pk, mode) in done:
                continue
            result = search(
                principal=principal,
                kb=run.kb,
                query=question.text,
                top_k=run.top_k,
                mode=mode,
                index_version=run.index_version,
                explain=False,
                served_instead=_served_instead(run),
            )
            with fenced(lease):
                _record(run, question, mode, result)
            written += 1
            faults.evaluation_after_result(written)
    with fenced(lease):
        problem = _set_changed(run)
        if problem:
            _close(run, lease, state=EvaluationRun.State.FAILED, error=problem)
        else:
            run.summary = run_summary(run)
            _close(run, lease, state=EvaluationRun.State.SUCCEEDED)
            # a run of the active version that fell past its gate's threshold: an anomaly
            quality_drop_check(run)
    logger.info("evaluation finished: %s", run.state, extra={"evaluation_run": run.pk})
    return run.state


def _warm_up(run: EvaluationRun, principal: Principal, left: list[Question]) -> None:
    """One unrecorded search per mode and language before the timed ones: a worker's first
    search loads what later ones reuse (the embedding model, the fusion's model, the Chinese
    dictionary), and the latency figures are meant to be the steady state the API serves."""
    firsts = {question.language: question for question in reversed(left)}
    for question in firsts.values():
        for mode in run.modes:
            search(
                principal=principal,
                kb=run.kb,
                query=question.text,
                top_k=run.top_k,
                mode=mode,
                index_version=run.index_version,
                explain=False,
                served_instead=_served_instead(run),
            )


def _served_instead(run: EvaluationRun) -> dict[int, int] | None:
    """A revision run's override: its build served instead of its document's live one."""
    build = run.served_build
    return {build.document_id: build.pk} if build is not None else None


def _start(run: EvaluationRun) -> str:
    """Pin the version and record the settings (first attempt), mark the run running; or say
    why it cannot run. Caller holds the lease (fenced)."""
    problem = _set_changed(run)
    if problem:
        return problem
    if run.index_version_id is None:
        active = KnowledgeBase.objects.values_list("active_index_version_id", flat=True).get(
            pk=run.kb_id
        )
        if active is None:
            return f"{run.kb.name} has no active index version to ask."
        run.index_version_id = active
    version = IndexVersion.objects.get(pk=run.index_version_id)
    run.index_version = version
    if version.collected_at is not None or version.state == IndexVersion.State.FAILED:
        return (
            f"Index version {version.number} can no longer be asked: its chunks were "
            f"{'collected' if version.collected_at else 'never all built'}."
        )
    build = run.served_build
    if build is not None and (build.state not in SERVABLE or build.collected_at is not None):
        return (
            f"Revision {build.revision.number} of {build.document.key} can no longer be served "
            f"instead: its build is {build.get_state_display().lower()}."
        )
    if not run.search_settings:
        run.search_settings = search_settings(version, top_k=run.top_k)
    run.state = EvaluationRun.State.RUNNING
    run.started_at = run.started_at or timezone.now()
    run.error = ""
    run.save(update_fields=["index_version", "search_settings", "state", "started_at", "error"])
    return ""


def _set_changed(run: EvaluationRun) -> str:
    version = QuestionSet.objects.values_list("version", flat=True).get(pk=run.question_set_id)
    if version == run.question_set_version:
        return ""
    return (
        f"The question set changed while the run went on (version {run.question_set_version} "
        f"→ {version}): its figures would mix two sets. Start a new run."
    )


def search_settings(version: IndexVersion, *, top_k: int) -> dict[str, object]:
    """What makes two runs' figures comparable, beside the questions: the index version's
    settings, how hybrid fuses (the method, the learned model file's SHA-256 and the knowledge
    base's adopted calibration), the reranker
    (protocol and model, never its address or key) and top_k. (A revision run's build is its
    `served_build`, never copied here: the API shows these settings to keys that may not read
    that document.)"""
    return {
        "index_version": index_version_settings_record(version),
        "fusion": {
            "method": settings.HYBRID_FUSION,
            "model_sha256": hashlib.sha256(fusion.MODEL_PATH.read_bytes()).hexdigest(),
            # the knowledge base's adopted calibration, if any (`retrieval.search.parameters`)
            "calibration": FusionCalibration.objects.filter(kb_id=version.kb_id)
            .values_list("calibration_id", flat=True)
            .first(),
        },
        "rerank": {
            "configured": bool(settings.RERANK_URL),
            "protocol": settings.RERANK_PROTOCOL if settings.RERANK_URL else "",
            "model": settings.RERANK_MODEL if settings.RERANK_URL else "",
        },
        "top_k": top_k,
    }


def _principal(run: EvaluationRun) -> Principal:
    """Who the run reads as: the requester's tenant and access groups when they asked."""
    return Principal(
        tenant_id=run.kb.tenant_id,
        kb_ids=frozenset({run.kb_id}),
        access_groups=frozenset(run.access_groups),
        all_groups=run.all_groups,
        user_id=run.requested_by_id,
    )


def passage_found(passage: str, texts: list[str]) -> bool:
    """Whether a hit holds the expected passage (or the passage holds a whole hit, for a passage
    longer than a chunk); case and spacing do not count."""
    wanted = _SPACE.sub(" ", passage).strip().casefold()
    for text in texts:
        have = _SPACE.sub(" ", text).strip().casefold()
        if wanted and have and (wanted in have or have in wanted):
            return True
    return False


def _record(run: EvaluationRun, question: Question, mode: str, result: SearchResult) -> None:
    """Write one question's answer in one mode; a second write of it is a no-op. Caller holds
    the lease (fenced)."""
    keys = [hit.document_key for hit in result.hits]
    EvaluationResult.objects.bulk_create(
        [
            EvaluationResult(
                run=run,
                question=question,
                mode=mode,
                external_id=question.external_id,
                text=question.text,
                language=question.language,
                tag=question.tag,
                expected_keys=question.expected_keys,
                rank=metrics.first_rank(keys, question.expected_keys, depth=run.top_k),
                returned_keys=metrics.distinct_documents(keys[: run.top_k]),
                passage_found=(
                    passage_found(question.expected_passage, [hit.text for hit in result.hits])
                    if question.expected_passage
                    else None
                ),
                latency_ms=round(result.took_ms, 2),
            )
        ],
        ignore_conflicts=True,
    )


def run_summary(run: EvaluationRun) -> dict[str, object]:
    """The run's figures per mode, from its results alone (`evaluation.metrics.summarize`)."""
    results = list(
        EvaluationResult.objects.filter(run=run).values_list(
            "mode",
            "expected_keys",
            "returned_keys",
            "language",
            "tag",
            "latency_ms",
            "passage_found",
        )
    )
    return {
        mode: metrics.summarize(
            [
                metrics.Answer(
                    expected=expected,
                    returned=returned,
                    language=language,
                    tag=tag,
                    latency_ms=latency,
                    passage_found=found,
                )
                for row_mode, expected, returned, language, tag, latency, found in results
                if row_mode == mode
            ]
        )
        for mode in run.modes
    }


def _close(run: EvaluationRun, lease: Lease, *, state: str, error: str = "") -> None:
    """Caller holds the lease (fenced)."""
    run.state = state
    run.error = error[:4000]
    run.finished_at = timezone.now()
    run.save(update_fields=["state", "error", "finished_at", "summary"])
    task_succeed(lease=lease)
