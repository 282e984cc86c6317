"""What is served, and index versions, as people see them in headless Chromium (issue 13, items
1, 2 and 9): a content manager uploads, uploads a new revision and deletes a document, and the
page's "served now" is what search returns; an index admin builds a new index version, is not
offered the swap until it is built, sees it ready at n/n, compares the two versions side by side,
swaps, and rolls back to the version the link names. A real Celery worker builds everything.
Screenshots land in artifacts/e2e/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from kb.models import Build, Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from retrieval.principals import Principal
from retrieval.search.engine import search
from retrieval.search.hits import SearchFilters
from tests.e2e.browser import Person, finds_at_once, make_user
from tests.helpers import upload_text

pytestmark = pytest.mark.integration


def searched_builds(kb: KnowledgeBase, key: str, query: str) -> set[int]:
    """The builds of document `key` search returns to a reader of the tenant now."""
    kb.refresh_from_db()
    reader = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    only = SearchFilters(document_keys=(key,))
    return {h.build_id for h in search(principal=reader, kb=kb, query=query, filters=only).hits}


def roles_on_page(browser: WebDriver) -> dict[int, str]:
    """Build id -> the role the Builds box shows for it."""
    return {
        int(row.get_attribute("data-build") or 0): row.find_element(By.CSS_SELECTOR, ".role").text
        for row in browser.find_elements(By.CSS_SELECTOR, "#builds tr[data-build]")
    }


def revision_box_roles(browser: WebDriver) -> dict[int, str]:
    """Build id -> the role the Revisions box shows for it."""
    return {
        int(el.get_attribute("data-build") or 0): el.find_element(By.CSS_SELECTOR, ".role").text
        for el in browser.find_elements(By.CSS_SELECTOR, ".canon-build[data-build]")
    }


def show(browser: WebDriver, element_id: str) -> None:
    """Scroll `element_id` to the top of the window, so the screenshot shows it."""
    browser.execute_script(f"document.getElementById('{element_id}').scrollIntoView()")


def served_on_page(browser: WebDriver) -> set[int]:
    return {pk for pk, role in roles_on_page(browser).items() if role == "served now"}


def test_what_is_served_and_index_versions_in_a_real_browser(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    worker = worker_factory()
    ensure_roles(Group, Permission)
    make_user("cm-iv", CONTENT_MANAGERS, kb.tenant)
    make_user("ia-iv", INDEX_ADMINS, kb.tenant)
    upload_text(kb, "leave", "# Leave\n\nPaid leave is twenty-five days a year.\n")
    first = tmp_path / "travel.md"
    first.write_text("# Travel\n\nTrain tickets are reimbursed in second class.\n")
    second = tmp_path / "travel-v2.md"
    second.write_text("# Travel\n\nTrain tickets are reimbursed in first class.\n")
    memo = tmp_path / "memo.md"
    memo.write_text("# Memo\n\nThe canteen closes early on Fridays.\n")

    # a content manager uploads a document; the page serves what search returns
    carol = Person(browser, live_server.url, "cm-iv")
    carol.log_in()
    carol.visit("/admin/kb/document/add/")
    carol.fill("id_key", "travel")
    carol.fill("id_title", "Travel policy")
    browser.find_element(By.ID, "id_file").send_keys(str(first))
    carol.click("input[name=_continue]")
    carol.wait_for_text("live r1")
    document = Document.objects.get(key="travel")

    # a new revision, with no worker running: r1 is served, r2 queued, in both boxes
    worker.stop()
    browser.find_element(By.ID, "id_new_revision").send_keys(str(second))
    carol.click("input[name=_continue]")
    carol.wait_for_text("r2 queued")
    queued = Build.objects.get(document=document, revision__number=2).pk
    assert revision_box_roles(browser)[queued] == roles_on_page(browser)[queued] == "queued"
    assert served_on_page(browser) == searched_builds(kb, "travel", "train tickets")
    show(browser, "revisions-group")
    carol.screenshot("new-revision-queued")

    # once a worker builds it, both boxes follow without a reload: r2 is served, as in search
    worker = worker_factory()
    carol.wait_for_text("live r2")
    carol.wait_for_text("served now")
    show(browser, "builds")
    carol.screenshot("new-revision-served")
    assert served_on_page(browser) == searched_builds(kb, "travel", "train tickets")
    assert len(served_on_page(browser)) == 1
    assert revision_box_roles(browser) == roles_on_page(browser)  # the two boxes agree
    assert "live" not in " ".join(roles_on_page(browser).values())

    # a deleted document serves nothing; its build is kept for restore
    carol.visit("/admin/kb/document/add/")
    carol.fill("id_key", "memo")
    carol.fill("id_title", "Canteen memo")
    browser.find_element(By.ID, "id_file").send_keys(str(memo))
    carol.click("input[name=_continue]")
    carol.wait_for_text("live r1")
    carol.click("#delete-link")
    carol.fill("id_reason", "outdated")
    carol.click("input[type=submit]")
    carol.wait_for_text("nothing served")
    show(browser, "builds")
    carol.screenshot("deleted-kept-for-restore")
    assert set(roles_on_page(browser).values()) == {"kept for restore (document deleted)"}
    assert searched_builds(kb, "memo", "canteen") == set()

    # an index admin creates a new index version; with no worker running nothing is built yet
    worker.stop()
    ian = Person(browser, live_server.url, "ia-iv")
    ian.log_in()
    ian.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    ian.click("#new-version-link")
    ian.fill("id_model", "canon-hash-small")
    ian.fill("id_dimensions", "128")
    ian.fill("id_chunk_size", "400")
    ian.fill("id_chunk_overlap", "50")
    # with the English list (issue 38): a second, English-only embedding of each passage
    english = browser.find_element(By.ID, "id_english_list")
    assert not english.is_selected()  # not the default for a `hash` knowledge base
    english.click()
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", english)
    ian.screenshot("new-version-form-english-list")
    ian.click("input[type=submit]")
    ian.wait_for_text("is building")
    row = browser.find_element(By.ID, "version-2")
    assert "building: 0/2 built" in row.text
    with finds_at_once(browser):
        assert not row.find_elements(By.CSS_SELECTOR, ".activate-link"), "swap offered at 0/2"
    assert "400 / 50" in row.text and "128d cosine" in row.text
    assert "800 / 100" in browser.find_element(By.ID, "version-1").text
    show(browser, "index-versions")
    ian.screenshot("version-building-no-swap")
    row.find_element(By.CSS_SELECTOR, ".compare-link").click()
    ian.wait_for_text("The swap is offered once every document is built")
    with finds_at_once(browser):
        assert not browser.find_elements(By.ID, "id_reason")
    ian.screenshot("compare-while-building")

    # once a worker has built every document, v2 is ready and the swap is offered
    worker_factory()
    ian.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    ian.wait_for_text("ready: 2/2 built", reload=True)
    show(browser, "index-versions")
    ian.screenshot("version-ready")

    # the swap page compares the two side by side before anything changes
    ian.click("#version-2 .activate-link")
    ian.wait_for_text("documents covered")
    table = browser.find_element(By.ID, "version-comparison")
    for label in ("chunk size", "chunk overlap", "model", "dimensions", "pipeline", "chunks"):
        assert label in table.text, label
    differing = [
        tr.find_element(By.TAG_NAME, "th").text
        for tr in table.find_elements(By.CSS_SELECTOR, "tr.differs")
    ]
    assert {"chunk size", "chunk overlap", "model", "dimensions", "English list"} <= set(differing)
    assert "Kept in the knowledge base's timeline" in ian.text()
    ian.screenshot("swap-side-by-side")
    ian.fill("id_reason", "smaller chunks")
    ian.click("input[type=submit]")
    ian.wait_for_text("Index version 2 is active")
    assert (
        "retired; still built for rollback until" in browser.find_element(By.ID, "version-1").text
    )
    link = browser.find_element(By.ID, "version-rollback-link")
    assert link.text == "Roll back to the previous version (v1)…"
    show(browser, "index-versions")
    ian.screenshot("swapped-v1-retired")

    # the rollback page names the version it goes back to, with the comparison
    link.click()
    ian.wait_for_text("back to index version 1")
    assert "roll back to v1" in browser.find_element(By.ID, "version-comparison").text.lower()
    ian.screenshot("rollback-names-v1")
    ian.fill("id_reason", "recall dropped")
    ian.click("input[type=submit]")
    ian.wait_for_text("Index version 1 is active again")
    with finds_at_once(browser):
        assert not browser.find_elements(By.ID, "version-rollback-link"), "a rollback forward"
    v2_row = browser.find_element(By.ID, "version-2").text
    assert "retired; still built for rollback until" in v2_row
    show(browser, "index-versions")
    ian.screenshot("rolled-back-v2-retired")

    # a new revision after all that is built into both; exactly one build is served
    upload_text(kb, "travel", "# Travel\n\nNight trains are reimbursed in sleeper class.\n")
    carol.log_in()
    carol.visit(f"/admin/kb/document/{document.pk}/change/")
    carol.wait_for_text("live r3", reload=True)
    carol.wait_for_text("kept for rollback (retired v2)", reload=True)
    show(browser, "builds")
    carol.screenshot("after-rollback-one-served")
    roles = roles_on_page(browser)
    assert list(roles.values()).count("served now") == 1
    assert served_on_page(browser) == searched_builds(kb, "travel", "night trains")
    assert not any("live" in role.lower() for role in roles.values())
    carol.visit("/admin/kb/build/")
    carol.screenshot("builds-list-roles")
    call_command("kb_verify")
