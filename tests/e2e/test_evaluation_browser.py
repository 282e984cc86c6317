"""Evaluation in a real headless Chromium, with a real Celery worker running the runs: an index
admin makes a question set, uploads a file with mistakes and reads the report (nothing
imported), uploads the corrected file, runs an evaluation, watches its page fill, runs a second
one, and reads the Quality page's charts, in the light and the dark theme. A content manager
sees the figures but is offered no upload or run. Screenshots land in artifacts/e2e/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from evaluation.models import EvaluationRun, QuestionSet
from kb.models import KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.conftest import Worker
from tests.e2e.browser import Person, finds_at_once, make_user
from tests.evaluation.conftest import DOCUMENTS
from tests.retrieval.factories import publish

pytestmark = pytest.mark.integration

GOOD = [
    {
        "id": "refund",
        "question": "within how many days are refunds possible",
        "expected_documents": ["refunds"],
        "tag": "money",
    },
    {
        "id": "train",
        "question": "train tickets second class",
        "expected_documents": ["travel", "baoxiao"],
        "tag": "travel",
    },
    {"id": "leave", "question": "paid leave days a year", "expected_documents": ["leave"]},
    {"id": "laptop", "question": "when are laptops replaced", "expected_documents": ["laptops"]},
    {"id": "zh", "question": "火车票 报销", "expected_documents": ["baoxiao"], "tag": "travel"},
    {"id": "parking", "question": "parking garage opening hours", "expected_documents": ["leave"]},
]
MISTAKES = [
    *GOOD[:3],
    {"id": "refund", "question": "refund with a receipt", "expected_documents": ["refunds"]},
    {"id": "lunch", "question": "", "expected_documents": ["leave"]},
    {"id": "bonus", "question": "bonus rules", "expected_documents": ["bonus-policy"]},
    {"id": "laptop", "question": "laptops", "expected_documents": ["laptops"], "language": "fr"},
]


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def test_an_index_admin_uploads_questions_runs_an_evaluation_and_reads_the_charts(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Worker],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    for key, text in DOCUMENTS.items():
        publish(kb, key, text)
    worker_factory()  # after: these builds are this process's
    ensure_roles(Group, Permission)
    make_user("iris", INDEX_ADMINS, kb.tenant)
    make_user("cora", CONTENT_MANAGERS, kb.tenant)
    mistakes = tmp_path / "handbook-questions.jsonl"
    mistakes.write_text(jsonl(MISTAKES))
    fixed = tmp_path / "handbook-questions-fixed.jsonl"
    fixed.write_text(jsonl(GOOD))

    # a new question set of the knowledge base
    iris = Person(browser, live_server.url, "iris")
    iris.log_in()
    iris.visit(f"/admin/evaluation/questionset/add/?kb={kb.pk}")
    iris.fill("id_name", "Handbook questions")
    iris.fill("id_description", "What new employees ask in their first week.")
    iris.submit("input[name=_continue]")
    question_set = QuestionSet.objects.get(kb=kb)
    iris.wait_for_text("No question yet.")

    # a file with mistakes: a readable report, by line, and nothing imported
    iris.click("#upload-link")
    browser.find_element(By.ID, "id_file").send_keys(str(mistakes))
    iris.submit("#upload-button")
    iris.wait_for_text("The file has problems: nothing was imported")
    report = iris.text()
    assert "4 of 7 rows have problems; 3 are valid." in report
    assert "line 4 (refund): duplicate id 'refund' (also at line 1)" in report
    assert "line 5 (lunch): empty question" in report
    assert "line 6 (bonus): unknown document key 'bonus-policy'" in report
    assert "line 7 (laptop): language 'fr' is not en or zh" in report
    assert browser.find_element(By.ID, "import-valid-button").get_attribute("value") == (
        "Import the 3 valid rows only"
    )
    assert question_set.questions.count() == 0
    iris.screenshot("evaluation-upload-report")

    # the corrected file, uploaded from the report's page
    browser.find_element(By.ID, "id_file").send_keys(str(fixed))
    iris.submit("#upload-button")
    iris.wait_for_text("Imported: 6 added, 0 updated; the set is at version 2.")
    assert "火车票 报销" in iris.text()
    iris.screenshot("evaluation-set")

    # run an evaluation: a worker asks every question in every mode
    iris.click("#run-link")
    assert "Each of the 6 questions of Handbook questions (version 2)" in iris.text()
    iris.screenshot("evaluation-run-form")
    iris.submit("#start-button")
    iris.wait_for_text("is queued; its figures appear here")
    iris.wait_for_text("Succeeded", timeout=120, reload=True)
    run = EvaluationRun.objects.get(question_set=question_set)
    assert run.state == "succeeded" and run.modes == ["hybrid", "keyword", "vector"]
    page = iris.text()
    assert "Figures" in page and "Latency" in page and "Settings it ran with" in page
    figures = browser.find_element(By.CSS_SELECTOR, "tr[data-mode=keyword][data-group=all]")
    keyword = run.summary["keyword"]["all"]
    assert figures.text.split()[:5] == [
        "keyword", "all", "questions", "6", f"{keyword['hit@1']:.3f}"
    ]  # fmt: skip
    miss = browser.find_element(By.CSS_SELECTOR, "#run-misses tr[data-question=parking]")
    assert "Test search" in miss.text
    iris.screenshot("evaluation-run-page")
    browser.execute_script("document.querySelector('#run-misses').scrollIntoView()")
    iris.screenshot("evaluation-run-misses")

    # a second run, so the charts draw lines; then the Quality page
    iris.visit(f"/admin/evaluation/questionset/{question_set.pk}/run/")
    iris.submit("#start-button")
    iris.wait_for_text("Succeeded", timeout=120, reload=True)
    iris.click("#quality-link")
    iris.wait_for_text("Handbook questions: figures per run")
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.canon-chart")
    assert len(charts) == 5
    lines = charts[0].find_elements(By.CSS_SELECTOR, "g.canon-chart-line")
    assert sorted(str(line.get_attribute("data-mode")) for line in lines) == [
        "hybrid",
        "keyword",
        "vector",
    ]
    assert len(charts[0].find_elements(By.CSS_SELECTOR, "circle")) == 6  # 2 runs x 3 modes
    iris.screenshot("evaluation-quality")
    browser.execute_script("document.documentElement.dataset.theme = 'dark'")
    iris.screenshot("evaluation-quality-dark")
    colour = browser.execute_script(
        "return getComputedStyle(document.querySelector('g.canon-chart-hybrid')).color"
    )
    assert colour == "rgb(129, 212, 250)"  # the dark theme's --link-fg
    browser.execute_script("document.documentElement.dataset.theme = 'light'")

    # the second run beside the first: figures and each question's change
    second = EvaluationRun.objects.filter(question_set=question_set).latest("pk")
    iris.visit(f"/admin/evaluation/evaluationrun/{second.pk}/change/")
    iris.click("#compare-link")
    iris.click(f"#comparable-runs tr[data-run='{run.pk}'] a")
    iris.wait_for_text(f"Evaluation {run.pk} → {second.pk}")
    assert "Questions whose answer changed" in iris.text()
    iris.screenshot("evaluation-compare")

    # a question's own form
    iris.visit(f"/admin/evaluation/questionset/{question_set.pk}/change/")
    iris.click("tr[data-question=train] a")
    iris.wait_for_text("Expected documents")
    assert browser.find_element(By.ID, "id_expected_keys").get_attribute("value") == (
        "travel\nbaoxiao"
    )
    iris.screenshot("evaluation-question")

    # a content manager reads it all, and is offered no upload and no run
    cora = Person(browser, live_server.url, "cora")
    cora.log_in()
    cora.visit(f"/admin/evaluation/questionset/{question_set.pk}/change/")
    with finds_at_once(browser):
        assert not browser.find_elements(By.ID, "upload-link")
        assert not browser.find_elements(By.ID, "run-link")
    cora.visit(f"/admin/evaluation/evaluationrun/{run.pk}/change/")
    cora.wait_for_text("Figures")
    cora.screenshot("evaluation-run-content-manager")
