"""The documents side of the admin as people use it (issue 13, items 4, 5, 6, 8, 10), in a real
headless Chromium against a live server with a real Celery worker: a non-superuser content
manager bulk-uploads (the only knowledge base preselected, names kept as uploaded, titles taken
from the files), finds a broken file in the Failed queue, follows an approve link to a styled
refusal that names who approves; an index admin reads the per-chunk diff and approves, retries,
deletes and restores in bulk through confirmation pages; the delete page shows its restore date
behind a red button. Screenshots land in artifacts/e2e/ (look at them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from kb.models import Build, Document, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.e2e.browser import Person, make_user

pytestmark = pytest.mark.integration


def _paragraphs(topic: str, detail: str) -> str:
    body = "\n\n".join(
        f"{topic} section {i}. " + " ".join(f"{topic.lower()}{i}w{j}" for j in range(80))
        for i in range(3)
    )
    return f"{detail}\n\n{body}\n"


def _bulk(person: Person, action: str) -> None:
    """Select every row of the list shown and run `action` (its confirmation page opens)."""
    person.click("#action-toggle")
    Select(person.driver.find_element(By.NAME, "action")).select_by_value(action)
    person.click("button[name=index]")


def _confirm(person: Person, reason: str) -> None:
    person.fill("id_reason", reason)
    person.submit("#confirm-button")


def test_work_queues_bulk_actions_diff_and_refusals_in_a_real_browser(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    worker_factory()
    ensure_roles(Group, Permission)
    make_user("cm-docs", CONTENT_MANAGERS, kb.tenant)
    make_user("ia-docs", INDEX_ADMINS, kb.tenant)
    files = {
        "Indexes-types.html": "<html><head><title>Index Types</title></head><body><main>"
        "<h1>Index Types</h1><p>B-tree, hash, GiST and GIN indexes.</p></main></body></html>",
        "Travel-Policy.md": "# Travel policy\n\n"
        + _paragraphs("Travel", "Train tickets are reimbursed in second class."),
        "broken.pdf": "%PDF-1.7 this is not really a PDF at all",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)

    # a non-superuser content manager uploads three files; the only knowledge base is chosen
    cm = Person(browser, live_server.url, "cm-docs")
    cm.log_in()
    cm.visit("/admin/kb/document/")
    cm.click("a.addlink[href$='/upload/']")
    assert Select(browser.find_element(By.ID, "id_kb")).first_selected_option.text == str(kb)
    browser.find_element(By.ID, "id_files").send_keys(
        "\n".join(str(tmp_path / name) for name in files)
    )
    cm.screenshot("upload-files-form")
    cm.click("input[type=submit]")
    cm.wait_for_text("New document Indexes-types from Indexes-types.html")
    assert "from Travel-Policy.md" in cm.text() and "from broken.pdf" in cm.text()
    cm.screenshot("uploaded-messages")

    # the titles come from the files once parsed; the broken file waits in the Failed queue
    cm.wait_for_text("Index Types", reload=True)
    cm.wait_for_text("Failed (1)", reload=True)
    cm.wait_for_text("Served (2)", reload=True)
    assert Document.objects.get(key="Travel-Policy").title == "Travel policy"
    # one knowledge base: no column for it, the filter beside the list names it
    assert "Work queues:" in cm.text() and "BY KNOWLEDGE BASE" in cm.text().upper()
    cm.screenshot("list-with-status-filter")
    cm.click("#queue-failed")
    cm.wait_for_text("1 document")
    assert "broken" in browser.find_element(By.ID, "result_list").text
    assert "Travel-Policy" not in browser.find_element(By.ID, "result_list").text
    cm.screenshot("failed-queue")

    # new revisions wait for an index admin
    kb.require_approval = True
    kb.save()
    revised = tmp_path / "v2"
    revised.mkdir()
    (revised / "Travel-Policy.md").write_text(
        "# Travel policy\n\n"
        + _paragraphs("Travel", "Train tickets are reimbursed in first class.")
    )
    (revised / "Indexes-types.html").write_text(
        files["Indexes-types.html"].replace("GIN indexes", "GIN and BRIN indexes")
    )
    cm.visit("/admin/kb/document/upload/")
    browser.find_element(By.ID, "id_files").send_keys(
        "\n".join(str(revised / name) for name in ["Travel-Policy.md", "Indexes-types.html"])
    )
    cm.click("input[type=submit]")
    cm.wait_for_text("2 files would become new revisions")  # asked first (issue 26, item 3)
    cm.screenshot("upload-files-asks-before-new-revisions")
    cm.submit("#confirm-button")
    cm.wait_for_text("Revision 2 of Travel-Policy from Travel-Policy.md")
    cm.wait_for_text("Awaiting approval (2)", reload=True)
    travel = Document.objects.get(key="Travel-Policy")
    cm.visit(f"/admin/kb/document/{travel.pk}/change/")
    cm.wait_for_text("r2 awaiting approval by an index admin")
    cm.screenshot("awaiting-approval-by-an-index-admin")
    history = [
        e.get_change_message()
        for e in LogEntry.objects.filter(object_id=str(travel.pk)).order_by("id")
    ]
    assert len(history) == 2 and all("ploaded Travel-Policy.md (" in m for m in history)
    assert history[0].endswith("as revision 1.") and history[1].endswith(
        "revision 2 with Upload files."
    )
    cm.visit(f"/admin/kb/document/{travel.pk}/history/")
    assert "as revision 2 with Upload files" in cm.text()
    cm.screenshot("history-with-uploads")

    # following an approve link is a styled refusal that says who approves
    candidate = Build.objects.get(document=travel, state=Build.State.READY)
    cm.visit(f"/admin/kb/document/{travel.pk}/approve/{candidate.pk}/")
    assert "Can approve a ready build" in cm.text()
    assert "Index admins have it" in cm.text()
    assert browser.find_element(By.ID, "site-name").text == "Canon"  # the admin's own page
    cm.screenshot("approve-refused")

    # an index admin reads the per-chunk diff, then approves both in bulk
    ia = Person(browser, live_server.url, "ia-docs")
    ia.log_in()
    ia.visit(f"/admin/kb/document/{travel.pk}/approve/{candidate.pk}/")
    ia.wait_for_text("Text changes")
    diff = browser.find_element(By.ID, "text-changes")
    assert [e.text for e in diff.find_elements(By.TAG_NAME, "del")][:1] == ["second"]
    assert [e.text for e in diff.find_elements(By.TAG_NAME, "ins")][:1] == ["first"]
    assert "unchanged chunk" in diff.text
    assert "revision 1 · uploaded " in ia.text() and "build " not in ia.text().lower()
    button = browser.find_element(By.ID, "confirm-button")
    assert button.get_attribute("value") == "Yes, approve revision 2 of Travel policy"
    ia.screenshot("approval-diff")
    browser.execute_script("document.documentElement.dataset.theme = 'dark'")
    ia.screenshot("approval-diff-dark")  # the admin's own variables: dark mode follows
    ia.visit("/admin/kb/document/")
    ia.click("#queue-awaiting_approval")
    ia.wait_for_text("2 documents")
    _bulk(ia, "approve_selected")
    ia.wait_for_text("Will change (2)")
    ia.screenshot("bulk-approve-confirmation")
    _confirm(ia, "release notes reviewed")
    ia.wait_for_text("Approved 2:")
    ia.wait_for_text("Awaiting approval (0)")
    ia.screenshot("bulk-approved")

    # the broken file is retried in bulk (and fails again: the file is still broken)
    ia.click("#queue-failed")
    ia.wait_for_text("1 document")
    _bulk(ia, "retry_selected")
    ia.wait_for_text("builds again")
    ia.screenshot("bulk-retry-confirmation")
    _confirm(ia, "parser upgraded")
    ia.wait_for_text("Retried 1: broken r1.")

    # the delete page: the date restore is possible until, what purge does, a red button
    ia.visit(f"/admin/kb/document/{travel.pk}/change/")
    link = browser.find_element(By.ID, "delete-link").value_of_css_property("background-color")
    assert link == "rgba(186, 33, 33, 1)", link  # the document page's Delete… is red too
    ia.screenshot("document-delete-link")
    ia.click("#delete-link")
    ia.wait_for_text("restorable until")
    assert "UTC (30 days from now" in ia.text() and "at purge" in ia.text()
    red = browser.find_element(By.ID, "confirm-button").value_of_css_property("background-color")
    assert red == "rgba(186, 33, 33, 1)", red
    ia.screenshot("delete-confirmation")
    _confirm(ia, "superseded by the new handbook")
    ia.wait_for_text("Restorable until")

    # bulk delete and bulk restore from the list, through their confirmation pages
    ia.visit("/admin/kb/document/?status=served")
    ia.wait_for_text("1 document")
    _bulk(ia, "delete_selected_documents")
    ia.wait_for_text("Will change (1)")
    ia.screenshot("bulk-delete-confirmation")
    _confirm(ia, "spring cleaning")
    ia.wait_for_text("Deleted 1:")
    ia.visit("/admin/kb/document/?status=deleted")
    ia.wait_for_text("2 documents")
    _bulk(ia, "restore_selected")
    ia.wait_for_text("Will change (2)")
    ia.screenshot("bulk-restore-confirmation")
    _confirm(ia, "still needed")
    ia.wait_for_text("Restored 2:")
    ia.wait_for_text("Deleted (0)")
    ia.screenshot("bulk-restored")
    assert not Document.objects.filter(deleted_at__isnull=False).exists()

    # the pages whose columns were cut off, as an index admin sees them
    for name, url in [
        ("tasks", "/admin/ingestion/ingestiontask/"),
        ("builds", "/admin/kb/build/"),
        ("publication-events", "/admin/kb/publicationevent/"),
    ]:
        ia.visit(url)
        ia.screenshot(f"list-{name}")

    # Add: a refused form keeps the chosen file
    cm.log_in()
    cm.visit("/admin/kb/document/add/")
    cm.fill("id_key", "Travel-Policy")  # taken
    browser.find_element(By.ID, "id_file").send_keys(str(tmp_path / "Travel-Policy.md"))
    cm.click("input[name=_continue]")
    cm.wait_for_text("Kept from your last try: Travel-Policy.md")
    assert "_addanother" not in browser.page_source
    cm.screenshot("add-refused-keeps-the-file")
    cm.fill("id_key", "travel-copy")
    cm.click("input[name=_continue]")
    cm.wait_for_text("was added successfully")
    copy = Document.objects.get(key="travel-copy")
    assert copy.revisions.get().original_name == "Travel-Policy.md"
    cm.wait_for_text("r1 awaiting approval", reload=True)  # the knowledge base requires it
    assert Document.objects.get(pk=copy.pk).title == "Travel policy"
    cm.screenshot("added-with-the-kept-file")
