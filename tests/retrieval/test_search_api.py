"""The search API: authentication, scoping, access groups and bad input (always a 4xx)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from ingestion.pipeline.run import task_execute
from kb import storage
from kb.models import KnowledgeBase, Tenant
from kb.services.documents import document_create
from retrieval.models import ApiKey
from retrieval.principals import api_key_create
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)


def publish(kb: KnowledgeBase, key: str, text: str, groups: tuple[str, ...] = ()) -> None:
    revision = document_create(
        kb=kb,
        key=key,
        title=key.title(),
        stored=storage.store_bytes(text.encode()),
        media_type="text/plain",
        original_name=f"{key}.txt",
        access_groups=groups,
    )
    task = IngestionTask.objects.get(build__revision=revision)
    assert task_execute(task_id=task.pk, worker_id="test") == "published"


def post(key: str | None, body: Any, *, raw: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client().post(
        "/api/v1/search",
        raw if raw is not None else body,
        content_type="application/json",
        headers=headers,
    )


@pytest.fixture
def published(kb: KnowledgeBase) -> KnowledgeBase:
    publish(kb, "open", "The cafeteria opens at eight in the morning.")
    publish(kb, "secret", "The cafeteria secret recipe is salt.", groups=("finance",))
    return kb


def test_a_key_sees_only_documents_of_its_groups(published: KnowledgeBase, tenant: Tenant) -> None:
    _, plain = api_key_create(tenant=tenant, name="plain")
    _, finance = api_key_create(tenant=tenant, name="finance", access_groups=["finance"])
    body = {"kb": "handbook", "query": "cafeteria", "mode": "keyword"}

    plain_keys = {h["document_key"] for h in post(plain, body).json()["hits"]}
    finance_keys = {h["document_key"] for h in post(finance, body).json()["hits"]}

    assert plain_keys == {"open"}
    assert finance_keys == {"open", "secret"}


def test_another_tenants_knowledge_base_is_not_found(published: KnowledgeBase) -> None:
    other = Tenant.objects.create(name="Other", slug="other")
    _, other_key = api_key_create(tenant=other, name="other")
    response = post(other_key, {"kb": "handbook", "query": "cafeteria"})
    assert response.status_code == 404
    assert "cafeteria" not in response.content.decode()
    response = post(other_key, {"kb": str(published.pk), "query": "cafeteria"})
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("header_key", "status"),
    [(None, 401), ("canon_nope_nope", 401), ("garbage", 401)],
)
def test_missing_or_invalid_keys_are_refused(
    published: KnowledgeBase, header_key: str | None, status: int
) -> None:
    response = post(header_key, {"kb": "handbook", "query": "cafeteria"})
    assert response.status_code == status
    assert response.json()["detail"]


def test_expired_and_revoked_keys_are_refused(published: KnowledgeBase, api_key: str) -> None:
    body = {"kb": "handbook", "query": "cafeteria"}
    assert post(api_key, body).status_code == 200
    ApiKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert post(api_key, body).status_code == 401
    ApiKey.objects.update(expires_at=None, revoked_at=timezone.now())
    response = post(api_key, body)
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        {"query": "x"},
        {"kb": "handbook"},
        {"kb": "handbook", "query": ""},
        {"kb": "handbook", "query": "   "},
        {"kb": "handbook", "query": "x" * 100_000},
        {"kb": "handbook", "query": "x", "top_k": 0},
        {"kb": "handbook", "query": "x", "top_k": -3},
        {"kb": "handbook", "query": "x", "top_k": 10**9},
        {"kb": "handbook", "query": "x", "top_k": "many"},
        {"kb": "handbook", "query": "x", "mode": "psychic"},
        {"kb": [], "query": "x"},
        {"kb": [f"kb{i}" for i in range(11)], "query": "x"},
        {"kb": ["handbook", "handbook"], "query": "x"},
        {"kb": ["handbook", "other"], "query": "x", "as_of": "2026-01-01T00:00:00Z"},
        {"kb": [{"slug": "handbook"}], "query": "x"},
        ["not", "an", "object"],
    ],
)
def test_bad_input_is_a_400_with_a_message(
    published: KnowledgeBase, api_key: str, body: Any
) -> None:
    response = post(api_key, body)
    assert response.status_code == 400, response.content
    assert response.json()["detail"]


def test_malformed_json_is_a_400(published: KnowledgeBase, api_key: str) -> None:
    response = post(api_key, None, raw='{"kb": "handbook", "query": ')
    assert response.status_code == 400
    assert "JSON" in response.json()["detail"]


@pytest.mark.parametrize(
    "query",
    ["!!!???", "'; DROP TABLE kb_chunk; --", '{"$ne": null}', "食堂", "🍕🍕", "a & b | !c:*"],
)
def test_odd_queries_are_answered_not_crashed(
    published: KnowledgeBase, api_key: str, query: str
) -> None:
    for mode in ("vector", "keyword", "hybrid"):
        response = post(api_key, {"kb": "handbook", "query": query, "mode": mode})
        assert response.status_code == 200, (mode, response.content)
        assert isinstance(response.json()["hits"], list)


def test_last_used_time_is_recorded_at_minute_precision(
    published: KnowledgeBase, api_key: str
) -> None:
    body = {"kb": "handbook", "query": "cafeteria", "mode": "keyword"}
    assert ApiKey.objects.get().last_used_at is None
    assert post(api_key, body).status_code == 200
    first = ApiKey.objects.get().last_used_at
    assert first is not None

    assert post(api_key, body).status_code == 200
    assert ApiKey.objects.get().last_used_at == first  # no write within the minute

    ApiKey.objects.update(last_used_at=timezone.now() - timedelta(minutes=5))
    assert post(api_key, body).status_code == 200
    assert ApiKey.objects.get().last_used_at > timezone.now() - timedelta(minutes=1)  # type: ignore[operator]


def test_a_vector_search_request_makes_three_database_round_trips(
    published: KnowledgeBase, api_key: str
) -> None:
    """The per-request cost B2 measures (docs/BENCHMARKS.md): the key and its knowledge bases,
    the knowledge base with its active version, and the vector statement, in autocommit: its
    own snapshot, whose rows prove the version active (no BEGIN, no settings, no re-check, no
    COMMIT). A new statement here is a visible decision."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    # top_k 1: one visible chunk answers it, so no exact fallback runs
    body = {"kb": "handbook", "query": "cafeteria", "mode": "vector", "top_k": 1}
    assert post(api_key, body).status_code == 200  # records last_used_at (once a minute)

    with CaptureQueriesContext(connection) as queries:
        response = post(api_key, body)

    assert response.status_code == 200 and response.json()["hits"]
    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) == 3, statements
    assert "FROM retrieval_apikey" in statements[0], statements[0]
    assert "FROM kb_knowledgebase" in statements[1], statements[1]
    assert "ORDER BY c.embedding" in statements[2], statements[2]


def test_the_search_statement_is_prepared_once_per_connection(
    published: KnowledgeBase, api_key: str
) -> None:
    """Planning the vector statement costs more than running it (docs/BENCHMARKS.md, B2):
    server-side binding lets psycopg prepare it after a few runs on a connection."""
    from django.db import connection

    body = {"kb": "handbook", "query": "cafeteria", "mode": "vector", "top_k": 1}
    for _ in range(6):
        assert post(api_key, body).status_code == 200

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%<=>%"]
        )
        prepared = [row[0] for row in cursor.fetchall()]
    assert len(prepared) == 1 and "ORDER BY c.embedding" in prepared[0], prepared


def test_keyword_search_matches_every_term_first_then_any_term(
    kb: KnowledgeBase, api_key: str
) -> None:
    publish(kb, "both", "The harbour ferry leaves at noon.")
    publish(kb, "ferry", "Ferry, ferry, ferry: the ferry timetable lists every ferry.")
    publish(kb, "harbour", "The harbour office closes early.")

    def keys(top_k: int) -> list[str]:
        body = {"kb": "handbook", "query": "harbour ferry", "mode": "keyword", "top_k": top_k}
        response = post(api_key, body)
        assert response.status_code == 200, response.content
        return [hit["document_key"] for hit in response.json()["hits"]]

    # every term found top_k rows, so the chunk that repeats one term (which outranks it when
    # any term matches) is not considered
    assert keys(1) == ["both"]
    assert sorted(keys(3)) == ["both", "ferry", "harbour"]  # too few: any term answers
