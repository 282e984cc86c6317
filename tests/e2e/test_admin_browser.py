"""The admin as people use it: a real headless Chromium (Debian's chromium + chromedriver,
driven by Selenium) against a live server, with a real Celery worker building the uploads.
Screenshots of every page land in artifacts/e2e/."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command

from kb.models import Document, KnowledgeBase, Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from tests.fault.harness import beat_once

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
PASSWORD = "a-long-e2e-password"

if CHROMIUM is None or CHROMEDRIVER is None:  # make test installs them; say so if it could not
    pytest.skip("Debian's chromium and chromium-driver are not installed", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER or ""))
    driver.implicitly_wait(2)
    yield driver
    driver.quit()


class Person:
    """One user in the browser: log in, visit, click, fill, wait, screenshot."""

    def __init__(self, driver: WebDriver, base_url: str, username: str) -> None:
        self.driver = driver
        self.base_url = base_url
        self.username = username
        self.shots = 0

    def log_in(self) -> None:
        self.driver.delete_all_cookies()
        self.visit("/admin/login/")
        self.fill("id_username", self.username)
        self.fill("id_password", PASSWORD)
        self.driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        self.wait_for_text("Recent actions")

    def visit(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    def fill(self, element_id: str, value: str) -> None:
        field = self.driver.find_element(By.ID, element_id)
        field.clear()
        field.send_keys(value)

    def click(self, selector: str) -> None:
        self.driver.find_element(By.CSS_SELECTOR, selector).click()

    def text(self) -> str:
        """The page's text; a body replaced while it was read (a navigation, a reload) is read
        again from the new page."""
        for _ in range(5):
            try:
                return str(self.driver.find_element(By.TAG_NAME, "body").text)
            except StaleElementReferenceException:
                time.sleep(0.1)
        return str(self.driver.find_element(By.TAG_NAME, "body").text)

    def wait_for_text(self, text: str, *, timeout: float = 60, reload: bool = False) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text():
            if time.monotonic() > deadline:
                self.screenshot("timeout")
                pytest.fail(f"{self.username} never saw {text!r}; page says:\n{self.text()[:2000]}")
            beat_once()  # what beat does in production: relay and sweep
            time.sleep(0.5)
            if reload:
                self.driver.refresh()

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.shots += 1
        path = ARTIFACTS / f"{self.username}-{self.shots:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        return path


def make_user(name: str, group: str, tenant: Tenant) -> User:
    user = User.objects.create_user(name, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    TenantMembership.objects.create(user=user, tenant=tenant)
    return user


def test_content_manager_and_index_admin_in_a_real_browser(
    live_server: Any,
    browser: WebDriver,
    worker_factory: Callable[..., Any],
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    worker_factory()
    ensure_roles(Group, Permission)
    make_user("carol", CONTENT_MANAGERS, kb.tenant)
    make_user("ian", INDEX_ADMINS, kb.tenant)
    first = tmp_path / "handbook.md"
    first.write_text("# Travel\n\nTrain tickets are reimbursed in second class.\n")
    second = tmp_path / "handbook-v2.md"
    second.write_text("# Travel\n\nTrain tickets are reimbursed in first class.\n")

    # a content manager uploads a document and watches it go live without reloading
    carol = Person(browser, live_server.url, "carol")
    carol.log_in()
    carol.visit("/admin/kb/document/add/")
    assert Select(browser.find_element(By.ID, "id_kb")).first_selected_option.text == str(kb)
    carol.fill("id_key", "travel")
    carol.fill("id_title", "Travel policy")
    browser.find_element(By.ID, "id_file").send_keys(str(first))
    carol.screenshot("upload-form")
    carol.click("input[name=_continue]")
    carol.wait_for_text("live r1")
    carol.screenshot("live-r1")
    document = Document.objects.get(key="travel")
    assert browser.find_element(By.CSS_SELECTOR, "#builds progress").get_attribute("value") == (
        browser.find_element(By.CSS_SELECTOR, "#builds progress").get_attribute("max")
    )

    # the knowledge base now requires approval; the second revision waits for it
    kb.require_approval = True
    kb.save()
    browser.find_element(By.ID, "id_new_revision").send_keys(str(second))
    carol.click("input[name=_continue]")
    # the document list follows the build without a reload
    carol.visit("/admin/kb/document/")
    carol.wait_for_text("r2 awaiting approval")
    carol.screenshot("list-awaiting-approval")
    carol.visit(f"/admin/kb/document/{document.pk}/change/")
    carol.wait_for_text("r2 awaiting approval")
    carol.screenshot("awaiting-approval")
    assert "Approve" not in browser.find_element(By.ID, "builds").text  # not her role

    # an index admin approves it through the confirmation page
    ian = Person(browser, live_server.url, "ian")
    ian.log_in()
    ian.visit(f"/admin/kb/document/{document.pk}/change/")
    ian.click(".approve-link")
    ian.wait_for_text("Text changes")
    assert "1 added, 1 removed" in ian.text()
    assert "first class" in browser.find_element(By.CSS_SELECTOR, ".canon-diff").text
    ian.screenshot("approve-confirmation")
    ian.fill("id_reason", "policy update approved")
    ian.click("input[type=submit]")
    ian.wait_for_text("live r2")
    ian.screenshot("approved-live-r2")

    # and rolls it back
    ian.click(".rollback-link")
    ian.fill("id_reason", "finance objected")
    ian.screenshot("rollback-confirmation")
    ian.click("input[type=submit]")
    ian.wait_for_text("Rolled back to revision 1")
    assert "live r1" in ian.text() and "finance objected" in ian.text()
    ian.screenshot("rolled-back")

    # a new index version builds, is swapped in, and rolled back
    ian.visit(f"/admin/kb/knowledgebase/{kb.pk}/change/")
    ian.click("#new-version-link")
    ian.fill("id_model", "canon-hash-small")
    ian.fill("id_dimensions", "128")
    ian.screenshot("new-index-version")
    ian.click("input[type=submit]")
    ian.wait_for_text("is building")
    ian.wait_for_text("1/1", reload=True)
    ian.screenshot("index-version-built")
    ian.click("#version-2 .activate-link")
    ian.wait_for_text("coverage")
    assert "complete" in ian.text()
    ian.fill("id_reason", "smaller embeddings")
    ian.click("input[type=submit]")
    ian.wait_for_text("Index version 2 is active")
    ian.screenshot("swapped")
    kb.refresh_from_db()
    assert kb.active_index_version is not None and kb.active_index_version.number == 2
    ian.click("#version-rollback-link")
    ian.fill("id_reason", "recall dropped")
    ian.click("input[type=submit]")
    ian.wait_for_text("Index version 1 is active again")
    ian.screenshot("version-rolled-back")
    kb.refresh_from_db()
    assert kb.active_index_version is not None and kb.active_index_version.number == 1
    call_command("kb_verify")
