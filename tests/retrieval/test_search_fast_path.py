"""The search API's lean path gives exactly the answers of the DRF serializers it skips: the
common request body validated without SearchInput, the response built without SearchOutput,
and the knowledge base found by one statement with the ORM lookup's rules."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from rest_framework.renderers import JSONRenderer

from kb.models import KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.api.serializers import SearchInput, SearchOutput, search_body, search_input_fast
from retrieval.principals import KnowledgeBaseNotFound, Principal
from retrieval.search.engine import search
from retrieval.search.hits import Hit, Rerank, SearchResult
from retrieval.search.visibility import knowledge_base_for

BASE = {"kb": "handbook", "query": "cafeteria"}
COMMON = [
    BASE,
    {**BASE, "top_k": 1, "mode": "vector"},
    {**BASE, "top_k": 100, "mode": "keyword"},
    {**BASE, "mode": "hybrid"},
    {"kb": "  handbook ", "query": "\u2003cafeteria opens\t"},
    {"kb": "x" * 100, "query": "q" * 4000},
    {"kb": "7", "query": "数据库 连接池"},
    {**BASE, "rerank": False},
    {**BASE, "mode": "vector", "rerank": True},
]
OTHERS = [
    {**BASE, "top_k": 0},
    {**BASE, "top_k": 101},
    {**BASE, "top_k": -1},
    {**BASE, "top_k": True},
    {**BASE, "top_k": 5.0},
    {**BASE, "top_k": "5"},
    {**BASE, "top_k": None},
    {**BASE, "mode": "VECTOR"},
    {**BASE, "mode": ""},
    {**BASE, "mode": None},
    {**BASE, "mode": 1},
    {"kb": "", "query": "cafeteria"},
    {"kb": "   ", "query": "cafeteria"},
    {"kb": "x" * 101, "query": "cafeteria"},
    {"kb": 5, "query": "cafeteria"},
    {"kb": ["handbook"], "query": "cafeteria"},
    {"kb": "handbook", "query": " \n "},
    {"kb": "handbook", "query": "q" * 4001},
    {"kb": "handbook", "query": "caf\x00e"},
    {"kb": "handbook", "query": "caf\ud800e"},
    {"kb": "handbook"},
    {"query": "cafeteria"},
    {**BASE, "document_keys": ["a"]},
    {**BASE, "metadata": {"team": "hr"}},
    {**BASE, "as_of": "2026-01-01T00:00:00Z"},
    {**BASE, "unknown": 1},
    {**BASE, "rerank": "false"},
    {**BASE, "rerank": 1},
    {**BASE, "rerank": None},
    {**BASE, "explain": True},
    [BASE],
    "handbook",
    None,
]


@pytest.mark.parametrize("body", COMMON + OTHERS, ids=repr)
def test_the_fast_path_answers_only_what_search_input_answers_the_same(body: Any) -> None:
    fast = search_input_fast(body)
    serializer = SearchInput(data=body) if isinstance(body, dict) else None

    if fast is not None:
        assert serializer is not None and serializer.is_valid(), serializer and serializer.errors
        assert fast == dict(serializer.validated_data)
    assert (fast is not None) == (body in COMMON)  # it does take the common requests


def _result(as_of: datetime | None) -> SearchResult:
    hits = [
        Hit(
            chunk_id=10 + i,
            score=0.5 / (i + 1),
            text=f"Chunk {i} — «text»",
            ordinal=i,
            document_key=f"doc-{i}",
            document_title=f"Document {i}",
            revision=2,
            build_id=99,
            heading_path="Guide › Start" if i else "",
        )
        for i in range(3)
    ]
    return SearchResult(
        kb="handbook",
        index_version=3,
        took_ms=1.25,
        hits=hits,
        as_of=as_of,
        unretained_documents=1 if as_of else None,
    )


@pytest.mark.parametrize("as_of", [None, datetime(2026, 11, 30, 12, 0, 5, 120000, tzinfo=UTC)])
def test_the_response_is_search_outputs_byte_for_byte(as_of: datetime | None) -> None:
    result = _result(as_of)
    renderer = JSONRenderer()

    assert renderer.render(search_body(result)) == renderer.render(SearchOutput(result).data)


@pytest.mark.parametrize(
    "rerank", [Rerank(reranked=True), Rerank(reason="timeout"), Rerank(reason="not_configured")]
)
def test_the_rerank_fields_are_search_outputs_byte_for_byte(rerank: Rerank) -> None:
    result = _result(None)
    if rerank.reranked:
        hits = [replace(hit, rerank_score=0.25 * i - 0.5) for i, hit in enumerate(result.hits)]
        result = replace(result, hits=hits[::-1])
    result = replace(result, rerank=rerank)
    renderer = JSONRenderer()

    assert renderer.render(search_body(result)) == renderer.render(SearchOutput(result).data)


@pytest.mark.django_db
def test_the_knowledge_base_lookup_keeps_the_orm_lookups_rules(kb: KnowledgeBase) -> None:
    tenant = kb.tenant
    # a knowledge base whose slug is another one's id names itself, not that one
    digits = knowledge_base_create(tenant=tenant, name="Digits", slug=str(kb.pk))
    unserved = knowledge_base_create(tenant=tenant, name="Unserved", slug="unserved")
    KnowledgeBase.objects.filter(pk=unserved.pk).update(active_index_version=None)
    other = knowledge_base_create(
        tenant=Tenant.objects.create(name="Other", slug="other"), name="Theirs", slug="theirs"
    )
    everyone = Principal(tenant_id=tenant.pk, kb_ids=None, access_groups=frozenset())
    handbook_only = Principal(
        tenant_id=tenant.pk, kb_ids=frozenset({kb.pk}), access_groups=frozenset()
    )

    def found(principal: Principal, ref: str) -> int | None:
        try:
            return knowledge_base_for(principal=principal, kb_ref=ref).pk
        except KnowledgeBaseNotFound:
            return None

    found_kb = knowledge_base_for(principal=everyone, kb_ref="handbook")
    assert found_kb.active_index_version is not None
    assert found_kb.active_index_version.pk == kb.active_index_version_id
    assert found_kb.tenant_id == tenant.pk and found_kb.slug == "handbook"
    assert found(everyone, str(kb.pk)) == digits.pk  # the slug first
    assert found(everyone, str(digits.pk)) == digits.pk  # then the id
    assert found(handbook_only, str(kb.pk)) is None  # the slug's knowledge base is not its own
    assert found(everyone, "unserved") is None  # no active version: not found
    assert found(everyone, str(unserved.pk)) is None
    assert found(everyone, "theirs") is None and found(everyone, str(other.pk)) is None
    assert found(everyone, "9" * 30) is None  # no integer overflow


@pytest.mark.django_db
def test_the_vector_statement_is_planned_once_not_on_every_run(kb: KnowledgeBase) -> None:
    """Prepared is not enough: with its LIMIT bound as a parameter, PostgreSQL's plan cache
    ('auto') re-planned the vector statement on every run (~3 ms; docs/BENCHMARKS.md, B2). With
    the LIMIT a literal it settles on the generic plan after five custom ones."""
    from django.db import connection

    from tests.retrieval.factories import publish

    publish(kb, "open", "The cafeteria opens at eight in the morning.")
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    found = knowledge_base_for(principal=principal, kb_ref="handbook")
    for _ in range(14):
        result = search(principal=principal, kb=found, query="cafeteria", top_k=1, mode="vector")
        assert [h.document_key for h in result.hits] == ["open"]

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s",
            ["%ORDER BY c.embedding%"],
        )
        plans = cursor.fetchall()
    # psycopg prepares the statement for its 6th run; PostgreSQL plans runs 6-10 of it for their
    # parameters (custom), then, finding the generic plan no dearer, uses that one from run 11.
    assert len(plans) == 1 and plans[0] == (4, 5), plans
