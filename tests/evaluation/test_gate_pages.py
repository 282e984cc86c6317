"""The gates in the admin, through the test client as an index admin and a content manager:
*Approve swap…* with both versions' runs side by side, the gate's verdict, the questions that
moved (each linking to Test search with the candidate beside the active version), the runs to
start and their progress, the refusal answered on the page and the override with a reason;
*Roll back…* with the last runs of both; a revision's *Approve…* with the questions that expect
its document; the gate's own page; Test search's "This hit answers the question" and the home's
Quality link. What a content manager may not do, and documents a viewer may not read, never
named."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from evaluation.models import EvaluationRun, QualityGate, Question, QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.gates import quality_gate_save
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from kb.audit_kinds import QUALITY_GATE_CHANGED, QUALITY_GATE_OVERRIDDEN
from kb.models import Build, IndexVersion, KnowledgeBase, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.evaluation.conftest import EVERYTHING, run_evaluation
from tests.evaluation.gate_world import QUESTIONS, publish_world, tiny_candidate
from tests.retrieval.factories import build, publish, upload
from work.models import AuditEvent

pytestmark = pytest.mark.django_db

Evaluate = Callable[[EvaluationRun], EvaluationRun]
# A question whose answer is behind the group `hr`: its document is never named to iris.
HR_QUESTION = {"id": "pay", "question": "when are salaries paid", "expected_documents": ["payroll"]}


def text(response: Any) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def people(kb: KnowledgeBase) -> dict[str, Client]:
    """iris and ivan (index admins; ivan in hr), cora (content manager)."""
    ensure_roles(Group, Permission)
    clients = {}
    for name, role, groups in (
        ("iris", INDEX_ADMINS, []),
        ("ivan", INDEX_ADMINS, ["hr"]),
        ("cora", CONTENT_MANAGERS, []),
    ):
        user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
        user.groups.add(Group.objects.get(name=role))
        TenantMembership.objects.create(user=user, tenant=kb.tenant, access_groups=groups)
        clients[name] = Client()
        clients[name].force_login(user)
    return clients


@pytest.fixture
def handbook(kb: KnowledgeBase) -> QuestionSet:
    publish_world(kb)
    publish(kb, "payroll", "Salaries are paid on the last working day.", groups=("hr",))
    question_set = question_set_create(kb=kb, name="Facilities")
    checked = questions_check(
        question_set=question_set, raw=read_rows([*QUESTIONS, HR_QUESTION]), reader=EVERYTHING
    )
    assert checked.ok, [str(p) for p in checked.problems]
    questions_import(question_set=question_set, checked=checked, reader=EVERYTHING)
    question_set.refresh_from_db()
    return question_set


@pytest.fixture
def candidate(kb: KnowledgeBase, handbook: QuestionSet) -> IndexVersion:
    return tiny_candidate(kb)


def run_open_runs() -> list[EvaluationRun]:
    """Run every open evaluation here, as a worker would."""
    runs = list(EvaluationRun.objects.filter(state="queued").order_by("pk"))
    for run in runs:
        run_evaluation(run)
        run.refresh_from_db()
        assert run.state == "succeeded", run.error
    return runs


def swap_url(kb: KnowledgeBase, version: IndexVersion) -> str:
    return f"/admin/kb/knowledgebase/{kb.pk}/index-versions/{version.pk}/activate/"


def test_the_swap_page_starts_the_missing_runs_then_shows_the_gate_refusing(
    kb: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion, people: dict[str, Client]
) -> None:
    quality_gate_save(kb=kb, question_set=handbook, max_drop=0.05)
    iris = people["iris"]
    url = swap_url(kb, candidate)

    page = text(iris.get(url))
    assert "Quality: active and candidate on your questions" in page
    assert "none yet" in page
    assert "The quality gate needs a finished run of Facilities" in page
    assert 'id="start-quality-runs"' in page and "Run the evaluation of both versions" in page
    assert people["cora"].get(url).status_code == 403  # swapping is the index admins'
    refused = people["cora"].post(
        "/admin/evaluation/qualitygate/runs/",
        {"kb": kb.pk, "question_set": handbook.pk, "versions": str(candidate.pk), "next": url},
    )
    assert refused.status_code == 403
    assert not EvaluationRun.objects.exists()

    started = iris.post(
        "/admin/evaluation/qualitygate/runs/",
        {
            "kb": kb.pk,
            "question_set": handbook.pk,
            "versions": f"{kb.active_index_version_id},{candidate.pk}",
            "next": url,
        },
    )
    assert started.status_code == 302 and started["Location"] == url
    runs = list(EvaluationRun.objects.order_by("pk"))
    assert [(r.all_groups, r.target, r.modes) for r in runs] == [
        (True, "active", ["hybrid", "keyword", "vector"]),
        (True, "candidate", ["hybrid", "keyword", "vector"]),
    ]
    # the page waits for them, following their progress
    waiting = text(iris.get(url))
    assert f'<progress max="100" value="0" data-run="{runs[1].pk}">' in waiting
    assert "/admin/evaluation/qualitygate/progress/?runs" in waiting
    assert 'id="start-quality-runs"' not in waiting
    progress = iris.get(
        f"/admin/evaluation/qualitygate/progress/?runs={runs[0].pk},{runs[1].pk}"
    ).json()
    assert progress["open"] is True and [r["state"] for r in progress["runs"]] == ["queued"] * 2
    again = iris.post(
        "/admin/evaluation/qualitygate/runs/",
        {"kb": kb.pk, "question_set": handbook.pk, "versions": str(candidate.pk), "next": url},
    )
    assert again.status_code == 302 and EvaluationRun.objects.count() == 2  # under way already

    run_open_runs()

    assert iris.get(f"/admin/evaluation/qualitygate/progress/?runs={runs[0].pk}").json() == {
        "runs": [
            {
                "id": runs[0].pk,
                "state": "succeeded",
                "label": "Succeeded",
                "done": 15,
                "total": 15,
                "percent": 100,
                "error": "",
            }
        ],
        "open": False,
    }
    page = text(iris.get(url))
    assert "The quality gate refuses v2: MRR@10 of hybrid on Facilities drops" in page
    assert 'name="override_gate"' in page  # iris may override
    rows = re.findall(r'<tr data-question="([\w-]+)" data-change="(\w+)">', page)
    assert ("parking", "down") in rows and {change for _, change in rows} <= {"down", "lost"}
    assert "query=staff+space+underground+garage&amp;" not in page  # whole query, linked:
    assert (
        "/admin/kb/knowledgebase/"
        f"{kb.pk}/search/?query=staff+space+underground+garage+permits+cost+renewed+January"
        f"&amp;mode=hybrid&amp;compare={candidate.pk}" in page
    )
    # the hr question's document is never named to iris, nor anywhere on this page
    assert "payroll" not in page


def test_a_refused_swap_comes_back_to_its_page_and_an_override_with_a_reason_goes_through(
    kb: KnowledgeBase, handbook: QuestionSet, candidate: IndexVersion, people: dict[str, Client]
) -> None:
    quality_gate_save(kb=kb, question_set=handbook, max_drop=0.05)
    iris = people["iris"]
    url = swap_url(kb, candidate)
    iris.post(
        "/admin/evaluation/qualitygate/runs/",
        {
            "kb": kb.pk,
            "question_set": handbook.pk,
            "versions": f"{kb.active_index_version_id},{candidate.pk}",
            "next": url,
        },
    )
    run_open_runs()
    active = kb.active_index_version_id

    refused = iris.post(url, {"reason": "smaller chunks", "expected": active})

    assert refused.status_code == 302 and refused["Location"] == url
    assert "The quality gate refuses v2" in text(iris.get(url))
    kb.refresh_from_db()
    assert kb.active_index_version_id == active

    swapped = iris.post(
        url, {"reason": "smaller chunks for the widget", "expected": active, "override_gate": "1"}
    )

    assert swapped.status_code == 302 and swapped["Location"] != url
    kb.refresh_from_db()
    assert kb.active_index_version_id == candidate.pk
    override = AuditEvent.objects.get(kind=QUALITY_GATE_OVERRIDDEN)
    assert override.details["reason"] == "smaller chunks for the widget"
    timeline = text(iris.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/"))
    assert "overrode the quality gate" in timeline and "smaller chunks for the widget" in timeline

    # roll back: the page shows the last runs of both versions, and refuses nothing
    back = f"/admin/kb/knowledgebase/{kb.pk}/index-versions/rollback/"
    page = text(iris.get(back))
    assert "Quality: the last runs of both versions" in page
    assert page.count("evaluation ") >= 2 and "roll back to v1" in page
    assert 'name="override_gate"' not in page
    iris.post(back, {"reason": "users complained", "expected": candidate.pk})
    kb.refresh_from_db()
    assert kb.active_index_version_id == active


def test_a_revisions_approval_shows_the_questions_that_expect_its_document(
    kb: KnowledgeBase, handbook: QuestionSet, people: dict[str, Client]
) -> None:
    kb.require_approval = True
    kb.save()
    pending = build(upload(kb, "parking", "Parking is handled by the landlord now."))
    assert pending.state == Build.State.READY
    iris = people["iris"]
    url = f"/admin/kb/document/{pending.document_id}/approve/{pending.pk}/"

    page = text(iris.get(url))
    assert "Quality: the questions this document answers" in page
    assert "1 question of Facilities expects this document." in page
    assert "Run both evaluations" in page

    iris.post(
        "/admin/evaluation/qualitygate/runs/",
        {
            "kb": kb.pk,
            "question_set": handbook.pk,
            "versions": str(kb.active_index_version_id),
            "build": pending.pk,
            "live": "1",
            "next": url,
        },
    )
    runs = run_open_runs()
    assert sorted(r.target for r in runs) == ["active", "revision"]
    assert {r.served_build_id for r in runs} == {None, pending.pk}
    page = text(iris.get(url + "?quality_mode=keyword"))

    assert re.findall(r'<tr data-question="([\w-]+)" data-change="(\w+)">', page) == [
        ("parking", "lost")
    ]
    assert "Besides these, 0 other questions' ranks changed in keyword." in page
    assert "payroll" not in page
    assert Build.objects.get(pk=pending.pk).state == Build.State.READY  # nothing approved
    # a document without questions: no such box
    other = build(upload(kb, "memo-lockers", "Lockers are gone."))
    assert "Quality: the questions" not in text(
        iris.get(f"/admin/kb/document/{other.document_id}/approve/{other.pk}/")
    )


def test_the_gates_page_is_the_index_admins_to_change_and_the_content_managers_to_read(
    kb: KnowledgeBase, handbook: QuestionSet, people: dict[str, Client]
) -> None:
    iris, cora = people["iris"], people["cora"]
    form = {
        "kb": kb.pk,
        "question_set": handbook.pk,
        "metric": "mrr@10",
        "mode": "hybrid",
        "max_drop": "0.05",
        "refuse_swaps": "on",
        "nightly_hour": "3",
    }
    assert cora.get(f"/admin/evaluation/qualitygate/add/?kb={kb.pk}").status_code == 403
    assert cora.post("/admin/evaluation/qualitygate/add/", form).status_code == 403
    assert not QualityGate.objects.exists()

    added = iris.post("/admin/evaluation/qualitygate/add/", form)

    assert added.status_code == 302, text(added)
    gate = QualityGate.objects.get(kb=kb)
    assert (gate.metric, gate.max_drop, gate.nightly_hour) == ("mrr@10", 0.05, 3)
    assert AuditEvent.objects.filter(kind=QUALITY_GATE_CHANGED, actor__username="iris").exists()
    change = f"/admin/evaluation/qualitygate/{gate.pk}/change/"
    seen = cora.get(change)
    assert seen.status_code == 200 and 'name="_save"' not in seen.content.decode()
    assert cora.post(change, {**form, "max_drop": "0.9"}).status_code == 403
    gate.refresh_from_db()
    assert gate.max_drop == 0.05
    # a set of another knowledge base is refused with words, not a 500
    other_kb_set = question_set_create(kb=_other_kb(kb), name="Elsewhere")
    wrong = iris.post(change, {**form, "question_set": other_kb_set.pk})
    assert wrong.status_code == 200
    assert "Choose a question set of this knowledge base." in text(wrong)
    assert iris.get(f"/admin/evaluation/qualitygate/add/?kb={kb.pk}").status_code == 200
    twice = iris.post("/admin/evaluation/qualitygate/add/", form)
    assert "This knowledge base has a quality gate already." in text(twice)


def _other_kb(kb: KnowledgeBase) -> KnowledgeBase:
    from kb.services.index_versions import knowledge_base_create

    return knowledge_base_create(tenant=kb.tenant, name="Other", slug="other")


def test_test_search_offers_each_hit_as_an_answer_and_the_home_links_quality(
    kb: KnowledgeBase, handbook: QuestionSet, people: dict[str, Client]
) -> None:
    iris, cora = people["iris"], people["cora"]
    search = f"/admin/kb/knowledgebase/{kb.pk}/search/?query=garage+permits&mode=keyword"

    page = iris.get(search).content.decode()

    forms = re.findall(
        r'<form method="post" action="/admin/evaluation/questionset/add-from-search/"', page
    )
    hits = re.findall(r'<tr class="hit"', page)
    assert hits and len(forms) == len(hits)
    assert 'name="document_key" value="memo-parking"' in page
    assert f'<option value="{handbook.pk}">Facilities</option>' in page
    assert "This hit answers the question" not in cora.get(search).content.decode()
    added = iris.post(
        "/admin/evaluation/questionset/add-from-search/",
        {
            "kb": kb.pk,
            "query": "garage permits",
            "document_key": "memo-parking",
            "question_set": handbook.pk,
            "next": search,
        },
    )
    assert added.status_code == 302 and added["Location"] == search
    assert Question.objects.get(question_set=handbook, text="garage permits").expected_keys == [
        "memo-parking"
    ]

    quality = f'id="quality-link" href="/admin/evaluation/evaluationrun/quality/{kb.pk}/"'
    assert quality in cora.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode()
    nobody = User.objects.create_user("nobody", password="a-long-test-password", is_staff=True)
    nobody.user_permissions.add(Permission.objects.get(codename="view_knowledgebase"))
    TenantMembership.objects.create(user=nobody, tenant=kb.tenant)
    client = Client()
    client.force_login(nobody)
    home = client.get(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    assert home.status_code == 200 and 'id="quality-link"' not in home.content.decode()
