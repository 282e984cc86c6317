"""Issue 37, items 5-7, in a real headless Chromium. A content manager sets metadata on three
documents, two of which hold keys the knowledge base does not declare: the confirmation names
them, she drops the keys after seeing the plan again, her reason kept, and it shows in each
document's History and the timeline; a new revision in a knowledge base that requires approval
says it will wait for an approver. An index admin finds a real sync run's held deletions as a
tile on the home and the front page and on the dashboard once they are a day old, confirms them
with a reason the run page, the timeline and the History then show, reads where the run's time
went, and pauses the source, which then shows no next sync. Screenshots in artifacts/e2e/."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.utils import timezone
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from kb.document_states import utc_text
from kb.models import Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.index_versions import knowledge_base_create
from kb.services.metadata import metadata_field_save
from sources.models import Source, SourceItem, SyncRun
from sources.services.runs import sync_request
from sources.services.sources import source_save
from tests.conftest import Worker, wait_for
from tests.e2e.browser import Person, make_user
from tests.e2e.test_sources_browser import sources_settings
from tests.retrieval.factories import build, publish, upload
from tests.sources.conftest import SOURCES_KEY
from work.models import IngestionTask

pytestmark = pytest.mark.integration


def test_bulk_metadata_with_undeclared_keys_and_the_approval_words(
    live_server: Any, browser: WebDriver, kb: KnowledgeBase, tmp_path: Path
) -> None:
    ensure_roles(Group, Permission)
    make_user("cora", CONTENT_MANAGERS, kb.tenant)
    for key, title in (("travel", "Travel policy"), ("vacation", "Vacation"), ("gifts", "Gifts")):
        upload(kb, key, f"# {title}\n\nText.", title=title)
    Document.objects.filter(key="travel").update(metadata={"legacy_id": "T-17", "owner": "finance"})
    Document.objects.filter(key="vacation").update(metadata={"legacy_id": "V-3"})
    metadata_field_save(kb=kb, name="year", type="number")
    metadata_field_save(kb=kb, name="department", type="string")

    cora = Person(browser, live_server.url, "cora")
    cora.log_in()
    cora.visit(f"/admin/kb/document/?kb__id__exact={kb.pk}")
    for key in ("travel", "vacation", "gifts"):
        row = browser.find_element(By.XPATH, f"//tr[.//a[text()='{key}']]")
        row.find_element(By.CSS_SELECTOR, "input.action-select").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("set_metadata")
    cora.click("button[name=index]")
    cora.wait_for_text("Set metadata on 3 documents")
    cora.fill("id_metadata__year", "2024")
    cora.submit("#confirm-button")

    # the confirmation names the two holders and their keys; only gifts would change
    cora.wait_for_text("2 documents hold keys Handbook does not declare")
    holders = browser.find_element(By.ID, "undeclared").text
    assert "travel" in holders and "legacy_id: T-17" in holders and "owner: finance" in holders
    assert "vacation" in holders and "gifts" not in holders
    assert "Will change (1 of 3 selected)" in cora.text()
    cora.fill("id_reason", "the 2024 review; the import's old keys go")
    browser.execute_script(
        "document.getElementById('undeclared-holders').scrollIntoView({block: 'center'})"
    )
    cora.screenshot("bulk-metadata-undeclared")

    # she asks to drop them: the plan again, with what she typed
    cora.submit("#review-drop")
    cora.wait_for_text("Their undeclared keys will be removed")
    assert "Will change (3)" in cora.text()
    assert (
        "legacy_id: T-17 → removed (not declared)"
        in browser.find_element(By.ID, "will-change").text
    )
    assert (
        browser.find_element(By.ID, "id_reason").get_attribute("value")
        == "the 2024 review; the import's old keys go"
    )
    cora.screenshot("bulk-metadata-drop-plan")
    cora.submit("#confirm-button")
    cora.wait_for_text("Set metadata on 3")
    assert Document.objects.get(key="travel").metadata == {"year": 2024}
    assert Document.objects.get(key="vacation").metadata == {"year": 2024}

    # the reason is in the document's History box and in the timeline
    travel = Document.objects.get(key="travel")
    cora.visit(f"/admin/kb/document/{travel.pk}/change/")
    history = browser.find_element(By.ID, "history").text
    assert "metadata set" in history and "the 2024 review; the import's old keys go" in history
    assert "legacy_id: T-17 → removed (not declared)" in history
    browser.execute_script("document.getElementById('history').scrollIntoView()")
    cora.screenshot("history-metadata-reason")
    cora.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    timeline = browser.find_element(By.ID, "kb-timeline").text
    assert "set metadata" in timeline and "the 2024 review" in timeline
    cora.screenshot("timeline-metadata-reason")

    # a new revision where approval is required says it will wait for an approver
    live = publish(kb, "handbook", "# Handbook\n\nFirst.")
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    second = tmp_path / "handbook-2.md"
    second.write_text("# Handbook\n\nSecond.\n")
    cora.visit(f"/admin/kb/document/{live.document_id}/change/")
    browser.find_element(By.ID, "id_new_revision").send_keys(str(second))
    cora.submit("input[name=_continue]")
    cora.wait_for_text("waits for approval by an index admin before it goes live")
    assert "it goes live when built" not in cora.text()
    cora.screenshot("upload-waits-for-approval")


def test_held_deletions_as_a_queue_answered_with_a_reason(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Worker],
    kb: KnowledgeBase,
    tmp_path: Path,
    settings: Any,
) -> None:
    sources_settings(tmp_path)
    settings.SOURCES_DELETE_HOLD_MIN = 2
    worker_factory(
        CANON_SOURCES_ALLOW_PRIVATE="1",
        CANON_SOURCES_KEY=SOURCES_KEY,
        CANON_SOURCES_CACHE_ROOT=str(tmp_path / "sources-cache"),
        CANON_SOURCES_FOLDER_ROOTS=os.pathsep.join([str(tmp_path)]),
        CANON_SOURCES_DELETE_HOLD_MIN="2",
    )
    ensure_roles(Group, Permission)
    make_user("iris", INDEX_ADMINS, kb.tenant)
    share = tmp_path / "share"
    share.mkdir()
    for number in range(6):
        (share / f"page-{number}.md").write_text(f"# Page {number}\n\nText {number}.\n")
    source = source_save(
        kb=kb,
        name="Policies share",
        slug="policies",
        kind="folder",
        config={"path": str(share)},
        sync_every_minutes=60,
    )

    def synced() -> SyncRun:
        run, _ = sync_request(source=source)
        return wait_for(
            lambda: (
                SyncRun.objects.filter(pk=run.pk).exclude(state__in=SyncRun.OPEN_STATES).first()
            ),
            what=f"sync run {run.pk} to end",
        )

    first = synced()
    assert (first.state, first.new) == ("succeeded", 6), first.error
    for number in (0, 1, 2):
        (share / f"page-{number}.md").unlink()
    held = synced()
    assert held.state == SyncRun.State.AWAITING_CONFIRMATION, held.deletion_note

    # the home and the front page show the queue like awaiting approval
    iris = Person(browser, live_server.url, "iris")
    iris.log_in()
    iris.wait_for_text("deletions to confirm")  # the front page (one knowledge base)
    assert "3\ndeletions to confirm" in browser.find_element(By.ID, "held-deletions").text
    iris.screenshot("front-page-held-deletions")
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    tile = browser.find_element(By.ID, "held-deletions")
    assert "attention" in (tile.get_attribute("class") or "")
    iris.screenshot("home-held-deletions")
    iris.click("#held-deletions a")
    iris.wait_for_text(f"Run {held.pk}")
    assert "Run 1 " not in iris.text().replace(f"Run {held.pk}", "")
    iris.screenshot("held-runs-list")

    # a day later, the dashboard lists it too
    IngestionTask.objects.filter(sync_run=held).update(
        finished_at=timezone.now() - timedelta(days=1, hours=2)
    )
    iris.visit("/admin/ingestion/ingestiontask/dashboard/")
    late = browser.find_element(By.ID, "held-deletions").text
    assert f"Run {held.pk}" in late and "Policies share" in late
    browser.execute_script("document.getElementById('held-deletions').scrollIntoView()")
    iris.screenshot("dashboard-held-deletions")

    # she confirms them with a reason; the run page says who, what and why, and where time went
    iris.visit(f"/admin/sources/syncrun/{held.pk}/change/")
    iris.click("#confirm-deletions-link")
    iris.fill("id_reason", "pages 0-2 were retired by the policy board")
    iris.submit("input[type=submit]")
    iris.wait_for_text("Why: pages 0-2 were retired by the policy board")
    answered = browser.find_element(By.ID, "answered").text
    assert "Confirmed by iris" in answered and "3 documents deleted, each restorable" in answered
    times = browser.find_element(By.ID, "run-times").text.lower()  # headers are upper-cased
    assert "waiting for a worker" in times and "waiting for a person" in times
    browser.execute_script("document.getElementById('run-deletions').scrollIntoView()")
    iris.screenshot("run-answered-with-reason")

    # the first run's time, from its request to its end, adds up
    iris.visit(f"/admin/sources/syncrun/{first.pk}/change/")
    cells = {
        cell.get_attribute("data-time"): float(cell.text.removesuffix(" s"))
        for cell in browser.find_elements(By.CSS_SELECTOR, "#run-times td[data-time]")
    }
    assert cells["total"] > 0 and cells["submitting"] > 0
    parts = sum(v for k, v in cells.items() if k != "total")
    assert abs(parts - cells["total"]) <= 0.011 * len(cells), cells
    assert first.finished_at is not None
    whole = (first.finished_at - first.created_at).total_seconds()
    assert abs(cells["total"] - whole) < 0.02, (cells, whole)
    browser.execute_script("document.getElementById('run-times').scrollIntoView()")
    iris.screenshot("run-time-split")

    # in the timeline and in a deleted document's History
    iris.visit(f"/admin/kb/knowledgebase/{kb.pk}/timeline/")
    assert (
        "pages 0-2 were retired by the policy board"
        in browser.find_element(By.ID, "kb-timeline").text
    )
    iris.screenshot("timeline-deletions-reason")
    gone = Document.objects.get(kb=kb, key="policies/page-0.md")
    assert gone.deleted_at is not None
    iris.visit(f"/admin/kb/document/{gone.pk}/change/")
    history = browser.find_element(By.ID, "history").text
    assert "deletion confirmed" in history and "retired by the policy board" in history
    browser.execute_script("document.getElementById('history').scrollIntoView()")
    iris.screenshot("history-deletion-reason")

    # paused, the source shows no next sync time
    iris.visit(f"/admin/sources/source/{source.pk}/change/")
    next_sync = Source.objects.get(pk=source.pk).next_sync_at
    assert next_sync is not None and utc_text(next_sync) in iris.text()  # scheduled: a time
    iris.click("#pause-link")
    iris.fill("id_reason", "moving the share")
    iris.submit("input[type=submit]")
    iris.wait_for_text("is paused")
    assert Source.objects.get(pk=source.pk).enabled is False
    iris.wait_for_text("none while paused")
    browser.execute_script(
        "document.querySelector('.field-next_sync').scrollIntoView({block: 'center'})"
    )
    iris.screenshot("paused-source-next-sync")

    # with several knowledge bases the front page lists each with its queues
    wiki = knowledge_base_create(tenant=kb.tenant, name="Wiki", slug="wiki")
    wiki_share = tmp_path / "wiki"
    wiki_share.mkdir()
    (wiki_share / "a.md").write_text("# A\n")
    wiki_source = source_save(
        kb=wiki, name="Wiki share", slug="wiki", kind="folder", config={"path": str(wiki_share)}
    )
    publish(kb, "waiting", "# Waiting\n\nOne.")
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    build(upload(kb, "waiting", "# Waiting\n\nTwo."))
    # A run that holds a deletion, made directly: one from sync_request has a task the test's
    # real worker would run (and answer) meanwhile.
    run = SyncRun.objects.create(source=wiki_source, state=SyncRun.State.AWAITING_CONFIRMATION)
    SourceItem.objects.create(source=wiki_source, path="gone.md", pending_delete_run=run)
    iris.visit("/admin/")
    rows = browser.find_element(By.ID, "kb-landing-list").text
    assert "Handbook" in rows and "Wiki" in rows and "DELETIONS TO CONFIRM" in rows.upper()
    handbook = browser.find_element(By.CSS_SELECTOR, f"tr[data-kb='{kb.pk}']")
    assert handbook.find_element(By.CSS_SELECTOR, "[data-queue=awaiting_approval]").text == "1"
    assert handbook.find_element(By.CSS_SELECTOR, "[data-queue=held_deletions]").text == "0"
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-kb='{wiki.pk}']")
    assert row.find_element(By.CSS_SELECTOR, "[data-queue=held_deletions]").text == "1"
    iris.screenshot("front-page-several-knowledge-bases")
