"""The browser harness of the admin's end-to-end tests: a real headless Chromium (Debian's
chromium + chromedriver, driven by Selenium) and `Person`, one user in it. Screenshots land in
artifacts/e2e/ (not committed); look at them."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from kb.models import Tenant, TenantMembership
from tests.fault.harness import beat_once

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
PASSWORD = "a-long-e2e-password"
# How long a find waits for its element to appear (Selenium's implicit wait).
IMPLICIT_WAIT = 2.0


def _replaced(exc: WebDriverException) -> bool:
    """Whether Selenium's error means the element's page was replaced: Selenium's stale element,
    or Chromium's inspector saying the same node no longer belongs to the document."""
    return isinstance(exc, StaleElementReferenceException) or (
        "does not belong to the document" in str(exc.msg)
    )


def _gone(element: object) -> bool:
    """`staleness_of` that also reads Chromium's inspector error as "replaced"."""
    try:
        element.is_enabled()  # type: ignore[attr-defined]
    except WebDriverException as exc:
        if _replaced(exc):
            return True
        raise
    return False


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    driver = chromium()
    yield driver
    driver.quit()


@pytest.fixture
def chinese_browser() -> Iterator[WebDriver]:
    """A browser whose person reads Simplified Chinese (Accept-Language zh-CN): the admin
    answers in Chinese (console/locale.py). Needs a CJK font (the Makefile's `browser`)."""
    driver = chromium(languages="zh-CN,zh")
    yield driver
    driver.quit()


def chromium(languages: str = "") -> WebDriver:
    """Headless Chromium; `languages` its Accept-Language (empty: Chromium's own, English)."""
    if CHROMIUM is None or CHROMEDRIVER is None:  # make test installs them; say so if it could not
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    options = webdriver.ChromeOptions()
    if languages:
        options.add_argument(f"--lang={languages.split(',')[0]}")
        options.add_experimental_option("prefs", {"intl.accept_languages": languages})
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
    driver.implicitly_wait(IMPLICIT_WAIT)
    return driver


@contextmanager
def finds_at_once(driver: WebDriver) -> Iterator[None]:
    """Finds in the block answer with what the page holds now, for asserting that a
    server-rendered element is absent from a page already loaded: with the implicit wait, each
    find that finds nothing waits its whole IMPLICIT_WAIT first."""
    driver.implicitly_wait(0)
    try:
        yield
    finally:
        driver.implicitly_wait(IMPLICIT_WAIT)


class Person:
    """One user in the browser: log in, visit, click, fill, wait, screenshot."""

    def __init__(self, driver: WebDriver, base_url: str, username: str) -> None:
        self.driver = driver
        self.base_url = base_url
        self.username = username
        self.shots = 0

    def log_in(self, *, signed_in: str = "Recent actions") -> None:
        """Sign in; `signed_in` is the front page's words that say it worked (Django's "Recent
        actions", "最近动作" in Chinese)."""
        self.driver.delete_all_cookies()
        self.visit("/admin/login/")
        self.fill("id_username", self.username)
        self.fill("id_password", PASSWORD)
        self.driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        self.wait_for_text(signed_in)

    def visit(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    def fill(self, element_id: str, value: str) -> None:
        field = self.driver.find_element(By.ID, element_id)
        field.clear()
        field.send_keys(value)

    def click(self, selector: str) -> None:
        self.driver.find_element(By.CSS_SELECTOR, selector).click()

    def submit(self, selector: str, *, timeout: float = 30) -> None:
        """Click a button that posts a form and wait until the answer has replaced the page, so
        that a `visit` right after cannot race the post's redirect (which would land last)."""
        for attempt in range(5):
            try:
                page = self.driver.find_element(By.TAG_NAME, "html")
                self.click(selector)
                break
            except (StaleElementReferenceException, WebDriverException) as exc:
                # a page that reloads itself (a progress poll) swapped its nodes under the click
                if attempt == 4 or not _replaced(exc):
                    raise
                time.sleep(0.1)
        WebDriverWait(self.driver, timeout).until(lambda _driver: _gone(page))

    def text(self) -> str:
        """The page's text; a body replaced while it was read (a navigation, a reload) is read
        again from the new page."""
        for _ in range(5):
            try:
                return str(self.driver.find_element(By.TAG_NAME, "body").text)
            except StaleElementReferenceException:
                time.sleep(0.1)
            except WebDriverException as exc:  # Chromium's words for the same replaced body
                if not _replaced(exc):
                    raise
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
