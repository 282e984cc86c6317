"""The knowledge base's extraction settings in a real headless Chromium (issue 37): an index
admin finds OCR and page headers and footers on the settings page with their help, turns OCR
off and headers on, and the timeline says so; a PDF built then says, on its build's page, which
pages were not read. Screenshots in artifacts/e2e/; with CANON_GUIDE_IMG=<dir> the admin
guide's picture of the settings is taken."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from kb import storage
from kb.models import KnowledgeBase
from kb.roles import INDEX_ADMINS, ensure_roles
from kb.services.documents import document_create
from tests.e2e.browser import Person, make_user
from tests.e2e.test_kb_home_browser import guide
from tests.ingestion.test_ocr_modes_pipeline import mixed_pdf
from tests.retrieval.factories import build

pytestmark = pytest.mark.integration


def test_an_index_admin_turns_ocr_off_and_headers_on(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase
) -> None:
    ensure_roles(Group, Permission)
    make_user("iris", INDEX_ADMINS, kb.tenant)
    iris = Person(browser, live_server.url, "iris")
    iris.log_in()

    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    ocr = browser.find_element(By.CSS_SELECTOR, ".field-ocr_mode")
    assert "OCR reads the text of pictures." in ocr.text
    choices = [label.text for label in ocr.find_elements(By.CSS_SELECTOR, "#id_ocr_mode label")]
    assert choices == [label for _, label in KnowledgeBase.OcrMode.choices]
    assert browser.find_element(By.ID, "id_ocr_mode_1").is_selected()  # the default
    headers = browser.find_element(By.CSS_SELECTOR, ".field-extract_headers_footers")
    assert "Index the page headers and footers of word-processing documents" in headers.text
    guide(iris, "extraction-settings", scroll_to=".field-retention_days")

    iris.click("#id_ocr_mode_0")
    iris.click("#id_extract_headers_footers")
    iris.submit("input[name=_continue]")
    iris.wait_for_text("was changed successfully")
    kb.refresh_from_db()
    assert (kb.ocr_mode, kb.extract_headers_footers) == ("off", True)
    assert browser.find_element(By.ID, "id_ocr_mode_0").is_selected()
    iris.screenshot("extraction-settings-saved")

    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    iris.wait_for_text(
        "Changed OCR: pages without text only → off; index page headers and footers: off → on."
    )
    iris.screenshot("extraction-settings-timeline")

    # a PDF with scanned pages, built now: its build's page names the pages not read
    revision = document_create(
        kb=kb,
        key="compressor",
        title="Compressor",
        stored=storage.store_bytes(mixed_pdf()),
        media_type="application/pdf",
        original_name="compressor.pdf",
    )
    built = build(revision)
    iris.visit(f"/admin/kb/chunk/of-build/{built.pk}/")
    note = browser.find_element(By.ID, "parse-notes").text
    assert note == (
        "Pages 2 and 4 have no text layer and were not read: OCR is off for this knowledge base."
    )
    iris.screenshot("pages-not-read")
