"""Evaluation in the admin, through the test client as index admins and content managers: a
set's upload with its readable report (nothing imported, unless the valid rows are chosen),
its page and export, a question's form, *Run evaluation…*, a run's page, *Compare with…*, the
Quality page's charts, Test search's "this hit answers the question", and what each role may
do; documents a user may not read only as counts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from evaluation.models import EvaluationRun, Question, QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from evaluation.services.runs import evaluation_request
from kb.models import IndexVersion, KnowledgeBase, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.index_versions import index_version_create
from tests.evaluation.conftest import EVERYTHING, reader_of
from tests.helpers import run_pending
from tests.retrieval.factories import publish

pytestmark = pytest.mark.django_db

Evaluate = Callable[[EvaluationRun], EvaluationRun]
PASSAGE = "hrsecretxq: salaries are paid"


@pytest.fixture
def people(corpus: KnowledgeBase) -> dict[str, Client]:
    """iris (index admin, no groups), ivan (index admin in hr), cora (content manager)."""
    ensure_roles(Group, Permission)
    clients = {}
    for name, role, groups in (
        ("iris", INDEX_ADMINS, []),
        ("ivan", INDEX_ADMINS, ["hr"]),
        ("cora", CONTENT_MANAGERS, []),
    ):
        user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
        user.groups.add(Group.objects.get(name=role))
        TenantMembership.objects.create(user=user, tenant=corpus.tenant, access_groups=groups)
        clients[name] = Client()
        clients[name].force_login(user)
    return clients


def text(response: Any) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def upload(
    client: Client, question_set: QuestionSet, content: bytes, name: str, **extra: str
) -> Any:
    return client.post(
        f"/admin/evaluation/questionset/{question_set.pk}/upload/",
        {"file": SimpleUploadedFile(name, content), **extra},
    )


WITH_MISTAKES = (
    "\n".join(
        json.dumps(row)
        for row in [
            {"id": "r1", "question": "refund days", "expected_documents": ["refunds"]},
            {"id": "r1", "question": "train class", "expected_documents": ["travel"]},
            {"id": "r3", "question": "", "expected_documents": ["leave"]},
            {"id": "r4", "question": "pay day", "expected_documents": ["payroll"]},
            {
                "id": "r5",
                "question": "laptops",
                "expected_documents": ["laptops"],
                "language": "de",
            },
            {"id": "r6", "question": "leave days", "answers": ["leave"]},
        ]
    ).encode()
    + b"\nnot json\n"
)


def test_an_upload_with_mistakes_gets_a_readable_report_and_imports_nothing(
    corpus: KnowledgeBase, people: dict[str, Client]
) -> None:
    question_set = question_set_create(kb=corpus, name="Handbook")

    response = upload(people["iris"], question_set, WITH_MISTAKES, "questions.jsonl")

    assert response.status_code == 200
    page = text(response)
    assert "The file has problems: nothing was imported" in page
    assert "5 of 7 rows have problems; 2 are valid." in page
    for words in [
        "line 2</strong> (<code>r1</code>): duplicate id &#x27;r1&#x27; (also at line 1)",
        "line 3</strong> (<code>r3</code>): empty question",
        "line 4</strong> (<code>r4</code>): unknown document key &#x27;payroll&#x27;",
        "language &#x27;de&#x27; is not en or zh (leave it empty to detect it)",
        "line 7</strong>: not valid JSON",
    ]:
        assert words in page, words
    assert question_set.questions.count() == 0
    token = response.context["token"]

    # the person chooses to import the valid rows
    imported = people["iris"].post(
        f"/admin/evaluation/questionset/{question_set.pk}/upload/", {"token": token}
    )

    assert imported.status_code == 302
    assert sorted(question_set.questions.values_list("external_id", flat=True)) == ["r1", "r6"]
    # a token is this user's: another index admin's post of it imports nothing
    stolen = people["ivan"].post(
        f"/admin/evaluation/questionset/{question_set.pk}/upload/", {"token": token}, follow=True
    )
    assert "too old or not yours" in text(stolen)


def test_a_clean_file_is_imported_at_once_and_replace_makes_the_set_the_file(
    corpus: KnowledgeBase, people: dict[str, Client]
) -> None:
    question_set = question_set_create(kb=corpus, name="Handbook")
    csv = b"id,question,expected_documents\nc1,refund days,refunds\nc2,train class,travel|baoxiao\n"

    response = upload(people["iris"], question_set, csv, "q.csv")
    follow = people["iris"].get(response["Location"])

    assert response.status_code == 302
    assert "Imported: 2 added, 0 updated; the set is at version 2." in text(follow)
    replaced = upload(
        people["iris"],
        question_set,
        b"id,question,expected_documents\nc9,laptops,laptops\n",
        "q.csv",
        replace="on",
    )
    assert replaced.status_code == 302
    assert list(question_set.questions.values_list("external_id", flat=True)) == ["c9"]


def _hr_set(corpus: KnowledgeBase) -> QuestionSet:
    question_set = question_set_create(kb=corpus, name="Pay")
    rows = [
        {
            "id": "pay",
            "question": "when are salaries paid",
            "expected_documents": ["payroll", "leave"],
            "expected_passage": PASSAGE,
        },
        {"id": "leave", "question": "paid leave days a year", "expected_documents": ["leave"]},
        # keyword search finds only payroll for it
        {
            "id": "miss",
            "question": "salaries on time",
            "expected_documents": ["refunds"],
        },
    ]
    hr = reader_of(corpus, "hr")
    checked = questions_check(question_set=question_set, raw=read_rows(rows), reader=hr)
    questions_import(question_set=question_set, checked=checked, reader=hr)
    return question_set


def test_a_set_page_counts_what_the_user_may_not_read(
    corpus: KnowledgeBase, people: dict[str, Client]
) -> None:
    question_set = _hr_set(corpus)
    url = f"/admin/evaluation/questionset/{question_set.pk}/change/"

    outsider = text(people["cora"].get(url))
    insider = text(people["ivan"].get(url))

    assert "1 document you may not read" in outsider
    assert "hrsecretxq" not in outsider and "withheld" in outsider
    assert "Payroll" in insider and PASSAGE in insider
    assert "Upload questions…" not in outsider and "Run evaluation…" not in outsider
    assert "Upload questions…" in insider and "Run evaluation…" in insider
    exported = people["cora"].get(f"/admin/evaluation/questionset/{question_set.pk}/export/")
    rows = [json.loads(line) for line in exported.content.decode().splitlines()]
    assert rows[0]["expected_documents"] == ["leave"] and rows[0]["hidden_documents"] == 1
    assert rows[0]["expected_passage"] == ""
    refused = people["cora"].get(f"/admin/evaluation/questionset/{question_set.pk}/upload/")
    assert refused.status_code == 403
    assert "evaluation.change_questionset" in text(refused)


def test_a_question_edited_by_someone_outside_hr_keeps_its_hidden_document(
    corpus: KnowledgeBase, people: dict[str, Client]
) -> None:
    question_set = _hr_set(corpus)
    question = question_set.questions.get(external_id="pay")
    url = f"/admin/evaluation/question/{question.pk}/change/"

    form = people["iris"].get(url)
    saved = people["iris"].post(
        url,
        {
            "external_id": "pay",
            "text": "on which day are salaries paid",
            "expected_keys": "leave\nrefunds",
            "language": "auto",
            "tag": "pay",
        },
    )
    clash = people["iris"].post(
        url,
        {
            "external_id": "leave",
            "text": "another words",
            "expected_keys": "leave",
            "language": "auto",
        },
    )

    assert "hrsecretxq" not in text(form)
    assert "1 more expected document you may not read stays as it is" in text(form)
    assert saved.status_code == 302, text(saved)[-3000:]
    question.refresh_from_db()
    assert question.text == "on which day are salaries paid"
    assert question.expected_keys == ["leave", "refunds", "payroll"]
    assert question.expected_passage == PASSAGE
    assert "the set has another question with id &#x27;leave&#x27;" in text(clash)
    question_set.refresh_from_db()
    assert question_set.version == 3  # the import, then the edit


def test_run_evaluation_then_its_page_its_misses_and_what_came_back(
    corpus: KnowledgeBase, people: dict[str, Client], evaluate: Evaluate
) -> None:
    question_set = _hr_set(corpus)
    started = people["ivan"].post(
        f"/admin/evaluation/questionset/{question_set.pk}/run/", {"modes": ["keyword", "hybrid"]}
    )
    run = EvaluationRun.objects.get()
    assert started["Location"] == f"/admin/evaluation/evaluationrun/{run.pk}/change/"
    assert (run.modes, run.access_groups) == (["keyword", "hybrid"], ["hr"])
    queued = text(people["cora"].get(started["Location"]))
    assert 'http-equiv="refresh"' in queued and "Queued" in queued

    evaluate(run)
    page = text(people["cora"].get(started["Location"]))
    as_hr = text(people["ivan"].get(started["Location"]))

    assert 'http-equiv="refresh"' not in page
    assert 'data-mode="keyword" data-group="all"' in page
    # six documents: vector and hybrid return every one in their top 10; keyword misses one
    assert "Missed (1)" in page, re.findall(r"Missed[^<]*", page)
    assert "salaries on time" in page
    assert "query=salaries+on+time&amp;mode=keyword" in page  # into Test search
    assert "hrsecretxq" not in page and "Payroll" not in page
    assert "1 document you may not read" in page  # what came back instead, for cora
    assert "Payroll" in as_hr
    assert "canon-hash" in page or "hash/" in page  # the settings it ran with


def test_compare_and_quality_pages(
    corpus: KnowledgeBase, people: dict[str, Client], evaluate: Evaluate
) -> None:
    question_set = _hr_set(corpus)
    hr = reader_of(corpus, "hr")

    def ask(modes: list[str] | None = None, version: IndexVersion | None = None) -> EvaluationRun:
        run, _ = evaluation_request(
            kb=corpus,
            question_set=question_set,
            modes=modes or ["keyword"],
            reader=hr,
            index_version=version,
        )
        return evaluate(run)

    before = ask()
    publish(corpus, "leave", "Holidays are agreed with the team lead.")  # its words are gone
    after = ask()
    candidate = index_version_create(
        kb_id=corpus.pk,
        provider="hash",
        model="other",
        dimensions=32,
        chunk_size=200,
        chunk_overlap=20,
    )
    run_pending()
    elsewhere = ask(["keyword", "vector"], candidate)

    choose = text(people["cora"].get(f"/admin/evaluation/evaluationrun/{after.pk}/compare/"))
    compared = people["cora"].get(
        f"/admin/evaluation/evaluationrun/{before.pk}/compare/{after.pk}/"
    )
    beside = people["cora"].get(
        f"/admin/evaluation/evaluationrun/{before.pk}/compare/{elsewhere.pk}/"
    )
    quality = people["cora"].get(f"/admin/evaluation/evaluationrun/quality/{corpus.pk}/")

    assert f"/admin/evaluation/evaluationrun/{before.pk}/compare/{after.pk}/" in choose
    (lost,) = compared.context["comparison"].of("lost")
    assert (lost.external_id, lost.mode, lost.before, lost.after) == ("leave", "keyword", 1, None)
    page = text(compared)
    assert 'data-question="leave" data-mode="keyword" data-change="lost"' in page
    assert "query=paid+leave+days+a+year&amp;mode=keyword" in page  # into Test search
    assert 'data-figure="hit@1"' in page and "canon-down" in page
    assert compared.context["comparison"].notes == []
    assert beside.context["comparison"].modes == ["keyword"]
    assert "The index versions differ in model, dimensions, chunk size, chunk overlap." in text(
        beside
    )
    assert f"compare={candidate.pk}" in text(beside)  # the candidate's column beside the active
    page = text(quality)
    assert page.count('<svg class="canon-chart"') == 5
    assert 'data-mode="keyword"' in page and 'data-mode="vector"' in page
    assert "<polyline" in page and "var(--" not in page.split("<svg", 1)[1].split("</svg>")[0]
    assert f"run {elsewhere.pk} (v2, set v2)" in page
    assert f"keyword, run {before.pk} (v1, set v2): hit@1 0.667" in page
    assert f"keyword, run {after.pk} (v1, set v2): hit@1 0.333" in page
    # the axis dates its runs as the page's language does: ISO in English, 年月日 in Chinese
    assert re.search(r"canon-chart-tick[^>]*>\d{4}-\d{2}-\d{2} \(3 runs\)<", page)
    chinese = text(
        people["cora"].get(
            f"/admin/evaluation/evaluationrun/quality/{corpus.pk}/",
            HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9",
        )
    )
    assert re.search(r"canon-chart-tick[^>]*>\d{4}年\d{1,2}月\d{1,2}日（3 次运行）<", chinese)
    assert not re.search(r"canon-chart-tick[^>]*>\d{4}-\d{2}-\d{2}", chinese)
    assert f"关键词，运行 {before.pk}（v1, set v2）：hit@1 0.667" in chinese


def test_this_hit_answers_the_question_from_test_search(
    corpus: KnowledgeBase, people: dict[str, Client]
) -> None:
    question_set = question_set_create(kb=corpus, name="From search")
    back = f"/admin/kb/knowledgebase/{corpus.pk}/search/?query=refund+days"

    def add(client: Client, key: str, query: str = "Refund  days") -> Any:
        return client.post(
            "/admin/evaluation/questionset/add-from-search/",
            {
                "kb": corpus.pk,
                "question_set": question_set.pk,
                "query": query,
                "document_key": key,
                "next": back,
            },
        )

    first = add(people["iris"], "refunds")
    second = add(people["iris"], "refunds")
    other = add(people["iris"], "travel", query="refund days")
    hidden = add(people["iris"], "payroll")
    refused = add(people["cora"], "refunds")
    offsite = people["iris"].post(
        "/admin/evaluation/questionset/add-from-search/",
        {
            "kb": corpus.pk,
            "question_set": question_set.pk,
            "query": "refund days",
            "document_key": "refunds",
            "next": "https://elsewhere.example/",
        },
    )

    assert first["Location"] == back == second["Location"]
    (question,) = Question.objects.filter(question_set=question_set)
    assert question.text == "Refund days" and question.expected_keys == ["refunds", "travel"]
    assert "Not added" in text(people["iris"].get(back))  # payroll: not a document iris may read
    assert Question.objects.filter(question_set=question_set).count() == 1
    assert refused.status_code == 403
    assert offsite["Location"] == f"/admin/kb/knowledgebase/{corpus.pk}/search/"
    assert people["iris"].get("/admin/evaluation/questionset/add-from-search/").status_code == 405
    del hidden, other


def test_every_evaluation_page_renders_for_both_roles(
    corpus: KnowledgeBase, people: dict[str, Client], evaluate: Evaluate
) -> None:
    question_set = _hr_set(corpus)
    run = evaluate(
        evaluation_request(
            kb=corpus, question_set=question_set, modes=["hybrid"], reader=EVERYTHING
        )[0]
    )
    question = question_set.questions.first()
    assert question is not None
    for name in ("iris", "cora"):
        for url in [
            "/admin/evaluation/",
            "/admin/evaluation/questionset/",
            f"/admin/evaluation/questionset/{question_set.pk}/change/",
            "/admin/evaluation/question/",
            f"/admin/evaluation/question/{question.pk}/change/",
            "/admin/evaluation/evaluationrun/",
            f"/admin/evaluation/evaluationrun/{run.pk}/change/",
            f"/admin/evaluation/evaluationrun/quality/{corpus.pk}/",
        ]:
            response = people[name].get(url)
            assert response.status_code == 200, (name, url, response.status_code)
    assert (
        people["iris"].get(f"/admin/evaluation/questionset/{question_set.pk}/run/").status_code
        == 200
    )
    assert (
        people["cora"].get(f"/admin/evaluation/questionset/{question_set.pk}/run/").status_code
        == 403
    )
