"""A knowledge base's home, its timeline, test search and chunk pages in a real headless
Chromium, with a real Celery worker building the uploads: a content manager (not a superuser,
outside the hr group) lands on her knowledge base's home, watches an ingest's bar fill without
reloading, uploads; an index admin in hr approves, builds a new index version, compares it with
the active one in test search, swaps; the timeline shows each step, and names nothing of hr to
the content manager. Screenshots land in artifacts/e2e/; with CANON_GUIDE_IMG=<dir> the admin
guide's pictures (docs/img/) are taken too, at 1200x800."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.urls import reverse
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from kb.models import Document, IndexVersion, KnowledgeBase, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.e2e.browser import Person, make_user
from tests.retrieval.factories import upload

pytestmark = pytest.mark.integration

MARK_HR = "payscalexq"
GUIDE = os.environ.get("CANON_GUIDE_IMG")


def guide(person: Person, name: str, *, scroll_to: str | None = None) -> None:
    """A picture for docs/ADMIN_GUIDE.md (only with CANON_GUIDE_IMG), 1200x800, then the
    test's own screenshot at the usual size."""
    driver = person.driver
    if GUIDE:
        size = driver.get_window_size()
        driver.set_window_size(1200, 800)
        inner = driver.execute_script("return window.innerHeight")
        driver.set_window_size(1200, 800 + 800 - inner)  # the window's frame is not the page
        if scroll_to:
            driver.execute_script(
                "document.querySelector(arguments[0]).scrollIntoView()", scroll_to
            )
        Path(GUIDE).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(GUIDE) / f"{name}.png"))
        driver.set_window_size(size["width"], size["height"])
    if scroll_to:
        driver.execute_script("document.querySelector(arguments[0]).scrollIntoView()", scroll_to)
    person.screenshot(name)


def test_the_knowledge_base_home_timeline_test_search_and_chunks_in_a_real_browser(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    ensure_roles(Group, Permission)
    make_user("cora", CONTENT_MANAGERS, kb.tenant)  # no access groups
    make_user("iris", INDEX_ADMINS, kb.tenant)
    TenantMembership.objects.filter(user__username="iris").update(access_groups=["hr"])
    handbook = tmp_path / "travel.md"
    handbook.write_text(
        "# Travel\n\n## Trains\n\nTrain tickets are reimbursed in second class. Receipts are "
        "kept for ten years.\n\n## Hotels\n\nHotels are booked through the travel desk; a "
        "night costs at most 120 euros in a capital city.\n"
    )
    second = tmp_path / "travel-v2.md"
    second.write_text(handbook.read_text().replace("second class", "first class"))

    # a content manager with one knowledge base lands on its summary, the apps below it
    cora = Person(browser, live_server.url, "cora")
    cora.log_in()
    assert "your knowledge base" in cora.text() and "Documents" in cora.text()
    assert browser.find_elements(By.ID, "kb-landing")
    assert browser.find_elements(By.CSS_SELECTOR, ".app-kb")  # the app list is still there
    cora.screenshot("landing")

    # she uploads a document while no worker runs yet, and two more arrive through the API
    cora.visit("/admin/kb/document/add/")
    assert Select(browser.find_element(By.ID, "id_kb")).first_selected_option.text == str(kb)
    cora.fill("id_key", "travel")
    cora.fill("id_title", "Travel policy")
    browser.find_element(By.ID, "id_file").send_keys(str(handbook))
    guide(cora, "upload")
    cora.click("input[name=_continue]")
    upload(kb, "vacation", "# Vacation\n\nVacation is 25 days a year, taken in whole days.")
    upload(kb, "salaries", f"# Salaries\n\n{MARK_HR} pay bands are reviewed every March.", ("hr",))

    # the home shows the ingest waiting; a worker starts and the bar fills without a reload
    cora.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    cora.wait_for_text("Ingest into v1 (active)")
    assert "0/3 built, 3 running" in cora.text()
    cora.screenshot("home-ingest-waiting")
    worker_factory()
    cora.wait_for_text("Nothing is being built", timeout=120)
    assert browser.find_element(By.CSS_SELECTOR, '[data-count="served"]').text == "3"
    assert "a document you cannot read" in cora.text()  # the hr upload, unnamed
    assert MARK_HR not in browser.page_source.lower()
    cora.screenshot("home-built")

    # the knowledge base now requires approval; her new revision waits for the index admin
    kb.require_approval = True
    kb.save()
    document = Document.objects.get(key="travel")
    cora.visit(f"/admin/kb/document/{document.pk}/change/")
    browser.find_element(By.ID, "id_new_revision").send_keys(str(second))
    cora.click("input[name=_continue]")
    cora.wait_for_text("r2 awaiting approval", timeout=120, reload=True)
    guide(cora, "document", scroll_to=".field-status")

    iris = Person(browser, live_server.url, "iris")
    iris.log_in()
    iris.visit(f"/admin/kb/document/{document.pk}/change/")
    iris.click(".approve-link")
    iris.wait_for_text("revision 2")
    iris.fill("id_reason", "policy update approved")
    guide(iris, "approve")
    iris.click("input[type=submit]")
    iris.wait_for_text("live r2", reload=True)

    # he deletes the vacation document, then builds a new index version with smaller chunks
    vacation = Document.objects.get(key="vacation")
    iris.visit(f"/admin/kb/document/{vacation.pk}/soft-delete/")
    iris.fill("id_reason", "moved to the HR portal")
    iris.click("input[type=submit]")
    iris.wait_for_text("is deleted")
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    iris.click("#new-version-link")
    iris.fill("id_model", "canon-hash-small")
    iris.fill("id_dimensions", "128")
    iris.fill("id_chunk_size", "120")
    iris.fill("id_chunk_overlap", "20")
    iris.click("input[type=submit]")
    iris.wait_for_text("is building")
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    iris.wait_for_text("Re-index into v2")
    iris.wait_for_text("2/2 built", timeout=120)  # the deleted document is not built
    iris.screenshot("home-reindexed")

    # test search: as himself (hr), as a key without groups, and v2 beside v1
    iris.click("#test-search-link")
    iris.fill("id_query", "reimbursed pay bands")
    Select(browser.find_element(By.ID, "id_mode")).select_by_value("keyword")
    iris.click("input[type=submit][value=Search]")
    iris.wait_for_text("Why visible")
    assert MARK_HR in iris.text() and "matched: hr" in iris.text()
    assert "Why this rank: keyword #1 (" in iris.text()
    Select(browser.find_element(By.ID, "id_mode")).select_by_value("hybrid")
    iris.click("input[type=submit][value=Search]")
    iris.wait_for_text("fused")
    guide(iris, "test-search-hybrid", scroll_to="#results")
    Select(browser.find_element(By.ID, "id_mode")).select_by_value("keyword")
    iris.click("#id_as_key")
    iris.click("input[type=submit][value=Search]")
    iris.wait_for_text("Why visible")
    assert MARK_HR not in iris.text()  # a key without hr never reads it
    candidate = IndexVersion.objects.get(kb=kb, number=2)
    Select(browser.find_element(By.ID, "id_compare")).select_by_value(str(candidate.pk))
    iris.click("#id_as_key")  # as himself again
    iris.click("input[type=submit][value=Search]")
    iris.wait_for_text("Candidate (ready) — v2")  # it covers the knowledge base
    sides = browser.find_elements(By.CSS_SELECTOR, "#results .side")
    assert len(sides) == 2 and "v1" in sides[0].text and "v2" in sides[1].text
    assert browser.find_elements(By.ID, "version-comparison")
    guide(iris, "test-search-compare", scroll_to="#results")

    # the chunks of a hit's build: the parsed text with its boundaries, then every chunk
    travel_hit = next(
        h for h in sides[1].find_elements(By.CSS_SELECTOR, ".hit") if "travel" in h.text
    )
    travel_hit.find_element(By.CSS_SELECTOR, "a[href*='of-build']").click()
    iris.wait_for_text("Parsed text")
    assert "Chunks:" in iris.text() and "Travel › Trains" in iris.text()
    guide(iris, "chunks")

    # the swap, through its confirmation page
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    iris.click("#version-2 .activate-link")
    iris.wait_for_text("Make index version 2 active")
    iris.fill("id_reason", "smaller chunks answer short questions better")
    guide(iris, "swap")
    iris.click("input[type=submit]")
    iris.wait_for_text("Index version 2 is active")

    # the timeline names each step with who and why
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    iris.wait_for_text("swapped the index version")
    timeline = browser.find_element(By.ID, "kb-timeline").text
    for words in (
        "smaller chunks answer short questions better",
        "new index version",
        "moved to the HR portal",
        "policy update approved",
        "approved",
        "new revision",
    ):
        assert words in timeline, words
    guide(iris, "home")
    guide(iris, "timeline", scroll_to="#kb-timeline-module")
    iris.visit(reverse("admin:ingestion_dashboard"))
    guide(iris, "dashboard")

    # the content manager's timeline and test search name nothing of hr
    cora.log_in()
    cora.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    assert "a document you cannot read" in cora.text()
    assert MARK_HR not in browser.page_source.lower() and "salaries" not in cora.text()
    cora.screenshot("timeline-outside-hr")
    cora.visit(f"/admin/kb/knowledgebase/{kb.pk}/search/?query=pay+bands&mode=keyword")
    cora.wait_for_text("No hits")
    assert MARK_HR not in browser.page_source.lower()
    cora.screenshot("test-search-outside-hr")
