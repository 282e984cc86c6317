"""SAML 2.0 sign-in to the admin against pysaml2's own IdP in its own process (signing with
xmlsec1): the same claim mapping as OIDC, an answer whose signature does not hold refused, and
a SAML session ending after its interval (SAML cannot re-check without the person)."""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User

from identity import audit
from identity.models import ExternalIdentity, SignInSession
from kb.models import TenantMembership
from kb.roles import CONTENT_MANAGERS
from tests.identity.flows import _form, client, saml_sign_in
from tests.identity.providers import SamlIdp
from work.models import AuditEvent

pytestmark = pytest.mark.integration


def test_a_new_person_signs_in_through_saml_with_the_same_mapping(
    live_server: Any, saml_idp: SamlIdp, company: dict[str, Any]
) -> None:
    saml_idp.set_user(
        "nora",
        mail=["nora@acme.test"],
        givenName=["Nora"],
        sn=["Berg"],
        groups=["canon-editors", "hr-team", "contractors"],
    )
    with client() as browser:
        page = saml_sign_in(browser, live_server.url, "nora")
    assert urlsplit(str(page.url)).path == "/admin/", page.text[:1000]
    user = User.objects.get(external_identity__provider=ExternalIdentity.Provider.SAML)
    assert (user.username, user.email, user.first_name, user.last_name) == (
        "nora",
        "nora@acme.test",
        "Nora",
        "Berg",
    )
    identity = user.external_identity
    assert identity.subject == "idp-person-nora"
    assert identity.issuer == saml_idp.metadata_url
    assert set(user.groups.values_list("name", flat=True)) == {CONTENT_MANAGERS}
    membership = TenantMembership.objects.get(user=user)
    assert (membership.tenant, membership.access_groups) == (company["tenant"], ["hr"])
    assert ["groups", "contractors"] in identity.unmatched
    [event] = AuditEvent.objects.filter(kind=audit.SIGN_IN)
    assert event.details["provider"] == "saml" and event.details["address"] == "127.0.0.1"
    assert SignInSession.objects.filter(identity=identity, ended_at__isnull=True).count() == 1


def test_a_person_whose_attributes_map_to_nothing_is_refused(
    live_server: Any, saml_idp: SamlIdp, company: dict[str, Any]
) -> None:
    saml_idp.set_user("otto", groups=["contractors"])
    with client() as browser:
        page = saml_sign_in(browser, live_server.url, "otto")
    assert urlsplit(str(page.url)).path == "/admin/login/"
    assert "has no group that gives access to Canon" in page.text
    assert not User.objects.filter(username="otto").exists()
    [refused] = AuditEvent.objects.filter(kind=audit.SIGN_IN_REFUSED)
    assert refused.details["provider"] == "saml"


def test_an_answer_changed_after_the_idp_signed_it_is_refused(
    live_server: Any, saml_idp: SamlIdp, company: dict[str, Any]
) -> None:
    saml_idp.set_user("pia", groups=["canon-editors"])
    with client() as browser:
        page = browser.get(f"{live_server.url}/identity/saml/login/")
        action, fields = _form(page)
        answer = browser.post(action, data={**fields, "username": "pia"})
        action, fields = _form(answer)
        xml = base64.b64decode(fields["SAMLResponse"]).decode()
        assert "canon-editors" in xml
        fields["SAMLResponse"] = base64.b64encode(
            xml.replace("canon-editors", "canon-admins").encode()
        ).decode()
        page = browser.post(action, data=fields)
    assert urlsplit(str(page.url)).path == "/admin/login/"
    assert "answer could not be accepted" in page.text
    assert not User.objects.filter(username="pia").exists()
    [refused] = AuditEvent.objects.filter(kind=audit.SIGN_IN_REFUSED)
    assert "SAML response refused" in refused.details["reason"]


def test_a_saml_session_ends_after_its_interval(
    live_server: Any, saml_idp: SamlIdp, company: dict[str, Any], settings: Any
) -> None:
    settings.SAML_RECHECK_MINUTES = 2 / 60
    saml_idp.set_user("quinn", groups=["canon-editors"])
    with client() as browser:
        saml_sign_in(browser, live_server.url, "quinn")
        assert urlsplit(str(browser.get(f"{live_server.url}/admin/").url)).path == "/admin/"
        time.sleep(2.2)
        page = browser.get(f"{live_server.url}/admin/")
    assert urlsplit(str(page.url)).path == "/admin/login/"
    assert "You were signed out" in page.text
    session = SignInSession.objects.get(identity__user__username="quinn")
    assert "SAML" in session.end_reason
