"""Search filters narrow, never widen; access-group changes apply to the very next query."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from kb.models import Document, KnowledgeBase, Tenant
from kb.services.documents import document_update
from retrieval.models import ApiKey
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, publish, search

pytestmark = pytest.mark.django_db


@pytest.fixture
def handbook(kb: KnowledgeBase) -> KnowledgeBase:
    publish(kb, "travel", "Expense rules for travel: trains and hotels.")
    publish(kb, "meals", "Expense rules for meals: lunch and dinner.")
    publish(kb, "payroll", "Expense rules for payroll bonuses.", groups=("finance",))
    Document.objects.filter(key="travel").update(metadata={"dept": "ops", "year": 2026})
    Document.objects.filter(key="meals").update(metadata={"dept": "ops", "year": 2025})
    Document.objects.filter(key="payroll").update(metadata={"dept": "ops", "year": 2026})
    return kb


def keys(client: Client, **body: Any) -> set[str]:
    response = search(client, {"kb": "handbook", "query": "expense rules", **body})
    assert response.status_code == 200, response.content
    return {hit["document_key"] for hit in response.json()["hits"]}


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_document_keys_and_metadata_narrow_the_result(
    handbook: KnowledgeBase, api_key: str, mode: str
) -> None:
    client = api(api_key)

    assert keys(client, mode=mode) == {"travel", "meals"}
    assert keys(client, mode=mode, document_keys=["meals"]) == {"meals"}
    assert keys(client, mode=mode, metadata={"year": 2026}) == {"travel"}
    assert keys(client, mode=mode, metadata={"dept": "ops"}, document_keys=["travel"]) == {"travel"}
    assert keys(client, mode=mode, metadata={"dept": "hr"}) == set()


def test_filters_never_widen_what_a_key_may_read(handbook: KnowledgeBase, api_key: str) -> None:
    client = api(api_key)

    assert keys(client, document_keys=["payroll"]) == set()
    assert keys(client, metadata={"year": 2026}, document_keys=["payroll", "travel"]) == {"travel"}


def test_access_groups_added_and_removed_apply_to_the_next_query(
    handbook: KnowledgeBase,
) -> None:
    key, plaintext = api_key_create(tenant=handbook.tenant, name="clerk")
    client = api(plaintext)
    payroll = Document.objects.get(key="payroll")
    assert "payroll" not in keys(client)

    ApiKey.objects.filter(pk=key.pk).update(access_groups=["finance"])
    assert "payroll" in keys(client), "the key's new group"

    document_update(document=payroll, title=payroll.title, access_groups=["board"])
    assert "payroll" not in keys(client), "the document moved to another group"

    document_update(document=payroll, title=payroll.title, access_groups=[])
    assert "payroll" in keys(client), "the document is open to the tenant"

    document_update(document=payroll, title=payroll.title, access_groups=["finance"])
    ApiKey.objects.filter(pk=key.pk).update(access_groups=[])
    assert "payroll" not in keys(client), "the key lost its group"


def test_another_tenant_with_the_same_keys_and_metadata_stays_invisible(
    handbook: KnowledgeBase,
) -> None:
    other = Tenant.objects.create(name="Other", slug="other")
    _, plaintext = api_key_create(tenant=other, name="theirs")

    response = search(
        api(plaintext), {"kb": str(handbook.pk), "query": "expense", "document_keys": ["travel"]}
    )

    assert response.status_code == 404


@pytest.mark.parametrize(
    "extra",
    [
        {"document_keys": []},
        {"document_keys": "travel"},
        {"document_keys": [1, None]},
        {"document_keys": ["k" * 256]},
        {"document_keys": ["k"] * 101},
        {"document_keys": ["nul\x00"]},
        {"metadata": ["dept"]},
        {"metadata": "dept=ops"},
        {"metadata": {"dept": "nul\x00"}},
        {"metadata": {"k": "v" * 5000}},
        {"as_of": "yesterday"},
        {"as_of": 12},
    ],
)
def test_bad_filters_are_a_400(handbook: KnowledgeBase, api_key: str, extra: Any) -> None:
    response = search(api(api_key), {"kb": "handbook", "query": "expense", **extra})

    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    if isinstance(detail, str):  # refused by the JSON parser (NUL), which names the value
        assert all(f"$.{name}" in detail for name in extra), detail
    else:
        assert set(detail) == set(extra)
