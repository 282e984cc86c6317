"""The OpenAI vector-store list, retrieve and search through the official `openai` client
pointed at Canon's real web process, and the shapes and refusals through Django's test client."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from django.test import Client

from tests.compat.conftest import Web, World
from tests.retrieval.factories import api

# The world (conftest.py) is committed once per module; each test's own writes roll back.
pytestmark = pytest.mark.django_db

BASE = "/api/openai/v1"


def client_for(web: Web, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{web.url}{BASE}", api_key=key, max_retries=0, timeout=30)


def search(client: Client, store: str, body: Any) -> Any:
    return client.post(
        f"{BASE}/vector_stores/{store}/search", body, content_type="application/json"
    )


def keys(response: Any) -> set[str]:
    assert response.status_code == 200, response.content
    return {item["attributes"]["document_key"] for item in response.json()["data"]}


# --- the official client against the real server ---------------------------------------------


@pytest.mark.integration
def test_the_openai_client_lists_retrieves_and_searches(web: Web, world: World) -> None:
    client = client_for(web, world.key)

    stores = client.vector_stores.list()
    handbook = client.vector_stores.retrieve("handbook")
    page = client.vector_stores.search("handbook", query="vacation policy", max_num_results=10)

    assert [store.id for store in stores] == ["archive", "handbook"]  # newest first
    assert handbook.object == "vector_store" and handbook.name == "Handbook"
    assert handbook.status == "completed"
    # The key reads two of the three documents (merger is behind a group): counts say two.
    assert (handbook.file_counts.total, handbook.file_counts.completed) == (2, 2)
    assert handbook.usage_bytes > 0
    assert handbook.created_at == int(world.handbook.created_at.timestamp())
    results = list(page)
    assert results
    assert {(result.attributes or {})["document_key"] for result in results} == {
        "vacation",
        "expenses",
    }
    vacation = next(r for r in results if (r.attributes or {})["document_key"] == "vacation")
    assert vacation.file_id == f"doc_{world.vacation_document}"
    assert vacation.filename == "vacation.txt"
    assert vacation.content[0].type == "text" and "thirty days" in vacation.content[0].text
    assert 0 <= vacation.score <= 1
    assert (vacation.attributes or {}).get("department") == "hr"
    assert (vacation.attributes or {}).get("year") == 2026


@pytest.mark.integration
def test_the_openai_client_s_filters_groups_threshold_and_errors(web: Web, world: World) -> None:
    plain = client_for(web, world.key)
    secret = client_for(web, world.secret_key)
    limited = client_for(web, world.handbook_key)

    def found(client: openai.OpenAI, **kwargs: Any) -> list[Any]:
        return list(client.vector_stores.search("handbook", query="vacation", **kwargs))

    hr = found(plain, filters={"type": "eq", "key": "department", "value": "hr"})
    hr_secret = found(secret, filters={"type": "eq", "key": "department", "value": "hr"})
    either = found(
        plain,
        filters={
            "type": "or",
            "filters": [
                {"type": "eq", "key": "department", "value": "finance"},
                {"type": "gte", "key": "year", "value": 2026},
            ],
        },
    )
    every = found(plain, max_num_results=10)
    threshold = (min(r.score for r in every) + max(r.score for r in every)) / 2
    above = found(plain, max_num_results=10, ranking_options={"score_threshold": threshold})
    one = found(plain, max_num_results=1)

    assert {(r.attributes or {})["document_key"] for r in hr} == {"vacation"}
    assert {(r.attributes or {})["document_key"] for r in hr_secret} == {"vacation", "merger"}
    assert {(r.attributes or {})["document_key"] for r in either} == {"vacation", "expenses"}
    assert above and all(r.score >= threshold for r in above) and len(above) < len(every)
    assert len(one) == 1
    assert [store.id for store in limited.vector_stores.list()] == ["handbook"]

    with pytest.raises(openai.NotFoundError) as forbidden:
        limited.vector_stores.retrieve("archive")
    with pytest.raises(openai.NotFoundError) as foreign:
        plain.vector_stores.search("foreign", query="vacation")
    with pytest.raises(openai.BadRequestError) as bad:
        found(plain, filters={"type": "eq", "key": "colour", "value": "red"})
    with pytest.raises(openai.AuthenticationError):
        client_for(web, "canon_0000_nope").vector_stores.list()

    assert forbidden.value.body == {  # OpenAI's 404, word for word: its code is null
        "message": "No vector store found with id 'archive'.",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert isinstance(foreign.value.body, dict) and foreign.value.body["code"] is None
    assert isinstance(bad.value.body, dict) and bad.value.body["param"] == "filters"
    assert "colour" in bad.value.body["message"]


@pytest.mark.integration
def test_the_openai_client_filters_on_what_results_carry(web: Web, world: World) -> None:
    """Issue 37, item 10: a client filters on the attributes it sees (document_key, kb,
    document_id), and on dates as OpenAI's attributes carry them, Unix seconds."""
    client = client_for(web, world.key)

    def found(filters: Any) -> set[str]:
        page = client.vector_stores.search("handbook", query="vacation", filters=filters)
        return {str((r.attributes or {})["document_key"]) for r in page}

    first = list(client.vector_stores.search("handbook", query="vacation policy"))
    vacation = next(r for r in first if (r.attributes or {})["document_key"] == "vacation")
    attributes = vacation.attributes or {}

    by_key = found({"type": "eq", "key": "document_key", "value": attributes["document_key"]})
    by_id = found({"type": "eq", "key": "document_id", "value": attributes["document_id"]})
    by_kb = found({"type": "eq", "key": "kb", "value": attributes["kb"]})
    other_kb = found({"type": "ne", "key": "kb", "value": "handbook"})
    published = found({"type": "gte", "key": "published", "value": 1767225600})  # 2026-01-01
    before = found({"type": "lt", "key": "published", "value": 1767225600})
    created = found({"type": "gt", "key": "created", "value": 946684800})  # 2000-01-01
    both = found(
        {
            "type": "and",
            "filters": [
                {"type": "in", "key": "document_id", "value": [world.vacation_document, 10**12]},
                {"type": "eq", "key": "year", "value": "2026"},  # a number as text
            ],
        }
    )

    assert (by_key, by_id, by_kb) == ({"vacation"}, {"vacation"}, {"vacation", "expenses"})
    assert other_kb == set()
    assert (published, before) == ({"vacation"}, set())
    assert created == {"vacation", "expenses"}
    assert both == {"vacation"}


@pytest.mark.integration
def test_the_openai_client_pages_past_an_unknown_cursor_to_an_empty_page(
    web: Web, world: World
) -> None:
    """Issue 37, item 10: a cursor naming no vector store of the key's (deleted, or out of its
    scope, between two pages) ends the listing with an empty page; it was a 400 the client
    raised as BadRequestError."""
    client = client_for(web, world.key)

    after = client.vector_stores.list(after="no-such-store")
    before = client.vector_stores.list(before="foreign")  # another tenant's: told apart from none

    page = after.model_dump()
    assert (page["data"], page["has_more"], page["first_id"], page["last_id"]) == (
        [],
        False,
        None,
        None,
    )
    assert (before.data, before.has_more) == ([], False)
    assert [store.id for store in client.vector_stores.list(after="archive")] == ["handbook"]
    assert [store.id for store in client.vector_stores.list(after="handbook")] == []


# --- shapes and refusals through the test client ----------------------------------------------


def test_the_search_page_has_openai_s_shape(world: World) -> None:
    response = search(api(world.key), "handbook", {"query": ["vacation", "policy"]})

    assert response.status_code == 200, response.content
    page = response.json()
    assert set(page) == {"object", "search_query", "data", "has_more", "next_page"}
    assert page["object"] == "vector_store.search_results.page"
    assert page["search_query"] == ["vacation", "policy"]
    assert (page["has_more"], page["next_page"]) == (False, None)
    for item in page["data"]:
        assert set(item) == {"file_id", "filename", "score", "attributes", "content"}
        assert all(isinstance(v, str | int | float | bool) for v in item["attributes"].values())


def test_the_list_pages_with_limit_after_and_before(world: World) -> None:
    client = api(world.key)

    def listed(query: str) -> Any:
        response = client.get(f"{BASE}/vector_stores{query}")
        assert response.status_code == 200, response.content
        return response.json()

    first = listed("?limit=1")
    second = listed("?limit=1&after=" + first["last_id"])
    back = listed("?limit=1&before=" + second["first_id"])
    ascending = listed("?order=asc")

    assert (first["object"], first["has_more"], [s["id"] for s in first["data"]]) == (
        "list",
        True,
        ["archive"],
    )
    assert (second["has_more"], [s["id"] for s in second["data"]]) == (False, ["handbook"])
    assert [s["id"] for s in back["data"]] == ["archive"]
    assert [s["id"] for s in ascending["data"]] == ["handbook", "archive"]
    assert client.get(f"{BASE}/vector_stores?limit=0").status_code == 400
    assert listed("?after=foreign")["data"] == []  # another tenant's: the same as no store


def test_file_counts_count_only_what_the_key_may_read(world: World) -> None:
    def counts(key: str) -> dict[str, int]:
        response = api(key).get(f"{BASE}/vector_stores/handbook")
        assert response.status_code == 200, response.content
        return dict(response.json()["file_counts"])

    assert counts(world.key)["total"] == 2
    assert counts(world.secret_key)["total"] == 3


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": []}, "query"),
        ({"query": "x", "max_num_results": 51}, "max_num_results"),
        ({"query": "x", "max_num_results": 0}, "max_num_results"),
        ({"query": "x", "ranking_options": {"ranker": "fancy"}}, "ranking_options.ranker"),
        ({"query": "x", "ranking_options": {"score_threshold": 2}}, "ranking_options"),
        ({"query": "x", "filters": {"type": "like", "key": "a", "value": 1}}, "filters.type"),
        ({"query": "x", "filters": {"type": "eq", "key": "year", "value": "soon"}}, "filters"),
        ({"query": "x", "filters": {"type": "and", "filters": []}}, "filters.filters"),
        ({"query": "x", "surprise": 1}, "surprise"),
        ({"query": "x" * 5000}, "query"),
    ],
)
def test_a_bad_search_is_a_400_naming_the_param(world: World, body: Any, param: str) -> None:
    response = search(api(world.key), "handbook", body)

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].startswith(param), error


def test_rewrite_query_is_accepted_and_the_query_searched_as_given(world: World) -> None:
    response = search(api(world.key), "handbook", {"query": "vacation", "rewrite_query": True})

    assert response.status_code == 200, response.content
    assert response.json()["search_query"] == ["vacation"]


def test_unknown_forbidden_and_foreign_stores_are_the_same_404(world: World) -> None:
    answers = [
        api(world.key).get(f"{BASE}/vector_stores/nope"),
        api(world.handbook_key).get(f"{BASE}/vector_stores/archive"),
        api(world.key).get(f"{BASE}/vector_stores/{world.foreign.pk}"),
        search(api(world.handbook_key), "archive", {"query": "vacation"}),
        search(api(world.key), "foreign", {"query": "vacation"}),
    ]

    for response in answers:
        assert response.status_code == 404
        assert response.json()["error"]["code"] is None  # as OpenAI answers a 404
    unknown_path = api(world.key).get(f"{BASE}/nothing-here")
    assert unknown_path.status_code == 404 and unknown_path.json()["error"]["code"] is None


def test_no_key_or_a_refused_key_is_a_401_in_openai_s_shape(world: World) -> None:
    missing = Client().get(f"{BASE}/vector_stores")
    refused = api("canon_0000_nope").get(f"{BASE}/vector_stores")

    assert missing.status_code == refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    assert missing["WWW-Authenticate"].startswith("Bearer")


def test_it_spends_the_rest_search_s_read_budget(world: World, settings: Any) -> None:
    settings.CANON_API_RATE = "2/min"
    client = api(world.key)

    assert (
        client.post(
            "/api/v1/search",
            {"kb": "handbook", "query": "vacation"},
            content_type="application/json",
        ).status_code
        == 200
    )
    assert search(client, "handbook", {"query": "vacation"}).status_code == 200
    throttled = search(client, "handbook", {"query": "vacation"})

    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(throttled["Retry-After"]) >= 1
