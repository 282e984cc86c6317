"""Tenant isolation on every endpoint: another tenant's knowledge base, document or chunk is
answered exactly like one that does not exist, and nothing of it leaks through bodies or counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import Chunk, Document, KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, publish, search

pytestmark = pytest.mark.django_db

MISSING = 10**12


@dataclass
class Theirs:
    kb: KnowledgeBase
    document: Document
    chunk: Chunk


@pytest.fixture
def theirs() -> Theirs:
    """Another tenant with a knowledge base of the same slug and a live secret document."""
    tenant = Tenant.objects.create(name="Rival", slug="rival")
    kb = knowledge_base_create(tenant=tenant, name="Handbook", slug="handbook")
    build = publish(kb, "merger", "The confidential merger plan with Initech.")
    return Theirs(kb=kb, document=build.document, chunk=build.chunks.get(ordinal=0))


@pytest.fixture
def mine(kb: KnowledgeBase) -> KnowledgeBase:
    publish(kb, "lunch", "Lunch is served at noon in the merger room.")
    return kb


@pytest.fixture
def client(mine: KnowledgeBase) -> Client:
    _, plaintext = api_key_create(tenant=mine.tenant, name="mine")
    return api(plaintext)


def same_as_missing(theirs_response: Any, missing_response: Any, *ids: int) -> None:
    """Same status, and the same body once the asked-for id is taken out."""
    a, b = theirs_response, missing_response
    assert a.status_code == b.status_code == 404
    body_a = a.content.decode()
    body_b = b.content.decode()
    for value in ids:
        body_a = body_a.replace(str(value), "ID")
    assert body_a == body_b.replace(str(MISSING), "ID")


def test_search_by_slug_sees_only_the_own_tenants_knowledge_base(
    client: Client, theirs: Theirs
) -> None:
    response = search(client, {"kb": "handbook", "query": "merger", "mode": "keyword"})

    assert response.status_code == 200
    assert [h["document_key"] for h in response.json()["hits"]] == ["lunch"]
    assert "Initech" not in response.content.decode()


def test_search_in_another_tenants_knowledge_base_by_id_is_not_found(
    client: Client, theirs: Theirs
) -> None:
    same_as_missing(
        search(client, {"kb": str(theirs.kb.pk), "query": "merger"}),
        search(client, {"kb": str(MISSING), "query": "merger"}),
        theirs.kb.pk,
    )


def test_the_knowledge_base_list_holds_only_the_own_tenant(
    client: Client, mine: KnowledgeBase, theirs: Theirs
) -> None:
    response = client.get("/api/v1/kbs/")

    assert [kb["id"] for kb in response.json()["results"]] == [mine.pk]


def test_another_tenants_documents_are_not_listed(client: Client, theirs: Theirs) -> None:
    same_as_missing(
        client.get(f"/api/v1/kbs/{theirs.kb.pk}/documents/"),
        client.get(f"/api/v1/kbs/{MISSING}/documents/"),
        theirs.kb.pk,
    )
    own = client.get("/api/v1/kbs/handbook/documents/").json()
    assert [d["key"] for d in own["results"]] == ["lunch"]


def test_another_tenants_document_is_not_found(client: Client, theirs: Theirs) -> None:
    same_as_missing(
        client.get(f"/api/v1/documents/{theirs.document.pk}"),
        client.get(f"/api/v1/documents/{MISSING}"),
        theirs.document.pk,
    )


def test_another_tenants_document_cannot_be_deleted(client: Client, theirs: Theirs) -> None:
    same_as_missing(
        client.delete(f"/api/v1/documents/{theirs.document.pk}"),
        client.delete(f"/api/v1/documents/{MISSING}"),
        theirs.document.pk,
    )
    theirs.document.refresh_from_db()
    assert theirs.document.deleted_at is None


def test_another_tenants_chunk_cannot_be_explained(client: Client, theirs: Theirs) -> None:
    same_as_missing(
        client.get(f"/api/v1/chunks/{theirs.chunk.pk}/explain"),
        client.get(f"/api/v1/chunks/{MISSING}/explain"),
        theirs.chunk.pk,
    )


def test_nothing_can_be_uploaded_into_another_tenants_knowledge_base(
    client: Client, theirs: Theirs
) -> None:
    def upload(kb_ref: object) -> Any:
        return client.post(
            f"/api/v1/kbs/{kb_ref}/documents/",
            {"key": "plant", "file": SimpleUploadedFile("plant.txt", b"planted text")},
            headers={"Idempotency-Key": f"plant-{kb_ref}"},
        )

    same_as_missing(upload(theirs.kb.pk), upload(MISSING), theirs.kb.pk)
    assert not Document.objects.filter(key="plant").exists()


def test_a_key_scoped_to_one_knowledge_base_sees_no_other_of_its_tenant(
    mine: KnowledgeBase,
) -> None:
    manual = knowledge_base_create(tenant=mine.tenant, name="Manual", slug="manual")
    build = publish(manual, "valves", "Valve maintenance schedule.")
    _, plaintext = api_key_create(tenant=mine.tenant, name="scoped", knowledge_bases=[mine])
    client = api(plaintext)

    assert search(client, {"kb": "manual", "query": "valve"}).status_code == 404
    assert client.get("/api/v1/kbs/manual/documents/").status_code == 404
    assert client.get(f"/api/v1/documents/{build.document_id}").status_code == 404
    chunk = build.chunks.get(ordinal=0)
    assert client.get(f"/api/v1/chunks/{chunk.pk}/explain").status_code == 404
    assert [kb["slug"] for kb in client.get("/api/v1/kbs/").json()["results"]] == ["handbook"]


def test_an_unknown_knowledge_base_is_a_clear_404(client: Client) -> None:
    response = search(client, {"kb": "no-such-kb", "query": "x"})

    assert response.status_code == 404
    assert response.json() == {
        "error": "not_found",
        "detail": "Knowledge base 'no-such-kb' not found.",
    }
