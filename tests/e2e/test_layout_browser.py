"""Issue 26, item 13, in a real headless Chromium at the guide's 1200 px: a content manager's
front page does not scroll sideways (long keys and reasons in its timeline wrap), the index
versions list fits the settings page, and the documents list's status column stays a few lines.

Screenshots land in artifacts/e2e/ (look at them)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from kb.models import Build, KnowledgeBase
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.documents import document_delete
from kb.services.publication import build_approve
from tests.e2e.browser import Person, make_user
from tests.helpers import run_pending, upload_text
from tests.kb.test_swap_with_known_failures import new_version, upload_broken

pytestmark = pytest.mark.integration

LONG_KEY = "runtime-config-resource-consumption-shared-buffers-and-work-mem-settings"
LONG_REASON = (
    "see https://www.postgresql.org/docs/current/runtime-config-resource.html#GUC-WORK-MEM"
)


def sideways(browser: WebDriver) -> int:
    """How many pixels the page scrolls sideways (0: it fits)."""
    return int(
        browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
    )


def test_pages_fit_the_window(live_server: Any, browser: WebDriver, kb: KnowledgeBase) -> None:
    ensure_roles(Group, Permission)
    make_user("cm-layout", CONTENT_MANAGERS, kb.tenant)
    make_user("ia-layout", INDEX_ADMINS, kb.tenant)
    kb.require_approval = True
    kb.save()
    for n in range(3):
        upload_text(kb, f"{LONG_KEY}-{n}", "Shared buffers set the memory the server uses. " * 5)
    upload_broken(kb, "scanned-expense-report-2026-with-a-very-long-file-name")
    run_pending()
    first = Build.objects.filter(state=Build.State.READY).order_by("id").first()
    assert first is not None
    build_approve(build_id=first.pk, actor=None, reason=LONG_REASON, expected_live_build_id=None)
    upload_text(kb, f"{LONG_KEY}-0", "Shared buffers: a second revision. " * 5)
    document_delete(document_id=first.document_id, actor=None, reason=LONG_REASON)
    new_version(kb)
    run_pending()
    browser.set_window_size(1200, 900)

    cm = Person(browser, live_server.url, "cm-layout")
    cm.log_in()
    cm.visit("/admin/")
    cm.wait_for_text("Latest in the timeline")
    assert sideways(browser) == 0
    cm.screenshot("front-page-fits")

    cm.visit("/admin/kb/document/")
    cm.wait_for_text("Work queues:")
    assert sideways(browser) == 0
    heights = browser.execute_script(
        """return [...document.querySelectorAll('#result_list td.field-status')].map(td => {
             const range = document.createRange(); range.selectNodeContents(td);
             return range.getBoundingClientRect().height; })"""
    )
    line = browser.execute_script(
        "return parseFloat(getComputedStyle(document.querySelector('#result_list td')).lineHeight)"
    )
    cm.screenshot("documents-list-status")
    assert heights and max(heights) <= 4 * float(line) + 2, (heights, line)  # 4 lines at most
    cm.screenshot("documents-list-status")

    ia = Person(browser, live_server.url, "ia-layout")
    ia.log_in()
    ia.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    ia.wait_for_text("Index versions")
    assert sideways(browser) == 0
    table = browser.find_element(By.CSS_SELECTOR, "table.canon-versions")
    module = browser.find_element(By.ID, "index-versions")
    assert table.size["width"] <= module.size["width"] + 1
    browser.execute_script("document.getElementById('index-versions').scrollIntoView()")
    ia.screenshot("index-versions-fit")
