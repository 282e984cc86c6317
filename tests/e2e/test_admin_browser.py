"""The admin as people use it: a real headless Chromium (Debian's chromium + chromedriver,
driven by Selenium) against a live server, with a real Celery worker building the uploads.
Screenshots of every page land in artifacts/e2e/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from kb.models import Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.e2e.browser import Person, make_user

pytestmark = pytest.mark.integration


def test_content_manager_and_index_admin_in_a_real_browser(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    worker_factory()
    ensure_roles(Group, Permission)
    make_user("carol", CONTENT_MANAGERS, kb.tenant)
    make_user("ian", INDEX_ADMINS, kb.tenant)
    first = tmp_path / "handbook.md"
    first.write_text("# Travel\n\nTrain tickets are reimbursed in second class.\n")
    second = tmp_path / "handbook-v2.md"
    second.write_text("# Travel\n\nTrain tickets are reimbursed in first class.\n")

    # a content manager uploads a document and watches it go live without reloading
    carol = Person(browser, live_server.url, "carol")
    carol.log_in()
    carol.visit("/admin/kb/document/add/")
    assert Select(browser.find_element(By.ID, "id_kb")).first_selected_option.text == str(kb)
    carol.fill("id_key", "travel")
    carol.fill("id_title", "Travel policy")
    browser.find_element(By.ID, "id_file").send_keys(str(first))
    carol.screenshot("upload-form")
    carol.click("input[name=_continue]")
    carol.wait_for_text("live r1")
    carol.screenshot("live-r1")
    document = Document.objects.get(key="travel")
    assert browser.find_element(By.CSS_SELECTOR, "#builds progress").get_attribute("value") == (
        browser.find_element(By.CSS_SELECTOR, "#builds progress").get_attribute("max")
    )

    # the knowledge base now requires approval; the second revision waits for it
    kb.require_approval = True
    kb.save()
    browser.find_element(By.ID, "id_new_revision").send_keys(str(second))
    carol.click("input[name=_continue]")
    # the document list follows the build without a reload
    carol.visit("/admin/kb/document/")
    carol.wait_for_text("r2 awaiting approval")
    carol.screenshot("list-awaiting-approval")
    carol.visit(f"/admin/kb/document/{document.pk}/change/")
    carol.wait_for_text("r2 awaiting approval")
    carol.screenshot("awaiting-approval")
    assert "Approve" not in browser.find_element(By.ID, "builds").text  # not her role

    # an index admin approves it through the confirmation page
    ian = Person(browser, live_server.url, "ian")
    ian.log_in()
    ian.visit(f"/admin/kb/document/{document.pk}/change/")
    ian.click(".approve-link")
    ian.wait_for_text("Text changes")
    assert "1 changed, 0 added, 0 removed" in ian.text()  # one chunk, its words compared
    assert "first class" in browser.find_element(By.CSS_SELECTOR, ".canon-diff").text
    ian.screenshot("approve-confirmation")
    ian.fill("id_reason", "policy update approved")
    ian.click("input[type=submit]")
    ian.wait_for_text("live r2")
    ian.screenshot("approved-live-r2")

    # and rolls it back
    ian.click(".rollback-link")
    ian.fill("id_reason", "finance objected")
    ian.screenshot("rollback-confirmation")
    ian.click("input[type=submit]")
    ian.wait_for_text("Rolled back to revision 1")
    assert "live r1" in ian.text() and "finance objected" in ian.text()
    ian.screenshot("rolled-back")

    # a new index version builds, is swapped in, and rolled back
    ian.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    ian.click("#new-version-link")
    ian.fill("id_model", "canon-hash-small")
    ian.fill("id_dimensions", "128")
    ian.screenshot("new-index-version")
    ian.click("input[type=submit]")
    ian.wait_for_text("is building")
    ian.wait_for_text("ready: 1/1 built", reload=True)
    ian.screenshot("index-version-built")
    ian.click("#version-2 .activate-link")
    ian.wait_for_text("documents covered")
    assert "1 of 1" in browser.find_element(By.ID, "version-comparison").text
    ian.fill("id_reason", "smaller embeddings")
    ian.click("input[type=submit]")
    ian.wait_for_text("Index version 2 is active")
    ian.screenshot("swapped")
    kb.refresh_from_db()
    assert kb.active_index_version is not None and kb.active_index_version.number == 2
    ian.click("#version-rollback-link")
    ian.fill("id_reason", "recall dropped")
    ian.click("input[type=submit]")
    ian.wait_for_text("Index version 1 is active again")
    ian.screenshot("version-rolled-back")
    kb.refresh_from_db()
    assert kb.active_index_version is not None and kb.active_index_version.number == 1
    call_command("kb_verify")
