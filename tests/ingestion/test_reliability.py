"""Service-level reliability: the sweeper, relay backoff and dead-letters, the embedding cache,
delete/restore, error classification and kb_verify's reports. Crash tests with real processes
live in tests/fault/."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

import embeddings
from ingestion.models import StageResult
from ingestion.pipeline.run import classify, task_execute
from ingestion.pipeline.stages import TerminalError
from ingestion.relay import outbox_relay_batch
from ingestion.sweeper import lease_sweep
from kb.completeness import IncompleteBuild
from kb.models import Build, Chunk, Document, KnowledgeBase, Posting, Publication
from kb.services.base import ActionRefused
from kb.services.documents import document_delete, document_restore
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.helpers import upload_task
from work.models import AuditEvent, IngestionTask, OutboxEvent

pytestmark = pytest.mark.django_db(transaction=True)


def expire(task: IngestionTask, *, attempt: int) -> None:
    """Leave the task as a crashed worker would: running, lease expired."""
    IngestionTask.objects.filter(pk=task.pk).update(
        status="running",
        lease_owner="dead-worker",
        lease_expires_at=timezone.now() - timedelta(seconds=5),
        attempt=attempt,
    )


def test_sweeper_requeues_an_expired_lease_with_an_event_and_an_audit(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Some text to build.")
    OutboxEvent.objects.update(published_at=timezone.now())
    expire(task, attempt=1)

    assert lease_sweep() == 1

    task.refresh_from_db()
    assert task.status == "queued" and task.lease_owner == "" and task.lease_expires_at is None
    assert OutboxEvent.objects.filter(task=task, published_at__isnull=True).count() == 1
    audit = AuditEvent.objects.get(kind="lease_expired", subject_id=task.pk)
    assert audit.action == "requeued" and audit.details["lease_owner"] == "dead-worker"
    # a second pass finds nothing to do
    assert lease_sweep() == 0
    assert OutboxEvent.objects.filter(task=task).count() == 2


def test_sweeper_skips_a_build_another_transaction_holds_and_sweeps_the_rest(
    kb: KnowledgeBase,
) -> None:
    """A host cut off inside the switch keeps its build locked until PostgreSQL ends its idle
    transaction: the sweeper must not wait for it, nor let every other expired lease wait."""
    held = upload_task(kb, "held", "A build whose row a stuck transaction locks.")
    free = upload_task(kb, "free", "A build nobody holds.")
    OutboxEvent.objects.update(published_at=timezone.now())
    expire(held, attempt=1)
    expire(free, attempt=1)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as other:  # a transaction of another session
        other.execute("SELECT 1 FROM kb_build WHERE id = %s FOR NO KEY UPDATE", [held.build_id])
        with connection.cursor() as mine:
            mine.execute("SET lock_timeout = '5s'")  # a wait would fail, not hang
        try:
            assert lease_sweep() == 1
        finally:
            with connection.cursor() as mine:
                mine.execute("RESET lock_timeout")
        held.refresh_from_db()
        free.refresh_from_db()
        assert held.status == "running" and free.status == "queued"
        other.rollback()

    assert lease_sweep() == 1
    held.refresh_from_db()
    assert held.status == "queued"


def test_sweeper_dead_letters_past_the_attempt_cap_and_the_live_version_serves(
    kb: KnowledgeBase,
) -> None:
    first = upload_task(kb, "doc", "The live text about lighthouses.")
    assert task_execute(task_id=first.pk, worker_id="w") == "published"
    second = upload_task(kb, "doc", "A revision that keeps crashing its worker.")
    expire(second, attempt=second.max_attempts)

    assert lease_sweep() == 1

    second.refresh_from_db()
    assert second.status == "dead"
    assert "giving up" in second.last_error
    build = Build.objects.get(tasks=second)
    assert build.state == "failed" and "giving up" in build.error
    assert AuditEvent.objects.get(subject_id=second.pk).escalated
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    hits = search(principal=principal, kb=kb, query="lighthouses").hits
    assert hits and {h.revision for h in hits} == {1}
    call_command("kb_verify")


def test_a_failing_send_backs_off_and_dead_letters_visibly(kb: KnowledgeBase, settings) -> None:
    settings.RELAY_MAX_ATTEMPTS = 3
    upload_task(kb, "doc", "text")

    def broken(event: OutboxEvent) -> None:
        raise ValueError("message rejected by the broker")

    for _ in range(3):
        OutboxEvent.objects.update(available_at=timezone.now())
        assert outbox_relay_batch(send=broken) == 0
    event = OutboxEvent.objects.get()
    assert event.attempts == 3
    assert event.dead_at is not None and event.published_at is None
    assert "message rejected" in event.last_error
    # a dead event is not retried
    assert outbox_relay_batch(send=broken) == 0
    assert OutboxEvent.objects.get().attempts == 3


def test_a_broker_outage_backs_off_but_never_dead_letters(kb: KnowledgeBase, settings) -> None:
    settings.RELAY_MAX_ATTEMPTS = 2
    upload_task(kb, "a", "text")
    upload_task(kb, "b", "text")
    sends: list[int] = []

    def unreachable(event: OutboxEvent) -> None:
        sends.append(event.pk)
        raise ConnectionError("connection refused")

    for _ in range(4):
        OutboxEvent.objects.update(available_at=timezone.now())
        assert outbox_relay_batch(send=unreachable) == 0
    # one failed send per pass (the rest keep their turn), and nothing is dead
    assert len(sends) == 4
    assert not OutboxEvent.objects.filter(dead_at__isnull=False).exists()
    OutboxEvent.objects.update(available_at=timezone.now())
    assert outbox_relay_batch(send=lambda event: None) == 2


def test_a_one_paragraph_edit_embeds_only_the_changed_chunks(kb: KnowledgeBase) -> None:
    paragraphs = [
        f"Paragraph {i} about topic {i}. " + " ".join(f"w{i}x{j}" for j in range(80))
        for i in range(200)
    ]
    first = upload_task(kb, "long", "\n\n".join(paragraphs))
    task_execute(task_id=first.pk, worker_id="w")
    paragraphs[100] = "Paragraph 100 was rewritten entirely with new words."
    second = upload_task(kb, "long", "\n\n".join(paragraphs))
    task_execute(task_id=second.pk, worker_id="w")

    embed = StageResult.objects.get(task=second, stage="embed").output
    total = embed["embedded"] + embed["cached"]
    assert total >= 190
    assert embed["embedded"] / total <= 0.02, embed
    assert Build.objects.get(tasks=second).state == "live"


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


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (TerminalError("unparseable", "bad file"), False),
        (IncompleteBuild("missing chunks"), False),
        (embeddings.EmbeddingShapeError("wrong dimensions"), False),
        (embeddings.ProviderUnavailable("503"), True),
        (ConnectionError("reset"), True),
        (RuntimeError("unexpected"), True),
    ],
)
def test_errors_are_classified(error: Exception, retryable: bool) -> None:
    assert classify(error)[0] is retryable


def test_kb_verify_reports_planted_violations(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Some text. " * 200)
    task_execute(task_id=task.pk, worker_id="w")
    call_command("kb_verify")
    build = Build.objects.get()

    # a live build loses a chunk, and a queued task loses its way to run
    Chunk.objects.filter(build=build, ordinal=0).delete()
    stuck = upload_task(kb, "other", "More text.")
    OutboxEvent.objects.filter(task=stuck).update(dead_at=timezone.now())

    with pytest.raises(CommandError) as failure:
        call_command("kb_verify")
    report = str(failure.value)
    assert f"[live-build-complete] build {build.pk}" in report
    assert f"[task-can-run] task {stuck.pk}" in report
    # the lost chunk left the build's BM25 statistics counting one chunk too many
    assert f"[keyword-index] build {build.pk}: statistics count" in report


def test_kb_verify_reports_a_live_chunk_missing_from_the_keyword_index(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "doc", "Some text about vacuum and indexes.")
    task_execute(task_id=task.pk, worker_id="w")
    build = Build.objects.get()
    Posting.objects.filter(chunk__build=build).delete()

    with pytest.raises(CommandError, match=rf"\[keyword-index\] build {build.pk}: 1 chunks have"):
        call_command("kb_verify")


def test_kb_verify_reports_an_active_pointer_at_a_retired_version(kb: KnowledgeBase) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE kb_indexversion SET state = 'retired' WHERE kb_id = %s", [kb.pk])
    with pytest.raises(CommandError, match="active-index-version"):
        call_command("kb_verify")


def test_every_session_bounds_an_idle_transaction() -> None:
    """The stuck transaction of the test above ends on its own: Canon's sessions carry
    idle_in_transaction_session_timeout (CANON_DB_IDLE_IN_TRANSACTION_SECONDS), whatever the
    server's configuration says."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] == "1min"
        cursor.execute("SHOW tcp_keepalives_idle")
        assert cursor.fetchone()[0] == "30"


def test_options_in_the_database_url_are_kept_beside_canons_own() -> None:
    """Canon's session options are added to `?options=` from DATABASE_URL, not put in its place."""
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DATABASES['default']['OPTIONS']['options'])"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": "postgresql://u@h:5432/d?options=-c%20statement_timeout%3D5000",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "idle_in_transaction_session_timeout=60000" in out
    assert out.strip().endswith("-c statement_timeout=5000")
