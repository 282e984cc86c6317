"""Canon's MCP server (the official MCP Python SDK): the tools `search`, `list_knowledge_bases`
and `fetch` (retrieval.mcp.tools) over streamable HTTP behind the API keys, or over stdio for a
local agent with one key.

Over HTTP every request is authenticated before the SDK sees it (`KeyAuthentication`): the
`Authorization: Bearer <key>` header is resolved by the REST API's own `principal_from_bearer`
on every request (never cached, so a revocation counts at once): an API key, or, while
CANON_OAUTH_* is set, an OAuth access token of the company's provider whose audience is this
server (CANON_MCP_RESOURCE_URL). A missing or bad one is a 401 whose `WWW-Authenticate` names
the protected resource metadata (RFC 9728, served at /.well-known/oauth-protected-resource), as
the MCP authorization specification asks, so a client can discover where to get a token.
The transport is stateless with JSON answers: any process behind a load balancer can answer
any request, nothing is kept between them. Over stdio the key given at start is resolved again
at every tool call.

Every tool call spends one request of the principal's read budget (the REST API's counter,
`rate_limit_wait`), runs on a worker thread of a bounded pool (the ORM is synchronous; each
thread keeps its own database connection, closed as Django closes a request's:
`close_old_connections` before and after), and writes one log line: tool, principal, knowledge
base, outcome, took_ms. Never the key, never the query (the REST API logs neither).

A call naming an argument its tool does not declare is refused, naming it (`StrictTools`): the
SDK would drop it, and an agent that sent `as_of` or a misspelt `top-k` would read an answer it
did not ask for as the one it asked for. Over HTTP only POST is served at /mcp: the transport
is stateless, with no server-initiated messages, so a GET (the optional event stream of
streamable HTTP) is a 405, as the specification says a server without that stream answers,
rather than a stream held open with nothing ever to carry.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import Field
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from identity.audit import checked_address
from identity.mapping import mapped_scopes
from identity.tokens import tokens_enabled
from retrieval.api.search_request import rate_limited
from retrieval.api.serializers import SearchInput
from retrieval.api.throttling import READ, rate_limit_wait
from retrieval.mcp import tools
from retrieval.principals import (
    InvalidKey,
    Principal,
    principal_from_bearer,
    principal_from_key,
)

logger = logging.getLogger("canon.mcp")

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
# RFC 9728: the metadata of the resource https://host/mcp is at
# https://host/.well-known/oauth-protected-resource/mcp; clients also try the root form.
RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
PRINCIPAL_SCOPE_KEY = "canon.principal"  # where KeyAuthentication leaves the request's principal

INSTRUCTIONS = (
    "Canon searches the knowledge bases this API key may read. Call list_knowledge_bases to "
    "learn their slugs, search with a query and a knowledge base, and fetch a hit's chunk_id "
    "(or a document_id) for the text and a citation: document, revision, build, headings, "
    "page and character range."
)


def _help(field: str, fallback: str = "") -> str:
    """The REST API's description of a search body field (one text for both doors)."""
    found = SearchInput().fields.get(field)
    return str(getattr(found, "help_text", None) or fallback)


class _Calls:
    """How tool calls reach the synchronous tools: on the pool's threads, with the principal of
    the request (HTTP) or of the key given at start (stdio), rate limited and logged."""

    def __init__(self, *, threads: int, stdio_key: str | None) -> None:
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="canon-mcp")
        self.stdio_key = stdio_key

    async def in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await sync_to_async(fn, thread_sensitive=False, executor=self.executor)(*args)

    def principal_of(self, ctx: Context) -> Principal | str:
        """The request's principal (HTTP), or the key to resolve in the call's thread (stdio)."""
        request = ctx.request_context.request
        if request is not None:
            principal = request.scope.get(PRINCIPAL_SCOPE_KEY)
            if not isinstance(principal, Principal):  # not behind KeyAuthentication
                raise ToolError("Not authenticated.")
            return principal
        if self.stdio_key is None:
            raise ToolError("Not authenticated.")
        return self.stdio_key

    async def run(
        self,
        ctx: Context,
        tool: str,
        body: Callable[[Principal], dict[str, Any]],
        kb: Any = None,
    ) -> dict[str, Any]:
        who = self.principal_of(ctx)
        try:
            return dict(await self.in_thread(_tool_call, tool, who, body, kb))
        except tools.ToolRefused as exc:
            raise ToolError(str(exc)) from exc


def spend_read_budget(principal: Principal) -> None:
    """Count one tool call against the principal's read budget (the REST API's counter);
    ToolRefused once it is spent."""
    wait = rate_limit_wait(principal, READ)
    if wait is not None:
        raise tools.refusal(rate_limited(wait))


def _tool_call(
    tool: str, who: Principal | str, body: Callable[[Principal], dict[str, Any]], kb: Any
) -> dict[str, Any]:
    """One tool call on a pool thread, between Django's connection housekeeping as a request's."""
    close_old_connections()
    started = time.perf_counter()
    principal: Principal | None = None
    outcome = "error"
    result: dict[str, Any] | None = None
    try:
        if isinstance(who, Principal):
            principal = who
        else:
            try:
                principal = principal_from_key(who)
            except InvalidKey as exc:
                raise tools.ToolRefused(f"Invalid API key: {exc}.") from exc
        spend_read_budget(principal)
        result = body(principal)
        outcome = "ok"
        return result
    except tools.ToolRefused:
        outcome = "refused"
        raise
    finally:
        took_ms = round((time.perf_counter() - started) * 1000, 1)
        if result is not None:
            kb = result.get("kb") or next(
                (part["kb"] for part in (result.get("chunk"), result.get("document")) if part),
                kb,
            )
        fields = {
            "tool": tool,
            "principal": principal.ident if principal is not None else None,
            "kb": kb if kb is None or isinstance(kb, str) else json.dumps(kb),
            "outcome": outcome,
            "took_ms": took_ms,
        }
        if tool == "search" and result is not None:
            fields["hits"] = len(result.get("hits", ()))
        logger.info(
            "mcp %s", " ".join(f"{name}={value}" for name, value in fields.items()), extra=fields
        )
        close_old_connections()


class CanonMCP:
    """The MCP server with Canon's three tools, served over HTTP (`http_app`) or stdio
    (`run_stdio`, with the caller's key)."""

    def __init__(self, *, threads: int = 8, stdio_key: str | None = None) -> None:
        self.calls = _Calls(threads=threads, stdio_key=stdio_key)
        self.server = _tools_server(self.calls)

    def http_app(self) -> ASGIApp:
        """The streamable HTTP app at /mcp, stateless with JSON answers, behind
        KeyAuthentication. The SDK's DNS-rebinding check (Host/Origin allow-lists) is off: it
        protects servers that trust a browser's ambient credentials, and this one trusts only a
        Bearer key; Host checking is the proxy's (docs/PRODUCTION.md)."""
        app = self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        return KeyAuthentication(app, self.calls)

    async def run_stdio(self) -> None:
        await self.server.run_stdio_async()


class StrictTools(MCPServer):
    """The SDK's server, refusing a tool call that names an argument the tool does not declare
    (the module docstring says why). The refusal is a tool error, as a bad value is."""

    _declared: dict[str, frozenset[str]] | None = None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        if self._declared is None:
            self._declared = {
                tool.name: frozenset(tool.input_schema.get("properties", {}))
                for tool in await self.list_tools()
            }
        declared = self._declared.get(name)
        unknown = sorted(set(arguments) - declared) if declared is not None else []
        if unknown:
            raise ToolError(_unknown_arguments(name, unknown, declared or frozenset()))
        return await super().call_tool(name, arguments, context)


def _unknown_arguments(tool: str, unknown: list[str], declared: frozenset[str]) -> str:
    takes = ", ".join(sorted(declared)) or "no arguments"
    message = (
        f"Error executing tool {tool}: unknown argument{'s' if len(unknown) > 1 else ''} "
        f"{', '.join(unknown)}; {tool} takes {takes}."
    )
    rest_only = sorted(set(unknown) & tools.SEARCH_FIELDS_NOT_OFFERED)
    if tool == "search" and rest_only:
        message += (
            f" {' and '.join(rest_only)}: the REST search's only (POST /api/v1/search), for "
            "index admins and ranking diagnosis."
        )
    return message


def _tools_server(calls: _Calls) -> MCPServer:
    server: MCPServer = StrictTools(
        "canon", title="Canon", instructions=INSTRUCTIONS, version="1", log_level="WARNING"
    )
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(
        name="search",
        annotations=reads,
        description="Search a knowledge base: the chunks this key may read that best answer the "
        "query, each with its citation (document key, revision, build, heading path, page or "
        "slide, character range). The arguments are those of Canon's REST search "
        "(POST /api/v1/search) but as_of and explain, with the same defaults and limits; leave "
        "out what you do not need. An argument not listed here is refused.",
    )
    async def search(
        ctx: Context,
        query: Annotated[str, Field(description="What to search for.")],
        kb: Annotated[
            str | list[str],
            Field(description=_help("kb", "Knowledge base slug (or id).")),
        ],
        mode: Annotated[
            str | None, Field(description="vector, keyword or hybrid (default hybrid).")
        ] = None,
        top_k: Annotated[int | None, Field(description="How many hits (default 10).")] = None,
        filter: Annotated[  # the REST body's field name
            dict[str, Any] | None, Field(description=_help("filter", "A metadata filter."))
        ] = None,
        document_keys: Annotated[
            list[str] | None, Field(description=_help("document_keys"))
        ] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description=_help("metadata"))] = None,
        neighbors: Annotated[
            int | None,
            Field(description=_help("neighbors", "Chunks either side of each hit to return.")),
        ] = None,
        expand: Annotated[
            str | None,
            Field(description=_help("expand", "section: each hit's heading section as context.")),
        ] = None,
        score_threshold: Annotated[
            float | None,
            Field(description=_help("score_threshold", "Leave out hits scoring below this.")),
        ] = None,
        rerank: Annotated[bool | None, Field(description=_help("rerank"))] = None,
    ) -> dict[str, Any]:
        arguments = {
            "query": query,
            "kb": kb,
            "mode": mode,
            "top_k": top_k,
            "filter": filter,
            "document_keys": document_keys,
            "metadata": metadata,
            "neighbors": neighbors,
            "expand": expand,
            "score_threshold": score_threshold,
            "rerank": rerank,
        }
        return await calls.run(
            ctx, "search", lambda principal: tools.search_tool(principal, arguments), kb=kb
        )

    @server.tool(
        name="list_knowledge_bases",
        annotations=reads,
        description="The knowledge bases this key may search: slug, name, description, index "
        "version and embedding model.",
    )
    async def list_knowledge_bases(ctx: Context) -> dict[str, Any]:
        return await calls.run(ctx, "list_knowledge_bases", tools.list_knowledge_bases_tool)

    @server.tool(
        name="fetch",
        annotations=reads,
        description="Read a chunk by chunk_id (from a search hit) with its citation: document id "
        "and key, revision, build, heading path, page or slide, character range, and whether "
        "it is still the live text; a citation stays readable after the document changes, "
        "while its revision is retained. Or read a document by document_id: its key, title, "
        "live revision and its live chunks in order, max_chunks at a time from first_ordinal "
        "(the answer's next_ordinal continues).",
    )
    async def fetch(
        ctx: Context,
        chunk_id: Annotated[int | None, Field(description="A chunk's id.")] = None,
        document_id: Annotated[int | None, Field(description="A document's id.")] = None,
        first_ordinal: Annotated[
            int, Field(description="Documents: the first chunk to return, by ordinal.")
        ] = 0,
        max_chunks: Annotated[
            int,
            Field(description=f"Documents: at most this many chunks (1-{tools.FETCH_MAX_CHUNKS})."),
        ] = 20,
    ) -> dict[str, Any]:
        return await calls.run(
            ctx,
            "fetch",
            lambda principal: tools.fetch_tool(
                principal,
                chunk_id=chunk_id,
                document_id=document_id,
                first_ordinal=first_ordinal,
                max_chunks=max_chunks,
            ),
        )

    return server


# --- HTTP ------------------------------------------------------------------------------------


def _principal_of_header(value: str | None, address: str | None = None) -> Principal | None:
    """The principal of an `Authorization: Bearer <key or token>` header, or None (missing,
    another scheme, malformed, unknown, expired or revoked key, refused token). On a pool
    thread."""
    close_old_connections()
    try:
        parts = (value or "").split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return None
        if not (parts[1].isascii() and parts[1].isprintable()):
            return None
        try:
            return principal_from_bearer(
                parts[1], audience=settings.MCP_RESOURCE_URL or None, address=address
            )
        except InvalidKey:
            return None
    finally:
        close_old_connections()


def _resource(scope: Scope) -> str:
    """This server's resource identifier: CANON_MCP_RESOURCE_URL, else its /mcp URL as the
    request reached it."""
    if settings.MCP_RESOURCE_URL:
        return str(settings.MCP_RESOURCE_URL)
    host = Headers(scope=scope).get("host") or "localhost"
    return f"{scope.get('scheme', 'http')}://{host}{MCP_PATH}"


def _metadata_url(resource: str) -> str:
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{RESOURCE_METADATA_PATH}{parts.path.rstrip('/')}"


def _resource_metadata(scope: Scope) -> dict[str, Any]:
    """RFC 9728's protected resource metadata: this server, the provider that issues its
    tokens, and the scopes the claim mapping reads (on a pool thread: a query)."""
    close_old_connections()
    try:
        metadata: dict[str, Any] = {
            "resource": _resource(scope),
            "authorization_servers": [settings.OAUTH_ISSUER],
            "bearer_methods_supported": ["header"],
            "resource_name": "Canon",
        }
        scopes = mapped_scopes()
        if scopes:
            metadata["scopes_supported"] = scopes
        return metadata
    finally:
        close_old_connections()


class KeyAuthentication:
    """ASGI middleware: a request to the MCP endpoint needs a valid API key (401 otherwise, as
    the REST API answers); its principal is left in the scope for the tools. /healthz answers
    without one, for load balancers. A method other than POST at /mcp is a 405 (the module
    docstring says why), after the key is checked."""

    def __init__(self, app: ASGIApp, calls: _Calls) -> None:
        self.app = app
        self.calls = calls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        if scope["path"] == HEALTH_PATH:
            await _json(send, 200, {"status": "ok"})
            return
        if scope["path"].startswith(RESOURCE_METADATA_PATH):
            if not tokens_enabled():
                await _json(
                    send,
                    404,
                    {"error": "not_found", "detail": "This server takes API keys only."},
                )
                return
            await _json(send, 200, await self.calls.in_thread(_resource_metadata, scope))
            return
        header = Headers(scope=scope).get("authorization")
        client = scope.get("client")
        address = checked_address(client[0]) if client else None
        principal = await self.calls.in_thread(_principal_of_header, header, address)
        if principal is None:
            detail = (
                "Authentication credentials were not provided."
                if not header
                else "Invalid API key (use 'Authorization: Bearer <API key>')."
            )
            challenge = 'Bearer realm="canon"'
            if tokens_enabled():
                metadata = _metadata_url(_resource(scope))
                challenge += f', resource_metadata="{metadata}"'
            await _json(
                send,
                401,
                {"error": "not_authenticated", "detail": detail},
                headers=[(b"www-authenticate", challenge.encode("latin-1", "replace"))],
            )
            return
        if scope["path"].rstrip("/") == MCP_PATH and scope["method"] != "POST":
            await _json(
                send,
                405,
                {
                    "error": "method_not_allowed",
                    "detail": f"Method {scope['method']} is not allowed here: this server is "
                    "stateless and sends no server-sent events; send requests with POST.",
                },
                headers=[(b"allow", b"POST")],
            )
            return
        scope[PRINCIPAL_SCOPE_KEY] = principal
        await self.app(scope, receive, send)


async def _json(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
