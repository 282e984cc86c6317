"""Issue 25, item 3: one search over several knowledge bases — each through its own active
index version, every hit naming its knowledge base, merged by score where the scores share a
scale (keyword search weighing terms by all the versions' statistics together) and by rank
where they do not; a key sees only the knowledge bases it may search."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from kb.models import KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from kb.services.metadata import metadata_field_save
from retrieval.principals import api_key_create
from retrieval.search.several import merged_lists
from tests.retrieval.factories import api, hit, publish, search

pytestmark = pytest.mark.django_db


@pytest.fixture
def wiki(tenant: Tenant) -> KnowledgeBase:
    return knowledge_base_create(tenant=tenant, name="Wiki", slug="wiki")


@pytest.fixture
def both(kb: KnowledgeBase, wiki: KnowledgeBase) -> tuple[KnowledgeBase, KnowledgeBase]:
    publish(kb, "leave", "Annual leave: every employee has 25 vacation days a year.")
    publish(kb, "holidays", "Public holidays are not counted as vacation days.")
    publish(kb, "salaries", "Salary bands for vacation planning.", groups=("hr",))
    publish(wiki, "vpn", "The VPN client asks for a token; vacation days do not matter.")
    publish(wiki, "printer", "The third floor printer jams on thick paper.")
    return kb, wiki


def ask(client: Client, kbs: Any, mode: str = "hybrid", **extra: Any) -> Any:
    body = {"kb": kbs, "query": "vacation days", "mode": mode, "top_k": 10, **extra}
    return search(client, body)


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_hits_come_from_every_knowledge_base_and_name_it(
    both: tuple[KnowledgeBase, KnowledgeBase], api_key: str, mode: str
) -> None:
    response = ask(api(api_key), ["handbook", "wiki"], mode)
    assert response.status_code == 200, response.json()
    body = response.json()
    found = {(hit["kb"], hit["document_key"]) for hit in body["hits"]}
    assert ("handbook", "leave") in found and ("wiki", "vpn") in found
    assert ("handbook", "salaries") not in found  # the key lacks the hr group
    assert body["knowledge_bases"] == {"handbook": 1, "wiki": 1}
    assert body["merged_by"] == "score"
    scores = [hit["score"] for hit in body["hits"]]
    assert scores == sorted(scores, reverse=True)


def test_one_knowledge_base_answers_as_before(
    both: tuple[KnowledgeBase, KnowledgeBase], api_key: str
) -> None:
    body = ask(api(api_key), "wiki").json()
    assert body["kb"] == "wiki" and body["knowledge_bases"] is None
    assert {hit["kb"] for hit in body["hits"]} == {"wiki"}


def test_vector_search_over_different_embedding_models_merges_by_rank(
    tenant: Tenant, api_key: str
) -> None:
    a = knowledge_base_create(tenant=tenant, name="A", slug="a", dimensions=64)
    b = knowledge_base_create(tenant=tenant, name="B", slug="b", dimensions=32)
    publish(a, "one", "Vacation days are counted in hours.")
    publish(a, "two", "Vacation days roll over once.")
    publish(b, "three", "Vacation days need a manager's approval.")
    body = ask(api(api_key), ["a", "b"], "vector").json()
    assert body["merged_by"] == "rank"
    # reciprocal rank: each knowledge base's first hit before either's second
    assert [hit["kb"] for hit in body["hits"][:2]] in (["a", "b"], ["b", "a"])
    assert body["hits"][0]["score"] == pytest.approx(1 / 61, abs=1e-6)
    # hybrid search merges by the learned fusion's probability, whatever the models
    hybrid = ask(api(api_key), ["a", "b"], "hybrid").json()
    assert hybrid["merged_by"] == "score"
    assert all(0 < hit["score"] < 1 for hit in hybrid["hits"])


def test_hybrid_search_with_a_fixed_weight_fusion_merges_by_rank(
    both: tuple[KnowledgeBase, KnowledgeBase], api_key: str, settings: Any
) -> None:
    settings.HYBRID_FUSION = "convex"  # scores relative to each knowledge base's best
    body = ask(api(api_key), ["handbook", "wiki"], "hybrid").json()
    assert body["merged_by"] == "rank"


def test_keyword_scores_are_those_of_one_index_holding_both(tenant: Tenant, api_key: str) -> None:
    """BM25 over several knowledge bases weighs the terms by their statistics together, so
    each hit scores as it would in one knowledge base holding every document."""
    docs = {
        "a": {
            "leave": "Annual leave: every employee has 25 vacation days a year.",
            "sick": "Sick leave needs a note from the third day.",
            "canteen": "The canteen serves vegetarian dishes every day.",
        },
        "b": {
            "vpn": "The VPN client asks for a token every day.",
            "parental": "Parental leave lasts up to three years; leave days are unpaid.",
        },
    }
    union = knowledge_base_create(tenant=tenant, name="All", slug="all")
    for slug, texts in docs.items():
        kb = knowledge_base_create(tenant=tenant, name=slug.upper(), slug=slug)
        for key, text in texts.items():
            publish(kb, key, text)
            publish(union, key, text)
    for query in ("leave days", "every day", "vacation token"):
        several = search(
            api(api_key), {"kb": ["a", "b"], "query": query, "mode": "keyword", "top_k": 10}
        ).json()
        one = search(
            api(api_key), {"kb": "all", "query": query, "mode": "keyword", "top_k": 10}
        ).json()
        assert several["merged_by"] == "score"
        assert len(several["hits"]) >= 2, query
        assert scored(several) == scored(one), query
        assert {h["kb"] for h in several["hits"]} <= {"a", "b"}


def scored(body: dict[str, Any]) -> list[tuple[float, str]]:
    """(score, document key) of the hits, best first, ties by key (chunk ids differ)."""
    return sorted((-h["score"], h["document_key"]) for h in body["hits"])


def test_merging_by_rank_interleaves_and_by_score_sorts() -> None:
    per_kb = [(None, [hit(1, 0.9), hit(2, 0.8)]), (None, [hit(3, 0.5), hit(4, 0.4)])]
    by_score = merged_lists(per_kb, how="score")  # type: ignore[arg-type]
    assert [h.chunk_id for h in by_score] == [1, 2, 3, 4]
    by_rank = merged_lists(per_kb, how="rank")  # type: ignore[arg-type]
    assert [h.chunk_id for h in by_rank] == [1, 3, 2, 4]
    assert [h.score for h in by_rank] == [round(1 / 61, 6)] * 2 + [round(1 / 62, 6)] * 2


def test_a_knowledge_base_the_key_may_not_search_is_the_same_404(
    both: tuple[KnowledgeBase, KnowledgeBase], kb: KnowledgeBase
) -> None:
    other = Tenant.objects.create(name="Other", slug="other")
    knowledge_base_create(tenant=other, name="Secret", slug="secret")
    _, only_handbook = api_key_create(tenant=kb.tenant, name="narrow", knowledge_bases=[kb])
    narrow = api(only_handbook)
    assert ask(narrow, ["handbook"]).status_code == 200
    for refs in (["handbook", "wiki"], ["handbook", "secret"], ["handbook", "nowhere"]):
        response = ask(narrow, refs)
        assert response.status_code == 404, refs
    messages = {ask(narrow, ["handbook", ref]).json()["detail"] for ref in ("wiki", "nowhere")}
    assert len(messages) == 2 and all("not found" in m for m in messages)


def test_filters_apply_in_each_knowledge_base(
    both: tuple[KnowledgeBase, KnowledgeBase], api_key: str
) -> None:
    where = {"field": "key", "op": "in", "value": ["leave", "printer"]}
    body = ask(api(api_key), ["handbook", "wiki"], "keyword", filter=where).json()
    assert {hit["document_key"] for hit in body["hits"]} == {"leave"}

    kb, _ = both
    metadata_field_save(kb=kb, name="department", type="string")
    response = ask(
        api(api_key),
        ["handbook", "wiki"],
        filter={"field": "department", "op": "eq", "value": "hr"},
    )
    assert response.status_code == 400
    assert "Unknown field" in response.json()["detail"]["filter"][0]


def test_as_of_and_explain_read_one_knowledge_base(
    both: tuple[KnowledgeBase, KnowledgeBase], api_key: str
) -> None:
    response = ask(api(api_key), ["handbook", "wiki"], explain=True)
    assert response.status_code == 400 and "explain" in response.json()["detail"]


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_a_score_threshold_keeps_hits_at_or_above_it(
    both: tuple[KnowledgeBase, KnowledgeBase], api_key: str, mode: str
) -> None:
    """Issue 25, item 4: on one knowledge base and on several (each on its own scale)."""
    client = api(api_key)
    for kbs in ("handbook", ["handbook", "wiki"]):
        everything = ask(client, kbs, mode).json()["hits"]
        assert len(everything) >= 2, (kbs, mode)
        if isinstance(kbs, str):
            cut = everything[1]["score"]  # the second hit's score: the first two stay
            kept = ask(client, kbs, mode, score_threshold=cut).json()["hits"]
            assert [h["chunk_id"] for h in kept] == [
                h["chunk_id"] for h in everything if h["score"] >= cut
            ]
            assert len(kept) >= 2
        none = ask(client, kbs, mode, score_threshold=10_000).json()["hits"]
        assert none == []
    assert ask(client, "handbook", mode, score_threshold="high").status_code == 400
