"""A source in a real headless Chromium, with a real Celery worker running its syncs: an index
admin adds a folder source through the form (only the chosen kind's settings show), asks for
*Sync now* behind its confirmation page, watches the run's bar and counts fill without a reload,
and finds the documents live, each naming its source; a file deleted at the source is deleted
by the next run, with the timeline's reason. A content manager sees the source and its runs
but is offered no action. Screenshots land in artifacts/e2e/; with CANON_GUIDE_IMG=<dir> the
admin guide's pictures are taken too (tests/e2e/test_kb_home_browser.py `guide`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from kb.models import Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from sources.models import Source, SyncRun
from tests.conftest import Worker, wait_for
from tests.e2e.browser import Person, finds_at_once, make_user
from tests.e2e.test_kb_home_browser import guide
from tests.sources.conftest import SOURCES_KEY

pytestmark = pytest.mark.integration


def sources_settings(tmp_path: Path) -> None:
    """What tests/sources/conftest.py sets, for this test outside that folder: the share under
    an allowed root, loopback allowed, a key for credentials."""
    settings.SOURCES_ALLOW_PRIVATE = True
    settings.SOURCES_KEY = SOURCES_KEY
    settings.SOURCES_CACHE_ROOT = tmp_path / "sources-cache"
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]


def test_an_index_admin_adds_a_folder_source_syncs_it_and_watches_the_run(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Worker],
    kb: KnowledgeBase,
    tmp_path: Path,
    settings: Any,
) -> None:
    sources_settings(tmp_path)
    worker_factory(
        CANON_SOURCES_ALLOW_PRIVATE="1",
        CANON_SOURCES_KEY=SOURCES_KEY,
        CANON_SOURCES_CACHE_ROOT=str(tmp_path / "sources-cache"),
        CANON_SOURCES_FOLDER_ROOTS=os.pathsep.join([str(tmp_path)]),
    )
    ensure_roles(Group, Permission)
    make_user("iris", INDEX_ADMINS, kb.tenant)
    make_user("cora", CONTENT_MANAGERS, kb.tenant)
    share = tmp_path / "share"
    (share / "policies").mkdir(parents=True)
    (share / "drafts").mkdir()
    (share / "policies" / "leave.md").write_text(
        "# Leave\n\nEvery employee has twenty-five days of paid leave a year.\n"
    )
    (share / "policies" / "travel.md").write_text(
        "# Travel\n\nTrain tickets are reimbursed in second class.\n"
    )
    (share / "drafts" / "bonus.md").write_text("# Bonus\n\nNot decided yet.\n")
    (share / "policies" / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a PDF at all")

    # the home offers a source; the form shows the folder's settings once folder is chosen
    iris = Person(browser, live_server.url, "iris")
    iris.log_in()
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    iris.wait_for_text("No source: documents arrive by upload only.")
    iris.click("#add-source-link")
    Select(browser.find_element(By.ID, "id_kind")).select_by_value("s3")
    assert browser.find_element(By.ID, "id_config__s3__tags_each_sync").is_displayed()
    assert "one more request an object" in iris.text()  # what the option costs, said
    browser.execute_script(
        "arguments[0].scrollIntoView({block: 'center'})",
        browser.find_element(By.ID, "id_config__s3__tags_each_sync"),
    )
    iris.screenshot("source-add-s3")
    Select(browser.find_element(By.ID, "id_kind")).select_by_value("folder")
    assert browser.find_element(By.ID, "id_config__folder__path").is_displayed()
    assert not browser.find_element(By.ID, "id_config__s3__bucket").is_displayed()
    iris.fill("id_name", "Policies share")
    iris.fill("id_slug", "policies")
    iris.fill("id_config__folder__path", str(share))
    iris.fill("id_exclude", "drafts/")
    guide(iris, "source-add")
    iris.click("input[name=_continue]")
    iris.wait_for_text("Never synced.")
    source = Source.objects.get(kb=kb)
    assert (source.kind, source.config, source.exclude) == (
        "folder",
        {"path": str(share)},
        ["drafts/"],
    )

    # Sync now, behind its confirmation page; the run's row fills without a reload
    iris.click("#sync-now-link")
    assert "Sync Policies share now" in iris.text()
    assert "deletes the documents of items gone from the source" in iris.text()
    iris.fill("id_reason", "first sync of the share")
    iris.screenshot("sync-confirm")
    iris.click("input[type=submit]")
    iris.wait_for_text("is queued; its progress is below")
    iris.wait_for_text("Succeeded", timeout=120)
    run = SyncRun.objects.get(source=source)
    assert (run.state, run.new, run.failed, run.skipped) == ("succeeded", 3, 0, 0)
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-run='{run.pk}']")
    assert row.find_element(By.CSS_SELECTOR, "[data-count=new]").text == "3"
    guide(iris, "source-runs", scroll_to="#recent-runs")

    # the broken PDF is a document whose build failed with its reason; the others go live
    wait_for(
        lambda: Document.objects.filter(kb=kb, key__startswith="policies/").count() == 3,
        what="three documents",
    )
    keys = set(Document.objects.filter(kb=kb).values_list("key", flat=True))
    assert keys == {"policies/policies/leave.md", "policies/policies/travel.md"} | {
        "policies/policies/broken.pdf"
    }
    leave = Document.objects.get(kb=kb, key="policies/policies/leave.md")
    iris.visit(f"/admin/kb/document/{leave.pk}/change/")
    iris.wait_for_text("served now", reload=True)
    assert "From source Policies share: policies/leave.md" in iris.text()
    iris.screenshot("document-from-source")

    # a file deleted at the source: the next run deletes its document, and says why
    (share / "policies" / "travel.md").unlink()
    iris.visit(f"/admin/sources/source/{source.pk}/sync/")
    iris.fill("id_reason", "travel.md was removed")
    iris.click("input[type=submit]")
    wait_for(
        lambda: SyncRun.objects.filter(source=source, finished_at__isnull=False).count() == 2,
        what="the second run to finish",
    )
    second = SyncRun.objects.filter(source=source).latest("pk")
    assert (second.state, second.deleted, second.unchanged) == ("succeeded", 1, 2)
    travel = Document.objects.get(kb=kb, key="policies/policies/travel.md")
    assert travel.deleted_at is not None
    iris.visit(f"/admin/sources/syncrun/{second.pk}/change/")
    iris.wait_for_text("Succeeded")
    iris.screenshot("second-run")
    iris.visit(f"/admin/kb/document/{travel.pk}/change/")
    assert "gone at the source" in iris.text()
    iris.screenshot("deleted-by-sync")

    # a content manager sees the source and its runs, and no action
    cora = Person(browser, live_server.url, "cora")
    cora.log_in()
    cora.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    assert "Policies share" in cora.text()
    with finds_at_once(browser):
        assert not browser.find_elements(By.ID, "add-source-link")
    cora.visit(f"/admin/sources/source/{source.pk}/change/")
    assert "Recent runs" in cora.text()
    with finds_at_once(browser):
        assert not browser.find_elements(By.ID, "sync-now-link")
        assert not browser.find_elements(By.ID, "pause-link")
    cora.screenshot("source-as-content-manager")
