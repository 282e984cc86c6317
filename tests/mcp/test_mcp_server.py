"""The MCP server through the official MCP client, against a real `manage.py canon_mcp`
process: the same knowledge bases, access groups, answers and refusals as the REST API."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client
from mcp.client.session import ClientSession

from retrieval.api.serializers import SearchInput
from retrieval.mcp.tools import SEARCH_FIELDS_NOT_OFFERED
from tests.mcp.conftest import McpServer, World, call_tool, session_call

# The world (conftest.py) is committed once for the module; each test's own writes roll back.
pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def answer(result: Any) -> dict[str, Any]:
    """A successful tool call's structured answer (the same as its text, which is JSON)."""
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return dict(result.structured_content)


def refusal(result: Any) -> str:
    assert result.is_error, result
    return str(result.content[0].text)


def test_the_server_lists_its_three_read_only_tools(mcp_server: McpServer, world: World) -> None:
    async def work(session: ClientSession) -> Any:
        return await session.list_tools()

    tools = {tool.name: tool for tool in session_call(mcp_server.url, world.key, work).tools}

    assert set(tools) == {"search", "list_knowledge_bases", "fetch"}
    assert all(tool.annotations and tool.annotations.read_only_hint for tool in tools.values())
    assert {"query", "kb"} <= set(tools["search"].input_schema["required"])


def test_the_search_tool_offers_every_field_of_the_rest_search_body() -> None:
    """One vocabulary: a field added to the REST search is offered by the tool (or listed as
    deliberately not offered), under the same name."""
    from retrieval.mcp.server import CanonMCP

    async def schema() -> dict[str, Any]:
        tools = await CanonMCP(threads=1).server.list_tools()
        return next(tool.input_schema for tool in tools if tool.name == "search")

    import anyio

    offered = set(anyio.run(schema)["properties"])
    assert set(SearchInput().fields) - SEARCH_FIELDS_NOT_OFFERED <= offered


def test_list_knowledge_bases_shows_only_what_the_key_may_search(
    mcp_server: McpServer, world: World
) -> None:
    listed = answer(call_tool(mcp_server.url, world.key, "list_knowledge_bases"))
    limited = answer(call_tool(mcp_server.url, world.handbook_key, "list_knowledge_bases"))
    foreign = answer(call_tool(mcp_server.url, world.foreign_key, "list_knowledge_bases"))

    assert [kb["slug"] for kb in listed["results"]] == ["archive", "handbook", "multilingual"]
    assert [kb["slug"] for kb in limited["results"]] == ["handbook"]
    assert [kb["slug"] for kb in foreign["results"]] == ["foreign"]


def test_search_returns_hits_with_citations_the_key_may_read(
    mcp_server: McpServer, world: World
) -> None:
    arguments = {"query": "vacation", "kb": "handbook", "mode": "keyword"}

    plain = answer(call_tool(mcp_server.url, world.key, "search", arguments))
    secret = answer(call_tool(mcp_server.url, world.secret_key, "search", arguments))

    assert [hit["document_key"] for hit in plain["hits"]] == ["vacation"]
    hit = plain["hits"][0]
    assert hit["chunk_id"] == world.public_chunk
    assert hit["revision"] == 1 and hit["build_id"] and "heading_path" in hit
    assert hit["char_start"] is not None and hit["char_end"] > hit["char_start"]
    assert {h["document_key"] for h in secret["hits"]} == {"vacation", "merger"}


def test_search_answers_what_the_rest_api_answers(
    mcp_server: McpServer, world: World, client: Any
) -> None:
    body = {"query": "vacation policy", "kb": "handbook", "mode": "keyword", "top_k": 5}

    over_mcp = answer(call_tool(mcp_server.url, world.secret_key, "search", body))
    over_rest = client.post(
        "/api/v1/search",
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {world.secret_key}"},
    ).json()

    drop = ("took_ms",)
    assert {k: v for k, v in over_mcp.items() if k not in drop} == {
        k: v for k, v in over_rest.items() if k not in drop
    }


def test_a_knowledge_base_the_key_may_not_search_is_not_found(
    mcp_server: McpServer, world: World
) -> None:
    for kb in ("foreign", "archive", "nonexistent"):
        message = refusal(
            call_tool(mcp_server.url, world.handbook_key, "search", {"query": "x", "kb": kb})
        )
        assert f"Knowledge base {kb!r} not found." in message


def test_fetch_a_chunk_with_its_citation(mcp_server: McpServer, world: World) -> None:
    fetched = answer(
        call_tool(mcp_server.url, world.key, "fetch", {"chunk_id": world.public_chunk})
    )

    chunk = fetched["chunk"]
    assert chunk["chunk_id"] == world.public_chunk
    assert "thirty days" in chunk["text"]
    assert chunk["document_id"] == world.public_document and chunk["document_key"] == "vacation"
    assert chunk["kb"] == "handbook" and chunk["revision"] == 1 and chunk["live"] is True
    assert "heading_path" in chunk and "location" in chunk
    assert chunk["char_end"] > chunk["char_start"]
    assert fetched["live_revision"] == 1
    # issue 37, item 12: the same `citation` object as the search hit of the chunk carries
    found = answer(
        call_tool(mcp_server.url, world.key, "search", {"query": "vacation", "kb": "handbook"})
    )
    hit = next(h for h in found["hits"] if h["chunk_id"] == world.public_chunk)
    assert chunk["citation"] == hit["citation"]
    assert chunk["citation"]["url"].startswith(
        f"/api/v1/documents/{world.public_document}/revisions/1/text?start="
    )


def test_fetch_a_document_with_its_live_chunks(mcp_server: McpServer, world: World) -> None:
    fetched = answer(
        call_tool(mcp_server.url, world.key, "fetch", {"document_id": world.public_document})
    )

    assert fetched["document"]["key"] == "vacation"
    assert fetched["document"]["live_revision"] == 1
    assert [c["chunk_id"] for c in fetched["chunks"]][:1] == [world.public_chunk]
    assert fetched["next_ordinal"] is None


def test_what_the_key_may_not_read_is_not_found_like_what_does_not_exist(
    mcp_server: McpServer, world: World
) -> None:
    url = mcp_server.url
    forbidden = refusal(call_tool(url, world.key, "fetch", {"chunk_id": world.secret_chunk}))
    missing = refusal(call_tool(url, world.key, "fetch", {"chunk_id": 10**12}))
    foreign = refusal(call_tool(url, world.foreign_key, "fetch", {"chunk_id": world.public_chunk}))
    document = refusal(call_tool(url, world.key, "fetch", {"document_id": world.secret_document}))
    readable = answer(call_tool(url, world.secret_key, "fetch", {"chunk_id": world.secret_chunk}))

    assert forbidden == f"Error executing tool fetch: Chunk {world.secret_chunk} not found."
    assert missing == f"Error executing tool fetch: Chunk {10**12} not found."
    assert foreign == f"Error executing tool fetch: Chunk {world.public_chunk} not found."
    assert document == f"Error executing tool fetch: Document {world.secret_document} not found."
    assert readable["chunk"]["document_key"] == "merger"


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("search", {"kb": "handbook"}, "query"),
        ("search", {"query": "x", "kb": "handbook", "top_k": 0}, "top_k"),
        ("search", {"query": "x", "kb": "handbook", "mode": "psychic"}, "mode"),
        ("search", {"query": "   ", "kb": "handbook"}, "query: This field may not be blank."),
        ("search", {"query": "x", "kb": "handbook", "top_k": "many"}, "top_k"),
        ("fetch", {}, "Give exactly one of chunk_id and document_id."),
        ("fetch", {"chunk_id": 1, "document_id": 1}, "Give exactly one of"),
        ("fetch", {"chunk_id": -3}, "chunk_id"),
        ("fetch", {"document_id": 1, "max_chunks": 1000}, "max_chunks"),
    ],
)
def test_bad_arguments_are_a_tool_error_naming_the_problem(
    mcp_server: McpServer, world: World, tool: str, arguments: dict[str, Any], expected: str
) -> None:
    message = refusal(call_tool(mcp_server.url, world.key, tool, arguments))

    assert expected in message, message


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        (
            "search",
            {"query": "x", "kb": "handbook", "as_of": "2026-01-01T00:00:00Z"},
            "unknown argument as_of; search takes",
        ),
        ("search", {"query": "x", "kb": "handbook", "explain": True}, "the REST search's only"),
        ("search", {"query": "x", "kb": "handbook", "top-k": 3}, "unknown argument top-k"),
        ("fetch", {"chunk_id": 1, "page": 2}, "unknown argument page; fetch takes chunk_id"),
        ("list_knowledge_bases", {"kb": "handbook"}, "list_knowledge_bases takes no arguments."),
    ],
)
def test_an_argument_a_tool_does_not_declare_is_refused_naming_it(
    mcp_server: McpServer, world: World, tool: str, arguments: dict[str, Any], expected: str
) -> None:
    """Issue 37, item 12: the SDK dropped them, so `as_of` searched now and `explain` explained
    nothing, and the agent could not tell."""
    message = refusal(call_tool(mcp_server.url, world.key, tool, arguments))

    assert expected in message, message


def test_the_tools_describe_the_limits_and_every_filter_operator_in_words(
    mcp_server: McpServer, world: World
) -> None:
    """Issue 37, item 12: the kb argument said `SEARCH_MAX_KBS` (a setting's name), and the
    filter's operators left out starts_with and ends_with, which it accepts; the REST API's
    OpenAPI schema the same."""
    from django.conf import settings

    from retrieval.filters import OPERATORS

    async def work(session: ClientSession) -> Any:
        return await session.list_tools()

    tools = {tool.name: tool for tool in session_call(mcp_server.url, world.key, work).tools}
    properties = tools["search"].input_schema["properties"]
    schema = Client().get("/api/schema/", headers={"Accept": "application/json"}).json()
    rest = schema["components"]["schemas"]["SearchInputRequest"]["properties"]

    assert "SEARCH_MAX" not in json.dumps(tools["search"].input_schema)
    assert f"up to {settings.SEARCH_MAX_KBS}" in properties["kb"]["description"]
    for operator in OPERATORS:
        assert operator in properties["filter"]["description"], operator
    assert rest["filter"]["properties"]["op"]["enum"] == list(OPERATORS)
    assert all(operator in rest["filter"]["description"] for operator in OPERATORS)
    assert "SEARCH_MAX" not in json.dumps(rest)


def test_get_is_a_405_not_an_event_stream_held_open(mcp_server: McpServer, world: World) -> None:
    """Issue 37, item 12: docs/PRODUCTION.md says the transport sends no server-sent events;
    a GET held a stream open all the same. Now the specification's answer of a server without
    that stream, at once; POST serves as before."""
    headers = {"Authorization": f"Bearer {world.key}", "Accept": "text/event-stream"}

    answer_ = httpx.get(mcp_server.url, headers=headers, timeout=10)
    without_key = httpx.get(mcp_server.url, headers={"Accept": "text/event-stream"}, timeout=10)

    assert answer_.status_code == 405, answer_.text
    assert answer_.headers["allow"] == "POST"
    assert answer_.headers["content-type"] == "application/json"
    assert "no server-sent events" in answer_.json()["detail"]
    assert without_key.status_code == 401
    assert not call_tool(mcp_server.url, world.key, "list_knowledge_bases").is_error


def test_a_number_beyond_a_double_in_a_filter_is_refused_naming_its_place(
    mcp_server: McpServer, world: World
) -> None:
    """Issue 37, item 13: `1e400` reads as infinity; the answer was "Value must be valid
    JSON." with no place. Sent as raw JSON-RPC: a client library would not write it."""
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", '
        '"arguments": {"query": "x", "kb": "handbook", "filter": {"and": [{"field": "year", '
        '"op": "gt", "value": 1e400}]}}}}'
    )
    headers = {
        "Authorization": f"Bearer {world.key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-06-18",
    }

    response = httpx.post(mcp_server.url, content=body, headers=headers, timeout=30)

    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True
    assert "filter: filter.and[0].value: a number beyond the range" in result["content"][0]["text"]


def test_the_embedding_model_is_loaded_before_the_server_answers(
    world: World, tmp_path: Path
) -> None:
    """Issue 37, item 12: the first search after start waited 4.4 s for the model. With
    CANON_PRELOAD_EMBEDDING_MODELS (as `make run` and canon.env set it) the server loads it
    before it answers, and the first search does not load it again."""
    server = McpServer(
        tmp_path / "server.log",
        CANON_PRELOAD_EMBEDDING_MODELS="use/use-multilingual-v3",
    )
    try:
        loaded_at_start = server.log().count("embedding model use-multilingual-v3 loaded")
        first = answer(
            call_tool(
                server.url, world.key, "search", {"query": "paid leave", "kb": "multilingual"}
            )
        )
        log = server.log()
    finally:
        server.stop()

    assert loaded_at_start == 1, log
    assert log.count("embedding model use-multilingual-v3 loaded") == 1, log
    assert log.index("embedding model use-multilingual-v3 loaded") < log.index("serving MCP")
    assert first["hits"] == [] and first["kb"] == "multilingual"
    load = float(re.search(r"use-multilingual-v3 loaded in ([0-9.]+)s", log).group(1))  # type: ignore[union-attr]
    print(f"model load at start {load:.2f} s; first search took {first['took_ms']:.0f} ms")


def test_a_missing_or_bad_key_is_a_401(mcp_server: McpServer, world: World) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer canon_abc_nope"}, {"Authorization": "Basic x"}):
        response = httpx.post(mcp_server.url, json=initialize, headers={**headers, **auth})
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"] == 'Bearer realm="canon"'
        assert world.key not in response.text

    with pytest.raises(Exception):  # noqa: B017 (the official client gets no session at all)
        call_tool(mcp_server.url, "canon_abc_nope", "list_knowledge_bases")


def test_tool_calls_spend_the_keys_read_budget(world: World, tmp_path: Path) -> None:
    server = McpServer(tmp_path / "server.log", CANON_API_RATE="3/min")
    try:

        async def work(session: ClientSession) -> list[Any]:
            return [await session.call_tool("list_knowledge_bases", {}) for _ in range(4)]

        results = session_call(server.url, world.key, work)
        other = call_tool(server.url, world.secret_key, "list_knowledge_bases")
    finally:
        server.stop()

    assert [r.is_error for r in results] == [False, False, False, True]
    assert "Rate limited; retry after" in results[3].content[0].text
    assert not other.is_error  # each key has its own budget


def test_every_call_is_logged_without_the_key_or_the_query(
    mcp_server: McpServer, world: World
) -> None:
    call_tool(mcp_server.url, world.key, "search", {"query": "zebra-words", "kb": "handbook"})
    call_tool(mcp_server.url, world.key, "fetch", {"chunk_id": world.secret_chunk})

    log = mcp_server.log()
    assert "mcp tool=search principal=key:" in log and "kb=handbook outcome=ok" in log
    assert "mcp tool=fetch" in log and "outcome=refused" in log
    assert "zebra-words" not in log
    secret = world.key.split("_", 2)[2]  # all after the prefix: token_urlsafe may hold "_" too
    assert world.key not in log and secret not in log


def test_search_reads_several_knowledge_bases_and_context_as_the_rest_api_does(
    mcp_server: McpServer, world: World
) -> None:
    arguments = {"query": "vacation", "kb": ["handbook", "archive"], "mode": "keyword"}

    found = answer(call_tool(mcp_server.url, world.key, "search", arguments))
    with_context = answer(
        call_tool(
            mcp_server.url,
            world.key,
            "search",
            {"query": "vacation", "kb": "handbook", "mode": "keyword", "neighbors": 1},
        )
    )
    refused = refusal(
        call_tool(mcp_server.url, world.handbook_key, "search", {**arguments, "top_k": 3})
    )

    assert {hit["document_key"] for hit in found["hits"]} == {"vacation", "old-vacation"}
    assert with_context["hits"] and all("context" in hit for hit in with_context["hits"])
    assert "not found" in refused  # the archive is not the handbook key's


def test_stdio_serves_the_same_tools_for_the_key_it_was_started_with(
    world: World, tmp_path: Path
) -> None:
    import anyio
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from tests.mcp.conftest import ROOT, server_env

    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "canon_mcp", "--stdio"],
        env=server_env(CANON_MCP_KEY=world.key),
        cwd=ROOT,
    )

    async def main() -> tuple[Any, ...]:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()
            kbs = await session.call_tool("list_knowledge_bases", {})
            hits = await session.call_tool(
                "search", {"query": "vacation", "kb": "handbook", "mode": "keyword"}
            )
            forbidden = await session.call_tool("fetch", {"chunk_id": world.secret_chunk})
            return tools, kbs, hits, forbidden

    with (tmp_path / "stdio-server.log").open("w") as errlog:
        tools, kbs, hits, forbidden = anyio.run(main)

    assert {tool.name for tool in tools.tools} == {"search", "list_knowledge_bases", "fetch"}
    assert [kb["slug"] for kb in answer(kbs)["results"]] == [
        "archive",
        "handbook",
        "multilingual",
    ]
    assert [hit["document_key"] for hit in answer(hits)["hits"]] == ["vacation"]
    assert refusal(forbidden).endswith(f"Chunk {world.secret_chunk} not found.")


def test_stdio_refuses_to_start_with_a_bad_key(world: World) -> None:
    from tests.mcp.conftest import ROOT, server_env

    done = subprocess.run(
        [sys.executable, "manage.py", "canon_mcp", "--stdio", "--key", "canon_abc_nope"],
        cwd=ROOT,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode != 0
    assert "Invalid API key: unknown API key." in done.stderr
    assert done.stdout == ""
