"""`explain: true` on the search API: why each hit ranks where it does, and nothing about what
the key may not read."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from django.test import override_settings

from kb.models import Chunk, KnowledgeBase, Tenant
from retrieval.principals import api_key_create
from tests.retrieval.test_search_api import post, publish

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published(kb: KnowledgeBase) -> KnowledgeBase:
    publish(kb, "open", "The cafeteria opens at eight in the morning.")
    publish(kb, "menu", "The menu changes every week; soup is served at noon.")
    publish(kb, "secret", "The cafeteria secret recipe is salt.", groups=("finance",))
    return kb


@pytest.fixture
def key(tenant: Tenant) -> str:
    return api_key_create(tenant=tenant, name="plain")[1]


def search(key: str, **body: Any) -> dict[str, Any]:
    response = post(key, {"kb": "handbook", "query": "when does the cafeteria open", **body})
    assert response.status_code == 200, response.content
    return dict(response.json())


def test_a_hybrid_hit_says_what_each_leg_and_the_fusion_gave_it(
    published: KnowledgeBase, key: str
) -> None:
    plain = search(key)
    explained = search(key, explain=True)

    assert [h["chunk_id"] for h in explained["hits"]] == [h["chunk_id"] for h in plain["hits"]]
    assert "ranking" not in plain and all("ranking" not in h for h in plain["hits"])
    query = explained["ranking"]
    assert query["mode"] == "hybrid" and query["method"] == "learned"
    assert query["query_language"] == "other" and query["keyword_bound"] > 0
    first = explained["hits"][0]
    assert first["document_key"] == "open"
    why = first["ranking"]
    assert why["keyword"]["rank"] == 1
    assert why["keyword"]["share_of_bound"] == pytest.approx(
        why["keyword"]["score"] / query["keyword_bound"], abs=1e-5
    )
    assert why["vector"]["rank"] >= 1
    fused = why["fused"]
    parts = [c["contribution"] for c in fused["contributions"]]
    assert fused["logit"] == pytest.approx(fused["bias"] + math.fsum(parts), abs=1e-4)
    assert fused["score"] == pytest.approx(1 / (1 + math.exp(-fused["logit"])), abs=1e-5)
    assert [abs(p) for p in parts] == sorted((abs(p) for p in parts), reverse=True)
    assert {c["feature"] for c in fused["contributions"]} >= {"cos", "bm25_share", "cross"}


def test_the_convex_method_splits_a_score_between_the_legs(
    published: KnowledgeBase, key: str
) -> None:
    with override_settings(HYBRID_FUSION="convex"):
        explained = search(key, explain=True)
    assert explained["ranking"]["method"] == "convex"
    for hit in explained["hits"]:
        fused = hit["ranking"]["fused"]
        assert [c["feature"] for c in fused["contributions"]] == ["vector", "keyword"]
        assert fused["score"] == pytest.approx(hit["score"], abs=1e-5)
        assert fused["score"] == pytest.approx(
            sum(c["contribution"] for c in fused["contributions"]), abs=1e-5
        )


@pytest.mark.parametrize("mode", ["vector", "keyword"])
def test_a_single_leg_says_only_its_own_rank(published: KnowledgeBase, key: str, mode: str) -> None:
    explained = search(key, explain=True, mode=mode)
    assert explained["ranking"]["method"] is None
    for rank, hit in enumerate(explained["hits"], start=1):
        assert set(hit["ranking"]) == {mode}
        assert hit["ranking"][mode]["rank"] == rank
        assert hit["ranking"][mode]["score"] == pytest.approx(hit["score"], abs=1e-5)


def test_an_explanation_names_nothing_the_key_may_not_read(
    published: KnowledgeBase, key: str
) -> None:
    explained = search(key, explain=True, query="cafeteria secret recipe")
    secret = Chunk.objects.filter(document__key="secret").values_list("id", flat=True)
    body = json.dumps(explained)
    assert {h["document_key"] for h in explained["hits"]} <= {"open", "menu"}
    assert "secret" not in {h["document_key"] for h in explained["hits"]}
    assert not any(f'"chunk_id": {cid}' in body for cid in secret)
    assert "salt" not in body


def test_explain_must_be_a_boolean(published: KnowledgeBase, key: str) -> None:
    response = post(key, {"kb": "handbook", "query": "cafeteria", "explain": "maybe"})
    assert response.status_code == 400
    assert "explain" in response.json()["detail"]
