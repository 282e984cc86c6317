"""The reconciler: one test per anomaly, each created as a crash would leave it; the repair goes
through the normal protocols, a second pass changes nothing, and two passes at once do the work
once. Visibility violations are escalated, never changed."""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from config.celery import app
from ingestion.pipeline.run import task_execute
from ingestion.reconciler.files import find_orphan_files, repair_orphan_file
from ingestion.reconciler.findings import MAX_REPAIRS
from ingestion.reconciler.runner import anomaly_dismiss, anomaly_retry, reconcile
from kb import storage
from kb.models import Build, Document, KnowledgeBase, Publication
from kb.services.documents import document_delete
from tests.helpers import upload_task
from work import broker
from work.leases import task_claim
from work.models import AuditEvent, IngestionTask, OutboxEvent

pytestmark = pytest.mark.django_db(transaction=True)


def anomalies(kind: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=f"anomaly:{kind}").order_by("id"))


def test_queued_task_without_an_event_gets_one(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Text.")
    OutboxEvent.objects.filter(task=task).delete()  # the message was lost with Redis

    assert reconcile()["queued_without_event"] == 1

    assert OutboxEvent.objects.filter(task=task, published_at__isnull=True).count() == 1
    assert anomalies("queued_without_event")[0].action == "added an outbox event"
    assert "queued_without_event" not in reconcile()
    call_command("kb_verify")


def _sent_long_ago(task: IngestionTask) -> None:
    """The relay published the task's message ten minutes ago and nobody claimed it."""
    long_ago = timezone.now() - timedelta(minutes=10)
    OutboxEvent.objects.filter(task=task).update(published_at=long_ago, available_at=long_ago)
    IngestionTask.objects.filter(pk=task.pk).update(updated_at=long_ago - timedelta(seconds=1))


def test_a_message_that_died_with_a_worker_or_redis_is_sent_again(
    kb: KnowledgeBase, settings: Any
) -> None:
    """A worker took the message and died before claiming (Redis holds it unacked for 40 min),
    or Redis lost it: the task waits queued with its event published, for a long time or for
    ever. The reconciler sends it again once the queue is empty; not while a backlog explains
    the wait, and not once the task was claimed."""
    settings.CELERY_TASK_DEFAULT_QUEUE = f"canon-reconciler-{uuid.uuid4().hex}"
    lost, waiting, claimed = (upload_task(kb, key, "Text.") for key in ("a", "b", "c"))
    for task in (lost, waiting, claimed):
        _sent_long_ago(task)
    assert task_claim(task_id=claimed.pk, owner="w") is not None

    with app.connection_for_write() as conn:
        backlog = conn.SimpleQueue(settings.CELERY_TASK_DEFAULT_QUEUE)
        backlog.put({"a": "message ahead of ours"})
        assert "sent_never_claimed" not in reconcile()  # a backlog explains the wait
        backlog.get(timeout=5).ack()
        backlog.close()

    assert reconcile()["sent_never_claimed"] == 2

    for task in (lost, waiting):
        assert OutboxEvent.objects.filter(task=task, published_at__isnull=True).count() == 1
    assert not OutboxEvent.objects.filter(task=claimed, published_at__isnull=True).exists()
    assert anomalies("sent_never_claimed")[0].action == "sent again (added an outbox event)"
    assert "sent_never_claimed" not in reconcile()  # the new event is pending


def test_a_complete_build_that_was_never_switched_is_switched(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Text about herons. " * 40)
    assert task_execute(task_id=task.pk, worker_id="w") == "published"
    # revision 2 was written completely, then the worker died before the switch and its task
    # was dead-lettered: the state F-C2 leaves when retries run out
    second = upload_task(kb, "doc", "Text about egrets. " * 40)
    lease = task_claim(task_id=second.pk, owner="w")
    assert lease is not None
    build = Build.objects.get(tasks=second)
    _write_without_switch(second, lease)
    IngestionTask.objects.filter(pk=second.pk).update(status="dead", lease_expires_at=None)

    assert reconcile()["complete_build_not_switched"] == 1

    build.refresh_from_db()
    assert build.state == "live"
    assert Publication.objects.get(document=build.document).build_id == build.pk
    assert anomalies("complete_build_not_switched")[0].action == "switch: published"
    assert "complete_build_not_switched" not in reconcile()
    call_command("kb_verify")


def _write_without_switch(task: IngestionTask, lease: object) -> None:
    """Run the stages up to (not including) the switch, as the crashed worker did."""
    from ingestion.pipeline import run

    original = run._switch
    run._switch = lambda **kwargs: "crashed"
    try:
        run.build_run(task=task, lease=lease)  # type: ignore[arg-type]
    finally:
        run._switch = original


def test_a_desired_revision_missing_its_build_gets_one(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Text.")
    Build.objects.filter(tasks=task).delete()  # as if the upload's builds never committed

    assert reconcile()["desired_revision_without_build"] == 1

    build = Build.objects.get(document__key="doc")
    assert IngestionTask.objects.filter(build=build, status="queued").exists()
    assert "desired_revision_without_build" not in reconcile()


def test_a_deleted_document_with_chunks_and_no_purge_is_purged(
    kb: KnowledgeBase, settings: object
) -> None:
    task = upload_task(kb, "doc", "Text. " * 50)
    task_execute(task_id=task.pk, worker_id="w")
    document = Document.objects.get()
    document_delete(document_id=document.pk)
    IngestionTask.objects.filter(kind="delete").delete()  # the purge task was lost

    assert reconcile()["deleted_with_chunks"] == 1

    purge = IngestionTask.objects.get(kind="delete")
    assert task_execute(task_id=purge.pk, worker_id="w").startswith("purged")
    assert "deleted_with_chunks" not in reconcile()
    call_command("kb_verify")


def test_a_lagging_outbox_is_relayed_then_escalated_when_it_cannot_be(
    kb: KnowledgeBase, settings: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload_task(kb, "doc", "Text.")
    OutboxEvent.objects.update(available_at=timezone.now() - timedelta(minutes=5))

    def broker_down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(broker.RunTaskBatch, "add", broker_down)
    for _ in range(MAX_REPAIRS + 1):
        OutboxEvent.objects.update(available_at=timezone.now() - timedelta(minutes=5))
        reconcile()
    events = anomalies("outbox_lagging")
    assert [e.escalated for e in events] == [False] * MAX_REPAIRS + [True]
    assert all("ran the relay" in e.action for e in events[:MAX_REPAIRS])
    # escalated subjects wait for a person: no further attempts
    reconcile()
    assert len(anomalies("outbox_lagging")) == MAX_REPAIRS + 1
    anomaly_dismiss(event_id=events[-1].pk, reason="broker replaced")
    assert AuditEvent.objects.get(pk=events[-1].pk).resolved_at is not None


def test_an_orphan_file_past_grace_is_removed(kb: KnowledgeBase, settings: object) -> None:
    kept = upload_task(kb, "doc", "Referenced text.")
    orphan = storage.store_bytes(b"bytes whose upload crashed before its commit")
    path = storage.absolute_path(orphan.path)
    old = time.time() - 7200
    os.utime(path, (old, old))
    os.utime(storage.absolute_path(kept.build.revision.storage_path), (old, old))  # type: ignore[union-attr]

    assert reconcile()["orphan_file"] == 1

    assert not path.exists()
    assert storage.absolute_path(kept.build.revision.storage_path).exists()  # type: ignore[union-attr]
    assert "orphan_file" not in reconcile()


def test_an_escalated_orphan_file_is_repaired_by_retry(kb: KnowledgeBase) -> None:
    """Given an orphan file that keeps coming back until the reconciler escalates it, when a
    person presses Retry, then the orphan repair runs (found by the finding's kind) and the file
    is gone."""
    content = b"bytes a crashing uploader keeps storing"
    old = time.time() - 7200
    for _ in range(MAX_REPAIRS):
        orphan = storage.store_bytes(content)
        os.utime(storage.absolute_path(orphan.path), (old, old))
        assert reconcile()["orphan_file"] >= 1  # earlier tests' files are orphans too
        assert not storage.absolute_path(orphan.path).exists()
    orphan = storage.store_bytes(content)
    path = storage.absolute_path(orphan.path)
    os.utime(path, (old, old))
    reconcile()
    escalated = anomalies("orphan_file")[-1]
    assert escalated.escalated and escalated.details["detail"] == orphan.path
    assert path.exists()  # escalated, not repaired

    outcome = anomaly_retry(event_id=escalated.pk)

    assert outcome == "deleted the file"
    assert not path.exists()
    assert AuditEvent.objects.get(pk=escalated.pk).resolved_at is not None


def test_an_orphan_reused_by_an_upload_after_it_was_found_is_kept(kb: KnowledgeBase) -> None:
    """The reconciler finds an orphan; before its repair runs, an upload of the same bytes reuses
    the file (its Revision not committed yet). The repair must keep it, and a file collected
    before the upload's store is written again."""
    orphan = storage.store_bytes(b"the same bytes uploaded twice")
    path = storage.absolute_path(orphan.path)
    old = time.time() - 7200
    os.utime(path, (old, old))
    finding = next(f for f in find_orphan_files() if f.detail == orphan.path)

    assert storage.store_bytes(b"the same bytes uploaded twice") == orphan  # reuses, refreshes

    assert repair_orphan_file(finding) == "reused meanwhile"
    assert path.exists()
    path.chmod(0o644)
    path.unlink()  # collected just before an upload stores the same bytes
    assert storage.store_bytes(b"the same bytes uploaded twice") == orphan
    assert path.read_bytes() == b"the same bytes uploaded twice"


def test_a_visibility_violation_is_escalated_not_changed(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Text. " * 300)
    task_execute(task_id=task.pk, worker_id="w")
    build = Build.objects.get()
    build.chunks.filter(ordinal=0).delete()  # a live build lost a chunk

    assert reconcile()["visibility_violation"] == 1

    event = anomalies("visibility_violation")[0]
    assert event.escalated and "chunks are written" in event.details["detail"]
    assert Publication.objects.get().build_id == build.pk  # untouched
    reconcile()
    assert len(anomalies("visibility_violation")) == 1


def test_two_reconcilers_at_once_do_the_work_once(kb: KnowledgeBase) -> None:
    tasks = [upload_task(kb, f"doc{i}", f"Text {i}.") for i in range(5)]
    OutboxEvent.objects.filter(task__in=tasks).delete()
    barrier = threading.Barrier(2)
    results: list[dict[str, int]] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(reconcile())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert sorted(r.get("queued_without_event", 0) for r in results) == [0, 5]
    for task in tasks:
        assert OutboxEvent.objects.filter(task=task).count() == 1
    assert len(anomalies("queued_without_event")) == 5
