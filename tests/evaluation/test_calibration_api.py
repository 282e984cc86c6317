"""Fusion calibrations through the API (issue 39, item 6), with real API keys and admin
sessions: asked for (202, then the same one again: 200), computed by its task in this process
as a worker runs it, read (the held-out figures, folds, each question's change and the gate's
verdict, as the selectors give them), adopted through the quality gate (refusals with their
codes; an override only by a person with the permission and a reason), rolled back; who may do
what; documents a key may not read only counted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from evaluation.calibration import MIN_QUESTIONS, calibration_changes, change_counts
from evaluation.models import Calibration, Question
from evaluation.services.gates import quality_gate_save
from kb.audit_kinds import (
    FUSION_CALIBRATION_ADOPTED,
    FUSION_CALIBRATION_ROLLED_BACK,
    QUALITY_GATE_OVERRIDDEN,
)
from kb.models import KnowledgeBase, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from retrieval.models import FusionCalibration
from retrieval.principals import Principal, api_key_create
from retrieval.search import fusion
from tests.evaluation.calibration_world import bad_default, publish_topics, topic_set
from tests.helpers import execute_here
from tests.retrieval.factories import api, publish
from work.models import AuditEvent, IngestionTask

pytestmark = pytest.mark.django_db

JSON = "application/json"
N = MIN_QUESTIONS + 4


@pytest.fixture
def topics(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> KnowledgeBase:
    """The calibration world, with a shipped default its questions clearly beat."""
    publish_topics(kb, N)
    model = bad_default()
    monkeypatch.setattr(fusion, "model", lambda *args, **kwargs: model)
    kb.refresh_from_db()
    return kb


def key(kb: KnowledgeBase, *, manage: bool = True, groups: tuple[str, ...] = ()) -> Client:
    _, plaintext = api_key_create(
        tenant=kb.tenant,
        name=f"key {manage} {groups}",
        can_manage_sources=manage,
        access_groups=groups,
    )
    return api(plaintext)


def person(kb: KnowledgeBase, name: str, role: str) -> tuple[User, Client]:
    ensure_roles(Group, Permission)
    user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    TenantMembership.objects.create(user=user, tenant=kb.tenant, access_groups=[])
    client = Client()
    client.force_login(user)
    return user, client


def post(client: Client, path: str, body: Any = None) -> Any:
    return client.post(path, json.dumps(body if body is not None else {}), content_type=JSON)


def compute(calibration_id: int) -> str:
    """Run the calibration's task here, as a worker would; return what it did."""
    calibration = Calibration.objects.get(pk=calibration_id)
    assert calibration.task_id is not None
    # Inside a test's transaction the database clock stands still at the test's start.
    IngestionTask.objects.filter(pk=calibration.task_id).update(available_at=None)
    return execute_here(calibration.task_id)


def computed(client: Client, kb: KnowledgeBase, n: int = N, name: str = "Topics") -> int:
    question_set = topic_set(kb, n, name=name)
    asked = post(client, f"/api/v1/kbs/{kb.slug}/calibrations", {"question_set": question_set.pk})
    assert asked.status_code == 202, asked.content
    assert compute(asked.json()["id"]) == "candidate"
    return int(asked.json()["id"])


def error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == code, body
    return str(body["detail"])


def test_a_calibration_is_asked_for_computed_and_read_as_its_page_reads_it(
    topics: KnowledgeBase,
) -> None:
    admin = key(topics)
    base = f"/api/v1/kbs/{topics.slug}/calibrations"
    assert admin.get(base).json() == {"results": [], "next_cursor": None}
    small = topic_set(topics, MIN_QUESTIONS - 1, name="Small")
    words = error(post(admin, base, {"question_set": small.pk}), 409, "too_few_questions")
    assert f"has {MIN_QUESTIONS - 1} questions" in words and f"at least {MIN_QUESTIONS}" in words
    assert "question_set" in error(post(admin, base, {"question_set": 10**12}), 400, "invalid")
    assert "question_set" in error(post(admin, base, {"question_set": "x"}), 400, "invalid")
    error(post(admin, base, ["a list"]), 400, "invalid")
    question_set = topic_set(topics, N)

    # when: asked for, and asked again
    asked = post(admin, base, {"question_set": question_set.pk})
    again = post(admin, base, {"question_set": question_set.pk})

    # then: one calibration, queued, as leased work
    assert asked.status_code == 202, asked.content
    assert again.status_code == 200 and again.json()["id"] == asked.json()["id"]
    body = asked.json()
    assert (body["kb"], body["question_set"], body["state"]) == (
        "handbook",
        question_set.pk,
        "queued",
    )
    assert body["question_set_version"] == question_set.version
    assert body["index_version"] == topics.active_index_version.number  # type: ignore[union-attr]
    calibration = Calibration.objects.get(pk=body["id"])
    assert calibration.task is not None
    assert calibration.task.kind == IngestionTask.Kind.CALIBRATION
    queued = admin.get(f"/api/v1/calibrations/{calibration.pk}").json()
    assert (queued["state"], queued["verdict"], queued["changes"]) == ("queued", None, [])

    # when: its task runs, as a worker runs it
    assert compute(calibration.pk) == "candidate"

    # then: its figures and changes are the selectors', the verdict the gate's
    calibration.refresh_from_db()
    detail = admin.get(f"/api/v1/calibrations/{calibration.pk}")
    assert detail.status_code == 200, detail.content
    read = detail.json()
    assert read["state"] == "candidate" and read["error"] == ""
    assert read["default_mrr"] == calibration.default_mrr
    assert read["candidate_mrr"] == calibration.candidate_mrr
    assert read["candidate_mrr"] > read["default_mrr"] + 0.2
    assert read["questions"] == N and read["l2"] == calibration.l2
    assert read["folds"] == calibration.folds and len(read["folds"]) == 5
    everything = Principal(tenant_id=topics.tenant_id, kb_ids=None, access_groups=frozenset())
    changes = calibration_changes(calibration, reader=everything)
    moved = [c for c in changes if c.change.change not in ("same", "missed")]
    assert [c["question"] for c in read["changes"]] == [c.change.external_id for c in moved]
    first = read["changes"][0]
    assert (first["default"], first["candidate"]) == (moved[0].change.before, moved[0].change.after)
    assert first["candidate_documents"] == moved[0].candidate_top
    assert read["unchanged"] == len(changes) - len(moved)
    assert read["counts"] == change_counts(changes)
    assert read["verdict"]["state"] == "passes"
    assert "The quality gate lets it through." in read["verdict"]["words"]
    assert (read["verdict"]["default"], read["verdict"]["candidate"]) == (
        calibration.default_mrr,
        calibration.candidate_mrr,
    )
    # the list: newest first, a page at a time
    computed(admin, topics, MIN_QUESTIONS, name="More topics")  # a second one, of another set
    page = admin.get(f"{base}?limit=1").json()
    assert len(page["results"]) == 1 and page["next_cursor"]
    rest = admin.get(f"{base}?limit=1&cursor={page['next_cursor']}").json()
    assert [r["id"] for r in rest["results"]] == [calibration.pk]
    assert rest["results"][0]["state"] == "candidate" and rest["next_cursor"] is None
    assert "changes" not in rest["results"][0]
    # as many queries for a page of two as for a page of one
    with CaptureQueriesContext(connection) as one:
        admin.get(f"{base}?limit=1")
    with CaptureQueriesContext(connection) as two:
        assert len(admin.get(f"{base}?limit=2").json()["results"]) == 2
    assert len(two.captured_queries) == len(one.captured_queries)
    error(admin.get(f"{base}?cursor=nope"), 400, "invalid")


def test_adopted_through_the_gate_then_rolled_back(topics: KnowledgeBase) -> None:
    admin = key(topics)
    calibration_id = computed(admin, topics)
    adopt = f"/api/v1/calibrations/{calibration_id}/adopt"
    roll_back = f"/api/v1/kbs/{topics.slug}/calibrations/roll-back"
    error(post(admin, roll_back), 409, "conflict")  # search uses the default already

    adopted = post(admin, adopt, {"reason": "our own questions"})

    assert adopted.status_code == 200, adopted.content
    assert adopted.json()["state"] == "adopted" and adopted.json()["verdict"] is None
    assert FusionCalibration.objects.get(kb=topics).calibration_id == calibration_id
    event = AuditEvent.objects.get(kind=FUSION_CALIBRATION_ADOPTED)
    assert event.details["reason"] == "our own questions"
    assert event.details["quality_gate"]["state"] == "passes"
    assert "adopted already" in error(post(admin, adopt), 409, "conflict")

    rolled = post(admin, roll_back, {"reason": "checking the default"})

    assert rolled.status_code == 200, rolled.content
    assert rolled.json() == {"kb": "handbook", "rolled_back": [calibration_id]}
    assert not FusionCalibration.objects.filter(kb=topics).exists()
    back = AuditEvent.objects.get(kind=FUSION_CALIBRATION_ROLLED_BACK)
    assert back.details["reason"] == "checking the default"
    assert "already uses the default" in error(post(admin, roll_back), 409, "conflict")
    # rolled back, it may be adopted again
    assert admin.get(f"/api/v1/calibrations/{calibration_id}").json()["state"] == "rolled_back"
    assert post(admin, adopt).status_code == 200
    error(post(admin, adopt, {"override": "maybe"}), 400, "invalid")
    error(post(admin, adopt, {"reason": "x" * 2001}), 400, "invalid")


def test_a_refused_calibration_is_adopted_only_by_a_person_who_may_override_with_a_reason(
    topics: KnowledgeBase,
) -> None:
    admin = key(topics)
    calibration_id = computed(admin, topics)
    calibration = Calibration.objects.get(pk=calibration_id)
    Calibration.objects.filter(pk=calibration_id).update(default_mrr=0.8, candidate_mrr=0.7)
    quality_gate_save(kb=topics, question_set=calibration.question_set, max_drop=0.05)
    adopt = f"/api/v1/calibrations/{calibration_id}/adopt"
    iris_user, iris = person(topics, "iris", INDEX_ADMINS)
    _, cora = person(topics, "cora", CONTENT_MANAGERS)

    verdict = admin.get(f"/api/v1/calibrations/{calibration_id}").json()["verdict"]
    assert (verdict["state"], verdict["drop"], verdict["max_drop"]) == ("refuses", 0.1, 0.05)
    words = error(post(admin, adopt), 409, "quality_gate_refused")
    assert "drops from 0.800 (the default) to 0.700" in words
    words = error(
        post(admin, adopt, {"override": True, "reason": "a key"}), 403, "permission_denied"
    )
    assert "Only a person may override the quality gate" in words
    assert cora.get(f"/api/v1/calibrations/{calibration_id}").status_code == 200
    assert "change_qualitygate" in error(
        post(cora, adopt, {"override": True, "reason": "x"}), 403, "permission_denied"
    )
    error(post(iris, adopt, {"override": True, "reason": "  "}), 400, "reason_required")
    assert not FusionCalibration.objects.exists()
    assert not AuditEvent.objects.filter(kind=QUALITY_GATE_OVERRIDDEN).exists()

    overridden = post(iris, adopt, {"override": True, "reason": "the set is skewed"})

    assert overridden.status_code == 200, overridden.content
    event = AuditEvent.objects.get(kind=QUALITY_GATE_OVERRIDDEN)
    assert event.actor_id == iris_user.pk and event.details["reason"] == "the set is skewed"
    adopted = AuditEvent.objects.get(kind=FUSION_CALIBRATION_ADOPTED)
    assert adopted.details["quality_gate"]["overridden"] is True
    # roll back needs the same permission as adopting
    roll_back = f"/api/v1/kbs/{topics.slug}/calibrations/roll-back"
    error(post(cora, roll_back), 403, "permission_denied")
    assert post(iris, roll_back).status_code == 200


def test_a_stale_calibration_is_refused_in_words_and_a_key_sees_only_what_it_may_read(
    topics: KnowledgeBase,
) -> None:
    admin = key(topics)
    calibration_id = computed(admin, topics)
    calibration = Calibration.objects.get(pk=calibration_id)
    publish(topics, "payroll", "Salaries are paid on the last day.", groups=("hr",))
    rows = calibration.per_question
    moved = next(i for i, row in enumerate(rows) if row["default"][0] != row["candidate"][0])
    rows[moved]["default"] = ["payroll", *rows[moved]["default"]]
    Calibration.objects.filter(pk=calibration_id).update(per_question=rows)
    external_id = rows[moved]["external_id"]

    read = admin.get(f"/api/v1/calibrations/{calibration_id}").json()

    change = next(c for c in read["changes"] if c["question"] == external_id)
    assert "payroll" not in change["default_documents"] and change["hidden_documents"] == 1
    assert read["hidden_documents"] == 1
    hr = key(topics, groups=("hr",)).get(f"/api/v1/calibrations/{calibration_id}").json()
    assert (
        "payroll"
        in next(c for c in hr["changes"] if c["question"] == external_id)["default_documents"]
    )
    # a key that may not manage the knowledge base may not read them at all
    reader = key(topics, manage=False)
    for path in (f"/api/v1/calibrations/{calibration_id}", "/api/v1/kbs/handbook/calibrations"):
        error(reader.get(path), 403, "permission_denied")
    error(post(reader, f"/api/v1/calibrations/{calibration_id}/adopt"), 403, "permission_denied")
    missing = admin.get(f"/api/v1/calibrations/{10**12}")
    assert error(missing, 404, "not_found") == f"Calibration {10**12} not found."

    # when: the set changes, the calibration no longer describes the knowledge base
    question_set = calibration.question_set
    Question.objects.filter(question_set=question_set).order_by("pk").first().delete()  # type: ignore[union-attr]
    question_set.version += 1
    question_set.save(update_fields=["version"])

    # then
    verdict = admin.get(f"/api/v1/calibrations/{calibration_id}").json()["verdict"]
    assert verdict["state"] == "missing" and "question set changed" in verdict["stale"][0]
    words = error(
        post(admin, f"/api/v1/calibrations/{calibration_id}/adopt"), 409, "calibration_stale"
    )
    assert "no longer describes this knowledge base" in words
