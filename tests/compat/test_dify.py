"""Dify's External Knowledge API: the request and response bodies of Dify's documentation
(docs.dify.ai, "External Knowledge API"), through Django's test client and through Canon's real
web process; its error bodies (1001, 1002, 2001) and Canon's own for a bad request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.test import Client

from tests.compat.conftest import Web, World
from tests.retrieval.factories import api

# The world (conftest.py) is committed once per module; each test's own writes roll back.
pytestmark = pytest.mark.django_db

URL = "/api/dify/retrieval"

# Dify's documented request, with a Canon knowledge base's slug as the knowledge ID.
DIFY_REQUEST = {
    "knowledge_id": "handbook",
    "query": "vacation policy",
    "retrieval_setting": {"top_k": 2, "score_threshold": 0.0},
}


def retrieve(client: Client, body: Any) -> Any:
    return client.post(URL, body, content_type="application/json")


def keys(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [record["metadata"]["document_key"] for record in response.json()["records"]]


def test_the_documented_request_gets_records_in_the_documented_shape(world: World) -> None:
    response = retrieve(api(world.key), {**DIFY_REQUEST, "retrieval_setting": {"top_k": 5}})

    assert response.status_code == 200, response.content
    records = response.json()["records"]
    assert records
    for record in records:
        assert set(record) == {"content", "score", "title", "metadata"}
        assert isinstance(record["content"], str) and record["content"]
        assert 0.0 <= record["score"] <= 1.0
        assert isinstance(record["metadata"], dict)
    vacation = next(r for r in records if r["metadata"]["document_key"] == "vacation")
    assert vacation["title"] == "Vacation"
    metadata = vacation["metadata"]
    assert metadata["department"] == "hr" and metadata["year"] == 2026  # the document's own
    assert metadata["path"] == "vacation"
    assert metadata["document_id"] == world.vacation_document
    assert metadata["revision"] == 1
    assert metadata["kb"] == "handbook"
    assert metadata["file_name"] == "vacation.txt"
    assert metadata["citation_url"].startswith(
        f"/api/v1/documents/{world.vacation_document}/revisions/1/text?start="
    )
    assert None not in metadata.values()  # Dify's pipeline wants an object without nulls


def test_top_k_and_the_score_threshold_apply(world: World) -> None:
    client = api(world.key)
    every = retrieve(client, {**DIFY_REQUEST, "retrieval_setting": {"top_k": 10}}).json()
    scores = sorted(r["score"] for r in every["records"])
    assert len(scores) >= 2 and scores[0] < scores[-1]

    top1 = retrieve(client, {**DIFY_REQUEST, "retrieval_setting": {"top_k": 1}}).json()
    threshold = (scores[0] + scores[-1]) / 2
    above = retrieve(
        client,
        {**DIFY_REQUEST, "retrieval_setting": {"top_k": 10, "score_threshold": threshold}},
    ).json()

    assert len(top1["records"]) == 1
    assert above["records"] and all(r["score"] >= threshold for r in above["records"])
    assert len(above["records"]) < len(scores)


def test_access_groups_decide_which_records_a_key_gets(world: World) -> None:
    body = {**DIFY_REQUEST, "retrieval_setting": {"top_k": 10, "score_threshold": 0.0}}

    assert "merger" not in keys(retrieve(api(world.key), body))
    assert "merger" in keys(retrieve(api(world.secret_key), body))


def test_a_metadata_condition_filters_the_records(world: World) -> None:
    def with_condition(condition: dict[str, Any]) -> list[str]:
        body = {**DIFY_REQUEST, "retrieval_setting": {"top_k": 10}, "metadata_condition": condition}
        return keys(retrieve(api(world.key), body))

    hr = {"conditions": [{"name": ["department"], "comparison_operator": "is", "value": "hr"}]}
    recent = {
        "logical_operator": "and",
        "conditions": [
            {"name": ["year"], "comparison_operator": "≥", "value": 2026},
            {"name": ["department"], "comparison_operator": "not empty"},
        ],
    }
    either = {
        "logical_operator": "or",
        "conditions": [
            {"name": ["department"], "comparison_operator": "is", "value": "finance"},
            {"name": ["year"], "comparison_operator": ">", "value": 2025},
        ],
    }

    assert set(with_condition(hr)) == {"vacation"}  # merger is hr too, but behind a group
    assert set(with_condition(recent)) == {"vacation"}
    assert set(with_condition(either)) == {"vacation", "expenses"}


def test_unknown_and_forbidden_knowledge_are_the_same_2001(world: World) -> None:
    def answer(key: str, knowledge_id: str) -> Any:
        return retrieve(api(key), {**DIFY_REQUEST, "knowledge_id": knowledge_id})

    unknown = answer(world.key, "nope")
    forbidden = answer(world.handbook_key, "archive")
    foreign = answer(world.key, "foreign")
    foreign_by_id = answer(world.key, str(world.foreign.pk))

    for response, name in [
        (unknown, "nope"),
        (forbidden, "archive"),
        (foreign, "foreign"),
        (foreign_by_id, str(world.foreign.pk)),
    ]:
        assert response.status_code == 404, name
        assert response.json() == {
            "error_code": 2001,
            "error_msg": "The knowledge does not exist.",
        }
    assert answer(world.handbook_key, "handbook").status_code == 200


def test_authorization_errors_are_dify_s_1001_and_1002(world: World) -> None:
    missing = retrieve(Client(), DIFY_REQUEST)
    malformed = retrieve(Client(headers={"Authorization": f"Token {world.key}"}), DIFY_REQUEST)
    refused = retrieve(api("canon_0000_not-a-key"), DIFY_REQUEST)

    assert missing.status_code == malformed.status_code == refused.status_code == 403
    assert missing.json()["error_code"] == malformed.json()["error_code"] == 1001
    assert "Bearer" in malformed.json()["error_msg"]
    assert refused.json()["error_code"] == 1002
    assert set(refused.json()) == {"error_code", "error_msg"}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"query": "x", "retrieval_setting": {"top_k": 2}}, "knowledge_id"),
        ({**DIFY_REQUEST, "retrieval_setting": {"top_k": 0}}, "retrieval_setting.top_k"),
        ({**DIFY_REQUEST, "retrieval_setting": {"top_k": 2, "score_threshold": 2}}, "threshold"),
        ({**DIFY_REQUEST, "query": ""}, "query"),
        ({**DIFY_REQUEST, "metadata_condition": {"conditions": []}}, "conditions"),
        (
            {
                **DIFY_REQUEST,
                "metadata_condition": {
                    "conditions": [{"name": ["colour"], "comparison_operator": "is", "value": "x"}]
                },
            },
            "colour",
        ),
        (
            {
                **DIFY_REQUEST,
                "metadata_condition": {
                    "conditions": [{"name": ["year"], "comparison_operator": "≥", "value": "soon"}]
                },
            },
            "metadata_condition",
        ),
        (
            {
                **DIFY_REQUEST,
                "metadata_condition": {
                    "conditions": [{"name": ["year"], "comparison_operator": "like", "value": 1}]
                },
            },
            "comparison_operator",
        ),
        (["not", "an", "object"], "object"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_problem(world: World, body: Any, named: str) -> None:
    response = retrieve(api(world.key), body)

    assert response.status_code == 400, response.content
    assert response.json()["error_code"] == 3001
    assert named in response.json()["error_msg"]


def test_invalid_json_is_a_400_in_dify_s_shape(world: World) -> None:
    response = api(world.key).post(URL, "{not json", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error_code"] == 3001


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
    assert retrieve(client, DIFY_REQUEST).status_code == 200
    throttled = retrieve(client, DIFY_REQUEST)

    assert throttled.status_code == 429
    assert throttled.json()["error_code"] == 3002
    assert int(throttled["Retry-After"]) >= 1


# --- the real server ------------------------------------------------------------------------


@pytest.mark.integration
def test_dify_s_request_against_the_real_server(web: Web, world: World) -> None:
    def post(key: str | None, body: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(f"{web.url}{URL}", json=body, headers=headers, timeout=30)

    body = {**DIFY_REQUEST, "retrieval_setting": {"top_k": 10, "score_threshold": 0.0}}
    plain = post(world.key, body)
    secret = post(world.secret_key, body)
    filtered = post(
        world.key,
        {
            **body,
            "metadata_condition": {
                "logical_operator": "and",
                "conditions": [
                    {"name": ["department"], "comparison_operator": "is", "value": "finance"}
                ],
            },
        },
    )

    assert plain.status_code == 200, plain.text
    assert "merger" not in [r["metadata"]["document_key"] for r in plain.json()["records"]]
    assert "merger" in [r["metadata"]["document_key"] for r in secret.json()["records"]]
    assert [r["metadata"]["document_key"] for r in filtered.json()["records"]] == ["expenses"]
    assert post(None, body).json()["error_code"] == 1001
    assert post("canon_0000_nope", body).json() == {
        "error_code": 1002,
        "error_msg": "Authorization failed: the API key is unknown, expired or revoked.",
    }
    assert post(world.key, {**body, "knowledge_id": "foreign"}).status_code == 404
    bad = post(world.key, {**body, "retrieval_setting": {"top_k": 1000}})
    assert (bad.status_code, bad.json()["error_code"]) == (400, 3001)
