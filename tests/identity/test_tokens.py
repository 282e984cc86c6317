"""OAuth 2.0 access tokens of a real OpenID provider (panva's oidc-provider, the
client-credentials grant of a service) beside API keys, on the search API and the Dify and
OpenAI shapes: read through the claim mapping into an API key's grants, checked against the
provider's JWKS, and every refusal answered exactly as the API answers an unknown key (or, for a
knowledge base the token's groups do not include, an unknown knowledge base), its reason only
on the audit trail."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from django.core.files.uploadedfile import SimpleUploadedFile

from identity import audit
from retrieval.principals import api_key_create
from tests.identity.providers import OTHER_AUDIENCE, SHORT_LIVED, OidcProvider, rsa_jwk
from tests.retrieval.factories import api, publish, search
from work.models import AuditEvent

pytestmark = pytest.mark.integration

DIFY = "/api/dify/retrieval"
OPENAI = "/api/openai/v1/vector_stores"


@pytest.fixture
def documents(company: dict[str, Any]) -> dict[str, Any]:
    publish(company["finance_kb"], "budget", "The travel budget is 900 euros.", groups=("finance",))
    publish(company["finance_kb"], "payroll", "Payroll runs on the 25th.", groups=("hr",))
    publish(company["kb"], "travel", "Travel by train; the budget is in Finance.")
    return company


def hit_keys(response: Any) -> set[str]:
    assert response.status_code == 200, response.content
    return {hit["document_key"] for hit in response.json()["hits"]}


def body(response: Any) -> tuple[int, Any, str | None]:
    return response.status_code, response.json(), response.get("WWW-Authenticate")


def refusals() -> list[str]:
    return [e.details["reason"] for e in AuditEvent.objects.filter(kind=audit.TOKEN_REFUSED)]


def test_a_service_token_reads_what_its_groups_give(
    token_provider: OidcProvider, documents: dict[str, Any]
) -> None:
    token = token_provider.service_token("agent-finance")
    agent = api(token)
    # the finance knowledge base only (its mapping row names it), documents of its group only
    assert hit_keys(search(agent, {"query": "budget payroll", "kb": "finance"})) == {"budget"}
    assert [kb["slug"] for kb in agent.get("/api/v1/kbs/").json()["results"]] == ["finance"]
    # a token without a role reads; it does not write
    upload = agent.post(
        "/api/v1/kbs/finance/documents/",
        {"key": "x", "file": SimpleUploadedFile("x.txt", b"Hello.")},
        HTTP_IDEMPOTENCY_KEY="token-upload-1",
    )
    assert upload.status_code == 403, upload.content
    # the same token on the Dify and OpenAI shapes
    dify = agent.post(
        DIFY,
        {"knowledge_id": "finance", "query": "budget", "retrieval_setting": {"top_k": 5}},
        content_type="application/json",
    )
    assert dify.status_code == 200, dify.content
    assert {r["metadata"]["document_key"] for r in dify.json()["records"]} == {"budget"}
    stores = agent.get(OPENAI)
    assert [store["id"] for store in stores.json()["data"]] == ["finance"]
    assert refusals() == []


def test_a_knowledge_base_the_tokens_groups_do_not_include_is_not_found(
    token_provider: OidcProvider, documents: dict[str, Any]
) -> None:
    """Answered as to an API key limited to the same knowledge bases: not found, never told
    apart from a knowledge base that does not exist."""
    token = api(token_provider.service_token("agent-finance"))
    _, limited = api_key_create(
        tenant=documents["tenant"], name="finance only", knowledge_bases=[documents["finance_kb"]]
    )
    by_key = api(limited)
    _, every = api_key_create(tenant=documents["tenant"], name="every kb")
    # the handbook exists (a key of the tenant reads it) ...
    assert hit_keys(search(api(every), {"query": "train", "kb": "handbook"})) == {"travel"}
    # ... but to the token it is not found, in every shape, exactly as to the limited key
    query = {"query": "train", "kb": "handbook"}
    assert search(token, query).status_code == 404
    assert body(search(token, query)) == body(search(by_key, query))
    dify = {"query": "train", "knowledge_id": "handbook", "retrieval_setting": {"top_k": 5}}
    assert token.post(DIFY, dify, "application/json").status_code == 404
    assert body(token.post(DIFY, dify, "application/json")) == (
        body(by_key.post(DIFY, dify, "application/json"))
    )
    assert token.get(f"{OPENAI}/handbook").status_code == 404
    assert body(token.get(f"{OPENAI}/handbook")) == body(by_key.get(f"{OPENAI}/handbook"))


def test_api_keys_work_unchanged_beside_tokens(
    token_provider: OidcProvider, documents: dict[str, Any]
) -> None:
    _, plaintext = api_key_create(tenant=documents["tenant"], name="old key", access_groups=["hr"])
    assert hit_keys(search(api(plaintext), {"query": "payroll budget", "kb": "finance"})) == {
        "payroll"
    }
    unknown = search(api("canon_0000_nope"), {"query": "x", "kb": "finance"})
    assert unknown.status_code == 401
    assert unknown.json()["detail"] == "Invalid API key: unknown API key."


def _alg_confusion(provider: OidcProvider) -> str:
    """HS256 with the provider's public key as the secret: the classic confusion."""
    public = provider.keys[provider.current_kid].public_key()
    secret = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    claims = jwt.decode(provider.forge(), options={"verify_signature": False})
    return _hs256(claims, secret, provider.current_kid)


def _hs256(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    """Written by hand: PyJWT itself refuses to sign with a PEM public key as an HMAC secret."""

    def part(data: Any) -> str:
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = part({"alg": "HS256", "typ": "JWT", "kid": kid})
    signing = f"{head}.{part(claims)}"
    mac = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


REFUSALS = {
    "expired": "expired",
    "wrong audience": "wrong audience",
    "wrong issuer": "wrong issuer",
    "unknown key id": "unknown key id 'stranger'",
    "alg none": "algorithm 'none' is not allowed",
    "alg HS256 with the public key": "algorithm 'HS256' is not allowed",
    "claims mapping to nothing": "its claims map to nothing",
    "bad signature": "bad signature",
}


def _refused_token(provider: OidcProvider, case: str, settings: Any) -> str:
    if case == "expired":
        settings.OAUTH_LEEWAY_SECONDS = 0
        token = provider.service_token("agent-finance", resource=SHORT_LIVED)
        time.sleep(2.1)  # it lived one second
        return token
    if case == "wrong audience":
        return provider.service_token("agent-finance", resource=OTHER_AUDIENCE)
    if case == "wrong issuer":  # the provider's own key, another issuer's name
        return provider.forge(iss="https://login.elsewhere.test")
    if case == "unknown key id":
        return provider.forge(kid="stranger", key=rsa_jwk("stranger")[1])
    if case == "alg none":
        return provider.forge(alg="none")
    if case == "alg HS256 with the public key":
        return _alg_confusion(provider)
    if case == "claims mapping to nothing":
        return provider.service_token("agent-nobody")
    if case == "bad signature":  # the provider's kid, signed by another key
        return provider.forge(key=rsa_jwk("other")[1])
    raise AssertionError(case)


@pytest.mark.parametrize("case", list(REFUSALS))
def test_each_refused_token_gets_the_unknown_keys_answer_and_its_reason_is_audited(
    token_provider: OidcProvider, documents: dict[str, Any], settings: Any, case: str
) -> None:
    token = _refused_token(token_provider, case, settings)
    query = {"query": "budget", "kb": "finance"}
    dify = {"knowledge_id": "finance", "query": "budget", "retrieval_setting": {"top_k": 5}}
    unknown_key, refused = api("canon_0000_nope"), api(token)
    assert body(search(refused, query)) == body(search(unknown_key, query))
    assert body(refused.post(DIFY, dify, "application/json")) == body(
        unknown_key.post(DIFY, dify, "application/json")
    )
    assert body(refused.get(OPENAI)) == body(unknown_key.get(OPENAI))
    assert search(refused, query).status_code == 401
    reasons = refusals()
    assert reasons and set(reasons) == {REFUSALS[case]}, reasons
    event = AuditEvent.objects.filter(kind=audit.TOKEN_REFUSED).first()
    assert event is not None and event.details["address"] == "127.0.0.1"
    signature = token.split(".")[2]
    assert token not in str(event.details)
    assert not signature or signature not in str(event.details)


def test_a_token_signed_with_the_previous_key_is_refused_after_rotation(
    token_provider: OidcProvider, documents: dict[str, Any], settings: Any
) -> None:
    settings.OAUTH_JWKS_MIN_REFETCH_SECONDS = 0
    query = {"query": "budget", "kb": "finance"}
    before = token_provider.service_token("agent-finance")
    assert hit_keys(search(api(before), query)) == {"budget"}

    old_kid, new_kid = token_provider.rotate_keys()
    after = token_provider.service_token("agent-finance")
    assert jwt.get_unverified_header(after)["kid"] == new_kid
    # the new key is fetched without a restart; the old one is gone with it
    assert hit_keys(search(api(after), query)) == {"budget"}
    refused = search(api(before), query)
    assert body(refused) == body(search(api("canon_0000_nope"), query))
    assert refusals() == [f"unknown key id {old_kid!r}"]
