"""Search calibrated to a knowledge base's own questions, in a real headless Chromium (issue 39,
item 6): an index admin opens the knowledge base's Quality page, asks for a calibration from a
set of MIN_QUESTIONS questions or more (a confirmation page), lets it compute, reads the
candidate beside the default (held-out folds, each question's change), adopts it through the
gate's confirmation page, finds the adoption on the timeline, reads the candidate in Chinese, and
rolls search back to the default. The world (tests/evaluation/calibration_world.py) has a
default its questions clearly beat, so the gate lets the calibration through.

The calibration's task is run in this process, as a worker runs it (the shipped default is
replaced in this process, which the live server shares). Screenshots land in artifacts/e2e/."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.urls import reverse
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from evaluation.calibration import MIN_QUESTIONS
from evaluation.models import Calibration
from evaluation.services.gates import quality_gate_save
from ingestion.pipeline.run import task_execute
from kb.audit_kinds import (
    FUSION_CALIBRATION_ADOPTED,
    FUSION_CALIBRATION_ROLLED_BACK,
    QUALITY_GATE_OVERRIDDEN,
)
from kb.models import KnowledgeBase
from kb.roles import INDEX_ADMINS, ensure_roles
from retrieval.models import FusionCalibration
from retrieval.search import fusion
from tests.e2e.browser import Person, finds_at_once, make_user
from tests.evaluation.calibration_world import bad_default, publish_topics, topic_set
from work.models import AuditEvent

pytestmark = pytest.mark.integration

N = MIN_QUESTIONS + 4


def show(browser: WebDriver, element_id: str) -> None:
    browser.execute_script(f"document.getElementById('{element_id}').scrollIntoView()")


def test_an_index_admin_calibrates_search_adopts_it_and_rolls_back_to_the_default(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_topics(kb, N)
    model = bad_default()
    monkeypatch.setattr(fusion, "model", lambda *args, **kwargs: model)
    question_set = topic_set(kb, N)
    ensure_roles(Group, Permission)
    make_user("iris", INDEX_ADMINS, kb.tenant)
    iris = Person(browser, live_server.url, "iris")
    iris.log_in()

    # the Quality page, from the knowledge base's home: search fuses by the default
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    iris.click("#quality-link")
    iris.wait_for_text("Search calibration")
    assert "Hybrid search fuses by the shipped default." in iris.text()
    show(browser, "calibration")
    iris.screenshot("calibration-quality-default")

    # Calibrate…: a confirmation page, which set
    iris.click("#calibrate-link")
    iris.wait_for_text(f"The set needs at least {MIN_QUESTIONS} questions.")
    Select(browser.find_element(By.ID, "id_question_set")).select_by_value(str(question_set.pk))
    iris.screenshot("calibration-calibrate")
    iris.submit("#calibrate-button")
    calibration = Calibration.objects.get(kb=kb)
    iris.wait_for_text(f"Calibration {calibration.pk} is being computed")
    assert "This page reloads itself" in iris.text()
    iris.screenshot("calibration-queued")

    # computed, as a worker runs its task
    assert calibration.task_id is not None
    assert task_execute(task_id=calibration.task_id, worker_id="e2e") == "candidate"
    calibration.refresh_from_db()
    assert calibration.state == Calibration.State.CANDIDATE, calibration.error
    assert calibration.default_mrr is not None and calibration.candidate_mrr is not None
    assert calibration.candidate_mrr > calibration.default_mrr
    iris.wait_for_text("Held-out MRR@10: the default beside the calibration")  # it reloads
    figures = browser.find_element(By.ID, "figures-all").text
    assert str(N) in figures
    assert f"{calibration.default_mrr:.3f}" in figures
    assert f"{calibration.candidate_mrr:.3f}" in figures
    assert len(browser.find_elements(By.CSS_SELECTOR, "#calibration-figures tr.fold")) == 5
    verdict = browser.find_element(By.ID, "calibration-verdict").text
    assert "The quality gate lets it through" in verdict
    changed = browser.find_elements(By.CSS_SELECTOR, "#calibration-changes tr[data-question]")
    assert changed
    assert {row.get_attribute("class") for row in changed} <= {"change-up", "change-gained"}
    counts = browser.find_element(By.ID, "calibration-counts").text
    assert f"{len(changed)} gained" in counts or "moved up" in counts
    assert "answer-" in changed[0].text  # the first documents under both, named
    iris.screenshot("calibration-candidate")
    show(browser, "calibration-changes")
    iris.screenshot("calibration-candidate-changes")

    # the same page in Chinese, through the header's switcher, and back
    iris.submit("#language-zh-hans")
    assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == "zh-hans"
    assert f"{calibration.candidate_mrr:.3f}" in browser.find_element(By.ID, "figures-all").text
    assert "gained" not in browser.find_element(By.ID, "calibration-changes").text
    iris.screenshot("calibration-candidate-zh")
    iris.submit("#language-en")
    iris.wait_for_text("Held-out MRR@10: the default beside the calibration")

    # Adopt…: the gate's verdict, a reason; nothing changes before the confirmation
    iris.click("#adopt-link")
    iris.wait_for_text("will fuse its legs by this calibration instead of the shipped default")
    assert (
        "The quality gate lets it through"
        in browser.find_element(By.ID, "calibration-verdict").text
    )
    assert not browser.find_elements(By.ID, "id_override_gate")  # nothing to override
    assert not FusionCalibration.objects.exists()
    iris.fill("id_reason", "our own questions rank better with it")
    iris.screenshot("calibration-adopt")
    iris.submit("#adopt-button")
    iris.wait_for_text(f"Search in {kb.name} now fuses by calibration {calibration.pk}.")
    assert FusionCalibration.objects.get(kb=kb).calibration_id == calibration.pk
    calibration.refresh_from_db()
    assert calibration.state == Calibration.State.ADOPTED
    assert browser.find_elements(By.ID, "rollback-link")
    iris.screenshot("calibration-adopted")

    # on the knowledge base's timeline
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    entry = browser.find_element(By.CSS_SELECTOR, f"tr.entry-{FUSION_CALIBRATION_ADOPTED}")
    assert "adopted a search calibration" in entry.text
    assert "our own questions rank better with it" in entry.text and "iris" in entry.text
    iris.screenshot("calibration-on-timeline")

    # the Quality page says what search fuses by; Roll back to the default…
    iris.visit(reverse("admin:evaluation_quality", args=[kb.pk]))
    adopted = browser.find_element(By.ID, "calibration-adopted").text
    assert f"Hybrid search fuses by calibration {calibration.pk}" in adopted
    row = browser.find_element(
        By.CSS_SELECTOR, f"#calibrations tr[data-calibration='{calibration.pk}']"
    )
    assert "adopted" in row.text
    show(browser, "calibration")
    iris.screenshot("calibration-quality-adopted")
    iris.click("#calibration-rollback")
    iris.wait_for_text("it will fuse by the shipped default again")
    iris.fill("id_reason", "users preferred the old order")
    iris.screenshot("calibration-rollback")
    iris.submit("#rollback-button")
    iris.wait_for_text(f"Search in {kb.name} fuses by the shipped default again.")
    assert not FusionCalibration.objects.filter(kb=kb).exists()
    assert "Hybrid search fuses by the shipped default." in iris.text()
    show(browser, "calibration")
    iris.screenshot("calibration-rolled-back")

    # both on the timeline
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    back = browser.find_element(By.CSS_SELECTOR, f"tr.entry-{FUSION_CALIBRATION_ROLLED_BACK}")
    assert "rolled search back to the default fusion" in back.text
    assert "users preferred the old order" in back.text
    assert AuditEvent.objects.filter(kind=FUSION_CALIBRATION_ROLLED_BACK).count() == 1
    iris.screenshot("calibration-rollback-on-timeline")


def test_a_calibration_the_gate_refuses_is_adopted_only_with_an_override_and_a_reason(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase
) -> None:
    """A candidate whose held-out MRR@10 is below the default's (made up: the computation
    keeps the default then), under a gate that allows a drop of 0.05."""
    publish_topics(kb, N)
    question_set = topic_set(kb, N)
    assert kb.active_index_version is not None
    quality_gate_save(kb=kb, question_set=question_set, max_drop=0.05)
    calibration = Calibration.objects.create(
        kb=kb,
        question_set=question_set,
        question_set_version=question_set.version,
        index_version=kb.active_index_version,
        state=Calibration.State.CANDIDATE,
        parameters={"made": "up"},
        questions=N,
        default_mrr=0.9,
        candidate_mrr=0.6,
    )
    ensure_roles(Group, Permission)
    make_user("ivan", INDEX_ADMINS, kb.tenant)
    ivan = Person(browser, live_server.url, "ivan")
    ivan.log_in()

    ivan.visit(reverse("admin:evaluation_calibration_adopt", args=[calibration.pk]))
    ivan.wait_for_text("refuses this calibration")
    verdict = browser.find_element(By.ID, "calibration-verdict")
    assert "errornote" in (verdict.get_attribute("class") or "")
    assert "drops from 0.900 (the default) to 0.600" in verdict.text
    assert "tick “Override the quality gate”" in browser.find_element(By.ID, "override-hint").text
    ivan.screenshot("calibration-adopt-refuses")
    ivan.submit("#adopt-button")
    ivan.wait_for_text("Adopt calibration")
    assert browser.find_elements(By.ID, "adopt-refused")
    with finds_at_once(browser):
        assert not browser.find_elements(By.ID, "calibration-verdict")  # said once, not twice
    assert not FusionCalibration.objects.exists()
    ivan.screenshot("calibration-adopt-refused")

    ivan.click("#id_override_gate")
    ivan.fill("id_reason", "the made-up figures are checked by hand")
    ivan.screenshot("calibration-adopt-override")
    ivan.submit("#adopt-button")
    ivan.wait_for_text(f"Search in {kb.name} now fuses by calibration {calibration.pk}.")
    assert FusionCalibration.objects.get(kb=kb).parameters == {"made": "up"}
    ivan.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    entry = browser.find_element(By.CSS_SELECTOR, f"tr.entry-{QUALITY_GATE_OVERRIDDEN}")
    assert "the made-up figures are checked by hand" in entry.text
    ivan.screenshot("calibration-override-on-timeline")
