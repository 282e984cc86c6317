"""The MCP server (`manage.py canon_mcp`, a real process) with access tokens of a real OpenID
provider, as the MCP authorization specification asks: protected resource metadata (RFC 9728)
naming the provider, a 401 whose WWW-Authenticate points at it, tokens whose audience is this
server accepted through the official MCP client, and tokens for anything else refused as an
unknown key is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from identity import audit
from tests.identity.providers import API_AUDIENCE, MCP_RESOURCE, OidcProvider
from tests.mcp.conftest import McpServer, call_tool
from tests.retrieval.factories import publish
from work.models import AuditEvent

pytestmark = pytest.mark.integration

METADATA = "https://canon.test/.well-known/oauth-protected-resource/mcp"


@pytest.fixture
def mcp_with_tokens(
    transactional_db: None, token_provider: OidcProvider, company: dict[str, Any], tmp_path: Path
) -> Any:
    publish(company["finance_kb"], "budget", "The travel budget is 900 euros.", groups=("finance",))
    publish(company["finance_kb"], "payroll", "Payroll runs on the 25th.", groups=("hr",))
    server = McpServer(
        tmp_path / "mcp.log",
        CANON_OAUTH_ISSUER=token_provider.issuer,
        CANON_OAUTH_AUDIENCE=API_AUDIENCE,
        CANON_MCP_RESOURCE_URL=MCP_RESOURCE,
    )
    yield server
    server.stop()


def test_the_protected_resource_metadata_names_the_provider(
    mcp_with_tokens: McpServer, token_provider: OidcProvider
) -> None:
    base = mcp_with_tokens.url.removesuffix("/mcp")
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ):
        answer = httpx.get(base + path, timeout=10)
        assert answer.status_code == 200, answer.text
        metadata = answer.json()
        assert metadata["resource"] == MCP_RESOURCE
        assert metadata["authorization_servers"] == [token_provider.issuer]
        assert metadata["bearer_methods_supported"] == ["header"]

    unauthenticated = httpx.post(mcp_with_tokens.url, json={}, timeout=10)
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["www-authenticate"] == (
        f'Bearer realm="canon", resource_metadata="{METADATA}"'
    )


def test_a_token_for_this_server_searches_what_its_groups_give(
    mcp_with_tokens: McpServer, token_provider: OidcProvider
) -> None:
    token = token_provider.service_token("agent-finance", resource=MCP_RESOURCE)
    listed = call_tool(mcp_with_tokens.url, token, "list_knowledge_bases")
    assert not listed.is_error, listed
    assert [kb["slug"] for kb in listed.structured_content["results"]] == ["finance"]
    found = call_tool(
        mcp_with_tokens.url,
        token,
        "search",
        {"query": "budget payroll", "kb": "finance", "mode": "keyword"},
    )
    assert not found.is_error, mcp_with_tokens.log()[-3000:]
    assert {hit["document_key"] for hit in found.structured_content["hits"]} == {"budget"}


def test_a_token_for_another_audience_is_refused_as_an_unknown_key(
    mcp_with_tokens: McpServer, token_provider: OidcProvider
) -> None:
    for_the_api = token_provider.service_token("agent-finance", resource=API_AUDIENCE)

    def answer(credential: str) -> tuple[int, Any, str]:
        response = httpx.post(
            mcp_with_tokens.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {credential}", "Accept": "application/json"},
            timeout=10,
        )
        return response.status_code, response.json(), response.headers["www-authenticate"]

    refused = answer(for_the_api)
    assert refused == answer("canon_0000_nope")
    assert refused[0] == 401
    [event] = AuditEvent.objects.filter(kind=audit.TOKEN_REFUSED)
    assert event.details["reason"] == "wrong audience"
    assert for_the_api not in json.dumps(event.details)
