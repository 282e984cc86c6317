"""Issue 37, items 8 and 9, in a real headless Chromium at 1,400 pixels, the walkthrough's
window: test search with a metadata filter built from the knowledge base's fields, hits in
words (what the number is, what found the hit, where in its file) and compare columns that show
whole lines; then the pages the walkthrough found cut off or worded for machines.

Screenshots land in artifacts/e2e/ (look at them)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from kb import storage
from kb.models import Chunk, Document, IndexVersion, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.documents import document_create, document_delete
from kb.services.index_versions import index_version_activate, index_version_create
from kb.services.metadata import metadata_field_save
from sources.services.sources import source_save
from tests.e2e.browser import Person, finds_at_once, make_user
from tests.helpers import run_pending
from tests.kb.test_swap_with_known_failures import new_version, upload_broken

pytestmark = pytest.mark.integration

PARAGRAPH = (
    "Train tickets are reimbursed in second class for journeys under four hours; longer "
    "journeys may be booked in first class when the traveller's manager agrees in writing. "
)


def sideways(browser: WebDriver, selector: str) -> int:
    """How many pixels the element scrolls sideways (0: everything in it is shown)."""
    return int(
        browser.execute_script(
            "const e = document.querySelector(arguments[0]); return e.scrollWidth - e.clientWidth",
            selector,
        )
    )


def show(browser: WebDriver, selector: str) -> None:
    browser.execute_script("document.querySelector(arguments[0]).scrollIntoView()", selector)


def add(kb: KnowledgeBase, key: str, text: str, metadata: dict[str, Any], title: str = "") -> None:
    document_create(
        kb=kb,
        key=key,
        title=title or key.replace("-", " ").capitalize(),
        stored=storage.store_bytes(text.encode()),
        media_type="text/markdown",
        original_name=f"{key}.md",
        metadata=metadata,
    )


def hit_boxes(browser: WebDriver) -> list[dict[str, float]]:
    """Each hit text's height, line height and hidden overflow, as the browser laid it out."""
    return list(
        browser.execute_script(
            """return [...document.querySelectorAll('.canon-hit-text')].map(e => ({
                 height: e.clientHeight, line: parseFloat(getComputedStyle(e).lineHeight),
                 hidden: e.scrollHeight - e.clientHeight}))"""
        )
    )


def test_test_search_filters_and_says_what_its_numbers_mean(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase
) -> None:
    ensure_roles(Group, Permission)
    make_user("adm2-search", INDEX_ADMINS, kb.tenant)
    metadata_field_save(kb=kb, name="department", type="string")
    metadata_field_save(kb=kb, name="approved", type="boolean")
    long_text = "# Travel\n\n" + "\n\n".join(PARAGRAPH * 10 for _ in range(4))
    add(kb, "travel-finance", long_text, {"department": "finance", "approved": True})
    add(kb, "travel-it", long_text.replace("Train", "Laptop"), {"department": "it"})
    add(
        kb,
        "travel-zh",
        "# 差旅\n\n火车票按二等座报销。出差需要提前申请。" * 3,
        {"department": "finance"},
    )
    run_pending()
    # a candidate of long chunks: a passage longer than a column shows at first
    candidate = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=128,
        chunk_size=2400,
        chunk_overlap=100,
    )
    run_pending()
    browser.set_window_size(1400, 1000)

    person = Person(browser, live_server.url, "adm2-search")
    person.log_in()
    person.visit(f"/admin/kb/knowledgebase/{kb.pk}/search/")
    # the builder offers only what the chosen field's type takes
    field = Select(browser.find_element(By.ID, "id_where_field"))
    op = browser.find_element(By.ID, "id_where_op")
    field.select_by_value("approved")
    disabled = {o.get_attribute("value") for o in op.find_elements(By.CSS_SELECTOR, "[disabled]")}
    assert {"contains", "gt", "in"} <= disabled and "eq" not in disabled
    assert browser.find_element(By.ID, "id_where_value").get_attribute("placeholder") == "yes or no"
    field.select_by_value("department")
    Select(op).select_by_value("eq")
    person.fill("id_where_value", "finance")
    person.fill("id_query", "train tickets reimbursed")
    Select(browser.find_element(By.ID, "id_mode")).select_by_value("hybrid")
    Select(browser.find_element(By.ID, "id_compare")).select_by_value(str(candidate.pk))
    person.fill("id_top_k", "5")
    person.click("input[type=submit][value=Search]")
    person.wait_for_text("Filtered by")
    show(browser, "#results")
    person.screenshot("test-search-filtered-compare")

    text = person.text()
    assert '{"field": "department", "op": "eq", "value": "finance"}' in text
    assert "travel-it" not in text  # the filter narrowed both columns
    assert "Candidate (ready) — v2" in text and "(building)" not in text
    assert "fusion estimate 0." in text and "It is relative, not a certainty" in text
    assert "Found by meaning (vector #1) and by its words (keyword #1)." in text
    assert "in another language than the query" in text  # the Chinese passage
    assert "bm25_share" not in text and "cross_x" not in text

    # the columns show whole lines: a long passage stops at a line's end, the rest on a click
    boxes = hit_boxes(browser)
    assert boxes and all(
        abs(b["height"] / b["line"] - round(b["height"] / b["line"])) < 0.05 for b in boxes
    ), boxes
    clamped = [b for b in boxes if b["hidden"] > 0]
    assert clamped, "a long passage is clamped"
    buttons = [
        b for b in browser.find_elements(By.CSS_SELECTOR, "button.canon-whole") if b.is_displayed()
    ]
    assert buttons
    buttons[0].click()
    assert buttons[0].text == "Show less"
    opened = browser.execute_script(
        "const e = document.querySelector('.canon-hit-text:not(.clamped)');"
        "return e.scrollHeight - e.clientHeight"
    )
    assert opened <= 1
    person.screenshot("test-search-whole-passage")

    # a JSON filter that cannot apply: the error names its place, nothing is searched
    person.fill("id_where_value", "")
    Select(browser.find_element(By.ID, "id_where_field")).select_by_value("")
    person.fill("id_filter", '{"and": [{"field": "department", "op": "gte", "value": 5}]}')
    person.click("input[type=submit][value=Search]")
    person.wait_for_text("filter.and[0].value")
    with finds_at_once(browser):
        assert not browser.find_elements(By.CSS_SELECTOR, "#results .side")
    person.screenshot("test-search-filter-error")


def test_the_walkthroughs_pages_fit_and_say_it_in_words(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase, tmp_path: Path, settings: Any
) -> None:
    ensure_roles(Group, Permission)
    make_user("adm2-ia", INDEX_ADMINS, kb.tenant)
    # a superuser: the sidebar of every app takes its scroll bar from the list's width
    make_user("adm2-root", CONTENT_MANAGERS, kb.tenant)
    User.objects.filter(username="adm2-root").update(is_superuser=True)
    metadata_field_save(kb=kb, name="department", type="string")
    for n in range(3):
        key = f"runtime-config-resource-consumption-{n}"
        add(kb, key, PARAGRAPH * 12, {}, title=key)  # no title of its own: the key
    upload_broken(kb, "scanned-expense-report-2026")
    upload_broken(kb, "withdrawn-report")
    run_pending()
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = new_version(kb)
    run_pending()
    withdrawn = Document.objects.get(kb=kb, key="withdrawn-report")
    document_delete(document_id=withdrawn.pk, actor=None, reason="withdrawn")
    index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)
    # a path as long as a share's usually is (the test's own tmp_path is twice that)
    share = Path(tempfile.mkdtemp(prefix="canon-"))
    settings.SOURCES_FOLDER_ROOTS = [str(share)]
    deep = share / "finance-and-controlling" / "policies" / "travel-2026"
    deep.mkdir(parents=True)
    assert 55 <= len(str(deep)) <= 80
    source = source_save(
        kb=kb, name="Finance share", slug="finance", kind="folder", config={"path": str(deep)}
    )
    failed = Document.objects.get(kb=kb, key="scanned-expense-report-2026")
    browser.set_window_size(1400, 1000)

    cm = Person(browser, live_server.url, "adm2-root")
    cm.log_in()
    cm.visit("/admin/kb/document/")
    cm.wait_for_text("Work queues:")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Documents"
    assert sideways(browser, "#changelist .results") == 0  # UPDATED AT is not cut off
    cm.screenshot("documents-list-fits")

    cm.visit("/admin/kb/document/add/")
    assert browser.find_element(By.ID, "id_metadata").get_attribute("value") == ""
    cm.screenshot("add-form-empty-metadata")

    cm.visit(f"/admin/kb/document/{failed.pk}/change/")
    cm.wait_for_text("Builds")
    assert cm.text().count("The PDF is damaged or truncated") == 3  # status, then one per build
    assert "PDF" in browser.find_element(By.CSS_SELECTOR, ".field-kind").text
    assert "application/pdf" not in cm.text()
    show(browser, "#builds")
    cm.screenshot("failed-document-error-once-per-build")

    chunk = Chunk.objects.filter(build__index_version=v2).order_by("-ordinal").first()
    assert chunk is not None
    cm.visit(f"/admin/kb/chunk/{chunk.pk}/change/")
    number = chunk.ordinal + 1
    assert f"chunk {number} of build" in cm.text() and f"Chunk:\n{number}" in cm.text()
    cm.screenshot("chunk-one-numbering")

    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    cm.wait_for_text("swapped the index version")
    timeline = browser.find_element(By.ID, "kb-timeline").text
    assert "API or system" not in timeline and "an API key or a sync" in timeline
    cm.screenshot("timeline-who")

    ia = Person(browser, live_server.url, "adm2-ia")
    ia.log_in()
    ia.visit("/admin/kb/indexversion/")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Index versions"
    assert sideways(browser, "#changelist .results") == 0  # CREATED AT is not cut off
    ia.screenshot("index-versions-list-fits")

    ia.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    row = browser.find_element(By.ID, "version-1")
    assert "Roll back to v1…" in row.text and "Compare…" not in row.text
    show(browser, "#index-versions")
    ia.screenshot("retired-version-offers-rollback")

    ia.visit(f"/admin/kb/knowledgebase/{kb.pk}/index-versions/new/")
    assert "BENCHMARKS" not in ia.text() and "half the memory" in ia.text()
    ia.screenshot("new-version-facts")

    ia.visit("/admin/ingestion/ingestiontask/dashboard/")
    ia.wait_for_text("Failed and dead tasks")
    failures = browser.find_element(By.XPATH, "//h2[text()='Failed and dead tasks']/..").text
    assert "withdrawn-report" not in failures and "scanned-expense-report-2026" in failures
    assert "failed for a document since deleted (history)" in ia.text()
    ia.screenshot("dashboard-without-deleted-failure")

    ia.visit(f"/admin/sources/source/{source.pk}/change/")
    crumbs = browser.find_element(By.CSS_SELECTOR, ".breadcrumbs").text
    assert "Sources › Sources" not in crumbs and crumbs.startswith("Home › Syncing › Sources")
    path = browser.find_element(By.ID, "id_config__folder__path")
    assert path.get_attribute("value") == str(deep)
    assert (
        int(
            browser.execute_script(
                "return arguments[0].scrollWidth - arguments[0].clientWidth", path
            )
        )
        <= 0
    )
    ia.screenshot("source-path-whole")
    shutil.rmtree(share)
    assert IndexVersion.objects.filter(kb=kb).count() == 2
