"""The quality gate in a real headless Chromium, with a real Celery worker building versions and
running evaluations (issue 39, item 3): an index admin uploads a question set, runs an
evaluation, sets the knowledge base's gate, builds a candidate version with a worse chunking
(50-character chunks), starts the runs the swap page asks for and watches it fill, sees the
swap refused with the questions that moved, overrides it with a reason, finds the override on
the timeline, and rolls back, the rollback page showing both versions' last runs. A content
manager reads the gate but is offered no way to change it; a question whose answer is a
document the admin may not read shows it only as a count. Screenshots land in artifacts/e2e/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from evaluation.models import EvaluationRun, QualityGate, QuestionSet
from evaluation.question_files import read_rows
from evaluation.services.gates import quality_gate_save
from evaluation.services.question_sets import (
    question_set_create,
    questions_check,
    questions_import,
)
from evaluation.services.schedule import evaluation_runs_start_due
from kb.access import Reader
from kb.audit_kinds import QUALITY_GATE_OVERRIDDEN
from kb.models import KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.conftest import Worker
from tests.e2e.browser import Person, finds_at_once, make_user
from tests.e2e.test_evaluation_browser import jsonl
from tests.evaluation.gate_world import QUESTIONS, publish_world
from tests.retrieval.factories import publish, upload
from work.models import AuditEvent

pytestmark = pytest.mark.integration


def show(browser: WebDriver, element_id: str) -> None:
    browser.execute_script(f"document.getElementById('{element_id}').scrollIntoView()")


def test_a_worse_chunking_is_refused_by_the_gate_overridden_with_a_reason_and_rolled_back(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Worker],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    publish_world(kb)
    publish(kb, "payroll", "Salaries are paid on the last working day.", groups=("hr",))
    worker_factory()  # after: these builds are this process's
    ensure_roles(Group, Permission)
    make_user("iris", INDEX_ADMINS, kb.tenant)
    make_user("cora", CONTENT_MANAGERS, kb.tenant)
    questions = tmp_path / "facilities.jsonl"
    questions.write_text(jsonl(QUESTIONS))

    # a question set, uploaded
    iris = Person(browser, live_server.url, "iris")
    iris.log_in()
    iris.visit(f"/admin/evaluation/questionset/add/?kb={kb.pk}")
    iris.fill("id_name", "Facilities")
    iris.submit("input[name=_continue]")
    question_set = QuestionSet.objects.get(kb=kb)
    iris.click("#upload-link")
    browser.find_element(By.ID, "id_file").send_keys(str(questions))
    iris.submit("#upload-button")
    iris.wait_for_text("Imported: 4 added, 0 updated; the set is at version 2.")
    # one more question, written by someone who reads the hr group's documents
    everything = Reader(tenant_id=kb.tenant_id, access_groups=frozenset(), all_groups=True)
    pay = [{"id": "pay", "question": "when are salaries paid", "expected_documents": ["payroll"]}]
    questions_import(
        question_set=question_set,
        checked=questions_check(question_set=question_set, raw=read_rows(pay), reader=everything),
        reader=everything,
    )

    # an evaluation of the active version, from the set's page
    iris.visit(f"/admin/evaluation/questionset/{question_set.pk}/change/")
    assert "payroll" not in iris.text() and "1 document you may not read" in iris.text()
    iris.click("#run-link")
    iris.submit("#start-button")
    iris.wait_for_text("Succeeded", timeout=180, reload=True)
    first = EvaluationRun.objects.get(question_set=question_set)
    miss = browser.find_element(By.CSS_SELECTOR, "#run-misses tr[data-question=pay]")
    assert "1 document you may not read" in miss.text and "payroll" not in iris.text()
    iris.screenshot("gate-first-run")

    # the knowledge base's gate: MRR@10 of hybrid may drop by at most 0.05
    iris.visit(f"/admin/evaluation/qualitygate/add/?kb={kb.pk}")
    assert browser.find_element(By.ID, "id_question_set").get_attribute("value") == str(
        question_set.pk
    )
    iris.fill("id_max_drop", "0.05")
    iris.screenshot("gate-form")
    iris.submit("input[name=_save]")
    iris.wait_for_text("MRR@10 of hybrid on Facilities may drop by at most 0.050")
    gate = QualityGate.objects.get(kb=kb)

    # a candidate with a worse chunking: 50 characters, no overlap
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    iris.click("#new-version-link")
    iris.fill("id_chunk_size", "50")
    iris.fill("id_chunk_overlap", "0")
    iris.fill("id_reason", "shorter chunks for the chat widget")
    iris.submit("input[type=submit]")
    iris.wait_for_text("is building")
    iris.wait_for_text("ready: 9/9 built", timeout=180, reload=True)
    iris.click("#version-2 .activate-link")

    # the swap page asks for the runs it judges by, and fills as they finish
    iris.wait_for_text("Quality: active and candidate on your questions")
    assert "The quality gate needs a finished run of Facilities" in iris.text()
    show(browser, "quality")
    iris.screenshot("gate-runs-missing")
    iris.submit("#start-quality-runs-button")
    iris.wait_for_text("started; this page shows the figures when done")
    show(browser, "quality")
    iris.screenshot("gate-runs-under-way")
    iris.wait_for_text("The quality gate refuses v2", timeout=240)  # the page reloads itself
    verdict = browser.find_element(By.ID, "gate-verdict").text
    assert "MRR@10 of hybrid on Facilities drops from" in verdict
    assert "more than the 0.050 allowed" in verdict
    rows = browser.find_elements(By.CSS_SELECTOR, "#quality-changes tr[data-question]")
    moved = {row.get_attribute("data-question"): row.get_attribute("data-change") for row in rows}
    assert moved.get("parking") in ("down", "lost"), moved
    link = rows[0].find_element(By.CSS_SELECTOR, "a.canon-search-link").get_attribute("href")
    assert link is not None and "compare=" in link and "query=" in link
    page = iris.text()
    assert "payroll" not in page
    show(browser, "quality")
    iris.screenshot("gate-refuses-with-changes")
    browser.execute_script("document.documentElement.dataset.theme = 'dark'")
    iris.screenshot("gate-refuses-dark")
    browser.execute_script("document.documentElement.dataset.theme = 'light'")

    # a question that moved, in Test search: the candidate beside the active version
    swap_page = browser.current_url
    browser.get(link)
    iris.wait_for_text("Documents in both result lists")
    assert browser.find_elements(By.CSS_SELECTOR, "#side-2 form.canon-answer-form")
    show(browser, "results")
    iris.screenshot("gate-question-in-test-search")
    browser.get(swap_page)
    iris.wait_for_text("The quality gate refuses v2")

    # confirmed without the override: refused, back on this page
    iris.fill("id_reason", "shorter chunks")
    iris.submit("#confirm-button")
    iris.wait_for_text("An index admin may override it, giving a reason.")
    kb.refresh_from_db()
    assert kb.active_index_version is not None and kb.active_index_version.number == 1
    iris.screenshot("gate-refused")

    # overridden, with a reason
    iris.click("#id_override_gate")
    iris.fill("id_reason", "the chat widget needs short passages; quality checked by hand")
    show(browser, "override-gate-row")
    iris.screenshot("gate-override")
    iris.submit("#confirm-button")
    iris.wait_for_text("Index version 2 is active.")
    override = AuditEvent.objects.get(kind=QUALITY_GATE_OVERRIDDEN)
    assert override.details["quality_gate"]["question_set"] == gate.question_set_id

    # on the timeline
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    entry = browser.find_element(By.CSS_SELECTOR, "tr.entry-quality_gate_overridden")
    assert "overrode the quality gate" in entry.text
    assert "the chat widget needs short passages" in entry.text and "iris" in entry.text
    iris.screenshot("gate-override-on-timeline")

    # roll back: both versions' last runs, and nothing to override
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/index-versions/rollback/")
    iris.wait_for_text("Quality: the last runs of both versions")
    with finds_at_once(browser):
        assert not browser.find_elements(By.ID, "id_override_gate")
        assert not browser.find_elements(By.ID, "gate-verdict")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#quality-figures tr[data-figure]")) == 7
    show(browser, "quality")
    iris.screenshot("gate-rollback-runs")
    iris.fill("id_reason", "users found fewer answers")
    iris.submit("#confirm-button")
    iris.wait_for_text("Index version 1 is active again.")
    assert first.state == "succeeded"

    # a content manager reads the gate, and is offered no way to change it
    cora = Person(browser, live_server.url, "cora")
    cora.log_in()
    cora.visit(f"/admin/evaluation/qualitygate/{gate.pk}/change/")
    cora.wait_for_text("Facilities")
    with finds_at_once(browser):
        assert not browser.find_elements(By.CSS_SELECTOR, "input[name=_save]")
        assert not browser.find_elements(By.ID, "id_max_drop")
    cora.screenshot("gate-content-manager")


def test_a_revisions_approval_shows_its_questions_and_a_nightly_drop_reaches_the_dashboard(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Worker],
    kb: KnowledgeBase,
) -> None:
    publish_world(kb)
    everything = Reader(tenant_id=kb.tenant_id, access_groups=frozenset(), all_groups=True)
    question_set = question_set_create(kb=kb, name="Facilities")
    questions_import(
        question_set=question_set,
        checked=questions_check(
            question_set=question_set, raw=read_rows(QUESTIONS), reader=everything
        ),
        reader=everything,
    )
    quality_gate_save(kb=kb, question_set=question_set, max_drop=0.05, nightly=True)
    kb.require_approval = True
    kb.save()
    waiting = upload(kb, "parking", "Parking is handled by the landlord now; ask them.")
    worker_factory()
    ensure_roles(Group, Permission)
    make_user("iris", INDEX_ADMINS, kb.tenant)
    iris = Person(browser, live_server.url, "iris")
    iris.log_in()

    # the revision waits for approval; its page asks for the runs it compares
    iris.visit(f"/admin/kb/document/{waiting.document_id}/change/")
    iris.wait_for_text("Approve", reload=True)
    pending = waiting.builds.get(index_version_id=kb.active_index_version_id)
    iris.visit(
        f"/admin/kb/document/{waiting.document_id}/approve/{pending.pk}/?quality_mode=keyword"
    )
    iris.wait_for_text("Quality: the questions this document answers")
    assert "1 question of Facilities expects this document." in iris.text()
    iris.submit("#start-quality-runs-button")
    iris.wait_for_text("Besides these", timeout=240)  # the page reloads itself
    row = browser.find_element(By.CSS_SELECTOR, "#revision-questions tr[data-question=parking]")
    assert row.get_attribute("data-change") == "lost"
    show(browser, "quality")
    iris.screenshot("approve-questions-lost")

    # approved anyway; the night's run finds the drop, and the dashboard says so
    iris.fill("id_reason", "the landlord took parking over")
    iris.submit("#confirm-button")
    iris.wait_for_text("Revision 2 is live.")
    assert evaluation_runs_start_due() == 1  # what beat's job does at the gate's hour
    iris.visit("/admin/ingestion/ingestiontask/dashboard/")
    iris.wait_for_text("anomaly:quality_drop", timeout=240, reload=True)
    anomalies = browser.find_element(By.ID, "anomalies")
    assert "MRR@10 of keyword" not in anomalies.text  # the gate's mode is hybrid
    assert "MRR@10 of hybrid on Facilities fell from" in anomalies.text
    show(browser, "anomalies")
    iris.screenshot("dashboard-quality-drop")
    anomalies.find_element(By.LINK_TEXT, f"evaluation {EvaluationRun.objects.latest('pk').pk}")

    # the knowledge base's home links its Quality page
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    iris.click("#quality-link")
    iris.wait_for_text("Facilities: figures per run")
    iris.screenshot("quality-from-home")
