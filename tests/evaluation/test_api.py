"""Evaluation's API through the test client and real API keys: question sets made, filled,
checked, imported and exported; runs started, run (in this process, as a worker would) and
read; who may do what; and what a key may not read shown only as counts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from evaluation.models import EvaluationRun, QuestionSet
from kb.models import KnowledgeBase, Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.evaluation.conftest import QUESTIONS, run_evaluation
from tests.retrieval.factories import api

pytestmark = pytest.mark.django_db

JSON = "application/json"


def key(kb: KnowledgeBase, *groups: str, manage: bool = True, kbs: Any = None) -> Client:
    _, plaintext = api_key_create(
        tenant=kb.tenant,
        name=f"key {groups} {manage}",
        access_groups=groups,
        can_manage_sources=manage,
        knowledge_bases=kbs or [],
    )
    return api(plaintext)


def post(client: Client, path: str, body: Any) -> Any:
    return client.post(path, json.dumps(body), content_type=JSON)


@pytest.fixture
def admin(corpus: KnowledgeBase) -> Client:
    return key(corpus)


def make_set(client: Client, name: str = "Handbook", kb: str = "handbook") -> int:
    response = post(client, f"/api/v1/kbs/{kb}/question-sets", {"name": name})
    assert response.status_code == 201, response.content
    return int(response.json()["id"])


def test_a_set_is_made_filled_and_exported(admin: Client) -> None:
    set_id = make_set(admin)
    assert post(admin, "/api/v1/kbs/handbook/question-sets", {"name": "Handbook"}).json() == {
        "error": "invalid",
        "detail": {"name": ["Handbook already has a question set named 'Handbook'."]},
    }

    added = post(admin, f"/api/v1/question-sets/{set_id}/questions", {"questions": QUESTIONS})

    assert added.status_code == 200, added.content
    assert added.json() == {
        "added": 6,
        "updated": 0,
        "unchanged": 0,
        "removed": 0,
        "skipped": 0,
        "version": 2,
        "problems": [],
    }
    exported = admin.get(f"/api/v1/question-sets/{set_id}/questions").json()
    assert exported["version"] == 2
    first = exported["results"][0]
    assert first == {
        "id": "q-refund",
        "question": "within how many days are refunds possible",
        "expected_documents": ["refunds"],
        "expected_passage": "Refunds are possible within thirty days",
        "language": "en",
        "tag": "money",
        "hidden_documents": 0,
    }
    assert [q["language"] for q in exported["results"]].count("zh") == 1  # detected
    # the same questions again change nothing; the set keeps its version
    again = post(admin, f"/api/v1/question-sets/{set_id}/questions", {"questions": QUESTIONS})
    assert (again.json()["unchanged"], again.json()["version"]) == (6, 2)
    detail = admin.get(f"/api/v1/question-sets/{set_id}").json()
    assert (detail["questions"], detail["version"], detail["kb"]) == (6, 2, "handbook")


def test_questions_with_problems_are_refused_with_each_one_named(admin: Client) -> None:
    set_id = make_set(admin)
    questions = [
        {"id": "a", "question": "refund days", "expected_documents": ["refunds"]},
        {"id": "a", "question": "train class", "expected_documents": ["travel"]},
        {"id": "b", "question": "  ", "expected_documents": ["travel"]},
        {"id": "c", "question": "salaries", "expected_documents": ["payroll", "nowhere"]},
        {"id": "d", "question": "leave", "expected_documents": ["leave"], "language": "fr"},
    ]

    refused = post(admin, f"/api/v1/question-sets/{set_id}/questions", {"questions": questions})

    assert refused.status_code == 400
    assert refused.json()["detail"] == {
        "questions": [
            "questions[1]: duplicate id 'a' (also at questions[0])",
            "questions[2]: empty question",
            "questions[3]: unknown document keys 'payroll', 'nowhere' (no document of this "
            "knowledge base you may read has them)",
            "questions[4]: language 'fr' is not en or zh (leave it empty to detect it)",
        ]
    }
    assert QuestionSet.objects.get(pk=set_id).questions.count() == 0  # nothing written
    partial = post(
        admin,
        f"/api/v1/question-sets/{set_id}/questions",
        {"questions": questions, "valid_only": True},
    )
    assert (partial.json()["added"], partial.json()["skipped"]) == (1, 4)
    assert len(partial.json()["problems"]) == 4


def test_a_file_is_imported_with_a_report_by_line(admin: Client) -> None:
    set_id = make_set(admin)
    csv = (
        b"id,question,expected_documents,language,tag\n"
        b"r1,refund days,refunds,,money\n"
        b"r2,train ticket class,travel|baoxiao,en,travel\n"
        b"r3,pay day,nowhere,,\n"
    )

    def send(**form: Any) -> Any:
        return admin.post(
            f"/api/v1/question-sets/{set_id}/import",
            {"file": SimpleUploadedFile("questions.csv", csv), **form},
        )

    refused = send()
    assert refused.status_code == 400
    assert refused.json()["detail"] == {
        "file": [
            "line 4: unknown document key 'nowhere' (no document of this knowledge base you "
            "may read has it)"
        ]
    }
    imported = send(valid_only="true")
    assert imported.status_code == 200 and imported.json()["added"] == 2
    exported = admin.get(f"/api/v1/question-sets/{set_id}/questions").json()["results"]
    assert exported[1]["expected_documents"] == ["travel", "baoxiao"]
    # replace: the set becomes the file
    jsonl = json.dumps({"id": "only", "question": "laptop", "answers": ["laptops"]}).encode()
    replaced = admin.post(
        f"/api/v1/question-sets/{set_id}/import",
        {"file": SimpleUploadedFile("q.jsonl", jsonl), "replace": "true"},
    )
    assert (replaced.json()["added"], replaced.json()["removed"]) == (1, 2)
    unreadable = admin.post(
        f"/api/v1/question-sets/{set_id}/import",
        {"file": SimpleUploadedFile("q.jsonl", b"\xff\xfe not utf-8")},
    )
    assert unreadable.status_code == 400
    assert "not UTF-8" in unreadable.json()["detail"]["file"][0]


def test_a_run_is_started_run_and_read(admin: Client, corpus: KnowledgeBase) -> None:
    set_id = make_set(admin)
    post(admin, f"/api/v1/question-sets/{set_id}/questions", {"questions": QUESTIONS})

    started = post(
        admin,
        "/api/v1/kbs/handbook/evaluations",
        {"question_set": set_id, "modes": ["keyword", "hybrid"]},
    )
    again = post(
        admin,
        "/api/v1/kbs/handbook/evaluations",
        {"question_set": set_id, "modes": ["keyword", "hybrid"]},
    )

    assert started.status_code == 202, started.content
    assert again.status_code == 200 and again.json()["id"] == started.json()["id"]
    body = started.json()
    assert (body["state"], body["done"], body["total"], body["target"]) == (
        "queued",
        0,
        12,
        "active",
    )
    run = EvaluationRun.objects.get(pk=body["id"])
    run_evaluation(run)
    detail = admin.get(f"/api/v1/evaluations/{run.pk}").json()
    assert (detail["state"], detail["done"], detail["index_version"]) == ("succeeded", 12, 1)
    assert detail["summary"]["keyword"]["all"]["n"] == 6
    assert detail["search_settings"]["top_k"] == 10
    page = admin.get(f"/api/v1/evaluations/{run.pk}/results?limit=5").json()
    assert len(page["results"]) == 5 and page["next_cursor"]
    rest = admin.get(f"/api/v1/evaluations/{run.pk}/results?cursor={page['next_cursor']}")
    assert len(rest.json()["results"]) == 7 and rest.json()["next_cursor"] is None
    listed = admin.get("/api/v1/kbs/handbook/evaluations").json()
    assert [r["id"] for r in listed["results"]] == [run.pk]


def test_what_a_key_may_not_read_is_only_counted(corpus: KnowledgeBase) -> None:
    hr = key(corpus, "hr")
    set_id = make_set(hr)
    post(
        hr,
        f"/api/v1/question-sets/{set_id}/questions",
        {
            "questions": [
                {
                    "id": "pay",
                    "question": "when are salaries paid",
                    "expected_documents": ["payroll", "leave"],
                    "expected_passage": "Salaries are paid on the last working day",
                }
            ]
        },
    )
    body = post(
        hr, "/api/v1/kbs/handbook/evaluations", {"question_set": set_id, "modes": ["keyword"]}
    )
    run_evaluation(EvaluationRun.objects.get(pk=body.json()["id"]))
    outsider = key(corpus)

    (question,) = outsider.get(f"/api/v1/question-sets/{set_id}/questions").json()["results"]
    (result,) = outsider.get(f"/api/v1/evaluations/{body.json()['id']}/results").json()["results"]
    (as_hr,) = hr.get(f"/api/v1/evaluations/{body.json()['id']}/results").json()["results"]

    assert question["expected_documents"] == ["leave"] and question["hidden_documents"] == 1
    assert question["expected_passage"] == ""  # it may quote the hidden document
    assert as_hr["rank"] == 1 and as_hr["returned_documents"][0] == "payroll"
    assert result["expected_documents"] == ["leave"] and result["hidden_expected"] == 1
    assert "payroll" not in result["returned_documents"] and result["hidden_returned"] == 1
    # an outsider's replace keeps what it cannot see
    post(
        outsider,
        f"/api/v1/question-sets/{set_id}/questions",
        {"questions": [{"id": "pay", "question": "salary day", "expected_documents": ["leave"]}]},
    )
    kept = hr.get(f"/api/v1/question-sets/{set_id}/questions").json()["results"][0]
    assert kept["expected_documents"] == ["leave", "payroll"]
    assert kept["expected_passage"] == "Salaries are paid on the last working day"


def test_who_may_do_what(corpus: KnowledgeBase) -> None:
    set_id = make_set(key(corpus))
    reader = key(corpus, manage=False)
    for response in [
        reader.get("/api/v1/kbs/handbook/question-sets"),
        reader.get(f"/api/v1/question-sets/{set_id}"),
        post(reader, "/api/v1/kbs/handbook/question-sets", {"name": "Mine"}),
    ]:
        assert response.status_code == 403
        assert "can_manage_sources" in response.json()["detail"]
    ensure_roles(Group, Permission)
    users = {}
    for name, role in (("cora", CONTENT_MANAGERS), ("iris", INDEX_ADMINS)):
        user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
        user.groups.add(Group.objects.get(name=role))
        TenantMembership.objects.create(user=user, tenant=corpus.tenant)
        users[name] = Client()
        users[name].force_login(user)
    assert users["cora"].get(f"/api/v1/question-sets/{set_id}").status_code == 200
    refused = post(users["cora"], "/api/v1/kbs/handbook/question-sets", {"name": "Cora's"})
    assert refused.status_code == 403
    assert "evaluation.change_questionset" in refused.json()["detail"]
    assert (
        post(users["iris"], "/api/v1/kbs/handbook/question-sets", {"name": "Iris's"}).status_code
        == 201
    )
    refused_run = post(users["cora"], "/api/v1/kbs/handbook/evaluations", {"question_set": set_id})
    assert refused_run.status_code == 403


def test_another_tenants_and_another_knowledge_bases_sets_are_not_found(
    corpus: KnowledgeBase,
) -> None:
    rival = Tenant.objects.create(name="Rival", slug="rival")
    rival_kb = knowledge_base_create(tenant=rival, name="Handbook", slug="handbook")
    theirs = make_set(key(rival_kb))
    manual = knowledge_base_create(tenant=corpus.tenant, name="Manual", slug="manual")
    other = key(manual, kbs=[manual])
    elsewhere = make_set(key(manual), kb="manual")
    scoped = key(corpus, kbs=[corpus])

    for set_id in (theirs, elsewhere, 10**12):
        response = scoped.get(f"/api/v1/question-sets/{set_id}")
        assert response.status_code == 404
        assert response.json() == {
            "error": "not_found",
            "detail": f"Question set {set_id} not found.",
        }
    assert other.get(f"/api/v1/question-sets/{elsewhere}").status_code == 200
    started = post(scoped, "/api/v1/kbs/handbook/evaluations", {"question_set": elsewhere})
    assert started.status_code == 400  # a set of another knowledge base is not this one's
    assert started.json()["detail"] == {
        "question_set": [f"handbook has no question set {elsewhere}."]
    }
