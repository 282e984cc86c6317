"""Approve, rollback, index-version swaps, retention GC and the admin's role checks."""

from __future__ import annotations

import threading
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from kb.models import (
    PIPELINE_VERSION,
    Build,
    Chunk,
    Document,
    IndexVersion,
    KnowledgeBase,
    LexicalStat,
    Posting,
    Publication,
    Tenant,
    TenantMembership,
)
from kb.roles import ensure_roles
from kb.services import documents as document_services
from kb.services.base import ActionRefused
from kb.services.documents import document_delete, document_purge, document_restore
from kb.services.index_versions import (
    index_version_activate,
    index_version_create,
    index_version_rollback,
)
from kb.services.publication import build_approve, document_rollback
from kb.services.retention import _build_give_up, retention_collect
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.helpers import run_pending, upload_text
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)


def publish(kb: KnowledgeBase, key: str, text: str) -> Build:
    """Upload and run every task this upload created (one per live index version)."""
    revision = upload_text(kb, key, text)
    run_pending()
    return Build.objects.get(revision=revision, index_version=kb.active_index_version_id)


def live_revision(document: Document) -> int | None:
    kb = KnowledgeBase.objects.get(pk=document.kb_id)
    pub = (
        Publication.objects.filter(document=document, index_version_id=kb.active_index_version_id)
        .select_related("build__revision")
        .first()
    )
    return pub.build.revision.number if pub else None


def race(**calls: Any) -> dict[str, str]:
    """Run the calls in threads released together; report "won" or "refused: <message>"."""
    outcomes: dict[str, str] = {}
    barrier = threading.Barrier(len(calls))

    def act(name: str, call: Any) -> None:
        barrier.wait()
        try:
            call()
            outcomes[name] = "won"
        except ActionRefused as exc:
            outcomes[name] = f"refused: {exc}"
        finally:
            connection.close()

    threads = [threading.Thread(target=act, args=item) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


@pytest.fixture
def approval_kb(kb: KnowledgeBase) -> KnowledgeBase:
    kb.require_approval = True
    kb.save()
    return kb


def test_approve_then_rollback_with_history(approval_kb: KnowledgeBase, admin_user: User) -> None:
    r1 = publish(approval_kb, "doc", "First text about owls.")
    build_approve(build_id=r1.pk, actor=admin_user, reason="first")
    r2 = publish(approval_kb, "doc", "Second text about owls and bats.")
    document = Document.objects.get(key="doc")
    assert live_revision(document) == 1  # r2 waits for approval
    build_approve(
        build_id=r2.pk, actor=admin_user, reason="looks right", expected_live_build_id=r1.pk
    )
    assert live_revision(document) == 2

    document_rollback(
        document_id=document.pk,
        build_id=r1.pk,
        actor=admin_user,
        reason="bats are wrong",
        expected_live_build_id=r2.pk,
    )

    document.refresh_from_db()
    assert live_revision(document) == 1 and document.desired_revision == 1
    events = list(document.events.order_by("id").values_list("action", "reason", "actor"))
    assert events == [
        ("approve", "first", admin_user.pk),
        ("approve", "looks right", admin_user.pk),
        ("rollback", "bats are wrong", admin_user.pk),
    ]
    call_command("kb_verify")


def test_a_stale_confirmation_page_is_refused(approval_kb: KnowledgeBase) -> None:
    r1 = publish(approval_kb, "doc", "One.")
    build_approve(build_id=r1.pk, actor=None)
    r2 = publish(approval_kb, "doc", "Two.")
    with pytest.raises(ActionRefused, match="changed since you opened"):
        build_approve(build_id=r2.pk, actor=None, expected_live_build_id=r2.pk + 999)
    assert live_revision(Document.objects.get()) == 1


def test_concurrent_approve_and_rollback_have_one_winner(approval_kb: KnowledgeBase) -> None:
    for round_number in range(3):
        key = f"doc{round_number}"
        r1 = publish(approval_kb, key, f"{key} one.")
        build_approve(build_id=r1.pk, actor=None)
        r2 = publish(approval_kb, key, f"{key} two.")
        build_approve(build_id=r2.pk, actor=None)
        r3 = publish(approval_kb, key, f"{key} three.")
        document = Document.objects.get(key=key)
        outcomes = race(
            approve=partial(
                build_approve, build_id=r3.pk, actor=None, expected_live_build_id=r2.pk
            ),
            rollback=partial(
                document_rollback,
                document_id=document.pk,
                build_id=r1.pk,
                actor=None,
                expected_live_build_id=r2.pk,
            ),
        )
        assert sorted(o.split(":")[0] for o in outcomes.values()) == ["refused", "won"], outcomes
        winner = next(name for name, o in outcomes.items() if o == "won")
        assert live_revision(document) == (3 if winner == "approve" else 1)
    call_command("kb_verify")


def test_index_version_swap_coverage_and_rollback(kb: KnowledgeBase, admin_user: User) -> None:
    publish(kb, "a", "Alpha text about rivers.")
    publish(kb, "b", "Beta text about mountains.")
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-v2",
        dimensions=128,
        chunk_size=400,
        chunk_overlap=50,
        actor=admin_user,
    )
    # not built yet: the swap is refused with the list of what is missing
    with pytest.raises(ActionRefused, match="a: no live build yet"):
        index_version_activate(version_id=v2.pk, actor=admin_user)

    run_pending()
    index_version_activate(version_id=v2.pk, actor=admin_user, expected_active_id=v1.pk)
    kb.refresh_from_db()
    assert kb.active_index_version_id == v2.pk
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    result = search(principal=principal, kb=kb, query="rivers")
    assert result.index_version == 2 and result.hits[0].document_key == "a"

    # an upload after the swap is built into the retained v1 too, so rollback is not stale
    publish(kb, "a", "Alpha text rewritten about lakes.")
    index_version_rollback(kb_id=kb.pk, actor=admin_user)
    kb.refresh_from_db()
    assert kb.active_index_version_id == v1.pk
    hits = search(principal=principal, kb=kb, query="lakes").hits
    assert hits and hits[0].revision == 2 and "lakes" in hits[0].text
    call_command("kb_verify")


def test_concurrent_swaps_have_one_winner(kb: KnowledgeBase) -> None:
    publish(kb, "a", "Some text.")
    v1 = kb.active_index_version
    assert v1 is not None
    candidates = [
        index_version_create(
            kb_id=kb.pk,
            provider="hash",
            model=f"m{i}",
            dimensions=64,
            chunk_size=400,
            chunk_overlap=0,
        )
        for i in range(2)
    ]
    run_pending()
    outcomes = race(
        **{
            f"swap{v.number}": (
                lambda v=v: index_version_activate(
                    version_id=v.pk, actor=None, expected_active_id=v1.pk
                )
            )
            for v in candidates
        }
    )
    assert sorted(o.split(":")[0] for o in outcomes.values()) == ["refused", "won"], outcomes
    assert IndexVersion.objects.filter(kb=kb, state="active").count() == 1
    call_command("kb_verify")


def test_gc_collects_only_unreferenced_builds_past_retention(kb: KnowledgeBase) -> None:
    old = publish(kb, "doc", "Old text. " * 50)
    live = publish(kb, "doc", "New text. " * 50)
    kb.require_approval = True
    kb.save()
    pending = publish(kb, "doc", "Waiting text. " * 50)  # ready, awaiting approval
    long_ago = timezone.now() - timedelta(days=kb.retention_days + 1)
    Build.objects.filter(pk__in=[old.pk, live.pk, pending.pk]).update(updated_at=long_ago)

    assert retention_collect() > 0

    old.refresh_from_db()
    assert old.collected_at is not None and not Chunk.objects.filter(build=old).exists()
    # its keyword postings and its share of the BM25 statistics went with it
    assert not LexicalStat.objects.filter(build=old).exists()
    assert Posting.objects.filter(index_version=old.index_version).exists()
    assert not Posting.objects.exclude(chunk__build__in=[live, pending]).exists()
    for kept in (live, pending):
        kept.refresh_from_db()
        assert kept.collected_at is None
        assert Chunk.objects.filter(build=kept).count() == kept.expected_chunk_count
    assert retention_collect() == 0
    with pytest.raises(ActionRefused, match="garbage-collected"):
        document_rollback(document_id=old.document_id, build_id=old.pk, actor=None)
    call_command("kb_verify")


def test_retention_rechecks_under_the_build_lock_and_spares_a_build_rolled_back_to(
    kb: KnowledgeBase,
) -> None:
    old = publish(kb, "doc", "Old text. " * 50)
    publish(kb, "doc", "New text. " * 50)
    long_ago = timezone.now() - timedelta(days=kb.retention_days + 1)
    Build.objects.filter(pk=old.pk).update(updated_at=long_ago)
    # what retention read as eligible just before a rollback made the old build live again
    eligible = Build.objects.filter(collected_at__isnull=True, updated_at__lt=timezone.now())
    eligible = eligible.exclude(pk__in=Publication.objects.values("build_id"))
    assert old.pk in set(eligible.values_list("pk", flat=True))
    document_rollback(document_id=old.document_id, build_id=old.pk, actor=None)

    _build_give_up(old.pk, eligible, timezone.now())

    old.refresh_from_db()
    assert old.state == Build.State.LIVE and old.collected_at is None
    assert Chunk.objects.filter(build=old).count() == old.expected_chunk_count
    call_command("kb_verify")


def test_a_purge_gives_up_every_build_in_batches_and_restore_is_refused(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from work.leases import task_claim

    build = publish(kb, "doc", "Text to purge. " * 300)
    document_delete(document_id=build.document_id, actor=None)
    task = IngestionTask.objects.get(kind=IngestionTask.Kind.DELETE)
    IngestionTask.objects.filter(pk=task.pk).update(available_at=timezone.now())
    lease = task_claim(task_id=task.pk, owner="purger")
    assert lease is not None
    monkeypatch.setattr(document_services, "PURGE_BATCH", 2)

    assert document_purge(document_id=build.document_id, lease=lease) > 2

    build.refresh_from_db()
    assert build.collected_at is not None and build.verified_at is None
    assert not Chunk.objects.filter(document_id=build.document_id).exists()
    assert not Posting.objects.exists() and not LexicalStat.objects.exists()
    with pytest.raises(ActionRefused, match="purged"):
        document_restore(document_id=build.document_id)


def role_user(name: str, group: str, tenant: Tenant) -> Client:
    ensure_roles(Group, Permission)  # the test database is flushed between tests
    user = User.objects.create_user(name, password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    TenantMembership.objects.create(user=user, tenant=tenant)
    client = Client()
    client.force_login(user)
    return client


def test_admin_actions_check_roles_and_tenants(approval_kb: KnowledgeBase) -> None:
    r1 = publish(approval_kb, "doc", "Text.")
    document = Document.objects.get()
    content = role_user("carol", "Content managers", approval_kb.tenant)
    index_admin = role_user("ian", "Index admins", approval_kb.tenant)
    other_tenant = Tenant.objects.create(name="Other", slug="other")
    outsider = role_user("otto", "Index admins", other_tenant)
    approve = f"/admin/kb/document/{document.pk}/approve/{r1.pk}/"

    assert content.get(approve).status_code == 403
    assert outsider.get(approve).status_code == 404
    assert outsider.get(f"/admin/kb/document/{document.pk}/change/").status_code == 302
    page = index_admin.get(approve)
    assert page.status_code == 200 and b"1 added, 0 removed" in page.content
    assert index_admin.post(approve, {"reason": "ok"}).status_code == 302
    assert live_revision(document) == 1
    # content managers may delete and restore, but not manage index versions
    delete = f"/admin/kb/document/{document.pk}/soft-delete/"
    assert content.post(delete, {"reason": "obsolete"}).status_code == 302
    document.refresh_from_db()
    assert document.deleted_at is not None
    assert (
        content.get(f"/admin/kb/knowledgebase/{approval_kb.pk}/index-versions/new/").status_code
        == 403
    )


def test_a_p1_knowledge_base_moves_to_bm25_through_a_new_index_version(
    kb: KnowledgeBase, admin_user: User
) -> None:
    """Given a knowledge base whose active version predates p2 (tsvector keyword leg), when an
    index admin builds a new version and swaps, then keyword search serves BM25 over postings,
    and the old version kept serving its own way until the swap."""
    v1 = kb.active_index_version
    assert v1 is not None
    IndexVersion.objects.filter(pk=v1.pk).update(pipeline_version="p1")
    kb.refresh_from_db()
    publish(kb, "a", "Vacuum reclaims storage occupied by dead tuples.")
    publish(kb, "b", "Indexes speed up reads at the cost of writes.")
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    assert not Posting.objects.exists()
    before = search(principal=principal, kb=kb, query="vacuum", mode="keyword")
    assert [h.document_key for h in before.hits] == ["a"]

    v2 = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-v1",
        dimensions=384,
        chunk_size=800,
        chunk_overlap=100,
        actor=admin_user,
    )
    assert v2.pipeline_version == PIPELINE_VERSION != "p1"
    run_pending()
    # still v1's tsvector ranking while v2 is only built
    during = search(principal=principal, kb=kb, query="vacuum", mode="keyword")
    assert during.index_version == 1 and [h.document_key for h in during.hits] == ["a"]
    index_version_activate(version_id=v2.pk, actor=admin_user, expected_active_id=v1.pk)

    kb.refresh_from_db()
    after = search(principal=principal, kb=kb, query="vacuuming indexes", mode="keyword")
    assert after.index_version == 2
    assert {h.document_key for h in after.hits} == {"a", "b"}  # stems: vacuum, index
    assert Posting.objects.filter(index_version=v2).exists()
    assert not Posting.objects.filter(index_version=v1).exists()
    call_command("kb_verify")
