"""Every way a search fails, answered at each of the four doors: the REST API, the MCP server's
`search` tool, Dify's retrieval and OpenAI's vector-store search. The failures are classified
once (`retrieval.api.search_request`) and each door words them in its own shape; these tests
hold every door's shape, word for word, so none can drift into a 500, or into telling apart
what it may not tell. In-process: Django's test client for the three HTTP doors, the MCP tool
function called directly (tests/mcp drives the real server with the official client)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

import embeddings
from kb.metadata import field_specs
from retrieval.api.searching import HistoryNotAllowed, SearchUnavailable
from retrieval.filters import FilterError, parse_filter
from retrieval.mcp.server import spend_read_budget
from retrieval.mcp.tools import ToolRefused, search_tool
from retrieval.principals import KnowledgeBaseNotFound, principal_from_key
from retrieval.search.history import HistoryOutOfRange
from tests.compat.conftest import World
from tests.retrieval.factories import api

# The world (conftest.py) is committed once per package; each test's own writes roll back.
pytestmark = pytest.mark.django_db

QUERY = "vacation policy"
DOORS = ("rest", "mcp", "dify", "openai")
PROVIDER_DOWN = "The query could not be embedded: the embedding provider is unavailable; try again."
PROVIDER_REFUSED = (
    "The query could not be embedded: the embedding provider refused it; the knowledge base's "
    "embedding settings need an administrator."
)
# What a provider's failure says inside Canon: its address, its answer. Never sent.
PROVIDER_DETAIL = "openai https://embed.internal:8443/v1: gave up: HTTP 503: {'key': 'sk-hidden'}"


@dataclass(frozen=True)
class Ask:
    """One search as each door's caller asks it: `rest` the REST body's further fields (and
    the MCP tool's arguments), `dify` and `openai` those of their bodies; `key` the World's
    key to ask with."""

    kb: Any = "handbook"  # a slug, or a list of them
    key: str = "key"
    rest: dict[str, Any] = field(default_factory=dict)
    dify: dict[str, Any] = field(default_factory=dict)
    openai: dict[str, Any] = field(default_factory=dict)


def answer(door: str, world: World, ask: Ask) -> Any:
    """The door's refusal: (status, body, Retry-After) over HTTP, the tool error's text for
    MCP."""
    key = getattr(world, ask.key)
    if door == "mcp":
        with pytest.raises(ToolRefused) as refused:
            search_tool(principal_from_key(key), {"kb": ask.kb, "query": QUERY, **ask.rest})
        return str(refused.value)
    if door == "rest":
        url, body = "/api/v1/search", {"kb": ask.kb, "query": QUERY, **ask.rest}
    elif door == "dify":
        url = "/api/dify/retrieval"
        body = {
            "knowledge_id": ask.kb,
            "query": QUERY,
            "retrieval_setting": {"top_k": 5},
            **ask.dify,
        }
    else:
        url, body = f"/api/openai/v1/vector_stores/{ask.kb}/search", {"query": QUERY, **ask.openai}
    response = api(key).post(url, body, content_type="application/json")
    return response.status_code, response.json(), response.get("Retry-After")


def openai_error(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


# --- every failure the search raises, at every door ------------------------------------------

# The search raises it (run_search, patched); what each door answers.
RAISED: dict[str, tuple[Exception, dict[str, Any]]] = {
    "not found": (
        KnowledgeBaseNotFound(42),  # as the replica's re-read names it: by id, never shown
        {
            "rest": (404, {"error": "not_found", "detail": "Knowledge base 'handbook' not found."}),
            "mcp": "Knowledge base 'handbook' not found.",
            "dify": (404, {"error_code": 2001, "error_msg": "The knowledge does not exist."}),
            "openai": (404, openai_error("No vector store found with id 'handbook'.")),
        },
    ),
    "filter": (
        FilterError("filter.and[0].field", 'Unknown field "colour".'),
        {
            "rest": (
                400,
                {
                    "error": "invalid",
                    "detail": {"filter": ['filter.and[0].field: Unknown field "colour".']},
                },
            ),
            "mcp": 'Invalid arguments: filter: filter.and[0].field: Unknown field "colour".',
            "dify": (
                400,
                {"error_code": 3001, "error_msg": 'metadata_condition: Unknown field "colour".'},
            ),
            "openai": (400, openai_error('Unknown field "colour".', param="filters")),
        },
    ),
    "history forbidden": (
        HistoryNotAllowed(),
        {
            "rest": (
                403,
                {"error": "permission_denied", "detail": "Only index admins may search as of."},
            ),
            "mcp": "Only index admins may search as of.",
            "dify": (403, {"error_code": 3001, "error_msg": "Only index admins may search as of."}),
            "openai": (
                403,
                openai_error("Only index admins may search as of.", code="permission_denied"),
            ),
        },
    ),
    "history out of range": (
        HistoryOutOfRange("as_of is in the future."),
        {
            "rest": (400, {"error": "invalid", "detail": {"as_of": ["as_of is in the future."]}}),
            "mcp": "Invalid arguments: as_of: as_of is in the future.",
            "dify": (400, {"error_code": 3001, "error_msg": "as_of: as_of is in the future."}),
            "openai": (400, openai_error("as_of is in the future.", param="as_of")),
        },
    ),
    "search unavailable": (
        SearchUnavailable(),
        {
            "rest": (
                503,
                {"error": "search_unavailable", "detail": "Search is unavailable; try again."},
                "5",
            ),
            "mcp": "Search is unavailable; try again in 5 s.",
            "dify": (
                503,
                {"error_code": 5001, "error_msg": "Search is unavailable; try again."},
                "5",
            ),
            "openai": (
                503,
                openai_error(
                    "Search is unavailable; try again.",
                    type="server_error",
                    code="service_unavailable",
                ),
                "5",
            ),
        },
    ),
    "provider unavailable": (
        embeddings.ProviderUnavailable(PROVIDER_DETAIL, retry_after=7),
        {
            "rest": (503, {"error": "provider_unavailable", "detail": PROVIDER_DOWN}, "7"),
            "mcp": PROVIDER_DOWN.removesuffix(".") + " in 7 s.",
            "dify": (503, {"error_code": 5001, "error_msg": PROVIDER_DOWN}, "7"),
            "openai": (
                503,
                openai_error(PROVIDER_DOWN, type="server_error", code="service_unavailable"),
                "7",
            ),
        },
    ),
    "provider refused": (
        embeddings.ProviderRejected(PROVIDER_DETAIL.replace("503", "400")),
        {
            "rest": (502, {"error": "provider_refused", "detail": PROVIDER_REFUSED}, None),
            "mcp": PROVIDER_REFUSED,
            "dify": (502, {"error_code": 5001, "error_msg": PROVIDER_REFUSED}, None),
            "openai": (502, openai_error(PROVIDER_REFUSED, type="server_error", code=None), None),
        },
    ),
    "provider misconfigured": (
        embeddings.ProviderMisconfigured(f"{PROVIDER_DETAIL}: no such model"),
        {
            "rest": (502, {"error": "provider_refused", "detail": PROVIDER_REFUSED}, None),
            "mcp": PROVIDER_REFUSED,
            "dify": (502, {"error_code": 5001, "error_msg": PROVIDER_REFUSED}, None),
            "openai": (502, openai_error(PROVIDER_REFUSED, type="server_error", code=None), None),
        },
    ),
    "breaker open": (
        embeddings.CircuitOpen(f"{PROVIDER_DETAIL}: circuit open", retry_after=12),
        {
            "rest": (503, {"error": "provider_unavailable", "detail": PROVIDER_DOWN}, "12"),
            "mcp": PROVIDER_DOWN.removesuffix(".") + " in 12 s.",
            "dify": (503, {"error_code": 5001, "error_msg": PROVIDER_DOWN}, "12"),
            "openai": (
                503,
                openai_error(PROVIDER_DOWN, type="server_error", code="service_unavailable"),
                "12",
            ),
        },
    ),
}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("failure", list(RAISED))
def test_each_failure_the_search_raises_has_its_answer_at_every_door(
    world: World, monkeypatch: pytest.MonkeyPatch, failure: str, door: str
) -> None:
    raised, answers = RAISED[failure]

    def fails(**kwargs: Any) -> Any:
        raise raised

    monkeypatch.setattr("retrieval.api.search_request.run_search", fails)

    got = answer(door, world, Ask())

    expected = answers[door]
    if door != "mcp" and len(expected) == 2:
        expected = (*expected, None)  # no Retry-After
    assert got == expected
    assert "embed.internal" not in str(got) and "sk-hidden" not in str(got)


# --- the same failures, reached for real --------------------------------------------------------


def _unknown_field(world: World) -> str:
    """What Canon says of a filter on a field the handbook does not declare."""
    with pytest.raises(FilterError) as refused:
        parse_filter({"field": "colour", "op": "eq", "value": "x"}, field_specs(world.handbook))
    return refused.value.message


COLOUR = Ask(
    rest={"filter": {"field": "colour", "op": "eq", "value": "x"}},
    dify={
        "metadata_condition": {
            "conditions": [{"name": ["colour"], "comparison_operator": "is", "value": "x"}]
        }
    },
    openai={"filters": {"type": "eq", "key": "colour", "value": "x"}},
)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    "ask",
    [
        Ask(kb="nope"),
        Ask(kb="archive", key="handbook_key"),  # the key's own tenant, not its knowledge base
        Ask(kb="foreign"),  # another tenant's
        # a filter on fields of a knowledge base the key may not search: not found, not
        # invalid (the refusal would name its fields)
        Ask(
            kb="archive",
            key="handbook_key",
            rest=COLOUR.rest,
            dify=COLOUR.dify,
            openai=COLOUR.openai,
        ),
    ],
    ids=["unknown", "not-the-keys", "another-tenants", "with-a-bad-filter"],
)
def test_a_knowledge_base_the_key_may_not_search_is_not_found_at_every_door(
    world: World, door: str, ask: Ask
) -> None:
    answers: dict[str, Any] = {
        "rest": (404, {"error": "not_found", "detail": f"Knowledge base {ask.kb!r} not found."}),
        "mcp": f"Knowledge base {ask.kb!r} not found.",
        "dify": (404, {"error_code": 2001, "error_msg": "The knowledge does not exist."}),
        "openai": (404, openai_error(f"No vector store found with id '{ask.kb}'.")),
    }
    expected = answers[door]

    got = answer(door, world, ask)

    assert got == (expected if door == "mcp" else (*expected, None))


def test_the_foreign_knowledge_base_by_id_is_not_found_like_by_slug(world: World) -> None:
    by_id = Ask(kb=str(world.foreign.pk))

    assert answer("rest", world, by_id)[0] == 404
    assert answer("mcp", world, by_id) == f"Knowledge base {by_id.kb!r} not found."
    assert answer("dify", world, by_id)[1]["error_code"] == 2001
    assert answer("openai", world, by_id)[0] == 404


@pytest.mark.parametrize("door", DOORS)
def test_a_filter_on_a_field_the_knowledge_base_lacks_is_invalid_at_every_door(
    world: World, door: str
) -> None:
    problem = _unknown_field(world)
    answers: dict[str, Any] = {
        "rest": (400, {"error": "invalid", "detail": {"filter": [f"filter.field: {problem}"]}}),
        "mcp": f"Invalid arguments: filter: filter.field: {problem}",
        "dify": (400, {"error_code": 3001, "error_msg": f"metadata_condition: {problem}"}),
        "openai": (400, openai_error(problem, param="filters")),
    }
    expected = answers[door]

    got = answer(door, world, COLOUR)

    assert got == (expected if door == "mcp" else (*expected, None))


TOO_MANY = [f"kb{i}" for i in range(11)]


@pytest.mark.parametrize(
    ("ask", "field_", "problem"),
    [
        (Ask(rest={"mode": "sideways"}), "mode", '"sideways" is not a valid choice.'),
        (Ask(kb=TOO_MANY), "kb", "One search reads at most 10 knowledge bases."),
        (Ask(rest={"top_k": 0}), "top_k", "Ensure this value is greater than or equal to 1."),
    ],
    ids=["mode", "too-many-knowledge-bases", "top_k"],
)
def test_an_invalid_rest_body_is_refused_alike_by_rest_and_mcp(
    world: World, ask: Ask, field_: str, problem: str
) -> None:
    """Dify's and OpenAI's requests cannot say these: always hybrid, one knowledge base, and
    their own top_k checked by their own serializers (test_dify.py, test_vector_stores.py)."""
    assert answer("rest", world, ask) == (
        400,
        {"error": "invalid", "detail": {field_: [problem]}},
        None,
    )
    assert answer("mcp", world, ask) == f"Invalid arguments: {field_}: {problem}"


@pytest.mark.parametrize("door", DOORS)
def test_an_embedding_provider_down_is_a_503_that_names_no_server(
    world: World, monkeypatch: pytest.MonkeyPatch, door: str
) -> None:
    def down(*args: Any) -> list[float]:
        raise embeddings.ProviderUnavailable(PROVIDER_DETAIL, retry_after=7)

    monkeypatch.setattr("retrieval.search.engine.embed_query", down)

    got = answer(door, world, Ask())

    assert "embed.internal" not in str(got) and "sk-hidden" not in str(got)
    if door == "mcp":
        assert got == PROVIDER_DOWN.removesuffix(".") + " in 7 s."
    else:
        assert (got[0], got[2]) == (503, "7")


# --- the read budget ----------------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.usefixtures("steady_rate_window")  # CI once saw its two requests straddle a minute
def test_a_spent_read_budget_is_a_429_at_every_door(world: World, settings: Any, door: str) -> None:
    settings.CANON_API_RATE = "1/min"
    if door == "mcp":  # the server counts each tool call before it runs the tool
        principal = principal_from_key(world.key)
        spend_read_budget(principal)
        with pytest.raises(ToolRefused) as refused:
            spend_read_budget(principal)
        assert re.fullmatch(
            r"Rate limited; retry after ([1-9]|[1-5][0-9]|60) s\.", str(refused.value)
        )
        return
    assert answer_ok(door, world)

    status, body, retry_after = answer(door, world, Ask())

    assert status == 429 and 1 <= int(retry_after) <= 60
    assert (
        body
        == {
            "rest": {
                "error": "throttled",
                "detail": f"Request was throttled. Expected available in {retry_after} second"
                + ("s." if retry_after != "1" else "."),
            },
            "dify": {
                "error_code": 3002,
                "error_msg": f"Rate limited; retry after {retry_after} s.",
            },
            "openai": openai_error(
                f"Rate limit reached; retry after {retry_after} s.",
                type="requests",
                code="rate_limit_exceeded",
            ),
        }[door]
    )


def answer_ok(door: str, world: World) -> bool:
    """The door answers one search of the handbook (spending one request of the budget)."""
    url, body = {
        "rest": ("/api/v1/search", {"kb": "handbook", "query": QUERY}),
        "dify": (
            "/api/dify/retrieval",
            {"knowledge_id": "handbook", "query": QUERY, "retrieval_setting": {"top_k": 1}},
        ),
        "openai": ("/api/openai/v1/vector_stores/handbook/search", {"query": QUERY}),
    }[door]
    return api(world.key).post(url, body, content_type="application/json").status_code == 200
