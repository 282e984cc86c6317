"""Fixtures of the sign-in tests: the real providers (tests/identity/providers.py) started for a
test, Canon's settings pointed at them, the roles and the claim mapping of a small company."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Group, Permission

from identity import jwks
from identity.models import ClaimMapping
from kb.models import KnowledgeBase, Tenant
from kb.roles import CONTENT_MANAGERS, INDEX_ADMINS, ensure_roles
from kb.services.index_versions import knowledge_base_create
from tests.identity.providers import OidcProvider, SamlIdp, oidc_settings

BACKENDS = ["identity.backends.LocalPasswordBackend"]


@pytest.fixture(autouse=True)
def _no_sign_in_failures_counted(settings: Any) -> Iterator[None]:
    """Each test starts with no failed sign-in counted (the counters live in Redis)."""

    def forget() -> None:
        server = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
        for key in server.scan_iter(match="*identity:*"):
            server.delete(key)

    forget()
    yield
    forget()


@pytest.fixture
def oidc_provider(live_server: Any, tmp_path: Path, settings: Any) -> Iterator[OidcProvider]:
    """The OpenID provider for one test, Canon's live server its client."""
    provider = OidcProvider(tmp_path / "oidc", canon_url=live_server.url)
    oidc_settings(settings, provider)
    yield provider
    provider.stop()
    jwks.forget()


@pytest.fixture
def token_provider(tmp_path: Path, settings: Any) -> Iterator[OidcProvider]:
    """The OpenID provider as the issuer of access tokens only (no live server needed)."""
    provider = OidcProvider(tmp_path / "oidc", canon_url="http://localhost:9")
    oidc_settings(settings, provider)
    yield provider
    provider.stop()
    jwks.forget()


@pytest.fixture
def saml_idp(live_server: Any, tmp_path: Path, settings: Any) -> Iterator[SamlIdp]:
    idp = SamlIdp(tmp_path / "saml", canon_url=live_server.url)
    settings.SAML_IDP_METADATA = idp.metadata_url
    settings.SAML_NAME = "Acme SAML"
    settings.SAML_ENABLED = True
    settings.AUTHENTICATION_BACKENDS = [*BACKENDS, "identity.saml.SamlBackend"]
    yield idp
    idp.stop()


@pytest.fixture
def roles(db: None) -> None:
    ensure_roles(Group, Permission)


@pytest.fixture
def company(tenant: Tenant, kb: KnowledgeBase, roles: None) -> dict[str, Any]:
    """Acme's mapping: editors are content managers, the finance and hr teams read their
    groups' documents, a contractors group is mapped to nothing; another tenant exists."""
    other = Tenant.objects.create(name="Globex", slug="globex")
    knowledge_base_create(tenant=other, name="Globex wiki", slug="wiki")
    finance_kb = knowledge_base_create(tenant=tenant, name="Finance", slug="finance")
    rows = {
        "editors": ClaimMapping.objects.create(
            claim="groups", value="canon-editors", tenant=tenant, role=CONTENT_MANAGERS
        ),
        "admins": ClaimMapping.objects.create(
            claim="groups", value="canon-admins", tenant=tenant, role=INDEX_ADMINS
        ),
        "finance": ClaimMapping.objects.create(
            claim="groups", value="finance-team", tenant=tenant, access_groups=["finance"]
        ),
        "hr": ClaimMapping.objects.create(
            claim="groups", value="hr-team", tenant=tenant, access_groups=["hr"]
        ),
        "globex": ClaimMapping.objects.create(
            claim="groups", value="globex-staff", tenant=other, role=CONTENT_MANAGERS
        ),
        "agents": ClaimMapping.objects.create(
            claim="groups", value="canon-agents-finance", tenant=tenant, access_groups=["finance"]
        ),
    }
    rows["agents"].knowledge_bases.set([finance_kb])
    return {"tenant": tenant, "kb": kb, "finance_kb": finance_kb, "other": other, **rows}
