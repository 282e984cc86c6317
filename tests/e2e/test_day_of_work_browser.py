"""A day of real work in a real headless Chromium (issue 26, items 1-4), a non-superuser content
manager among the users, a real Celery worker where something must be built:

1. a knowledge base with one unparseable file (a truncated PDF) swaps to a new index version,
   the swap page naming that file; a version that would serve a document worse is stuck, says
   so on the home and its page, and the content manager's retry is the way out;
2. a document page left open through the build and then saved keeps the extracted title;
3. a bulk upload whose file is named like an existing document asks first;
4. the content manager gets one message for a restricted and a deleted key, and *Add* points
   her to the New revision field of a document she may read.

Screenshots land in artifacts/e2e/ (look at them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from kb.models import Build, Document, IndexVersion, KnowledgeBase, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.documents import document_delete
from retrieval.api.uploads import key_unavailable
from tests.conftest import wait_for
from tests.e2e.browser import Person, finds_at_once, make_user
from tests.kb.test_swap_with_known_failures import BROKEN_PDF, fail_build
from tests.retrieval.factories import upload

pytestmark = pytest.mark.integration


def show(browser: WebDriver, selector: str) -> None:
    browser.execute_script("document.querySelector(arguments[0]).scrollIntoView()", selector)


def messages_on_page(browser: WebDriver) -> list[str]:
    return [el.text for el in browser.find_elements(By.CSS_SELECTOR, "ul.messagelist li")]


def new_version_in_browser(ian: Person, kb: KnowledgeBase, model: str) -> None:
    ian.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    ian.click("#new-version-link")
    ian.fill("id_model", model)
    ian.fill("id_dimensions", "128")
    ian.fill("id_chunk_size", "400")
    ian.fill("id_chunk_overlap", "50")
    ian.click("input[type=submit]")
    ian.wait_for_text("is building")


def test_one_unparseable_file_does_not_block_a_swap(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    worker = worker_factory()
    ensure_roles(Group, Permission)
    make_user("cm-swap", CONTENT_MANAGERS, kb.tenant)
    make_user("ia-swap", INDEX_ADMINS, kb.tenant)
    (tmp_path / "travel.md").write_text("# Travel\n\nTrain tickets are reimbursed.\n")
    (tmp_path / "leave.md").write_text("# Leave\n\nPaid leave is twenty-five days a year.\n")
    (tmp_path / "scan.pdf").write_bytes(BROKEN_PDF)  # a truncated PDF

    # a content manager uploads three files; the PDF fails to build
    cm = Person(browser, live_server.url, "cm-swap")
    cm.log_in()
    cm.visit("/admin/kb/document/upload/")
    browser.find_element(By.ID, "id_files").send_keys(
        "\n".join(str(tmp_path / name) for name in ("travel.md", "leave.md", "scan.pdf"))
    )
    cm.click("input[type=submit]")
    cm.wait_for_text("New document scan from scan.pdf")
    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    cm.wait_for_text("damaged or truncated", reload=True)

    # an index admin builds v2; once built, the home's bar says ready to swap, not building
    ian = Person(browser, live_server.url, "ia-swap")
    ian.log_in()
    new_version_in_browser(ian, kb, "canon-hash-small")
    v2 = IndexVersion.objects.get(kb=kb, number=2)
    ian.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    ian.wait_for_text("Re-index into v2 (ready to swap)", timeout=120)
    bar = browser.find_element(By.CSS_SELECTOR, '.canon-bar[data-version="2"]').text
    assert "(building)" not in bar and "ready: 2/3 built; 1 failed as in v1" in bar
    show(browser, "#kb-progress")
    ian.screenshot("home-v2-ready-to-swap")

    # the swap is offered; its page names the PDF, linked, served by neither version
    ian.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    row = browser.find_element(By.ID, "version-2")
    assert "ready: 2/3 built; 1 failed as in v1" in row.text
    show(browser, "#index-versions")
    ian.screenshot("v2-ready-with-a-known-failure")
    row.find_element(By.CSS_SELECTOR, ".activate-link").click()
    ian.wait_for_text("Served as before: failed in both versions (1)")
    known = browser.find_element(By.ID, "known-failures-table")
    assert "r1 failed in v2; v1 does not serve it either" in known.text
    link = known.find_element(By.CSS_SELECTOR, "a").get_attribute("href") or ""
    scan = Document.objects.get(kb=kb, key="scan")
    assert link.endswith(f"/admin/kb/document/{scan.pk}/change/")
    show(browser, "#known-failures")
    ian.screenshot("swap-names-the-known-failure")
    ian.fill("id_reason", "smaller chunks")
    ian.submit("#confirm-button")
    ian.wait_for_text("Index version 2 is active")
    kb.refresh_from_db()
    assert kb.active_index_version_id == v2.pk

    # a version that would serve a document worse is stuck, and says what to do
    worker.stop()
    new_version_in_browser(ian, kb, "canon-hash-tiny")
    v3 = IndexVersion.objects.get(kb=kb, number=3)
    leave = Build.objects.get(index_version=v3, document__key="leave")
    fail_build(leave, "the provider refused the input")
    worker = worker_factory()
    cm.log_in()
    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    cm.wait_for_text("Re-index into v3 (stuck)", timeout=120)
    bar = browser.find_element(By.CSS_SELECTOR, '.canon-bar[data-version="3"]').text
    assert "1 failed that v2 serves: retry, fix or delete it" in bar and "(building)" not in bar
    show(browser, "#kb-progress")
    cm.screenshot("home-v3-stuck-names-the-way-out")
    ian.log_in()
    ian.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    browser.find_element(By.CSS_SELECTOR, "#version-3 .compare-link").click()
    ian.wait_for_text("What keeps the swap back (1)")
    blocking = browser.find_element(By.ID, "blocking-documents").text
    assert "r1 failed in v3, but v2 serves r1: the swap would stop serving it" in blocking
    assert "Retry its build if the failure was temporary" in blocking
    with finds_at_once(browser):
        assert not browser.find_elements(By.ID, "id_reason")
    show(browser, "#swap-blockers")
    ian.screenshot("v3-compare-what-keeps-the-swap-back")

    # the content manager follows the way out: she retries the failed build
    cm.log_in()
    cm.visit(f"/admin/kb/document/{leave.document_id}/change/")
    browser.find_element(By.CSS_SELECTOR, f"#build-{leave.pk} .retry-link").click()
    cm.fill("id_reason", "the provider is back")
    cm.submit("#confirm-button")
    cm.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    cm.wait_for_text("Re-index into v3 (ready to swap)", timeout=120, reload=True)
    cm.screenshot("home-v3-ready-after-retry")


def test_a_page_left_open_through_the_build_keeps_the_extracted_title(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    ensure_roles(Group, Permission)
    make_user("cm-title", CONTENT_MANAGERS, kb.tenant)
    TenantMembership.objects.filter(user__username="cm-title").update(access_groups=["finance"])
    resource = tmp_path / "runtime-config-resource.html"
    resource.write_text(
        "<html><head><title>20.4. Resource Consumption</title></head><body><main>"
        "<h1>20.4. Resource Consumption</h1><p>shared_buffers sets the memory.</p>"
        "</main></body></html>"
    )

    # she uploads without a title while no worker runs: the page holds the key as its title
    cm = Person(browser, live_server.url, "cm-title")
    cm.log_in()
    cm.visit("/admin/kb/document/add/")
    cm.fill("id_key", "runtime-config-resource")
    browser.find_element(By.ID, "id_file").send_keys(str(resource))
    cm.click("input[name=_continue]")
    cm.wait_for_text("was added successfully")
    field = browser.find_element(By.ID, "id_title")
    assert field.get_attribute("value") == "runtime-config-resource"
    cm.screenshot("page-open-title-is-the-key")

    # the page stays open while the worker builds; its script does not get to refresh the
    # title (a laptop asleep, say): its requests never answer
    browser.execute_script("window.fetch = function () { return new Promise(function () {}); }")
    worker_factory()
    document = Document.objects.get(kb=kb, key="runtime-config-resource")
    wait_for(
        lambda: Document.objects.get(pk=document.pk).title == "20.4. Resource Consumption",
        timeout=120,
        what="the extracted title",
    )
    assert field.get_attribute("value") == "runtime-config-resource"  # the page never knew

    # she gives it a group and saves: the title stays the file's
    cm.fill("id_access_groups", "finance")
    cm.click("input[name=_continue]")
    cm.wait_for_text("was changed successfully")
    document.refresh_from_db()
    assert (document.title, document.access_groups) == ("20.4. Resource Consumption", ["finance"])
    assert browser.find_element(By.ID, "id_title").get_attribute("value") == document.title
    cm.screenshot("saved-keeps-the-extracted-title")

    # a page whose script runs shows the title the file gave as soon as it is parsed
    second = tmp_path / "runtime-config-wal.html"
    second.write_text(resource.read_text().replace("20.4. Resource Consumption", "20.5. WAL"))
    cm.visit("/admin/kb/document/add/")
    cm.fill("id_key", "runtime-config-wal")
    browser.find_element(By.ID, "id_file").send_keys(str(second))
    cm.click("input[name=_continue]")
    cm.wait_for_text("served now", timeout=120)
    wait_for(
        lambda: browser.find_element(By.ID, "id_title").get_attribute("value") == "20.5. WAL",
        timeout=30,
        relay=False,
        what="the title field refreshed",
    )
    cm.screenshot("title-refreshed-live")


def test_a_clashing_bulk_upload_asks_first(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase, tmp_path: Path
) -> None:
    ensure_roles(Group, Permission)
    make_user("cm-clash", CONTENT_MANAGERS, kb.tenant)
    upload(kb, "travel-expenses", "Travel expenses are reimbursed within 30 days.")
    travel = Document.objects.get(kb=kb, key="travel-expenses")
    (tmp_path / "travel-expenses.txt").write_text("The canteen menu for next week.")
    (tmp_path / "canteen.txt").write_text("The canteen opens at noon.")

    cm = Person(browser, live_server.url, "cm-clash")
    cm.log_in()
    cm.visit("/admin/kb/document/upload/")
    assert "asks you first" in cm.text()
    browser.find_element(By.ID, "id_files").send_keys(
        "\n".join(str(tmp_path / name) for name in ("travel-expenses.txt", "canteen.txt"))
    )
    cm.click("input[type=submit]")

    # the new document goes ahead; the clashing file waits, listed with its document
    cm.wait_for_text("1 file would become a new revision")
    assert "New document canteen from canteen.txt" in cm.text()
    clashes = browser.find_element(By.ID, "clashes").text
    assert "travel-expenses.txt" in clashes and "revision 2 of" in clashes
    link = browser.find_element(By.CSS_SELECTOR, "#clashes a.clash-document")
    assert (link.get_attribute("href") or "").endswith(f"/admin/kb/document/{travel.pk}/change/")
    assert travel.revisions.count() == 1  # nothing replaced yet
    cm.screenshot("clashing-upload-asks-first")

    # she confirms: now it is revision 2
    cm.submit("#confirm-button")
    cm.wait_for_text("Revision 2 of travel-expenses from travel-expenses.txt")
    assert travel.revisions.count() == 2
    cm.screenshot("clash-confirmed")

    # the same upload again, declined: nothing changes
    cm.visit("/admin/kb/document/upload/")
    browser.find_element(By.ID, "id_files").send_keys(str(tmp_path / "travel-expenses.txt"))
    cm.click("input[type=submit]")
    cm.wait_for_text("1 file would become a new revision")
    cm.click("#cancel-button")
    cm.wait_for_text("Not uploaded, as you chose: travel-expenses.txt.")
    assert travel.revisions.count() == 2


def test_a_restricted_and_a_deleted_key_get_the_same_message(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase, tmp_path: Path
) -> None:
    ensure_roles(Group, Permission)
    make_user("cm-keys", CONTENT_MANAGERS, kb.tenant)  # not in hr
    upload(kb, "salary-bands", "payscalexq bands are reviewed every March.", ("hr",))
    gone = upload(kb, "old-memo", "An old memo.").document
    document_delete(document_id=gone.pk, actor=None)
    travel = upload(kb, "travel", "Train tickets are reimbursed.").document
    (tmp_path / "salary-bands.txt").write_text("New bands.")
    (tmp_path / "old-memo.txt").write_text("A new memo.")

    cm = Person(browser, live_server.url, "cm-keys")
    cm.log_in()
    cm.visit("/admin/kb/document/upload/")
    browser.find_element(By.ID, "id_files").send_keys(
        "\n".join(str(tmp_path / name) for name in ("salary-bands.txt", "old-memo.txt"))
    )
    cm.click("input[type=submit]")
    cm.wait_for_text("Not uploaded: old-memo.txt")
    restricted, deleted = sorted(messages_on_page(browser), reverse=True)
    assert (
        restricted == f"Not uploaded: salary-bands.txt: {key_unavailable('salary-bands').message}"
    )
    assert restricted.replace("salary-bands", "K") == deleted.replace("old-memo", "K")
    assert "payscalexq" not in browser.page_source
    cm.screenshot("upload-one-message-for-restricted-and-deleted")

    # Add: the same answer for both; a document she may read points to its New revision field
    def add(key: str) -> str:
        cm.visit("/admin/kb/document/add/")
        cm.fill("id_key", key)
        browser.find_element(By.ID, "id_file").send_keys(str(tmp_path / "old-memo.txt"))
        cm.click("input[name=_continue]")
        cm.wait_for_text("Please correct the error below")
        return str(browser.find_element(By.CSS_SELECTOR, ".field-key .errorlist").text)

    assert add("salary-bands") == key_unavailable("salary-bands").message
    cm.screenshot("add-restricted-key")
    assert add("old-memo") == key_unavailable("old-memo").message
    cm.screenshot("add-deleted-key")
    assert add("travel").startswith("A document with key “travel” already exists.")
    cm.screenshot("add-readable-key-points-to-new-revision")
    cm.click(".field-key .errorlist a.new-revision-link")
    cm.wait_for_text("New revision")
    assert browser.current_url.endswith(f"/admin/kb/document/{travel.pk}/change/#id_new_revision")
    cm.screenshot("new-revision-field")
