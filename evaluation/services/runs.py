"""Asking for an evaluation run, and closing runs whose worker gave up.

A run is leased work (`evaluation.run.evaluation_execute`, an IngestionTask of kind
"evaluation"): `evaluation_request` writes the run, its task and the task's outbox event in one
transaction, so the run starts exactly when it is committed."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.utils.translation import gettext

from evaluation.models import EvaluationRun, Question, QuestionSet
from evaluation.services.orphans import orphans_close
from kb.models import Build, IndexVersion, KnowledgeBase
from kb.selectors.index_versions import live_index_versions
from kb.selectors.metadata import DocumentReader
from kb.services.base import ActionRefused, Actor, actor_id
from retrieval.search.engine import MODES
from work.models import IngestionTask
from work.outbox import task_create


def evaluation_request(
    *,
    kb: KnowledgeBase,
    question_set: QuestionSet,
    modes: Sequence[str],
    reader: DocumentReader,
    index_version: IndexVersion | None = None,
    served_build: Build | None = None,
    scheduled: bool = False,
    actor: Actor = None,
) -> tuple[EvaluationRun, bool]:
    """Ask every question of `question_set` of `kb` in each of `modes`: of its active version
    (pinned when the run starts), or of `index_version` (a candidate, or a retired version still
    kept), or with `served_build` (a document's pending revision, built and complete) served
    instead of that document's live build, the rest of the knowledge base as its version serves
    it. The run reads as `reader` (the requester's access groups, kept on the run); `scheduled`:
    the nightly schedule asked (`evaluation.services.schedule`).

    Idempotent: while a run of the same set, version, build and modes is open, asking again
    returns it. Returns (run, created). Refused (ActionRefused, with the reason) for an empty
    set, a set, version or build of another knowledge base, a version no longer built for, a
    build not complete, no mode or an unknown one. Takes the set's row lock (no key), then
    writes the run, its task and its outbox event."""
    chosen = list(dict.fromkeys(modes))
    unknown = [mode for mode in chosen if mode not in MODES]
    if not chosen or unknown:
        raise ActionRefused(
            gettext("Choose one or more modes of %(modes)s.") % {"modes": ", ".join(MODES)}
        )
    if question_set.kb_id != kb.pk:
        raise ActionRefused(gettext("That question set belongs to another knowledge base."))
    if kb.active_index_version_id is None:
        raise ActionRefused(gettext("%(kb)s has no active index version to ask.") % {"kb": kb.name})
    version = _target(kb, index_version)
    if served_build is not None:
        version = _revision_target(kb, served_build)
    with transaction.atomic():
        locked = QuestionSet.objects.select_for_update(no_key=True).get(pk=question_set.pk)
        evaluation_runs_close_orphaned(question_set=locked)
        questions = Question.objects.filter(question_set=locked).count()
        if not questions:
            raise ActionRefused(gettext("%(set)s has no questions yet.") % {"set": locked.name})
        open_run = (
            EvaluationRun.objects.filter(
                question_set=locked,
                state__in=EvaluationRun.OPEN_STATES,
                index_version=version,
                served_build=served_build,
                modes=chosen,
                question_set_version=locked.version,
            )
            .order_by("pk")
            .first()
        )
        if open_run is not None:
            return open_run, False
        task = task_create(kind=IngestionTask.Kind.EVALUATION, kb_id=kb.pk)
        run = EvaluationRun.objects.create(
            kb=kb,
            question_set=locked,
            question_set_version=locked.version,
            target=_target_kind(version, served_build),
            index_version=version,
            served_build=served_build,
            modes=chosen,
            scheduled=scheduled,
            task=task,
            access_groups=sorted(reader.access_groups),
            all_groups=reader.all_groups,
            questions_total=questions,
            requested_by_id=actor_id(actor),
        )
    return run, True


def _target(kb: KnowledgeBase, index_version: IndexVersion | None) -> IndexVersion | None:
    """The version a run asks, None for the active one (pinned when it starts)."""
    if index_version is None or index_version.pk == kb.active_index_version_id:
        return None
    if index_version.kb_id != kb.pk:
        raise ActionRefused(gettext("That index version belongs to another knowledge base."))
    if not live_index_versions(kb_id=kb.pk).filter(pk=index_version.pk).exists():
        raise ActionRefused(
            gettext(
                "Index version %(n)s is no longer built for (failed, or retired and collected): "
                "it cannot be asked."
            )
            % {"n": index_version.number}
        )
    return index_version


def _target_kind(version: IndexVersion | None, served_build: Build | None) -> str:
    if served_build is not None:
        return EvaluationRun.Target.REVISION
    return EvaluationRun.Target.ACTIVE if version is None else EvaluationRun.Target.CANDIDATE


# A build that may be served instead of its document's live one: complete, and not set aside.
SERVABLE = (Build.State.READY, Build.State.LIVE)


def _revision_target(kb: KnowledgeBase, build: Build) -> IndexVersion:
    """The version a run of a pending revision asks: its build's, which must be the active one
    (the knowledge base as search serves it, but for that document)."""
    if build.kb_id != kb.pk:
        raise ActionRefused(gettext("That build belongs to another knowledge base."))
    if build.index_version_id != kb.active_index_version_id:
        raise ActionRefused(
            gettext(
                "That build is of an index version search does not serve: only a revision built "
                "in the active version can be asked in its place."
            )
        )
    if build.state not in SERVABLE or build.collected_at is not None:
        raise ActionRefused(
            gettext(
                "Revision %(n)s's build is %(state)s: only a complete build can be served instead."
            )
            % {"n": build.revision.number, "state": build.get_state_display().lower()}
        )
    return build.index_version


def evaluation_runs_close_orphaned(*, question_set: QuestionSet | None = None) -> int:
    """Open runs whose task is closed (dead after its attempts, failed) or gone are failed with
    the task's reason. Returns how many. Idempotent."""
    runs = EvaluationRun.objects.all()
    if question_set is not None:
        runs = runs.filter(question_set=question_set)
    return orphans_close(
        runs,
        open_states=EvaluationRun.OPEN_STATES,
        failed=EvaluationRun.State.FAILED,
        finished_field="finished_at",
        default_reason="The run's worker stopped before it finished.",
    )
