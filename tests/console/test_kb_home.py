"""A knowledge base's home: documents by state and chunks served agree with what search serves,
the progress JSON counts an ingest and a re-index, and the admin's front page lands a user with
one knowledge base on its summary."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ingestion.pipeline.run import task_execute
from kb import home
from kb.models import Chunk, KnowledgeBase, Tenant
from kb.services.documents import document_delete
from kb.services.index_versions import index_version_create, knowledge_base_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.console.admin_world import MARK_HR, World, build_world, staff
from tests.retrieval.factories import build, publish, upload
from work.models import IngestionTask

pytestmark = pytest.mark.django_db


def run_queued(kb: KnowledgeBase) -> None:
    for task in IngestionTask.objects.filter(kb=kb, status=IngestionTask.Status.QUEUED):
        IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
        task_execute(task_id=task.pk, worker_id="test")


def test_counts_by_state_match_what_search_serves(kb: KnowledgeBase, admin_user: User) -> None:
    publish(kb, "served", "Served text about trains.")
    publish(kb, "gone", "Deleted text about trains.")
    document_delete(document_id=kb.documents.get(key="gone").pk, actor=admin_user)
    upload(kb, "queued", "Queued text about trains.")
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    build(upload(kb, "served", "A second revision about trains."))

    counts = home.knowledge_base_counts(kb=kb)

    everyone = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    kb.refresh_from_db()
    hits = search(principal=everyone, kb=kb, query="trains", mode="keyword", top_k=50).hits
    assert counts.served == len({h.document_key for h in hits}) == 1
    assert (
        counts.chunks_served
        == Chunk.objects.filter(build_id__in={h.build_id for h in hits}).count()
    )
    assert (counts.documents, counts.awaiting_approval, counts.building, counts.deleted) == (
        2,
        1,
        1,
        1,
    )
    assert counts.not_served == 1 and counts.failed == 0


def test_the_progress_json_counts_an_ingest_and_a_re_index(
    kb: KnowledgeBase, admin_user: User
) -> None:
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/kb/knowledgebase/{kb.pk}/home/progress/"
    upload(kb, "one", "First document.")
    upload(kb, "two", "Second document.")

    ingest = client.get(url).json()["versions"]
    run_queued(kb)
    done = client.get(url).json()["versions"]
    index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=64,
        chunk_size=400,
        chunk_overlap=40,
        actor=admin_user,
    )
    reindex = client.get(url).json()["versions"]

    assert [(v["version"], v["built"], v["running"], v["in_progress"]) for v in ingest] == [
        (1, 0, 2, True)
    ]
    assert [(v["version"], v["built"], v["percent"], v["in_progress"]) for v in done] == [
        (1, 2, 100, False)
    ]
    assert [(v["version"], v["active"], v["label"]) for v in reindex] == [
        (1, True, "2/2 built"),
        (2, False, "0/2 built, 2 running"),
    ]


def test_the_front_page_lands_a_user_with_one_knowledge_base_on_its_summary(
    kb: KnowledgeBase, tenant: Tenant
) -> None:
    from django.contrib.auth.models import Group, Permission

    from kb.roles import CONTENT_MANAGERS, ensure_roles

    ensure_roles(Group, Permission)
    carol = staff("carol", CONTENT_MANAGERS, tenant)
    client = Client()
    client.force_login(carol)

    one = client.get("/admin/")
    knowledge_base_create(tenant=tenant, name="Policies", slug="policies")
    two = client.get("/admin/")

    assert one.status_code == 200 and 'id="kb-landing"' in one.content.decode()
    assert "your knowledge base" in one.content.decode()
    assert f"/admin/kb/knowledgebase/{kb.pk}/home/" in one.content.decode()
    assert "your knowledge base" not in two.content.decode()
    assert "Policies" in two.content.decode() and "Handbook" in two.content.decode()
    for page in (one, two):  # the app list stays
        assert 'class="app-kb' in page.content.decode()


@pytest.fixture
def world(db: None) -> World:
    return build_world()


def test_the_home_names_no_hr_document_to_a_user_outside_hr(world: World) -> None:
    from kb.models import Build

    hr_build = Build.objects.filter(document=world.hr_doc, state=Build.State.READY).first()
    assert hr_build is not None
    Build.objects.filter(pk=hr_build.pk).update(state=Build.State.FAILED, error=f"{MARK_HR} broke")
    kb = world.kb_b

    carol = world.client("carol").get(f"/admin/kb/knowledgebase/{kb.pk}/home/")
    harry = world.client("harry").get(f"/admin/kb/knowledgebase/{kb.pk}/home/")

    assert carol.status_code == harry.status_code == 200
    assert MARK_HR not in carol.content.decode().lower()
    assert carol.context["failed_hidden"] == 1 and carol.context["counts"].failed == 1
    assert MARK_HR in harry.content.decode().lower()


def test_the_home_takes_the_permission_to_view_knowledge_bases(world: World) -> None:
    user = staff("nobody", "Content managers", world.tenant_b)
    user.groups.clear()
    client = Client()
    client.force_login(user)

    response: Any = client.get(f"/admin/kb/knowledgebase/{world.kb_b.pk}/home/")

    assert response.status_code in (403, 404)
