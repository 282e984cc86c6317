"""Test search on a knowledge base's page: the API's search, as the user or as a key with
groups the user holds, as of a past time, and against a candidate index version beside the
active one. Never wider than the user; the candidate override is the admin's only."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from ingestion.pipeline.run import task_execute
from kb.models import Build, IndexVersion, KnowledgeBase, Tenant
from kb.services.documents import document_delete
from kb.services.index_versions import index_version_create, knowledge_base_create
from retrieval.principals import Principal, api_key_create
from retrieval.search import engine, fusion
from tests.console.admin_world import MARK_HR, World, build_world
from tests.retrieval.factories import api, publish, search, upload
from work.models import IngestionTask

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: None) -> World:
    return build_world()


def _search(client: Client, kb: KnowledgeBase, **params: Any) -> Any:
    return client.get(f"/admin/kb/knowledgebase/{kb.pk}/search/", {"mode": "keyword", **params})


def _hit_keys(response: Any, side: int = 0) -> list[str]:
    return [row["hit"].document_key for row in response.context["sides"][side].rows]


def run_queued(kb: KnowledgeBase) -> None:
    for task in IngestionTask.objects.filter(kb=kb, status=IngestionTask.Status.QUEUED):
        IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
        task_execute(task_id=task.pk, worker_id="test")


def candidate_version(kb: KnowledgeBase, actor: User | None = None) -> IndexVersion:
    """A second index version of `kb`, built for every document, not swapped in."""
    version = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=64,
        chunk_size=120,
        chunk_overlap=10,
        actor=actor,
    )
    run_queued(kb)
    return version


def test_a_hit_says_why_it_is_visible(world: World) -> None:
    response = _search(world.client("harry"), world.kb_b, query="pay bands")

    assert response.status_code == 200
    rows = response.context["sides"][0].rows
    assert [r["hit"].document_key for r in rows] == ["salaries"]
    why = rows[0]["why"]
    assert "pointer in v1 (active) names build" in why.pointer
    assert why.groups_matched == ["hr"] and "matched: hr" in why.groups
    assert "<mark>pay</mark>" in str(rows[0]["text"])
    assert f"/admin/kb/chunk/of-build/{rows[0]['hit'].build_id}/" in rows[0]["chunks_url"]


def test_a_hit_says_why_it_ranks_where_it_does(world: World) -> None:
    response = _search(world.client("harry"), world.kb_b, query="pay bands", mode="hybrid")

    assert response.status_code == 200
    ranked = response.context["sides"][0].rows[0]["ranked"]
    assert ranked.startswith("vector #1 (similarity ")
    assert "keyword #1 (BM25 " in ranked and "of the most the query's words could score" in ranked
    assert re.search(r" · fused [01]\.\d{3}: raised by [a-z]", ranked)
    assert "keyword rank 1 (+" in ranked  # a feature told as the hit's value of it
    # the model's feature names are words on the page, never its identifiers
    page = response.content.decode()
    assert "Why this rank: vector #1" in page
    assert not [name for name in fusion.FEATURES if name in page]


def test_a_user_outside_hr_never_sees_hr_text_whatever_they_ask(world: World) -> None:
    carol = world.client("carol")
    as_herself = _search(carol, world.kb_b, query="pay bands")
    # a forged request to search as a key holding a group she does not hold
    as_hr_key = _search(carol, world.kb_b, query="pay bands", as_key="on", groups="hr")
    hybrid = _search(carol, world.kb_b, query="pay bands", mode="hybrid", top_k="50")

    assert _hit_keys(as_herself) == [] and _hit_keys(hybrid) == ["vacation"]
    assert "groups" in as_hr_key.context["form"].errors and not as_hr_key.context["sides"]
    for response in (as_herself, as_hr_key, hybrid):
        assert response.status_code == 200
        assert MARK_HR not in response.content.decode().lower()
    # she is offered no group to search as
    assert list(as_herself.context["form"].fields["groups"].choices) == []


def test_as_a_key_with_groups_searches_with_exactly_those_groups(world: World) -> None:
    harry = world.client("harry")  # holds hr

    with_hr = _search(harry, world.kb_b, query="pay bands", as_key="on", groups="hr")
    without = _search(harry, world.kb_b, query="pay bands", as_key="on")

    assert _hit_keys(with_hr) == ["salaries"] and _hit_keys(without) == []
    assert MARK_HR not in without.content.decode().lower()


def test_a_superuser_may_search_as_any_group_of_the_knowledge_base(
    world: World, admin_user: User
) -> None:
    root = Client()
    root.force_login(admin_user)  # a superuser of another tenant: superusers see every tenant

    response = _search(root, world.kb_b, query="pay bands", as_key="on", groups="hr")

    assert list(response.context["form"].fields["groups"].choices) == [("hr", "hr")]
    assert _hit_keys(response) == ["salaries"]


def test_as_of_shows_what_search_returned_then(kb: KnowledgeBase, admin_user: User) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")
    before = timezone.now()
    publish(kb, "travel", "Trains are reimbursed in first class.")
    client = Client()
    client.force_login(admin_user)

    then = _search(client, kb, query="reimbursed", as_of=before.isoformat())
    now = _search(client, kb, query="reimbursed")
    too_old = _search(client, kb, query="reimbursed", as_of="2001-01-01 00:00:00")

    assert "second class" in then.context["sides"][0].rows[0]["hit"].text
    assert "At " in then.context["sides"][0].rows[0]["why"].pointer
    assert "first class" in now.context["sides"][0].rows[0]["hit"].text
    refusal = too_old.context["sides"][0].error
    assert "before the oldest history this knowledge base keeps" in refusal
    assert "“As of”" in refusal and "as_of" not in refusal
    future = _search(client, kb, query="reimbursed", as_of="2999-01-01 00:00:00")
    assert "in the future" in future.context["sides"][0].error
    assert "as_of" not in future.context["sides"][0].error


def test_compare_runs_the_query_against_a_candidate_beside_the_active_version(
    kb: KnowledgeBase, admin_user: User
) -> None:
    long = " ".join(f"Trains and buses are reimbursed, rule {i}." for i in range(12))
    publish(kb, "travel", f"# Travel\n\n{long}")
    version = candidate_version(kb, admin_user)
    client = Client()
    client.force_login(admin_user)

    response = _search(client, kb, query="reimbursed", compare=str(version.pk), top_k="20")

    active, candidate = response.context["sides"]
    assert (active.version.number, candidate.version.number) == (1, 2)
    v2_builds = set(Build.objects.filter(index_version=version).values_list("pk", flat=True))
    assert candidate.rows and {r["hit"].build_id for r in candidate.rows} <= v2_builds
    assert not {r["hit"].build_id for r in active.rows} & v2_builds
    assert len(candidate.rows) > len(active.rows)  # smaller chunks: more of them match
    # built for every document: the candidate is ready, as its row on the knowledge base says
    assert "pointer in v2 (ready) names build" in candidate.rows[0]["why"].pointer
    assert candidate.title == "Candidate (ready)"
    assert (
        "v2 (ready: 1/1 built"
        in dict(response.context["form"].fields["compare"].choices)[version.pk]
    )
    # and so does the page of a hit's chunks
    chunks_page = client.get(candidate.rows[0]["chunks_url"].split("#")[0]).content.decode()
    assert "v2 (ready: 1/1 built" in chunks_page and "building" not in chunks_page
    assert response.context["shared"] == 1
    assert response.context["comparison"].candidate.version == version
    # a comparison with as-of is refused: history is of the versions that were active
    refused = _search(client, kb, query="x", compare=str(version.pk), as_of=timezone.now())
    assert refused.context["form"].non_field_errors() and not refused.context["sides"]


def test_the_api_cannot_search_a_candidate_version(kb: KnowledgeBase, tenant: Tenant) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")
    version = candidate_version(kb)
    _, key = api_key_create(tenant=tenant, name="bot")

    response = search(
        api(key),
        {"kb": kb.slug, "query": "reimbursed", "mode": "keyword", "index_version": version.pk},
    )

    body = response.json()
    assert response.status_code in (200, 400), body
    if response.status_code == 200:
        assert body["index_version"] == 1
        v1 = set(Build.objects.filter(index_version__number=1).values_list("pk", flat=True))
        assert body["hits"] and all(hit["build_id"] in v1 for hit in body["hits"])


def test_the_override_refuses_another_knowledge_bases_version(
    kb: KnowledgeBase, tenant: Tenant
) -> None:
    other = knowledge_base_create(tenant=tenant, name="Other", slug="other")
    principal = Principal(tenant_id=tenant.pk, kb_ids=None, access_groups=frozenset())
    with pytest.raises(ValueError, match="another knowledge base"):
        engine.search(
            principal=principal,
            kb=kb,
            query="x",
            mode="keyword",
            index_version=other.active_index_version,
        )


def test_a_candidate_search_applies_the_rest_of_the_visibility_rule(
    kb: KnowledgeBase, admin_user: User
) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")
    publish(kb, "salaries", "Pay bands are reimbursed monthly.", ("hr",))
    version = candidate_version(kb)
    document_delete(document_id=kb.documents.get(key="travel").pk, actor=admin_user, reason="old")
    outside = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    inside = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset({"hr"}))

    def keys(principal: Principal) -> list[str]:
        result = engine.search(
            principal=principal, kb=kb, query="reimbursed", mode="hybrid", index_version=version
        )
        assert result.index_version == version.number
        return [h.document_key for h in result.hits]

    assert keys(outside) == []  # travel is deleted, salaries behind hr
    assert keys(inside) == ["salaries"]
    upload(kb, "later", "Reimbursed later.")  # not built into v2: nothing to serve yet
    assert keys(inside) == ["salaries"]
