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


def condition(name: str, operator: str, value: Any = None) -> dict[str, Any]:
    """One condition as a running Dify sends it (`MetadataCondition.model_dump()`): the name a
    string, the value as its workflow gave it."""
    return {"name": name, "comparison_operator": operator, "value": value}


def filtered(key: str, *conditions: dict[str, Any], logic: str = "and") -> set[str]:
    body = {
        **DIFY_REQUEST,
        "retrieval_setting": {"top_k": 10, "score_threshold": 0.0},
        "metadata_condition": {"logical_operator": logic, "conditions": list(conditions)},
    }
    return set(keys(retrieve(api(key), body)))


# 2026-01-01, 2026-02-01 and 2026-01-15 10:00, UTC, in Unix seconds (Dify's time metadata).
JAN_1, FEB_1, JAN_15_10H = 1767225600, 1769904000, 1768471200


def test_a_document_without_the_field_matches_no_negative_operator(world: World) -> None:
    """Issue 37, item 11: one rule for the four, as in Dify's own knowledge bases. `expenses`
    has no audience; `not contains` used to find it, `is not`, `≠` and `not in` did not."""
    for operator, value in [
        ("not contains", "board"),
        ("is not", "board"),
        ("≠", "board"),
        ("not in", "board, directors"),  # Dify's comma-separated text
        ("not in", ["board"]),
    ]:
        assert filtered(world.key, condition("audience", operator, value)) == {"vacation"}, operator
    assert filtered(world.key, condition("audience", "empty")) == {"expenses"}
    # the secret key reads merger (audience "board") too: excluded by every one of them
    assert filtered(world.secret_key, condition("audience", "not contains", "board")) == {
        "vacation"
    }


def test_dates_as_unix_seconds_and_numbers_as_text_are_what_dify_sends(world: World) -> None:
    """Issue 37, item 11: Dify's date picker gives Unix seconds, a workflow variable gives
    text; both were refused with 3001."""
    assert filtered(world.key, condition("published", "after", JAN_1)) == {"vacation"}
    assert filtered(world.key, condition("published", "before", str(FEB_1))) == {"vacation"}
    assert filtered(world.key, condition("published", "is", JAN_15_10H)) == {"vacation"}
    assert filtered(world.key, condition("published", "before", JAN_1)) == set()
    assert filtered(world.key, condition("created", "after", 946684800)) == {
        "vacation",
        "expenses",
    }
    assert filtered(world.key, condition("year", "≥", "2026")) == {"vacation"}
    assert filtered(world.key, condition("year", "=", "2025")) == {"expenses"}
    assert filtered(world.key, condition("year", "in", "2025, 2024")) == {"expenses"}


def test_the_score_threshold_means_the_same_under_every_fusion(world: World, settings: Any) -> None:
    """Issue 37, item 15: with CANON_HYBRID_FUSION=rrf every fused score was below 0.033, so a
    threshold from Dify's 0-1 scale kept nothing; the door fuses by the learned model always."""
    every = {**DIFY_REQUEST, "retrieval_setting": {"top_k": 10, "score_threshold": 0.0}}
    learned = retrieve(api(world.key), every).json()["records"]
    scores = sorted(r["score"] for r in learned)
    threshold = (scores[0] + scores[-1]) / 2
    above = {**DIFY_REQUEST, "retrieval_setting": {"top_k": 10, "score_threshold": threshold}}
    kept = [r["metadata"]["chunk_id"] for r in retrieve(api(world.key), above).json()["records"]]

    for fusion in ("convex", "rrf"):
        settings.HYBRID_FUSION = fusion
        records = retrieve(api(world.key), every).json()["records"]
        again = retrieve(api(world.key), above).json()["records"]

        assert [(r["metadata"]["chunk_id"], r["score"]) for r in records] == [
            (r["metadata"]["chunk_id"], r["score"]) for r in learned
        ], fusion
        assert [r["metadata"]["chunk_id"] for r in again] == kept, fusion
    assert kept and len(kept) < len(learned)
    # The REST API keeps the configured fusion (rrf, last): its hybrid scores are rrf's.
    rest = api(world.key).post(
        "/api/v1/search",
        {"kb": "handbook", "query": DIFY_REQUEST["query"], "mode": "hybrid"},
        content_type="application/json",
    )
    assert max(hit["score"] for hit in rest.json()["hits"]) <= round(2 / 61, 6)


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


@pytest.mark.integration
def test_what_a_running_dify_sends_against_the_real_server(web: Web, world: World) -> None:
    """The body of Dify's `ExternalDatasetService.fetch_external_knowledge_retrieval`: a
    threshold of 0.0 when it is off, `metadata_condition` as `MetadataCondition.model_dump()`
    (a name as a string, the values as Dify holds them: Unix seconds from its date picker, a
    number as text from a workflow variable, comma-separated text for `in`)."""
    body = {
        "retrieval_setting": {"top_k": 10, "score_threshold": 0.0},
        "query": "vacation policy",
        "knowledge_id": "handbook",
        "metadata_condition": {
            "logical_operator": "and",
            "conditions": [
                condition("published", "after", JAN_1),
                condition("year", "≥", "2026"),
                condition("department", "in", "hr, legal"),
                condition("audience", "not contains", "board"),
            ],
        },
    }

    response = httpx.post(
        f"{web.url}{URL}", json=body, headers={"Authorization": f"Bearer {world.secret_key}"}
    )

    assert response.status_code == 200, response.text
    assert {r["metadata"]["document_key"] for r in response.json()["records"]} == {"vacation"}
