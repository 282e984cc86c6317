"""Principals: keys made in the admin or by `create_api_key`, expiry and revocation on every
endpoint, admin sessions, and per-key rate limits."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from kb.models import KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.models import ApiKey
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, search

pytestmark = pytest.mark.django_db

KEY_PATTERN = re.compile(r"canon_[0-9a-f]{8}_[A-Za-z0-9_-]+")


@pytest.fixture
def manual(kb: KnowledgeBase) -> KnowledgeBase:
    """A second knowledge base of the same tenant."""
    return knowledge_base_create(tenant=kb.tenant, name="Manual", slug="manual")


def kb_slugs(key: str) -> list[str]:
    response = api(key).get("/api/v1/kbs/")
    assert response.status_code == 200, response.content
    return [kb["slug"] for kb in response.json()["results"]]


def test_a_key_created_in_the_admin_keeps_its_knowledge_bases(
    admin_user: User, kb: KnowledgeBase, manual: KnowledgeBase
) -> None:
    client = Client()
    client.force_login(admin_user)

    response = client.post(
        "/admin/retrieval/apikey/add/",
        {
            "tenant": kb.tenant_id,
            "name": "bot",
            "knowledge_bases": [manual.pk],
            "access_groups": "finance,hr",
            "expires_at_0": "",
            "expires_at_1": "",
        },
        follow=True,
    )

    assert response.status_code == 200
    plaintext = KEY_PATTERN.search(response.content.decode())
    assert plaintext, "the key is shown once after creation"
    key = ApiKey.objects.get(name="bot")
    assert list(key.knowledge_bases.all()) == [manual]
    assert key.access_groups == ["finance", "hr"]
    assert key.key_hash not in response.content.decode()
    assert kb_slugs(plaintext.group()) == ["manual"]


def test_a_key_edited_or_revoked_in_the_admin_changes_at_once(
    admin_user: User, kb: KnowledgeBase, manual: KnowledgeBase
) -> None:
    key, plaintext = api_key_create(tenant=kb.tenant, name="bot")
    client = Client()
    client.force_login(admin_user)
    assert kb_slugs(plaintext) == ["handbook", "manual"]

    response = client.post(
        f"/admin/retrieval/apikey/{key.pk}/change/",
        {
            "tenant": kb.tenant_id,
            "name": "bot",
            "knowledge_bases": [kb.pk],
            "access_groups": "",
            "expires_at_0": "",
            "expires_at_1": "",
        },
    )
    assert response.status_code == 302
    assert kb_slugs(plaintext) == ["handbook"]

    client.post(
        "/admin/retrieval/apikey/",
        {"action": "revoke", "_selected_action": [key.pk]},
    )
    assert api(plaintext).get("/api/v1/kbs/").status_code == 401


def test_the_admin_refuses_knowledge_bases_of_another_tenant(
    admin_user: User, kb: KnowledgeBase
) -> None:
    other = knowledge_base_create(
        tenant=Tenant.objects.create(name="Other", slug="other"), name="Theirs", slug="theirs"
    )
    client = Client()
    client.force_login(admin_user)

    response = client.post(
        "/admin/retrieval/apikey/add/",
        {
            "tenant": kb.tenant_id,
            "name": "sneaky",
            "knowledge_bases": [other.pk],
            "expires_at_0": "",
            "expires_at_1": "",
        },
    )

    assert response.status_code == 200  # the form again, with the error
    assert "Not knowledge bases of" in response.content.decode()
    assert not ApiKey.objects.filter(name="sneaky").exists()


def test_create_api_key_prints_a_key_scoped_as_asked(
    kb: KnowledgeBase, manual: KnowledgeBase
) -> None:
    out = io.StringIO()

    call_command(
        "create_api_key",
        "--tenant=acme",
        "--kb=manual",
        "--groups=finance, hr",
        "--name=sync",
        "--expires-days=30",
        stdout=out,
        stderr=io.StringIO(),
    )

    plaintext = out.getvalue().strip()
    assert KEY_PATTERN.fullmatch(plaintext)
    key = ApiKey.objects.get(name="sync")
    assert key.access_groups == ["finance", "hr"]
    assert key.expires_at is not None
    assert timedelta(days=29) < key.expires_at - timezone.now() <= timedelta(days=30)
    assert kb_slugs(plaintext) == ["manual"]


@pytest.mark.parametrize(
    "args",
    [["--tenant=nobody"], ["--tenant=acme", "--kb=nothing"], ["--tenant=acme", "--expires-days=0"]],
)
def test_create_api_key_refuses_what_does_not_exist(kb: KnowledgeBase, args: list[str]) -> None:
    with pytest.raises(CommandError):
        call_command("create_api_key", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert not ApiKey.objects.exists()


ENDPOINTS = [
    ("post", "/api/v1/search", {"kb": "handbook", "query": "x"}),
    ("get", "/api/v1/kbs/", None),
    ("get", "/api/v1/kbs/handbook/documents/", None),
    ("get", "/api/v1/documents/1", None),
    ("delete", "/api/v1/documents/1", None),
    ("get", "/api/v1/chunks/1/explain", None),
    ("post", "/api/v1/kbs/handbook/documents/", None),
]


def call(client: Client, method: str, path: str, body: Any) -> Any:
    if method == "post" and body is not None:
        return client.post(path, body, content_type="application/json")
    return getattr(client, method)(path)


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_expired_revoked_and_malformed_keys_get_401_on_every_endpoint(
    kb: KnowledgeBase, method: str, path: str, body: Any
) -> None:
    _, expired = api_key_create(
        tenant=kb.tenant, name="old", expires_at=timezone.now() - timedelta(seconds=1)
    )
    _, revoked = api_key_create(tenant=kb.tenant, name="gone")
    ApiKey.objects.filter(name="gone").update(revoked_at=timezone.now())

    for plaintext, reason in [
        (expired, "expired"),
        (revoked, "revoked"),
        ("canon_deadbeef_nope", "unknown"),
        ("not-a-key", "malformed"),
        (None, "credentials"),
    ]:
        response = call(api(plaintext), method, path, body)
        assert response.status_code == 401, (plaintext, response.content)
        assert reason in response.json()["detail"]
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_admin_session_user_calls_the_api_for_their_tenant(
    admin_user: User, kb: KnowledgeBase
) -> None:
    Tenant.objects.create(name="Other", slug="other")
    client = Client()
    client.force_login(admin_user)

    response = client.get("/api/v1/kbs/")

    assert response.status_code == 200
    assert [k["slug"] for k in response.json()["results"]] == ["handbook"]


def test_a_session_user_without_a_tenant_is_refused(kb: KnowledgeBase) -> None:
    user = User.objects.create_user("drifter", password="a-long-test-password")
    client = Client()
    client.force_login(user)

    assert client.get("/api/v1/kbs/").status_code == 403


@pytest.mark.usefixtures("steady_rate_window")
def test_a_key_over_its_rate_gets_429_with_retry_after(kb: KnowledgeBase, settings: Any) -> None:
    settings.CANON_API_RATE = "2/min"
    _, busy = api_key_create(tenant=kb.tenant, name="busy")
    _, calm = api_key_create(tenant=kb.tenant, name="calm")

    statuses = [api(busy).get("/api/v1/kbs/").status_code for _ in range(3)]
    throttled = search(api(busy), {"kb": "handbook", "query": "x"})

    assert statuses == [200, 200, 429]
    assert throttled.status_code == 429
    assert throttled.json()["error"] == "throttled"
    assert 1 <= int(throttled.headers["Retry-After"]) <= 60
    assert api(calm).get("/api/v1/kbs/").status_code == 200, "the limit is per key"


@pytest.mark.usefixtures("steady_rate_window")
def test_session_users_are_rate_limited_per_user(
    admin_user: User, kb: KnowledgeBase, settings: Any
) -> None:
    settings.CANON_API_RATE = "1/min"
    client = Client()
    client.force_login(admin_user)

    assert client.get("/api/v1/kbs/").status_code == 200
    assert client.get("/api/v1/kbs/").status_code == 429


def test_rate_limits_fail_open_when_the_cache_is_down(
    kb: KnowledgeBase, api_key: str, settings: Any
) -> None:
    settings.CANON_API_RATE = "1/min"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }

    statuses = {api(api_key).get("/api/v1/kbs/").status_code for _ in range(2)}

    assert statuses == {200}
