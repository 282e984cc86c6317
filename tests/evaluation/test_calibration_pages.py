"""The search calibration in the admin, through the test client: the Quality page's box,
*Calibrate…*, the calibration's page (the default beside the candidate, folds, each question's
change, a document the viewer may not read counted and never named), *Adopt…* with the gate's
verdict and *Roll back to the default…*; a content manager may look but neither adopt nor roll
back."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from evaluation.calibration import MIN_QUESTIONS
from evaluation.models import Calibration
from evaluation.services.calibration import calibration_compute
from kb.audit_kinds import FUSION_CALIBRATION_ADOPTED, FUSION_CALIBRATION_ROLLED_BACK
from kb.models import KnowledgeBase, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from retrieval.models import FusionCalibration
from retrieval.search import fusion
from tests.evaluation.calibration_world import bad_default, publish_topics, topic_set, words
from tests.retrieval.factories import publish
from work.models import AuditEvent

pytestmark = pytest.mark.django_db

N = 44
SECRET = "secret-plan"


def text(response: Any) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def world(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> KnowledgeBase:
    """The topics, a document behind `hr` that tops topic 0's legs, and a default they beat."""
    publish_topics(kb, N)
    publish(kb, SECRET, " ".join(words(0) * 3), groups=("hr",))
    model = bad_default()
    monkeypatch.setattr(fusion, "model", lambda *args, **kwargs: model)
    kb.refresh_from_db()
    return kb


@pytest.fixture
def people(kb: KnowledgeBase) -> dict[str, Client]:
    """iris (index admin), cora (content manager); neither in hr."""
    ensure_roles(Group, Permission)
    clients = {}
    for name, role in (("iris", INDEX_ADMINS), ("cora", CONTENT_MANAGERS)):
        user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
        user.groups.add(Group.objects.get(name=role))
        TenantMembership.objects.create(user=user, tenant=kb.tenant, access_groups=[])
        clients[name] = Client()
        clients[name].force_login(user)
    return clients


def test_an_index_admin_calibrates_compares_adopts_and_rolls_back(
    world: KnowledgeBase, people: dict[str, Client]
) -> None:
    iris = people["iris"]
    question_set = topic_set(world, N)
    quality = reverse("admin:evaluation_quality", args=[world.pk])
    page = text(iris.get(quality))
    assert 'id="calibration-default"' in page and 'id="calibrate-link"' in page

    calibrate = reverse("admin:evaluation_calibrate", args=[world.pk])
    assert f"at least {MIN_QUESTIONS} questions" in text(iris.get(calibrate))
    response = iris.post(calibrate, {"question_set": question_set.pk})
    calibration = Calibration.objects.get(kb=world)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:evaluation_calibration", args=[calibration.pk])
    assert calibration_compute(calibration_id=calibration.pk) is not None

    page = text(iris.get(response["Location"]))
    calibration.refresh_from_db()
    assert calibration.state == Calibration.State.CANDIDATE
    assert f"{calibration.default_mrr:.3f}" in page and f"{calibration.candidate_mrr:.3f}" in page
    assert page.count('class="fold"') == 5
    assert 'class="change-up"' in page or 'class="change-gained"' in page
    assert 'id="calibration-hidden"' in page and SECRET not in page
    assert "The quality gate lets it through" in page

    adopt = reverse("admin:evaluation_calibration_adopt", args=[calibration.pk])
    assert 'id="calibration-verdict"' in text(iris.get(adopt))
    assert not FusionCalibration.objects.exists()  # a GET changes nothing
    response = iris.post(adopt, {"reason": "our questions"})
    assert response.status_code == 302
    assert FusionCalibration.objects.get(kb=world).calibration_id == calibration.pk
    assert AuditEvent.objects.get(kind=FUSION_CALIBRATION_ADOPTED).details["reason"] == (
        "our questions"
    )
    assert 'id="calibration-adopted"' in text(iris.get(quality))

    rollback = reverse("admin:evaluation_calibration_rollback", args=[world.pk])
    assert 'id="rollback-summary"' in text(iris.get(rollback))
    assert FusionCalibration.objects.exists()
    response = iris.post(rollback, {"reason": "back to normal"})
    assert response.status_code == 302
    assert not FusionCalibration.objects.exists()
    assert AuditEvent.objects.filter(kind=FUSION_CALIBRATION_ROLLED_BACK).count() == 1


def test_the_adopt_page_shows_the_refusal_and_takes_an_override_with_a_reason(
    world: KnowledgeBase, people: dict[str, Client]
) -> None:
    iris = people["iris"]
    question_set = topic_set(world, N)
    calibration = Calibration.objects.create(
        kb=world,
        question_set=question_set,
        question_set_version=question_set.version,
        index_version=world.active_index_version,  # type: ignore[misc]
        state=Calibration.State.CANDIDATE,
        parameters={"made": "up"},
        default_mrr=0.9,
        candidate_mrr=0.6,
    )
    adopt = reverse("admin:evaluation_calibration_adopt", args=[calibration.pk])
    page = text(iris.get(adopt))
    assert "refuses this calibration" in page and 'name="override_gate"' in page
    page = text(iris.post(adopt, {"reason": ""}))
    assert 'id="adopt-refused"' in page and not FusionCalibration.objects.exists()
    response = iris.post(adopt, {"reason": "we know better", "override_gate": "1"})
    assert response.status_code == 302
    assert FusionCalibration.objects.get(kb=world).parameters == {"made": "up"}


def test_a_content_manager_sees_a_calibration_but_may_not_adopt_or_roll_back(
    world: KnowledgeBase, people: dict[str, Client]
) -> None:
    cora = people["cora"]
    question_set = topic_set(world, N)
    calibration = Calibration.objects.create(
        kb=world,
        question_set=question_set,
        question_set_version=question_set.version,
        index_version=world.active_index_version,  # type: ignore[misc]
        state=Calibration.State.CANDIDATE,
        parameters={"made": "up"},
        default_mrr=0.5,
        candidate_mrr=0.8,
    )
    page = text(cora.get(reverse("admin:evaluation_calibration", args=[calibration.pk])))
    assert "0.800" in page and 'id="adopt-link"' not in page
    assert 'id="calibrate-link"' not in text(
        cora.get(reverse("admin:evaluation_quality", args=[world.pk]))
    )
    adopt = reverse("admin:evaluation_calibration_adopt", args=[calibration.pk])
    assert cora.get(adopt).status_code == 403
    assert cora.post(adopt, {"reason": "x"}).status_code == 403
    rollback = reverse("admin:evaluation_calibration_rollback", args=[world.pk])
    assert cora.post(rollback, {"reason": "x"}).status_code == 403
    assert cora.post(reverse("admin:evaluation_calibrate", args=[world.pk])).status_code == 403
    assert not FusionCalibration.objects.exists()
    calibration.refresh_from_db()
    assert calibration.state == Calibration.State.CANDIDATE
