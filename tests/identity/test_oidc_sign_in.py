"""OIDC sign-in to the admin against a real OpenID provider (panva's oidc-provider in its own
process): the code flow with PKCE, people created at their first sign-in, the claim mapping
applied at every sign-in, refusals readable and audited, failed sign-ins rate limited, and
access that follows the provider at each re-check (groups, a disabled account, a provider that
cannot be reached) and at its back-channel logout."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib.auth.models import User

from identity import audit
from identity.models import ExternalIdentity, SignInSession
from identity.secrets import unseal
from kb.models import TenantMembership
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS
from tests.identity.flows import client, end_provider_session, oidc_sign_in
from tests.identity.providers import OidcProvider, rsa_jwk
from tests.retrieval.factories import publish
from work.models import AuditEvent

pytestmark = pytest.mark.integration


def roles_of(user: User) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def events(kind: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=kind).order_by("pk"))


def test_a_new_person_signs_in_with_pkce_and_gets_what_their_groups_give(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any]
) -> None:
    oidc_provider.set_account(
        "dana-sub",
        preferred_username="dana",
        email="dana@acme.test",
        given_name="Dana",
        family_name="Reyes",
        groups=["canon-editors", "finance-team", "contractors"],
    )
    with client() as browser:
        # the authorisation request carries a PKCE challenge (S256), a state and a nonce
        start = browser.get(f"{live_server.url}/identity/oidc/start/", follow_redirects=False)
        query = parse_qs(urlsplit(start.headers["location"]).query)
        assert query["code_challenge_method"] == ["S256"]
        assert len(query["code_challenge"][0]) == 43 and query["state"] and query["nonce"]
        page = oidc_sign_in(browser, live_server.url, "dana-sub")

    # in the admin, as Canon's own user for the provider's subject
    assert urlsplit(str(page.url)).path == "/admin/", page.text[:500]
    assert "Log out" in page.text
    user = User.objects.get(external_identity__subject="dana-sub")
    assert (user.username, user.email, user.first_name, user.last_name) == (
        "dana",
        "dana@acme.test",
        "Dana",
        "Reyes",
    )
    assert user.is_staff and not user.is_superuser and not user.has_usable_password()
    assert roles_of(user) == {CONTENT_MANAGERS}
    membership = TenantMembership.objects.get(user=user)
    assert (membership.tenant, membership.access_groups) == (company["tenant"], ["finance"])
    # the source of access, claim by claim, and what gave nothing
    identity = user.external_identity
    assert {(g["value"], g["role"], tuple(g["access_groups"])) for g in identity.grants} == {
        ("canon-editors", CONTENT_MANAGERS, ()),
        ("finance-team", "", ("finance",)),
    }
    assert identity.unmatched == [["groups", "contractors"]]
    # the sign-in on the audit trail, from where; the session kept for re-checks, its tokens
    # sealed
    [signed_in] = events(audit.SIGN_IN)
    assert signed_in.subject_id == user.pk
    assert signed_in.details["address"] == "127.0.0.1"
    assert signed_in.details["roles"] == [CONTENT_MANAGERS]
    session = SignInSession.objects.get(identity=identity)
    assert session.refresh_token and session.provider_session
    assert unseal(session.refresh_token) and unseal(session.refresh_token) != session.refresh_token


def test_claims_are_applied_again_at_every_sign_in(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any]
) -> None:
    oidc_provider.set_account("erin", preferred_username="erin", groups=["canon-editors"])
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "erin")
    user = User.objects.get(username="erin")
    TenantMembership.objects.filter(user=user).update(access_groups=["given-by-hand"])

    oidc_provider.set_account("erin", preferred_username="erin", groups=["canon-admins", "hr-team"])
    with client() as browser:
        page = oidc_sign_in(browser, live_server.url, "erin")
    assert urlsplit(str(page.url)).path == "/admin/"
    assert roles_of(user) == {INDEX_ADMINS}
    assert TenantMembership.objects.get(user=user).access_groups == ["hr"]
    assert User.objects.filter(external_identity__isnull=False).count() == 1


@pytest.mark.parametrize(
    ("groups", "says"),
    [
        (["contractors"], "has no group that gives access to Canon"),
        (["canon-editors", "globex-staff"], "more than one tenant (acme, globex)"),
        (["finance-team"], "no role in Canon"),
    ],
)
def test_claims_that_give_no_single_tenant_and_role_are_refused_readably(
    live_server: Any,
    oidc_provider: OidcProvider,
    company: dict[str, Any],
    groups: list[str],
    says: str,
) -> None:
    oidc_provider.set_account("frank", preferred_username="frank", groups=groups)
    with client() as browser:
        page = oidc_sign_in(browser, live_server.url, "frank")
    assert urlsplit(str(page.url)).path == "/admin/login/"
    assert says in page.text.replace("&#x27;", "'")
    assert not User.objects.filter(username="frank").exists()
    [refused] = events(audit.SIGN_IN_REFUSED)
    assert refused.details["provider"] == "oidc" and refused.details["address"] == "127.0.0.1"
    assert refused.details["reason"]


def test_a_local_account_of_the_same_name_is_never_taken_over(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any]
) -> None:
    local = User.objects.create_superuser("root", "", "a-long-test-password")
    oidc_provider.set_account("someone", preferred_username="root", groups=["canon-editors"])
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "someone")
    newcomer = User.objects.get(external_identity__subject="someone")
    assert newcomer.pk != local.pk and newcomer.username == "root-2"
    assert not newcomer.is_superuser
    local.refresh_from_db()
    assert local.is_superuser and not ExternalIdentity.objects.filter(user=local).exists()


def test_failed_sign_ins_are_rate_limited(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any], settings: Any
) -> None:
    settings.SIGN_IN_MAX_FAILURES = 1
    oidc_provider.set_account("mallory", preferred_username="mallory", groups=["contractors"])
    with client() as browser:
        for _ in range(5):  # an address's limit is five times a name's
            page = oidc_sign_in(browser, live_server.url, "mallory")
            assert "has no group that gives access" in page.text
        page = browser.get(f"{live_server.url}/identity/oidc/start/")
        assert urlsplit(str(page.url)).path == "/admin/login/"
        assert "Too many failed sign-ins from your address" in page.text
        # the password form from the same address is refused the same way
        form = browser.get(f"{live_server.url}/admin/login/")
        token = form.cookies.get("csrftoken") or browser.cookies.get("csrftoken")
        page = browser.post(
            f"{live_server.url}/admin/login/",
            data={"username": "root", "password": "x", "csrfmiddlewaretoken": token},
            headers={"Referer": f"{live_server.url}/admin/login/"},
        )
        assert "Too many failed sign-ins from your address" in page.text
    reasons = [event.details["reason"] for event in events(audit.SIGN_IN_REFUSED)]
    assert reasons.count("rate limited") == 1 and len(reasons) >= 5


def test_removed_from_a_group_loses_it_at_the_next_request_after_the_recheck(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any], settings: Any
) -> None:
    settings.IDENTITY_RECHECK_MINUTES = 2 / 60  # two seconds
    publish(company["kb"], "budget", "The travel budget is 900 euros.", groups=("finance",))
    publish(company["kb"], "handbook", "Everyone reads the handbook.")
    oidc_provider.set_account(
        "gail", preferred_username="gail", groups=["canon-editors", "finance-team"]
    )
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "gail")
        documents = f"{live_server.url}/admin/kb/document/"
        assert "Budget" in browser.get(documents).text

        oidc_provider.set_account("gail", preferred_username="gail", groups=["canon-editors"])
        assert "Budget" in browser.get(documents).text  # within the interval: as it was
        time.sleep(2.2)
        page = browser.get(documents)
        assert "Budget" not in page.text and "Handbook" in page.text
    user = User.objects.get(username="gail")
    assert TenantMembership.objects.get(user=user).access_groups == []
    [changed] = events(audit.ACCESS_CHANGED)
    assert changed.details["before"]["access_groups"] == ["finance"]
    assert changed.details["after"]["access_groups"] == []


def test_disabled_at_the_provider_is_signed_out_at_the_next_request_after_the_recheck(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any], settings: Any
) -> None:
    settings.IDENTITY_RECHECK_MINUTES = 0  # every request
    oidc_provider.set_account("hank", preferred_username="hank", groups=["canon-editors"])
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "hank")
        assert urlsplit(str(browser.get(f"{live_server.url}/admin/").url)).path == "/admin/"
        # the API with the admin's session too
        assert browser.get(f"{live_server.url}/api/v1/kbs/").status_code == 200

        oidc_provider.set_account("hank", enabled=False, groups=["canon-editors"])
        page = browser.get(f"{live_server.url}/admin/")
        assert urlsplit(str(page.url)).path == "/admin/login/"
        assert "You were signed out" in page.text
        assert browser.get(f"{live_server.url}/api/v1/kbs/").status_code in (401, 403)
    session = SignInSession.objects.get(identity__user__username="hank")
    assert session.ended_at is not None and "no longer accepts" in session.end_reason
    assert session.refresh_token == ""
    [signed_out] = events(audit.SIGNED_OUT)
    assert signed_out.details["reason"] == session.end_reason


def test_a_provider_that_cannot_be_reached_at_the_recheck_signs_out(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any], settings: Any
) -> None:
    settings.IDENTITY_RECHECK_MINUTES = 0
    oidc_provider.set_account("ivy", preferred_username="ivy", groups=["canon-editors"])
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "ivy")
        oidc_provider.stop()
        page = browser.get(f"{live_server.url}/admin/")
    assert urlsplit(str(page.url)).path == "/admin/login/"
    session = SignInSession.objects.get(identity__user__username="ivy")
    assert "could not be reached" in session.end_reason


def test_signing_out_at_the_provider_ends_the_session_by_back_channel_logout(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any], settings: Any
) -> None:
    settings.IDENTITY_RECHECK_MINUTES = 60  # no re-check: the logout itself ends it
    oidc_provider.set_account("jo", preferred_username="jo", groups=["canon-editors"])
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "jo")
        assert urlsplit(str(browser.get(f"{live_server.url}/admin/").url)).path == "/admin/"
        end_provider_session(browser, oidc_provider.issuer)
        deadline = time.monotonic() + 10
        while SignInSession.objects.filter(ended_at__isnull=True).exists():
            assert time.monotonic() < deadline, oidc_provider.log()
            time.sleep(0.1)
        page = browser.get(f"{live_server.url}/admin/")
    assert urlsplit(str(page.url)).path == "/admin/login/"
    session = SignInSession.objects.get(identity__user__username="jo")
    assert session.end_reason == "signed out at the identity provider"


def test_a_logout_token_canon_cannot_verify_ends_nothing(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any]
) -> None:
    oidc_provider.set_account("kim", preferred_username="kim", groups=["canon-editors"])
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "kim")
    session = SignInSession.objects.get(identity__user__username="kim")
    event: dict[str, Any] = {"http://schemas.openid.net/event/backchannel-logout": {}}
    forged = [
        # signed by a key the provider never published
        oidc_provider.forge(
            kid="stranger",
            key=rsa_jwk("stranger")[1],
            aud="canon",
            sub="kim",
            sid=session.provider_session,
            jti="1",
            events=event,
        ),
        # the provider's key, but for another client
        oidc_provider.forge(aud="another-client", sub="kim", jti="2", events=event),
        # the provider's key, for Canon, but not a logout token
        oidc_provider.forge(aud="canon", sub="kim", jti="3"),
    ]
    url = f"{live_server.url}/identity/oidc/backchannel-logout/"
    for token in forged:
        answer = httpx.post(url, data={"logout_token": token}, timeout=10)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "invalid_request"
    session.refresh_from_db()
    assert session.ended_at is None
    refusals = events(audit.TOKEN_REFUSED)
    assert [e.details["reason"] for e in refusals] == [
        "back-channel logout: unknown key id 'stranger'",
        "back-channel logout: wrong audience",
        "back-channel logout: not a logout token (no back-channel logout event)",
    ]
    assert all(token not in str(e.details) for e in refusals for token in forged)


def test_signing_out_in_canon_drops_the_provider_tokens(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any]
) -> None:
    oidc_provider.set_account("lee", preferred_username="lee", groups=["canon-editors"])
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "lee")
        token = browser.cookies.get("csrftoken")
        browser.post(
            f"{live_server.url}/admin/logout/",
            data={"csrfmiddlewaretoken": token},
            headers={"Referer": f"{live_server.url}/admin/"},
        )
    session = SignInSession.objects.get(identity__user__username="lee")
    assert session.end_reason == "signed out in Canon"
    assert session.refresh_token == session.access_token == ""


def test_a_person_disabled_in_canon_is_signed_out_at_the_next_request(
    live_server: Any, oidc_provider: OidcProvider, company: dict[str, Any], settings: Any
) -> None:
    settings.IDENTITY_RECHECK_MINUTES = 60  # Canon's own switch, not the provider's re-check
    oidc_provider.set_account("max", preferred_username="max", groups=["canon-editors"])
    with client() as browser:
        oidc_sign_in(browser, live_server.url, "max")
        assert urlsplit(str(browser.get(f"{live_server.url}/admin/").url)).path == "/admin/"
        assert browser.get(f"{live_server.url}/api/v1/kbs/").status_code == 200
        User.objects.filter(username="max").update(is_active=False)
        # the session no longer passes, in the admin nor the API
        assert browser.get(f"{live_server.url}/api/v1/kbs/").status_code in (401, 403)
        page = browser.get(f"{live_server.url}/admin/")
        assert urlsplit(str(page.url)).path == "/admin/login/"
        # and the provider cannot sign them in again
        page = oidc_sign_in(browser, live_server.url, "max")
    assert "disabled in Canon" in page.text
