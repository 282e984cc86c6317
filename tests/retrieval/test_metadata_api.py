"""Issue 25, item 1 through the API: uploads carry metadata (checked against the knowledge
base's fields; a misfit is a 400 naming the field), a new revision replaces it only when given,
documents show it, and `GET /kbs/{kb}/metadata` summarises values counting only the documents
the key may read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import Document, KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from kb.services.metadata import metadata_field_save
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, upload

pytestmark = pytest.mark.django_db

HANDBOOK = "/api/v1/kbs/handbook/documents/"


@pytest.fixture
def client(api_key: str) -> Client:
    return api(api_key)


@pytest.fixture
def typed_kb(kb: KnowledgeBase) -> KnowledgeBase:
    metadata_field_save(kb=kb, name="department", type="string")
    metadata_field_save(kb=kb, name="year", type="number")
    metadata_field_save(kb=kb, name="valid_until", type="date")
    metadata_field_save(kb=kb, name="tags", type="string_list")
    return kb


def post(client: Client, idempotency_key: str, key: str = "policy", **fields: Any) -> Any:
    return client.post(
        HANDBOOK,
        {"key": key, "file": SimpleUploadedFile(f"{key}.txt", b"Book economy class."), **fields},
        headers={"Idempotency-Key": idempotency_key},
    )


def test_an_upload_with_metadata_stores_it_normalised(
    client: Client, typed_kb: KnowledgeBase
) -> None:
    metadata = {"department": "travel", "valid_until": "2026-12-31T00:00:00Z", "tags": "a"}
    response = post(client, "u1", metadata=json.dumps(metadata))
    assert response.status_code == 201, response.content
    stored = {"department": "travel", "valid_until": "2026-12-31", "tags": ["a"]}
    assert response.json()["metadata"] == stored
    document = Document.objects.get(kb=typed_kb, key="policy")
    assert document.metadata == stored
    # the document's outputs show it
    assert client.get(f"/api/v1/documents/{document.pk}").json()["metadata"] == stored
    assert client.get(HANDBOOK).json()["results"][0]["metadata"] == stored


def test_a_misfit_value_is_a_400_naming_the_field_and_stores_nothing(
    client: Client, typed_kb: KnowledgeBase
) -> None:
    response = post(client, "u1", metadata=json.dumps({"year": "next year"}))
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert list(body["detail"]["metadata"]) == ["year"]
    assert "number" in body["detail"]["metadata"]["year"][0]
    assert not Document.objects.filter(kb=typed_kb).exists()

    undeclared = post(client, "u2", metadata=json.dumps({"colour": "red"}))
    assert undeclared.status_code == 400
    assert "colour" in undeclared.json()["detail"]["metadata"]

    for bad in ("[1, 2]", "{not json"):
        malformed = post(client, "u3", metadata=bad)
        assert malformed.status_code == 400
        assert "metadata" in malformed.json()["detail"]


def test_a_new_revision_replaces_the_metadata_only_when_given(
    client: Client, typed_kb: KnowledgeBase
) -> None:
    assert post(client, "u1", metadata=json.dumps({"year": 2024})).status_code == 201
    document = Document.objects.get(kb=typed_kb, key="policy")

    kept = post(client, "u2")
    assert kept.status_code == 201 and kept.json()["revision"] == 2
    document.refresh_from_db()
    assert document.metadata == {"year": 2024}

    replaced = post(client, "u3", metadata=json.dumps({"department": "hr"}))
    assert replaced.status_code == 201 and replaced.json()["metadata"] == {"department": "hr"}
    document.refresh_from_db()
    assert (document.metadata, document.desired_revision) == ({"department": "hr"}, 3)

    refused = post(client, "u4", metadata=json.dumps({"year": "x"}))
    assert refused.status_code == 400
    document.refresh_from_db()
    assert (document.metadata, document.desired_revision) == ({"department": "hr"}, 3)


def test_a_repeat_with_other_metadata_is_another_request(
    client: Client, typed_kb: KnowledgeBase
) -> None:
    assert post(client, "u1", metadata=json.dumps({"year": 2024})).status_code == 201
    assert post(client, "u1", metadata=json.dumps({"year": 2024})).status_code == 201
    assert post(client, "u1", metadata=json.dumps({"year": 2025})).status_code == 409


def test_the_summary_counts_only_documents_the_key_may_read(
    tenant: Tenant, typed_kb: KnowledgeBase
) -> None:
    for key, groups, department, year in (
        ("a", (), "sales", 2021),
        ("b", (), "sales", 2024),
        ("pay", ("hr",), "hrsecretxq", 1999),
    ):
        document = upload(typed_kb, key, f"{key}.", groups).document
        Document.objects.filter(pk=document.pk).update(
            metadata={"department": department, "year": year}
        )
    _, outsider = api_key_create(tenant=tenant, name="outsider")
    _, insider = api_key_create(tenant=tenant, name="insider", access_groups=["hr"])

    response = api(outsider).get("/api/v1/kbs/handbook/metadata")
    assert response.status_code == 200, response.content
    body = response.json()
    fields = {f["name"]: f for f in body["fields"]}
    assert body["kb"] == "handbook" and body["documents"] == 2
    assert fields["department"]["values"] == [{"value": "sales", "documents": 2}]
    assert (fields["year"]["min"], fields["year"]["max"]) == (2021, 2024)
    assert fields["year"]["documents"] == 2 and "values" not in fields["year"]
    assert fields["content_type"]["built_in"] is True
    assert "hrsecretxq" not in response.content.decode()

    body = api(insider).get("/api/v1/kbs/handbook/metadata").json()
    assert body["documents"] == 3
    assert {f["name"]: f for f in body["fields"]}["year"]["min"] == 1999


def test_a_knowledge_base_the_key_may_not_search_is_a_404(
    tenant: Tenant, typed_kb: KnowledgeBase
) -> None:
    other_tenant = Tenant.objects.create(name="Other", slug="other")
    knowledge_base_create(tenant=other_tenant, name="Theirs", slug="theirs")
    policies = knowledge_base_create(tenant=tenant, name="Policies", slug="policies")
    _, limited = api_key_create(tenant=tenant, name="limited", knowledge_bases=[policies])

    client = api(limited)
    missing = client.get("/api/v1/kbs/nowhere/metadata")
    assert missing.status_code == 404
    for kb in ("theirs", "handbook"):
        response = client.get(f"/api/v1/kbs/{kb}/metadata")
        assert (response.status_code, response.json()["error"]) == (404, missing.json()["error"])
    assert client.get("/api/v1/kbs/policies/metadata").status_code == 200
    assert api().get("/api/v1/kbs/policies/metadata").status_code == 401
