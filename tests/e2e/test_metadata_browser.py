"""Metadata in a real headless Chromium: an index admin declares typed fields on the knowledge
base's settings page, a content manager fills them on a document's page (typed inputs) and sets
one on several documents from the list, and the home's summary counts the values, without the
document she may not read. With CANON_GUIDE_IMG=<dir> the admin guide's pictures are taken."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from kb.models import Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.e2e.browser import Person, make_user
from tests.e2e.test_kb_home_browser import guide
from tests.retrieval.factories import upload

pytestmark = pytest.mark.integration

MARK_HR = "payscalexq"


def test_metadata_fields_values_and_summary_in_a_real_browser(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase
) -> None:
    ensure_roles(Group, Permission)
    make_user("cora", CONTENT_MANAGERS, kb.tenant)  # no access groups
    make_user("iris", INDEX_ADMINS, kb.tenant)
    travel = upload(kb, "travel", "# Travel\n\nTrains are reimbursed.", title="Travel policy")
    upload(kb, "vacation", "# Vacation\n\n25 days a year.", title="Vacation policy")
    upload(kb, "expenses", "# Expenses\n\nReceipts within 30 days.", title="Expenses")
    upload(kb, "salaries", f"# Salaries\n\n{MARK_HR} bands.", ("hr",), title="Salaries")
    Document.objects.filter(key="salaries").update(metadata={"department": MARK_HR, "year": 1999})

    # the index admin declares the fields on the settings page
    iris = Person(browser, live_server.url, "iris")
    iris.log_in()
    for name, kind in (
        ("department", "string"),
        ("year", "number"),
        ("valid_until", "date"),
        ("public", "boolean"),
        ("tags", "string_list"),
    ):
        iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
        rows = browser.find_elements(By.CSS_SELECTOR, "#metadata_fields-group tr.form-row")
        index = len([r for r in rows if "empty-form" not in (r.get_attribute("class") or "")]) - 1
        iris.fill(f"id_metadata_fields-{index}-name", name)
        Select(browser.find_element(By.ID, f"id_metadata_fields-{index}-type")).select_by_value(
            kind
        )
        iris.click("input[name=_continue]")
        iris.wait_for_text("was changed successfully")
    assert "Delete…" in browser.find_element(By.ID, "metadata_fields-group").text
    iris.screenshot("metadata-fields")

    # the content manager fills them on a document's page
    cora = Person(browser, live_server.url, "cora")
    cora.log_in()
    cora.visit(f"/admin/kb/document/{travel.document_id}/change/")
    cora.fill("id_metadata__department", "finance")
    cora.fill("id_metadata__year", "2024")
    browser.execute_script(
        "document.getElementById('id_metadata__valid_until').value = '2026-12-31'"
    )
    cora.click("#id_metadata__public")
    cora.fill("id_metadata__tags", "travel, reimbursement")
    guide(cora, "document-metadata", scroll_to="fieldset.canon-metadata")
    cora.click("input[name=_continue]")
    cora.wait_for_text("was changed successfully")
    document = Document.objects.get(key="travel")
    assert document.metadata == {
        "department": "finance",
        "year": 2024,
        "valid_until": "2026-12-31",
        "public": True,
        "tags": ["reimbursement", "travel"],
    }

    # and sets the department on two more documents from the list
    cora.visit(f"/admin/kb/document/?kb__id__exact={kb.pk}")
    for key in ("vacation", "expenses"):
        row = browser.find_element(By.XPATH, f"//tr[.//a[text()='{key}']]")
        row.find_element(By.CSS_SELECTOR, "input.action-select").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("set_metadata")
    cora.click("button[name=index]")
    cora.wait_for_text("Set metadata on 2 documents")
    cora.fill("id_metadata__department", "people")
    cora.submit("#confirm-button")
    cora.wait_for_text("department: — → people")
    cora.fill("id_reason", "HR owns these")
    cora.screenshot("bulk-metadata-confirm")
    cora.submit("#confirm-button")
    cora.wait_for_text("Set metadata on 2")

    # the home's summary counts the values of the documents she may read
    cora.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    summary = browser.find_element(By.ID, "kb-metadata").text
    assert "people (2)" in summary and "finance (1)" in summary
    assert MARK_HR not in browser.page_source and "1999" not in summary
    guide(cora, "metadata-summary", scroll_to="#kb-metadata")
