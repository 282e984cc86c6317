"""Deleting, restoring and purging a document (`kb.services.documents`): a delete is invisible to
search at commit and a restore brings the document back; the purge, due after the delay,
gives up every build in batches, removes chunks, keyword postings and pointers, is idempotent,
and leaves nothing to restore."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from ingestion.pipeline.run import task_execute
from kb.models import Chunk, Document, KnowledgeBase, LexicalStat, Posting, Publication
from kb.services import documents as document_services
from kb.services.base import ActionRefused
from kb.services.documents import document_delete, document_purge, document_restore
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.helpers import upload_task
from tests.kb.publishing import publish
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)


def test_delete_is_invisible_at_commit_and_restore_brings_it_back(
    kb: KnowledgeBase, settings
) -> None:
    settings.DELETE_PURGE_DELAY_SECONDS = 3600
    task = upload_task(kb, "doc", "Text about penguins.")
    task_execute(task_id=task.pk, worker_id="w")
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    document = Document.objects.get(key="doc")

    document_delete(document_id=document.pk, reason="outdated")
    assert search(principal=principal, kb=kb, query="penguins").hits == []
    purge = IngestionTask.objects.get(kind="delete")
    assert purge.available_at is not None
    assert purge.available_at > timezone.now() + timedelta(minutes=59)
    assert task_execute(task_id=purge.pk, worker_id="w") == "not_claimed"  # not yet due

    document_restore(document_id=document.pk, reason="still needed")
    assert [h.document_key for h in search(principal=principal, kb=kb, query="penguins").hits]
    actions = list(document.events.order_by("id").values_list("action", flat=True))
    assert actions == ["publish", "delete", "restore"]
    call_command("kb_verify")


def test_purge_removes_chunks_and_pointers_and_is_idempotent(kb: KnowledgeBase, settings) -> None:
    settings.DELETE_PURGE_DELAY_SECONDS = 0
    task = upload_task(kb, "doc", "Text about walruses. " * 100)
    task_execute(task_id=task.pk, worker_id="w")
    document = Document.objects.get(key="doc")
    document_delete(document_id=document.pk)
    purge = IngestionTask.objects.get(kind="delete")

    assert task_execute(task_id=purge.pk, worker_id="w").startswith("purged")

    document.refresh_from_db()
    assert document.purged_at is not None
    assert not Chunk.objects.filter(document=document).exists()
    assert not Publication.objects.filter(document=document).exists()
    with pytest.raises(ActionRefused, match="purged"):
        document_restore(document_id=document.pk)
    assert task_execute(task_id=purge.pk, worker_id="w") == "not_claimed"
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
