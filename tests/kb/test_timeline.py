"""The knowledge base's timeline (kb.timeline): every admin action on the knowledge base, newest
first, in pages of two queries; re-index work and the reconciler's records stay out; entries
about documents the reader may not read name nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ingestion.pipeline.run import task_execute
from kb.access import Reader
from kb.models import Document, IndexVersion, KnowledgeBase
from kb.services.documents import document_delete, document_restore
from kb.services.index_versions import (
    index_version_activate,
    index_version_create,
    index_version_rollback,
    knowledge_base_create,
)
from kb.services.publication import build_approve, document_rollback
from kb.timeline import kb_timeline
from tests.console.admin_world import MARK_HR, World, build_world
from tests.retrieval.factories import build, publish, upload
from work.models import AuditEvent, IngestionTask

pytestmark = pytest.mark.django_db

EVERYONE = Reader(tenant_id=0, access_groups=frozenset(), all_groups=True)


def run_queued(kb: KnowledgeBase) -> None:
    """Run every queued build task of `kb` in this process, as a worker would."""
    for task in IngestionTask.objects.filter(kb=kb, status=IngestionTask.Status.QUEUED):
        IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
        task_execute(task_id=task.pk, worker_id="test")


def everything(kb: KnowledgeBase, reader: Reader = EVERYONE) -> list[Any]:
    return kb_timeline(kb=kb, reader=reader, limit=200).entries


def test_the_timeline_lists_uploads_pointer_changes_versions_and_settings_newest_first(
    kb: KnowledgeBase, admin_user: User
) -> None:
    # given a document uploaded and published, then a revision that needed approval
    publish(kb, "travel", "# Travel\n\nTrains are reimbursed in second class.")
    KnowledgeBase.objects.filter(pk=kb.pk).update(require_approval=True)
    second = build(upload(kb, "travel", "# Travel\n\nTrains are reimbursed in first class."))
    build_approve(build_id=second.pk, actor=admin_user, reason="policy update")
    document = Document.objects.get(key="travel")
    first = document.builds.get(revision__number=1)
    document_rollback(
        document_id=document.pk, build_id=first.pk, actor=admin_user, reason="finance objected"
    )
    document_delete(document_id=document.pk, actor=admin_user, reason="obsolete")
    document_restore(document_id=document.pk, actor=admin_user, reason="still needed")
    # and a new index version, built (its publishes are re-index work), swapped and rolled back
    version = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=64,
        chunk_size=400,
        chunk_overlap=40,
        actor=admin_user,
    )
    run_queued(kb)
    index_version_activate(version_id=version.pk, actor=admin_user, reason="smaller")
    index_version_rollback(kb_id=kb.pk, actor=admin_user, reason="recall dropped")
    # and the reconciler's records, which are not admin actions
    AuditEvent.objects.create(kind="anomaly:orphan_chunks", kb=kb, subject_type="build")
    AuditEvent.objects.create(kind="lease_expired", kb=kb, subject_type="task")
    # and a settings change through the admin
    client = Client()
    client.force_login(admin_user)
    response = client.post(
        f"/admin/kb/knowledgebase/{kb.pk}/change/",
        {"name": "Handbook", "description": "", "require_approval": "on", "retention_days": "14"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]

    # when the timeline is read
    entries = everything(kb)

    # then every action is there, newest first, with who and why
    kinds = [e.kind for e in entries]
    assert kinds == [
        "settings_changed",
        "index_version_rollback",
        "index_version_swap",
        "index_version_created",
        "restore",
        "delete",
        "rollback",
        "approve",
        "revision",
        "publish",
        "upload",
    ]
    by_kind = {e.kind: e for e in entries}
    assert by_kind["settings_changed"].detail == "Changed retention days: 30 → 14."
    assert by_kind["settings_changed"].actor == "root"
    assert (by_kind["approve"].actor, by_kind["approve"].reason) == ("root", "policy update")
    assert by_kind["approve"].revision == 2 and by_kind["approve"].document_key == "travel"
    assert by_kind["rollback"].reason == "finance objected"
    assert by_kind["publish"].actor is None and by_kind["publish"].by_pipeline
    assert by_kind["upload"].detail == "travel.txt" and by_kind["revision"].revision == 2
    swap = by_kind["index_version_swap"]
    assert (swap.version, swap.previous_version, swap.reason) == (2, 1, "smaller")
    back = by_kind["index_version_rollback"]
    assert (back.version, back.previous_version, back.reason) == (1, 2, "recall dropped")
    assert by_kind["index_version_created"].actor == "root"
    assert "canon-hash-small" in by_kind["index_version_created"].detail
    assert [e.at for e in entries] == sorted((e.at for e in entries), reverse=True)


def test_a_pointer_change_is_listed_in_the_version_that_was_active_then(
    kb: KnowledgeBase, admin_user: User
) -> None:
    # given a document published in v1, and v2 built (publishing it there) and swapped in
    publish(kb, "travel", "Trains are reimbursed.")
    version = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=64,
        chunk_size=400,
        chunk_overlap=40,
        actor=admin_user,
    )
    run_queued(kb)
    index_version_activate(version_id=version.pk, actor=admin_user, reason="swap")
    # when a revision is published after the swap (into v2, active, and v1, retained)
    upload(kb, "travel", "Trains are reimbursed in first class.")
    run_queued(kb)

    publishes = [e for e in everything(kb) if e.kind == "publish"]

    # then v1's first publish and v2's later one are listed; v2's re-index and v1's retained
    # copy are not
    assert [(e.revision, e.version) for e in publishes] == [(2, 2), (1, 1)]


def test_pages_follow_each_other_without_gaps_or_repeats(kb: KnowledgeBase) -> None:
    for i in range(7):
        publish(kb, f"doc-{i}", f"Document number {i}.")
    whole = everything(kb)
    assert len(whole) == 14  # an upload and a publish each

    seen, before = [], None
    while True:
        page = kb_timeline(kb=kb, reader=EVERYONE, before=before, limit=4)
        seen += page.entries
        if page.older is None:
            break
        before = page.older
    assert [e.cursor for e in seen] == [e.cursor for e in whole]
    # a cursor that was not made by the timeline is the first page
    assert kb_timeline(kb=kb, reader=EVERYONE, before="nonsense", limit=4).entries == whole[:4]


@pytest.mark.parametrize("size", [5, 40])
def test_a_page_is_two_queries_whatever_its_size(
    kb: KnowledgeBase, admin_user: User, size: int, django_assert_num_queries: Any
) -> None:
    for i in range(size):
        publish(kb, f"doc-{i}", f"Document number {i}.")
    document = Document.objects.get(key="doc-0")
    document_delete(document_id=document.pk, actor=admin_user, reason="gone")
    kb.refresh_from_db()

    with django_assert_num_queries(2):
        page = kb_timeline(kb=kb, reader=EVERYONE, limit=size)
    assert len(page.entries) == size and page.older is not None
    with django_assert_num_queries(2):
        older = kb_timeline(kb=kb, reader=EVERYONE, before=page.older, limit=size)
    assert older.entries and older.entries[0].at <= page.entries[-1].at


@pytest.fixture
def world(db: None) -> World:
    return build_world()


def test_entries_about_a_document_the_reader_may_not_read_name_nothing(world: World) -> None:
    kb = world.kb_b
    document_delete(document_id=world.hr_doc.pk, reason=f"{MARK_HR} reorganisation")
    outside = Reader(tenant_id=world.tenant_b.pk, access_groups=frozenset(), all_groups=False)
    inside = Reader(tenant_id=world.tenant_b.pk, access_groups=frozenset({"hr"}), all_groups=False)

    hidden = [e for e in everything(kb, outside) if e.hidden]
    shown = [e for e in everything(kb, inside) if e.document_key == "salaries"]

    # the reader outside hr sees that things happened, and nothing about what
    assert {e.kind for e in hidden} == {"upload", "revision", "publish", "delete"}
    for entry in hidden:
        assert entry.document_id is None and entry.document_key == "" and entry.reason == ""
        assert entry.actor is None and entry.detail == "" and entry.revision is None
    assert len(shown) == len(hidden)
    assert any(MARK_HR in e.reason for e in shown)


def test_the_timeline_pages_show_no_hr_content_to_a_user_outside_hr(world: World) -> None:
    document_delete(document_id=world.hr_doc.pk, reason=f"{MARK_HR} reorganisation")
    kb = world.kb_b
    for path in (
        f"/admin/kb/knowledgebase/{kb.pk}/home/",
        f"/admin/kb/knowledgebase/{kb.pk}/timeline/",
    ):
        carol = world.client("carol").get(path)
        harry = world.client("harry").get(path)
        assert carol.status_code == harry.status_code == 200
        assert MARK_HR not in carol.content.decode().lower()
        assert "a document you cannot read" in carol.content.decode()
        assert MARK_HR in harry.content.decode().lower()


def test_only_versions_of_this_knowledge_base_count(kb: KnowledgeBase, tenant: Any) -> None:
    other = knowledge_base_create(tenant=tenant, name="Other", slug="other")
    publish(other, "elsewhere", "Not in the handbook.")
    assert everything(kb) == []
    assert IndexVersion.objects.filter(kb=other).count() == 1
