"""Test search's metadata filter (issue 37, item 8): a condition built from the knowledge base's
fields, and the API's filter language in a JSON box, refused with the same errors naming the
place; the filter only narrows what the principal may read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from kb import storage
from kb.models import KnowledgeBase
from kb.services.documents import document_create
from kb.services.metadata import metadata_field_save
from tests.console.admin_world import MARK_HR, World, build_world
from tests.retrieval.factories import api, build, search

pytestmark = pytest.mark.django_db


def publish_with(kb: KnowledgeBase, key: str, text: str, metadata: dict[str, Any]) -> None:
    revision = document_create(
        kb=kb,
        key=key,
        title=key.title(),
        stored=storage.store_bytes(text.encode()),
        media_type="text/plain",
        original_name=f"{key}.txt",
        metadata=metadata,
    )
    build(revision)


@pytest.fixture
def handbook(kb: KnowledgeBase) -> KnowledgeBase:
    """Three travel rules with a department, a year, a flag and tags."""
    metadata_field_save(kb=kb, name="department", type="string")
    metadata_field_save(kb=kb, name="year", type="number")
    metadata_field_save(kb=kb, name="approved", type="boolean")
    metadata_field_save(kb=kb, name="tags", type="string_list")
    publish_with(
        kb,
        "trains",
        "Train tickets are reimbursed in second class.",
        {"department": "finance", "year": 2024, "approved": True, "tags": ["travel"]},
    )
    publish_with(
        kb,
        "hotels",
        "Hotels are reimbursed up to 120 euros a night.",
        {"department": "finance", "year": 2022, "approved": False, "tags": ["travel", "draft"]},
    )
    publish_with(
        kb,
        "laptops",
        "Laptops are reimbursed every four years.",
        {"department": "it", "year": 2025, "approved": True},
    )
    return kb


@pytest.fixture
def client(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def _search(client: Client, kb: KnowledgeBase, **params: Any) -> Any:
    return client.get(
        f"/admin/kb/knowledgebase/{kb.pk}/search/",
        {"query": "reimbursed", "mode": "keyword", "top_k": "10", **params},
    )


def _keys(response: Any) -> list[str]:
    assert response.status_code == 200
    assert response.context["sides"], response.context["form"].errors
    return sorted(row["hit"].document_key for row in response.context["sides"][0].rows)


def test_without_a_filter_every_document_matches(client: Client, handbook: KnowledgeBase) -> None:
    assert _keys(_search(client, handbook)) == ["hotels", "laptops", "trains"]


def test_the_builder_offers_the_knowledge_bases_fields_with_their_types(
    client: Client, handbook: KnowledgeBase
) -> None:
    response = _search(client, handbook)

    choices = dict(response.context["form"].fields["where_field"].choices)
    assert choices["year"] == "year (number)"
    assert choices["tags"] == "tags (list of text)"
    assert choices["content_type"] == "content_type (text, built-in)"
    # declared fields come first, then the built-in ones
    names = [name for name, _ in response.context["form"].fields["where_field"].choices][1:]
    assert names[:4] == ["approved", "department", "tags", "year"]
    assert dict(response.context["form"].fields["where_op"].choices)["gte"] == (
        "is at least / on or after (gte)"
    )


@pytest.mark.parametrize(
    ("field", "op", "value", "keys"),
    [
        ("department", "eq", "finance", ["hotels", "trains"]),
        ("department", "ne", "finance", ["laptops"]),
        ("year", "gte", "2024", ["laptops", "trains"]),
        ("year", "in", "2022, 2025", ["hotels", "laptops"]),
        ("approved", "eq", "no", ["hotels"]),
        ("tags", "contains", "draft", ["hotels"]),
        ("tags", "exists", "no", ["laptops"]),
        ("tags", "exists", "", ["hotels", "trains"]),  # empty: has a value
        ("key", "starts_with", "ho", ["hotels"]),
    ],
)
def test_a_built_condition_narrows_the_hits(
    client: Client, handbook: KnowledgeBase, field: str, op: str, value: str, keys: list[str]
) -> None:
    response = _search(client, handbook, where_field=field, where_op=op, where_value=value)

    assert _keys(response) == keys
    assert response.context["applied"].api_json.startswith(f'{{"field": "{field}", "op": "{op}"')
    assert 'id="applied-filter"' in response.content.decode()


def test_the_applied_filter_is_what_the_api_answers_alike(
    client: Client, handbook: KnowledgeBase, api_key: str
) -> None:
    response = _search(
        client,
        handbook,
        where_field="year",
        where_op="gte",
        where_value="2024",
        filter='{"not": {"field": "department", "op": "eq", "value": "it"}}',
    )
    applied = response.context["applied"].api_json

    assert _keys(response) == ["trains"]
    assert applied == (
        '{"and": [{"field": "year", "op": "gte", "value": 2024}, '
        '{"not": {"field": "department", "op": "eq", "value": "it"}}]}'
    )
    body = {"kb": handbook.slug, "query": "reimbursed", "mode": "keyword"}
    answer = search(api(api_key), {**body, "filter": json.loads(applied)})
    assert answer.status_code == 200, answer.content
    assert sorted(hit["document_key"] for hit in answer.json()["hits"]) == ["trains"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            '{"and": [{"field": "year", "op": "gte", "value": "soon"}]}',
            'filter.and[0].value: "year" is a number field; give it a number.',
        ),
        ('{"field": "year", "op": "gte", "value": 1e400}', "filter.value"),  # out of range
        ('{"field": "colour", "op": "eq", "value": "red"}', 'filter.field: Unknown field "colour"'),
        (
            '{"field": "approved", "op": "contains", "value": "y"}',
            'filter.op: "contains" does not apply to boolean field "approved"',
        ),
        ('{"field": "year", "op": "gte", "value": 2024', "filter: not valid JSON ("),
        ('{"field": "year", "op": "eq", "value": NaN}', "filter: not valid JSON (NaN"),
        ('{"field": "key", "op": "eq", "value": "a\\u0000b"}', "filter.value holds a NUL"),
        ('{"field": "key", "op": "eq", "value": "\\ud800"}', "filter.value holds an unpaired"),
        ('{"not": ' * 6 + "{}" + "}" * 6, "filter.not.not.not.not.not: Filters nest at most"),
        ("[" * 5000 + "]" * 5000, "filter"),
    ],
)
def test_a_json_filter_that_cannot_apply_is_refused_naming_the_place(
    client: Client, handbook: KnowledgeBase, text: str, error: str
) -> None:
    response = _search(client, handbook, filter=text)

    assert response.status_code == 200
    assert not response.context["sides"]  # nothing searched
    errors = response.context["form"].errors["filter"]
    assert any(message.startswith(error) for message in errors), errors


@pytest.mark.parametrize(
    ("params", "field", "error"),
    [
        (
            {"where_field": "year", "where_op": "gte", "where_value": "soon"},
            "where_value",
            '"year" is a number field; give it a number.',
        ),
        (
            {"where_field": "approved", "where_op": "gt", "where_value": "yes"},
            "where_op",
            '"gt" does not apply to boolean field "approved"',
        ),
        (
            {"where_field": "year", "where_op": "eq", "where_value": ""},
            "where_value",
            "Give a value to compare with.",
        ),
        ({"where_value": "finance"}, "where_field", "Choose the field the value is for."),
        ({"where_field": "colour", "where_value": "red"}, "where_field", "Select a valid choice"),
    ],
)
def test_a_built_condition_that_cannot_apply_is_refused_on_its_input(
    client: Client, handbook: KnowledgeBase, params: dict[str, str], field: str, error: str
) -> None:
    response = _search(client, handbook, **params)

    assert response.status_code == 200 and not response.context["sides"]
    errors = response.context["form"].errors[field]
    assert any(message.startswith(error) for message in errors), errors


def test_a_filter_never_widens_what_the_user_may_read(db: None) -> None:
    world: World = build_world()
    carol = world.client("carol")  # not in hr
    url = f"/admin/kb/knowledgebase/{world.kb_b.pk}/search/"

    by_key = carol.get(
        url,
        {
            "query": "pay bands",
            "mode": "keyword",
            "filter": '{"or": [{"field": "key", "op": "eq", "value": "salaries"}, '
            '{"field": "key", "op": "exists", "value": true}]}',
        },
    )

    assert by_key.status_code == 200 and by_key.context["sides"]
    assert by_key.context["sides"][0].rows == []
    assert MARK_HR not in by_key.content.decode().lower()
