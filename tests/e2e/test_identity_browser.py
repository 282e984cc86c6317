"""Sign-in through the company's identity provider in a real headless Chromium, against a real
OpenID provider (panva's oidc-provider in its own process, tests/identity/providers.py): a new
person signs in with the provider's own pages, lands in her knowledge base with the role and
groups her provider groups give, and sees only the documents those groups allow; taken out of a
group at the provider she loses its documents at the next request after the re-check; disabled
there, she is signed out; signing out at the provider signs her out of Canon (back-channel
logout). A superuser sees where her access came from. Screenshots land in artifacts/e2e/."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from identity import jwks
from identity.models import ClaimMapping, SignInSession
from kb.models import KnowledgeBase, Tenant, TenantMembership
from kb.roles import CONTENT_MANAGERS, ensure_roles
from kb.services.index_versions import knowledge_base_create
from tests.e2e.browser import PASSWORD, Person, finds_at_once
from tests.identity.providers import OidcProvider, oidc_settings
from tests.retrieval.factories import publish

pytestmark = pytest.mark.integration


@pytest.fixture
def provider(live_server: Any, tmp_path: Path, settings: Any) -> Iterator[OidcProvider]:
    started = OidcProvider(tmp_path / "oidc", canon_url=live_server.url)
    oidc_settings(settings, started)
    yield started
    started.stop()
    jwks.forget()


@pytest.fixture
def handbook(transactional_db: None) -> KnowledgeBase:
    """Acme's one knowledge base, a public document and one for each of two groups, and the
    mapping of Acme's provider groups."""
    ensure_roles(Group, Permission)
    tenant = Tenant.objects.create(name="Acme", slug="acme")
    kb = knowledge_base_create(tenant=tenant, name="Handbook", slug="handbook")
    publish(kb, "travel", "Travel by train in second class.")
    publish(kb, "budget", "The travel budget is 900 euros a year.", groups=("finance",))
    publish(kb, "salaries", "Salary bands are reviewed in March.", groups=("hr",))
    for value, role, groups in (
        ("canon-editors", CONTENT_MANAGERS, []),
        ("finance-team", "", ["finance"]),
        ("hr-team", "", ["hr"]),
    ):
        ClaimMapping.objects.create(
            claim="groups", value=value, tenant=tenant, role=role, access_groups=groups
        )
    return kb


def sign_in_at_provider(person: Person, login: str) -> None:
    """From Canon's sign-in page, through the provider's own pages and back (the provider may
    remember her: then it asks nothing)."""
    person.visit("/admin/")
    person.driver.delete_all_cookies()
    person.visit("/admin/")
    person.wait_for_text("Sign in with Acme ID")
    person.screenshot("canon-sign-in-page")
    person.click("a.button.default")
    with finds_at_once(person.driver):
        fields = person.driver.find_elements(By.NAME, "login")
    if fields:
        fields[0].send_keys(login)
        person.driver.find_element(By.NAME, "password").send_keys("any password")
        person.screenshot("provider-sign-in")
        person.submit("button.login-submit")
    if "Continue" in person.text():  # the provider's consent page
        person.screenshot("provider-consent")
        person.submit("button.login-submit")
    person.wait_for_text("Knowledge bases")  # the admin's front page, signed in


def document_list(person: Person) -> str:
    person.visit("/admin/kb/document/")
    person.wait_for_text("Travel")
    return person.text()


def test_a_new_person_signs_in_through_the_provider_and_access_follows_it(
    live_server: Any,
    browser: WebDriver,
    provider: OidcProvider,
    handbook: KnowledgeBase,
    settings: Any,
) -> None:
    settings.IDENTITY_RECHECK_MINUTES = 3 / 60  # three seconds
    provider.set_account(
        "dana-7f3",
        preferred_username="dana",
        email="dana@acme.test",
        given_name="Dana",
        family_name="Reyes",
        groups=["canon-editors", "finance-team", "contractors"],
    )
    dana = Person(browser, live_server.url, "dana")
    sign_in_at_provider(dana, "dana-7f3")

    # she lands on her knowledge base's home, a content manager of Acme in finance
    dana.wait_for_text("Handbook")
    dana.screenshot("landed-in-her-knowledge-base")
    user = User.objects.get(username="dana")
    assert set(user.groups.values_list("name", flat=True)) == {CONTENT_MANAGERS}
    assert TenantMembership.objects.get(user=user).access_groups == ["finance"]
    listed = document_list(dana)
    dana.screenshot("documents-with-finance")
    assert "Budget" in listed and "Salaries" not in listed
    with finds_at_once(browser):  # a content manager may add documents
        assert browser.find_elements(By.CSS_SELECTOR, "a.addlink")

    # taken out of finance at the provider: the budget goes at the first request after the
    # re-check
    provider.set_account(
        "dana-7f3", preferred_username="dana", groups=["canon-editors", "contractors"]
    )
    deadline = time.monotonic() + 30
    while "Budget" in (listed := document_list(dana)):
        assert time.monotonic() < deadline, "the budget stayed after the re-check"
        time.sleep(0.5)
    dana.screenshot("documents-after-leaving-finance")
    assert "Budget" not in listed and "Travel" in listed

    # a superuser sees where her access comes from, claim by claim
    User.objects.create_superuser("root", "", PASSWORD)
    TenantMembership.objects.create(user=User.objects.get(username="root"), tenant=handbook.tenant)
    admin_browser = Person(browser, live_server.url, "root")
    admin_browser.log_in()
    admin_browser.visit(f"/admin/auth/user/{user.pk}/change/")
    admin_browser.wait_for_text("Source of access")
    source = browser.find_element(By.CSS_SELECTOR, "table.canon-source-of-access").text
    assert "canon-editors" in source and CONTENT_MANAGERS in source
    assert "Values that gave nothing: groups=contractors." in admin_browser.text()
    browser.execute_script(
        "document.querySelector('table.canon-source-of-access').closest('fieldset')"
        ".scrollIntoView()"
    )
    admin_browser.screenshot("source-of-access")
    admin_browser.visit("/admin/identity/claimmapping/")
    admin_browser.wait_for_text("finance-team")
    admin_browser.screenshot("claim-mapping")
    admin_browser.visit("/admin/identity/claimmapping/add/")
    admin_browser.wait_for_text("Access groups")
    admin_browser.screenshot("claim-mapping-add")

    # disabled at the provider: signed out at her next request after the re-check
    sign_in_at_provider(dana, "dana-7f3")
    provider.set_account("dana-7f3", enabled=False, groups=["canon-editors"])
    dana.wait_for_text("You were signed out", reload=True, timeout=30)
    dana.screenshot("signed-out-when-disabled")
    assert browser.current_url.startswith(f"{live_server.url}/admin/login/")
    last = SignInSession.objects.filter(identity__user=user).latest("pk")
    assert "no longer accepts" in last.end_reason


def test_signing_out_at_the_provider_signs_out_of_canon(
    live_server: Any,
    browser: WebDriver,
    provider: OidcProvider,
    handbook: KnowledgeBase,
    settings: Any,
) -> None:
    settings.IDENTITY_RECHECK_MINUTES = 60  # no re-check: the provider's logout does it
    provider.set_account("erin", preferred_username="erin", groups=["canon-editors"])
    erin = Person(browser, live_server.url, "erin")
    sign_in_at_provider(erin, "erin")
    erin.wait_for_text("Handbook")

    browser.get(f"{provider.issuer}/session/end")
    erin.screenshot("provider-sign-out")
    erin.submit("button[name=logout], button[autofocus], button")
    erin.visit("/admin/")
    erin.wait_for_text("Sign in with Acme ID")
    erin.screenshot("signed-out-by-the-provider")
    session = SignInSession.objects.get(identity__user__username="erin")
    assert session.end_reason == "signed out at the identity provider"
