"""Explain: why a chunk is, or is not, returned by search to this caller now."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from kb.models import Build, KnowledgeBase
from kb.services.documents import document_delete
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, build, publish, search, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(api_key: str) -> Client:
    return api(api_key)


def explain(client: Client, build: Build) -> dict[str, Any]:
    chunk = build.chunks.get(ordinal=0)
    response = client.get(f"/api/v1/chunks/{chunk.pk}/explain")
    assert response.status_code == 200, response.content
    return dict(response.json())


def test_a_live_chunk_is_visible_and_says_why(client: Client, kb: KnowledgeBase) -> None:
    live = publish(kb, "policy", "Refunds within thirty days.")

    facts = explain(client, live)

    assert facts["visible"] is True
    assert facts["pointer"] == {
        "build_id": live.pk,
        "revision": 1,
        "published_at": facts["pointer"]["published_at"],
        "points_at_this_build": True,
    }
    assert facts["build"]["state"] == "live"
    assert facts["build"]["complete"] is True
    assert facts["build"]["chunk_count"] == facts["build"]["expected_chunk_count"] >= 1
    assert facts["index_version"] == {"number": 1, "state": "active", "active": True}
    assert facts["access"]["allowed"] is True
    assert "names this chunk's build" in facts["reasons"][0]
    hits = search(client, {"kb": "handbook", "query": "refunds", "mode": "keyword"}).json()["hits"]
    assert facts["chunk_id"] in {h["chunk_id"] for h in hits}


def test_a_superseded_chunk_names_the_live_build_instead(client: Client, kb: KnowledgeBase) -> None:
    old = publish(kb, "policy", "Refunds within thirty days.")
    new = publish(kb, "policy", "Refunds within sixty days.")

    facts = explain(client, old)

    assert facts["visible"] is False
    assert facts["pointer"]["build_id"] == new.pk
    assert facts["pointer"]["points_at_this_build"] is False
    assert facts["build"]["state"] == "superseded"
    assert facts["build"]["is_desired_revision"] is False
    reasons = " ".join(facts["reasons"])
    assert f"names build {new.pk} (revision 2)" in reasons
    assert "revision 2 is the desired one" in reasons


def test_a_chunk_of_another_access_group_is_not_found(client: Client, kb: KnowledgeBase) -> None:
    """Item 2 of issue 14: the same 404 as for an id that does not exist; nothing of the
    document (id, groups, token count, times, build) is told."""
    secret = publish(kb, "payroll", "Salaries.", groups=("finance",))
    chunk = secret.chunks.get(ordinal=0)

    response = client.get(f"/api/v1/chunks/{chunk.pk}/explain")
    missing = client.get(f"/api/v1/chunks/{10**12}/explain")

    assert response.status_code == missing.status_code == 404
    assert response.json() == {"error": "not_found", "detail": f"Chunk {chunk.pk} not found."}
    assert response.content.replace(str(chunk.pk).encode(), b"ID") == missing.content.replace(
        str(10**12).encode(), b"ID"
    )
    _, finance = api_key_create(tenant=kb.tenant, name="finance", access_groups=["finance"])
    facts = explain(api(finance), secret)
    assert facts["visible"] is True
    assert facts["document"]["key"] == "payroll"
    assert facts["access"] == {
        "document_groups": ["finance"],
        "caller_groups": ["finance"],
        "caller_reads_all_groups": False,
        "groups_matched": ["finance"],
        "allowed": True,
    }


def test_a_readable_chunk_of_a_deleted_restricted_document_is_still_explained(
    kb: KnowledgeBase,
) -> None:
    """Explain stays useful for what the caller may read but search does not serve."""
    secret = publish(kb, "payroll", "Salaries.", groups=("finance",))
    document_delete(document_id=secret.document_id)
    _, finance = api_key_create(tenant=kb.tenant, name="finance", access_groups=["finance"])
    _, plain = api_key_create(tenant=kb.tenant, name="plain")

    facts = explain(api(finance), secret)

    assert facts["visible"] is False
    assert facts["document"]["deleted"] is True
    chunk = secret.chunks.get(ordinal=0)
    assert api(plain).get(f"/api/v1/chunks/{chunk.pk}/explain").status_code == 404


def test_a_deleted_documents_chunk_says_so(client: Client, kb: KnowledgeBase) -> None:
    live = publish(kb, "policy", "Refunds within thirty days.")
    document_delete(document_id=live.document_id)

    facts = explain(client, live)

    assert facts["visible"] is False
    assert facts["document"]["deleted"] is True
    assert "deleted" in " ".join(facts["reasons"])
    assert facts["pointer"]["points_at_this_build"] is True, "the pointer stays for restore"


def test_a_build_awaiting_approval_is_not_visible_yet(client: Client, kb: KnowledgeBase) -> None:
    strict = knowledge_base_create(
        tenant=kb.tenant, name="Strict", slug="strict", require_approval=True
    )
    ready = build(upload(strict, "policy", "Refunds within thirty days."))

    facts = explain(client, ready)

    assert facts["visible"] is False
    assert facts["approval"] == {
        "kb_requires_approval": True,
        "awaiting_approval": True,
        "approved_at": None,
    }
    assert facts["pointer"]["build_id"] is None
    assert "waiting for approval" in " ".join(facts["reasons"])


def test_an_incomplete_build_lists_its_problems(client: Client, kb: KnowledgeBase) -> None:
    live = publish(kb, "policy", "Refunds within thirty days.")
    Build.objects.filter(pk=live.pk).update(expected_chunk_count=live.chunks.count() + 1)

    facts = explain(client, live)

    assert facts["build"]["complete"] is False
    assert any("chunks are written" in problem for problem in facts["build"]["problems"])
    assert "visibility rule is violated" in facts["reasons"][-1]
