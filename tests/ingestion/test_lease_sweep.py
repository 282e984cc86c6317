"""The lease sweeper (`ingestion.sweeper`): a task whose worker stopped renewing its lease goes
back to the queue with an event and an audit entry, or dies past its attempt cap while the
live version keeps serving; a build another transaction holds is passed over, not waited
for. Crash tests with real processes live in tests/fault/."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from ingestion.pipeline.run import task_execute
from ingestion.sweeper import lease_sweep
from kb.models import Build, KnowledgeBase
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
    # a declared reason: the admin words it in the reader's language (kb.failures)
    assert build.error == second.last_error
    assert (build.error_code, build.error_params) == (
        "build.worker_stopped",
        {"attempts": second.max_attempts},
    )
    assert AuditEvent.objects.get(subject_id=second.pk).escalated
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    hits = search(principal=principal, kb=kb, query="lighthouses").hits
    assert hits and {h.revision for h in hits} == {1}
    call_command("kb_verify")
