"""The quality gate, through the swap service every caller uses (the admin, any API, a script:
`kb.services.index_versions.index_version_activate`): a candidate whose MRR@10 drops by more
than the gate allows is refused, so is one without runs to judge by; an index admin overrides
it with a reason, kept on the timeline; a content manager may not; a drop within the threshold
passes; a rollback is never refused; a gate's changes are on the timeline too."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, Permission, User

from evaluation.gate import gate_verdict
from evaluation.models import EvaluationRun, QualityGate, QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.gates import (
    GateInvalid,
    gate_runs_request,
    quality_gate_delete,
    quality_gate_save,
)
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from evaluation.services.runs import evaluation_request
from kb.access import Reader
from kb.audit_kinds import QUALITY_GATE_CHANGED, QUALITY_GATE_OVERRIDDEN
from kb.models import IndexVersion, KnowledgeBase, Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.base import ActionRefused
from kb.services.index_versions import (
    index_version_activate,
    index_version_rollback,
    knowledge_base_create,
)
from kb.timeline import kb_timeline
from tests.evaluation.conftest import EVERYTHING, reader_of
from tests.evaluation.gate_world import QUESTIONS, publish_world, tiny_candidate
from work.models import AuditEvent

pytestmark = pytest.mark.django_db

Evaluate = Callable[[EvaluationRun], EvaluationRun]


@pytest.fixture
def world(kb: KnowledgeBase) -> KnowledgeBase:
    publish_world(kb)
    return kb


@pytest.fixture
def handbook(world: KnowledgeBase) -> QuestionSet:
    question_set = question_set_create(kb=world, name="Facilities")
    reader = reader_of(world)
    checked = questions_check(question_set=question_set, raw=read_rows(QUESTIONS), reader=reader)
    assert checked.ok
    questions_import(question_set=question_set, checked=checked, reader=reader)
    question_set.refresh_from_db()
    return question_set


@pytest.fixture
def candidate(world: KnowledgeBase, handbook: QuestionSet) -> IndexVersion:
    return tiny_candidate(world)


def person(name: str, role: str, tenant: Tenant) -> User:
    ensure_roles(Group, Permission)
    user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    TenantMembership.objects.create(user=user, tenant=tenant)
    return User.objects.get(pk=user.pk)  # no permission cache


def judge_both(
    kb: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion, evaluate: Evaluate
) -> list[EvaluationRun]:
    """The runs the gate judges by, started as the swap page starts them, run here."""
    kb.refresh_from_db()
    assert kb.active_index_version is not None
    started = gate_runs_request(
        kb=kb,
        question_set=handbook,
        versions=[kb.active_index_version, candidate],
        missing=[kb.active_index_version, candidate],
    )
    assert [s.created for s in started] == [True, True]
    return [evaluate(s.run) for s in started]


def test_a_swap_whose_mrr_drops_past_the_gate_is_refused_by_the_swap_service(
    world: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion, evaluate: Evaluate
) -> None:
    quality_gate_save(kb=world, question_set=handbook, max_drop=0.05)
    active_run, candidate_run = judge_both(world, handbook, candidate, evaluate)
    before = active_run.summary["hybrid"]["all"]["mrr@10"]
    after = candidate_run.summary["hybrid"]["all"]["mrr@10"]
    assert before - after > 0.05, (before, after)  # tiny chunks lose the answers
    iris = person("iris", INDEX_ADMINS, world.tenant)
    active_id = world.active_index_version_id

    with pytest.raises(ActionRefused) as refused:
        index_version_activate(version_id=candidate.pk, actor=iris, reason="faster")

    message = str(refused.value)
    assert (
        f"The quality gate refuses v{candidate.number}: MRR@10 of hybrid on Facilities drops "
        f"from {before:.3f} (v1) to {after:.3f}, by {before - after:.3f}, more than the 0.050 "
        "allowed." in message
    ), message
    assert "An index admin may override it, giving a reason." in message
    world.refresh_from_db()
    assert world.active_index_version_id == active_id
    assert not AuditEvent.objects.filter(kind="index_version_swap").exists()


def test_without_runs_to_judge_by_the_gate_refuses_and_says_which(
    world: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion, evaluate: Evaluate
) -> None:
    quality_gate_save(kb=world, question_set=handbook)
    # a run that read only what one person may read does not count: the gate reads everything
    evaluate(
        evaluation_request(
            kb=world, question_set=handbook, modes=["hybrid"], reader=reader_of(world)
        )[0]
    )

    with pytest.raises(ActionRefused) as refused:
        index_version_activate(version_id=candidate.pk, actor=None)

    assert (
        "The quality gate needs a finished run of Facilities (version 2, reading every "
        f"document, in hybrid) on v1 and v{candidate.number}" in str(refused.value)
    )


def test_an_index_admin_overrides_the_gate_with_a_reason_kept_on_the_timeline(
    world: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion, evaluate: Evaluate
) -> None:
    quality_gate_save(kb=world, question_set=handbook, max_drop=0.05)
    judge_both(world, handbook, candidate, evaluate)
    cora = person("cora", CONTENT_MANAGERS, world.tenant)
    iris = person("iris", INDEX_ADMINS, world.tenant)

    with pytest.raises(ActionRefused, match="permission to override the quality gate"):
        index_version_activate(version_id=candidate.pk, actor=cora, reason="x", override=True)
    with pytest.raises(ActionRefused, match="permission to override the quality gate"):
        index_version_activate(version_id=candidate.pk, actor=None, reason="x", override=True)
    with pytest.raises(ActionRefused, match="Say why you override the quality gate"):
        index_version_activate(version_id=candidate.pk, actor=iris, reason=" ", override=True)
    assert not AuditEvent.objects.filter(kind=QUALITY_GATE_OVERRIDDEN).exists()

    index_version_activate(
        version_id=candidate.pk,
        actor=iris,
        reason="small chunks for the chat widget",
        override=True,
    )

    world.refresh_from_db()
    assert world.active_index_version_id == candidate.pk
    override = AuditEvent.objects.get(kind=QUALITY_GATE_OVERRIDDEN)
    assert override.actor_id == iris.pk and override.subject_id == candidate.pk
    assert override.details["reason"] == "small chunks for the chat widget"
    assert override.details["quality_gate"]["state"] == "refuses"
    assert "The quality gate refuses" in override.action
    swap = AuditEvent.objects.get(kind="index_version_swap")
    assert swap.details["quality_gate"]["overridden"] is True
    entries = kb_timeline(kb=world, reader=EVERYTHING).entries
    overrode = next(e for e in entries if e.kind == QUALITY_GATE_OVERRIDDEN)
    assert overrode.label == "overrode the quality gate"
    assert overrode.reason == "small chunks for the chat widget"
    assert overrode.actor == "iris" and overrode.version == candidate.number
    assert overrode.previous_version == 1

    # and back: a rollback is never refused by the gate, whatever the figures
    index_version_rollback(kb_id=world.pk, actor=cora, reason="users complained")
    world.refresh_from_db()
    assert world.active_index_version.number == 1  # type: ignore[union-attr]


def test_a_drop_within_the_threshold_passes_and_the_swap_keeps_the_verdict(
    world: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion, evaluate: Evaluate
) -> None:
    gate = quality_gate_save(kb=world, question_set=handbook, max_drop=0.5)
    judge_both(world, handbook, candidate, evaluate)
    world.refresh_from_db()
    assert world.active_index_version is not None
    verdict = gate_verdict(gate=gate, active=world.active_index_version, candidate=candidate)
    assert verdict.state == "passes" and verdict.drop is not None and 0 < verdict.drop <= 0.5
    assert "within the 0.500 the quality gate allows" in verdict.words()

    index_version_activate(version_id=candidate.pk, actor=None, reason="")

    swap = AuditEvent.objects.get(kind="index_version_swap")
    assert swap.details["quality_gate"]["state"] == "passes"
    assert swap.details["quality_gate"]["before"] == verdict.before


def test_a_gate_that_refuses_nothing_only_informs(
    world: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion
) -> None:
    quality_gate_save(kb=world, question_set=handbook, refuse_swaps=False)

    index_version_activate(version_id=candidate.pk, actor=None)

    world.refresh_from_db()
    assert world.active_index_version_id == candidate.pk
    swap = AuditEvent.objects.get(kind="index_version_swap")
    assert swap.details["quality_gate"]["state"] == "informs"


def test_without_a_gate_a_swap_is_judged_by_coverage_alone(
    world: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion
) -> None:
    index_version_activate(version_id=candidate.pk, actor=None)

    swap = AuditEvent.objects.get(kind="index_version_swap")
    assert "quality_gate" not in swap.details


def test_a_gate_is_checked_and_its_changes_are_on_the_timeline(
    world: KnowledgeBase, handbook: QuestionSet, tenant: Tenant
) -> None:
    elsewhere = knowledge_base_create(tenant=tenant, name="Other", slug="other")
    foreign = question_set_create(kb=elsewhere, name="Theirs")
    iris = person("iris", INDEX_ADMINS, world.tenant)
    for kwargs, field in (
        ({"question_set": foreign}, "question_set"),
        ({"question_set": handbook, "metric": "speed"}, "metric"),
        ({"question_set": handbook, "mode": "psychic"}, "mode"),
        ({"question_set": handbook, "max_drop": 1.5}, "max_drop"),
        ({"question_set": handbook, "nightly_hour": 24}, "nightly_hour"),
    ):
        with pytest.raises(GateInvalid) as invalid:
            quality_gate_save(kb=world, actor=iris, **kwargs)
        assert invalid.value.field == field
    assert not QualityGate.objects.exists()

    gate = quality_gate_save(kb=world, question_set=handbook, max_drop=0.03, actor=iris)
    quality_gate_save(kb=world, question_set=handbook, max_drop=0.03, actor=iris)  # no change
    quality_gate_save(kb=world, question_set=handbook, metric="ndcg@10", nightly=True, actor=iris)
    quality_gate_delete(gate=QualityGate.objects.get(pk=gate.pk), actor=iris)

    changes = list(
        AuditEvent.objects.filter(kind=QUALITY_GATE_CHANGED)
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert changes == [
        "MRR@10 of hybrid on Facilities may drop by at most 0.030; refuses a swap that drops more",
        "nDCG@10 of hybrid on Facilities may drop by at most 0.020; refuses a swap that drops "
        "more; nightly run at 02:00",
        "removed (it said: nDCG@10 of hybrid on Facilities may drop by at most 0.020; refuses a "
        "swap that drops more; nightly run at 02:00)",
    ]
    labels = [
        e.label
        for e in kb_timeline(
            kb=world, reader=Reader(tenant_id=tenant.pk, access_groups=frozenset())
        ).entries
        if e.kind == QUALITY_GATE_CHANGED
    ]
    assert labels == ["changed the quality gate"] * 3
