"""Issue 26, items 5, 6, 12, 14 and 15 in a real headless Chromium, a content manager's session
and a real Celery worker: the document page left open refreshes its History box when the build
is published and offers Retry… when a build fails while watched (no reload, no "?"); the
replaced failure is history; test search marks stems and not stop words; an unknown admin
address is an admin page with a way home; the dashboard counts what the local model embedded.

Screenshots land in artifacts/e2e/ (look at them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from kb.models import Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.e2e.browser import Person, make_user
from tests.helpers import upload_text
from tests.kb.test_swap_with_known_failures import BROKEN_PDF

pytestmark = pytest.mark.integration


def show(browser: WebDriver, selector: str) -> None:
    browser.execute_script("document.querySelector(arguments[0]).scrollIntoView()", selector)


def box(browser: WebDriver, element_id: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, f"#{element_id} tbody").text)


def test_the_document_page_follows_its_builds_live(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    ensure_roles(Group, Permission)
    make_user("cm-live", CONTENT_MANAGERS, kb.tenant)
    make_user("ia-live", INDEX_ADMINS, kb.tenant)
    travel = tmp_path / "travel.md"
    travel.write_text("# Travel\n\nThe salary bands and the travel bands are reviewed in March.\n")
    broken = tmp_path / "travel.pdf"
    broken.write_bytes(BROKEN_PDF)

    # no worker yet: the page she keeps open says queued, and nothing published
    cm = Person(browser, live_server.url, "cm-live")
    cm.log_in()
    cm.visit("/admin/kb/document/add/")
    cm.fill("id_key", "travel")
    browser.find_element(By.ID, "id_file").send_keys(str(travel))
    cm.click("input[name=_continue]")
    cm.wait_for_text("was added successfully")
    assert "Nothing published yet" in box(browser, "history")

    # the worker publishes it: status, builds and history agree without a reload
    first = worker_factory()
    cm.wait_for_text("served now", timeout=120)
    # the history box follows without a reload ("Nothing published yet" holds "publish" too)
    WebDriverWait(browser, 30).until(lambda d: "Nothing published yet" not in box(d, "history"))
    history = box(browser, "history")
    assert "Nothing published yet" not in history
    assert "r1" in history and "Canon, when built" in history and "UTC" in history
    show(browser, "#builds")
    cm.screenshot("history-refreshed-live")
    first.stop()

    # a new revision that cannot be parsed fails while she watches: Retry… appears, no "?"
    browser.find_element(By.ID, "id_new_revision").send_keys(str(broken))
    cm.click("input[name=_continue]")
    cm.wait_for_text("was changed successfully")
    assert "queued" in box(browser, "builds")
    worker_factory()
    cm.wait_for_text("Retry…", timeout=120)
    builds = box(browser, "builds")
    assert "— (failed before chunking)" in builds and "?" not in builds
    assert "served now" in builds  # r1 still served
    document = Document.objects.get(kb=kb, key="travel")
    assert browser.find_elements(By.CSS_SELECTOR, ".retry-link")
    show(browser, "#builds")
    cm.screenshot("failed-build-offers-retry-live")

    # a fixed revision goes live: the failure of r2 is history, no Retry… on it
    browser.refresh()
    browser.find_element(By.ID, "id_new_revision").send_keys(str(travel))
    cm.click("input[name=_continue]")
    cm.wait_for_text("was changed successfully")
    cm.wait_for_text("failed earlier; r3 is the current revision", timeout=120)
    cm.wait_for_text("live r3", timeout=120)
    assert not browser.find_elements(By.CSS_SELECTOR, ".retry-link")
    show(browser, "#builds")
    cm.screenshot("replaced-failure-is-history")

    # test search marks the stem, not the stop word
    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/search/?mode=keyword&query=the+band")
    marks = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "mark")]
    assert marks and set(marks) == {"bands"}, marks
    cm.screenshot("test-search-marks-stems")

    # an unknown admin address: an admin page with a way home
    cm.visit("/admin/kb/no-such-page/")
    cm.wait_for_text("Page not found")
    assert "View site" not in cm.text()
    cm.screenshot("not-found")
    cm.click("#not-found-home")
    cm.wait_for_text("Recent actions")

    # the index admin's dashboard: what the local model embedded, not "No provider calls"
    ia = Person(browser, live_server.url, "ia-live")
    ia.log_in()
    ia.visit("/admin/ingestion/ingestiontask/dashboard/")
    ia.wait_for_text("chunks embedded in the last hour")
    assert "No provider calls recorded" not in ia.text()
    assert browser.find_elements(By.CSS_SELECTOR, "#embedded .embedded-chunks")
    assert document.pk
    show(browser, "#providers")
    ia.screenshot("dashboard-embedded")


def test_the_document_list_refreshes_its_counts_live(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
) -> None:
    """Issue 26, item 8: once a build finishes, the list's filter counts follow without a
    reload (the rows already did)."""
    ensure_roles(Group, Permission)
    make_user("cm-list", CONTENT_MANAGERS, kb.tenant)
    upload_text(kb, "travel", "Train tickets are reimbursed in second class.")
    cm = Person(browser, live_server.url, "cm-list")
    cm.log_in()
    cm.visit("/admin/kb/document/")
    cm.wait_for_text("Building (1)")
    filters = browser.find_element(By.ID, "changelist-filter")
    assert "Served (0)" in filters.text
    browser.execute_script("document.body.dataset.sameDocument = 'yes'")
    worker_factory()
    cm.wait_for_text("Served (1)", timeout=120)
    assert "Building (0)" in browser.find_element(By.ID, "changelist-filter").text
    assert browser.execute_script("return document.body.dataset.sameDocument") == "yes"
    cm.screenshot("list-counts-refreshed-live")
