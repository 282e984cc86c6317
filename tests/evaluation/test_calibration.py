"""A knowledge base's fusion calibration (issue 39, item 6), through its services and search:
too few questions refused in words; a set the default already answers keeps it; a default its
questions clearly beat gives a candidate better on held-out folds, which search then uses until
it is rolled back; adoption through the gate (refused when worse or stale, overridden with a
reason, audited on the timeline)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User

from evaluation.calibration import MIN_QUESTIONS, calibration_verdict
from evaluation.models import Calibration, Question
from evaluation.services.calibration import (
    calibration_adopt,
    calibration_compute,
    calibration_request,
    calibration_roll_back,
)
from evaluation.services.gates import quality_gate_save
from kb.audit_kinds import (
    FUSION_CALIBRATION_ADOPTED,
    FUSION_CALIBRATION_ROLLED_BACK,
    QUALITY_GATE_OVERRIDDEN,
)
from kb.models import KnowledgeBase, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.base import ActionRefused
from kb.services.index_versions import knowledge_base_create
from kb.timeline import AUDIT_KINDS
from retrieval.models import FusionCalibration
from retrieval.principals import Principal
from retrieval.search import fusion
from retrieval.search.engine import search
from retrieval.search.several import search_several
from tests.evaluation.calibration_world import bad_default, publish_topics, topic_set
from tests.retrieval.factories import publish
from work.models import AuditEvent

pytestmark = pytest.mark.django_db

N = 44


@pytest.fixture
def topics(kb: KnowledgeBase) -> KnowledgeBase:
    publish_topics(kb, N)
    kb.refresh_from_db()
    return kb


@pytest.fixture
def bad(monkeypatch: pytest.MonkeyPatch) -> fusion.FusionModel:
    """The shipped default replaced by one this knowledge base's questions clearly beat."""
    model = bad_default()
    monkeypatch.setattr(fusion, "model", lambda *args, **kwargs: model)
    return model


def person(kb: KnowledgeBase, name: str, role: str) -> User:
    ensure_roles(Group, Permission)
    user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    TenantMembership.objects.create(user=user, tenant=kb.tenant, access_groups=[])
    return User.objects.get(pk=user.pk)  # fresh permission caches


def computed(kb: KnowledgeBase, n: int = N) -> Calibration:
    calibration, created = calibration_request(kb=kb, question_set=topic_set(kb, n))
    assert created
    done = calibration_compute(calibration_id=calibration.pk)
    assert done is not None, "the calibration was not claimed"
    return done


def first_keys(kb: KnowledgeBase, query: str) -> list[str]:
    principal = Principal(
        tenant_id=kb.tenant_id,
        kb_ids=frozenset({kb.pk}),
        access_groups=frozenset(),
        all_groups=True,
    )
    result = search(principal=principal, kb=kb, query=query, top_k=5, mode="hybrid", rerank=False)
    return [hit.document_key for hit in result.hits]


def test_a_set_below_the_minimum_is_refused_in_words(topics: KnowledgeBase) -> None:
    with pytest.raises(ActionRefused) as refused:
        calibration_request(kb=topics, question_set=topic_set(topics, MIN_QUESTIONS - 1))
    message = str(refused.value)
    assert f"has {MIN_QUESTIONS - 1} questions" in message
    assert f"at least {MIN_QUESTIONS}." in message
    assert not Calibration.objects.exists()


def test_a_set_the_default_already_answers_keeps_the_default(topics: KnowledgeBase) -> None:
    calibration = computed(topics, MIN_QUESTIONS)
    assert calibration.state == Calibration.State.DEFAULT_KEPT
    assert calibration.l2 is None
    assert calibration.default_mrr == 1.0
    assert calibration.parameters["weights"] == [round(w, 6) for w in fusion.model().weights]
    with pytest.raises(ActionRefused, match="nothing to adopt"):
        calibration_adopt(calibration=calibration)


def test_asking_again_for_the_same_set_version_returns_the_same_calibration(
    topics: KnowledgeBase,
) -> None:
    question_set = topic_set(topics, MIN_QUESTIONS)
    first, created = calibration_request(kb=topics, question_set=question_set)
    again, created_again = calibration_request(kb=topics, question_set=question_set)
    assert created and not created_again and again.pk == first.pk
    assert calibration_compute(calibration_id=first.pk) is not None
    assert calibration_compute(calibration_id=first.pk) is None  # computed: not claimed again


def test_a_beatable_default_gives_a_candidate_better_on_held_out_folds(
    topics: KnowledgeBase, bad: fusion.FusionModel
) -> None:
    calibration = computed(topics)
    assert calibration.state == Calibration.State.CANDIDATE, calibration.grid
    assert calibration.l2 is not None
    assert calibration.candidate_mrr is not None and calibration.default_mrr is not None
    assert calibration.candidate_mrr > calibration.default_mrr + 0.2
    assert len(calibration.folds) == 5 and sum(f["n"] for f in calibration.folds) == N
    assert all(f["candidate_mrr"] >= f["default_mrr"] for f in calibration.folds)
    rows = {row["external_id"]: row for row in calibration.per_question}
    assert len(rows) == N
    assert sum(row["candidate"][0] == row["expected"][0] for row in rows.values()) > sum(
        row["default"][0] == row["expected"][0] for row in rows.values()
    )
    # deterministic: computing it again writes the same
    Calibration.objects.filter(pk=calibration.pk).update(state=Calibration.State.QUEUED)
    again = calibration_compute(calibration_id=calibration.pk)
    assert again is not None
    assert again.parameters == calibration.parameters
    assert again.per_question == calibration.per_question


def test_search_uses_the_adopted_parameters_and_the_default_after_rolling_back(
    topics: KnowledgeBase, bad: fusion.FusionModel
) -> None:
    calibration = computed(topics)
    iris = person(topics, "iris", INDEX_ADMINS)
    query = " ".join(calibration.per_question[0]["text"].split()[:2])
    expected = calibration.per_question[0]["expected"][0]
    before = first_keys(topics, query)
    assert before[0] != expected  # the bad default buries the answer

    calibration_adopt(calibration=calibration, actor=iris)

    assert FusionCalibration.objects.get(kb=topics).calibration_id == calibration.pk
    adopted = first_keys(topics, query)
    assert adopted[0] == expected
    event = AuditEvent.objects.get(kind=FUSION_CALIBRATION_ADOPTED)
    assert event.kb_id == topics.pk and event.actor_id == iris.pk
    assert event.details["quality_gate"]["state"] == "passes"
    assert FUSION_CALIBRATION_ADOPTED in AUDIT_KINDS

    calibration_roll_back(kb=topics, actor=iris, reason="checking the default")

    assert first_keys(topics, query) == before
    assert not FusionCalibration.objects.filter(kb=topics).exists()
    calibration.refresh_from_db()
    assert calibration.state == Calibration.State.ROLLED_BACK
    back = AuditEvent.objects.get(kind=FUSION_CALIBRATION_ROLLED_BACK)
    assert back.details["reason"] == "checking the default"
    with pytest.raises(ActionRefused, match="already uses the default"):
        calibration_roll_back(kb=topics, actor=iris)


def _worse(calibration: Calibration) -> Calibration:
    """The calibration as if its held-out folds had shown it worse than the default."""
    Calibration.objects.filter(pk=calibration.pk).update(default_mrr=0.8, candidate_mrr=0.7)
    calibration.refresh_from_db()
    return calibration


def test_adopting_a_worse_calibration_is_refused_unless_overridden_with_a_reason(
    topics: KnowledgeBase, bad: fusion.FusionModel
) -> None:
    calibration = _worse(computed(topics))
    iris = person(topics, "iris", INDEX_ADMINS)
    cora = person(topics, "cora", CONTENT_MANAGERS)
    quality_gate_save(kb=topics, question_set=calibration.question_set, max_drop=0.05)

    with pytest.raises(ActionRefused) as refused:
        calibration_adopt(calibration=calibration, actor=iris)
    assert "drops from 0.800 (the default) to 0.700" in str(refused.value)
    with pytest.raises(ActionRefused, match="may change the quality gate"):
        calibration_adopt(calibration=calibration, actor=cora, override=True, reason="x")
    with pytest.raises(ActionRefused, match="Say why"):
        calibration_adopt(calibration=calibration, actor=iris, override=True, reason="  ")
    assert not FusionCalibration.objects.exists()
    assert not AuditEvent.objects.filter(kind=QUALITY_GATE_OVERRIDDEN).exists()

    calibration_adopt(
        calibration=calibration, actor=iris, override=True, reason="the set is skewed"
    )

    override = AuditEvent.objects.get(kind=QUALITY_GATE_OVERRIDDEN)
    assert override.subject_type == "calibration" and override.subject_id == calibration.pk
    assert override.details["reason"] == "the set is skewed"
    assert override.details["quality_gate"]["state"] == "refuses"
    adopted: dict[str, Any] = AuditEvent.objects.get(kind=FUSION_CALIBRATION_ADOPTED).details
    assert adopted["quality_gate"]["overridden"] is True
    assert FusionCalibration.objects.get(kb=topics).parameters == calibration.parameters


def test_a_drop_within_the_gates_allowance_passes(
    topics: KnowledgeBase, bad: fusion.FusionModel
) -> None:
    calibration = _worse(computed(topics))
    quality_gate_save(kb=topics, question_set=calibration.question_set, max_drop=0.2)
    calibration_adopt(calibration=calibration)
    calibration.refresh_from_db()
    assert calibration.state == Calibration.State.ADOPTED


def test_a_calibration_of_a_set_changed_since_is_stale(
    topics: KnowledgeBase, bad: fusion.FusionModel
) -> None:
    calibration = computed(topics)
    question_set = calibration.question_set
    Question.objects.filter(question_set=question_set).order_by("pk").first().delete()  # type: ignore[union-attr]
    question_set.version += 1
    question_set.save(update_fields=["version"])
    with pytest.raises(ActionRefused, match="question set changed"):
        calibration_adopt(calibration=calibration)
    # asking again calibrates the set's new version
    again, created = calibration_request(kb=topics, question_set=question_set)
    assert created and again.pk != calibration.pk


def test_a_gate_that_refuses_no_swap_lets_a_drop_through_but_not_stale_figures(
    topics: KnowledgeBase, bad: fusion.FusionModel
) -> None:
    calibration = _worse(computed(topics))
    quality_gate_save(
        kb=topics, question_set=calibration.question_set, max_drop=0.0, refuse_swaps=False
    )
    assert calibration_verdict(calibration).state == "informs"
    Calibration.objects.filter(pk=calibration.pk).update(default_sha256="0" * 64)
    calibration.refresh_from_db()
    verdict = calibration_verdict(calibration)
    assert verdict.state == "missing" and "shipped default changed" in verdict.words()
    with pytest.raises(ActionRefused, match="no longer describes"):
        calibration_adopt(calibration=calibration)


def test_a_search_of_several_knowledge_bases_fuses_each_with_its_calibration(
    topics: KnowledgeBase, bad: fusion.FusionModel
) -> None:
    calibration = computed(topics)
    calibration_adopt(calibration=calibration, actor=person(topics, "iris", INDEX_ADMINS))
    other = knowledge_base_create(tenant=topics.tenant, name="Other", slug="other")
    publish(other, "printer", "The third floor printer jams on thick paper.")
    query = " ".join(calibration.per_question[0]["text"].split()[:2])
    expected = calibration.per_question[0]["expected"][0]
    principal = Principal(
        tenant_id=topics.tenant_id,
        kb_ids=frozenset({topics.pk, other.pk}),
        access_groups=frozenset(),
        all_groups=True,
    )

    result = search_several(
        principal=principal, kbs=[topics, other], query=query, top_k=5, rerank=False
    )

    assert result.merged_by == "score"
    # as the knowledge base's own search ranks it with its calibration (the bad default would not)
    assert [hit.document_key for hit in result.hits if hit.kb == topics.slug][:1] == [expected]
    assert first_keys(topics, query)[0] == expected


def test_a_version_with_the_english_list_calibrates_the_three_lists_model(
    tenant: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a version with the English list the refit is of the three lists' model (what search
    serves for questions not in Chinese), measured against it; adopted, search reads the list
    and ranks by the calibration."""
    english = knowledge_base_create(
        tenant=tenant, name="English", slug="english", provider="hash", english_list=True
    )
    publish_topics(english, N)
    english.refresh_from_db()
    shipped = fusion.english_model()
    turned = replace(shipped, weights=tuple(-w for w in shipped.weights), gate=None)
    monkeypatch.setattr(fusion, "english_model", lambda *args, **kwargs: turned)

    calibration = computed(english)

    assert calibration.state == Calibration.State.CANDIDATE, calibration.grid
    assert calibration.parameters["features"] == [*fusion.FEATURES, *fusion.ENGLISH_FEATURES]
    assert calibration.candidate_mrr is not None and calibration.default_mrr is not None
    assert calibration.candidate_mrr > calibration.default_mrr + 0.2
    calibration_adopt(calibration=calibration, actor=person(english, "iris", INDEX_ADMINS))
    query = calibration.per_question[0]["text"]
    principal = Principal(tenant_id=english.tenant_id, kb_ids=None, access_groups=frozenset())
    result = search(principal=principal, kb=english, query=query, explain=True)
    assert result.hits[0].document_key == calibration.per_question[0]["expected"][0]
    assert result.ranking is not None
    assert any("english" in hit for hit in result.ranking.hits.values())
