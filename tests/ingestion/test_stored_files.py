"""A database whose storage lacks a file (a restore without it, a lost disk): the reconciler and
`kb_verify` report it, a build that needs the file fails with a reason a person can act on, and
search keeps serving the published chunks. A lost derived file is parsed again."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from console.dashboard import dashboard
from ingestion.models import StageResult
from ingestion.pipeline import run
from ingestion.pipeline.chunk import chunk
from ingestion.pipeline.run import task_execute
from ingestion.reconciler.files import find_orphan_files, repair_orphan_file
from ingestion.reconciler.runner import reconcile
from kb import storage
from kb.backup import BackupError, pg_tool
from kb.models import Build, KnowledgeBase, Revision
from kb.services.documents import build_retry
from kb.services.index_versions import index_version_create
from kb.storage_lock import STORAGE_LOCK_KEY, backup_running
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.conftest import database_url
from tests.helpers import upload_task
from work.models import AuditEvent, IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

HERONS = "Grey herons wade in shallow water and strike at fish with their long bills. " * 30


def herons(test: str) -> str:
    """Text of its own per test: stored files are shared by content across the session."""
    return f"{test}. {HERONS}"


def _published(kb: KnowledgeBase, key: str, text: str) -> Revision:
    task = upload_task(kb, key, text)
    assert task_execute(task_id=task.pk, worker_id="w") == "published"
    return Revision.objects.get(builds__tasks=task)


def _reindex(kb: KnowledgeBase) -> IngestionTask:
    version = kb.active_index_version
    assert version is not None
    new = index_version_create(
        kb_id=kb.pk,
        provider=version.provider,
        model=version.model,
        dimensions=version.dimensions,
        chunk_size=version.chunk_size,
        chunk_overlap=version.chunk_overlap,
    )
    return IngestionTask.objects.get(build__index_version=new)


def _hits(kb: KnowledgeBase, query: str) -> set[str]:
    kb.refresh_from_db()
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    return {h.document_key for h in search(principal=principal, kb=kb, query=query).hits}


def test_a_missing_source_is_reported_and_a_rebuild_fails_readably_while_search_serves(
    kb: KnowledgeBase,
) -> None:
    # given a live document whose source file is then lost
    text = herons("missing")
    revision = _published(kb, "herons", text)
    storage.absolute_path(revision.storage_path).unlink()
    reason = f"stored file missing: {revision.sha256}; restore storage from backup"

    # then the reconciler escalates it at once (no automatic repair can bring bytes back) ...
    assert reconcile()["stored_file_missing"] == 1
    (event,) = AuditEvent.objects.filter(kind="anomaly:stored_file_missing")
    assert event.escalated and event.subject_type == "revision"
    assert event.subject_id == revision.pk
    assert event.details["detail"].startswith(reason)
    assert [a.pk for a in dashboard(tenant_ids=None).anomalies] == [event.pk]
    reconcile()
    assert AuditEvent.objects.filter(kind="anomaly:stored_file_missing").count() == 1
    # ... and kb_verify names it
    with pytest.raises(CommandError) as failed:
        call_command("kb_verify")
    assert f"[stored-file] revision {revision.pk} of document {revision.document_id}: {reason}" in (
        str(failed.value)
    )

    # when the document is built again (a re-index into a new version), the text extracted
    # from the file before it was lost serves (parse is a shared stage) ...
    rebuilt = _reindex(kb)
    assert task_execute(task_id=rebuilt.pk, worker_id="w") == "published"
    assert not StageResult.objects.filter(task=rebuilt, stage="parse").exists()

    # ... but once that is gone too, nothing can build it: a re-index fails readably
    (parsed,) = StageResult.objects.filter(stage="parse", status="succeeded")
    storage.absolute_path(parsed.output["text_path"]).unlink()
    task = _reindex(kb)
    assert task_execute(task_id=task.pk, worker_id="w") == "failed"

    # then the build fails with the reason, terminally, and search serves the published chunks
    build = Build.objects.get(tasks=task)
    assert build.state == Build.State.FAILED
    assert build.error == reason
    task.refresh_from_db()
    assert (task.status, task.last_error_code) == ("failed", "stored_file_missing")
    assert _hits(kb, "grey herons fish") == {"herons"}

    # and once the file is back, a retry builds it
    assert storage.store_bytes(text.encode()).path == revision.storage_path
    build_retry(build_id=build.pk)
    assert task_execute(task_id=task.pk, worker_id="w") == "published"
    call_command("kb_verify")


def test_a_replaced_source_fails_the_build_as_damaged(kb: KnowledgeBase) -> None:
    text = herons("replaced")
    revision = _published(kb, "herons", text)
    path = storage.absolute_path(revision.storage_path)
    path.chmod(0o644)
    path.write_bytes(text.upper().encode())  # same size, other bytes
    # a re-index that must read the file again: the text extracted from it is gone too
    (parsed,) = StageResult.objects.filter(stage="parse", status="succeeded")
    storage.absolute_path(parsed.output["text_path"]).unlink()

    task = _reindex(kb)
    assert task_execute(task_id=task.pk, worker_id="w") == "failed"

    assert Build.objects.get(tasks=task).error == (
        f"stored file damaged (its bytes do not match its SHA-256): {revision.sha256}; "
        "restore storage from backup"
    )
    path.unlink()  # the next test run stores it afresh


def test_a_lost_derived_file_is_parsed_again(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a task that parsed (the extracted text is in derived storage) and then failed
    task = upload_task(kb, "herons", herons("derived"))
    original = chunk

    def crash(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the worker's disk went away")

    monkeypatch.setattr(run, "chunk", crash)
    assert task_execute(task_id=task.pk, worker_id="w") == "retry"
    parse = StageResult.objects.get(task=task, stage="parse", status="succeeded")
    derived = storage.absolute_path(parse.output["text_path"])
    # when the derived file is lost before the retry (a restore of the database alone)
    derived.unlink()
    monkeypatch.setattr(run, "chunk", original)
    IngestionTask.objects.filter(pk=task.pk).update(available_at=timezone.now())

    # then the retry parses again instead of failing on the missing text
    assert task_execute(task_id=task.pk, worker_id="w") == "published"
    assert derived.exists()
    parse.refresh_from_db()
    assert parse.attempts == 2


def test_no_orphan_is_deleted_while_a_backup_holds_the_storage_lock(
    kb: KnowledgeBase, settings: object
) -> None:
    orphan = storage.store_bytes(b"an upload that never committed")
    path = Path(storage.absolute_path(orphan.path))
    settings.RECONCILER_ORPHAN_GRACE_SECONDS = -1  # type: ignore[attr-defined]
    finding = next(f for f in find_orphan_files() if f.detail == orphan.path)

    # a backup in another session holds the lock shared, as canon_backup does
    with psycopg.connect(database_url(), autocommit=True) as backup:
        backup.execute("SELECT pg_advisory_lock_shared(%s)", [STORAGE_LOCK_KEY])
        assert backup_running()
        assert not [f for f in find_orphan_files() if f.detail == orphan.path]
        assert repair_orphan_file(finding) == "kept: a backup is running"
        assert path.exists()
        backup.execute("SELECT pg_advisory_unlock_shared(%s)", [STORAGE_LOCK_KEY])

    assert not backup_running()
    assert repair_orphan_file(finding) == "deleted the file"
    assert not path.exists()


def test_the_postgresql_programs_match_the_server() -> None:
    with psycopg.connect(database_url()) as conn:
        server = int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10000  # type: ignore[index]
    assert pg_tool("pg_dump", at_least=server).major >= server
    with pytest.raises(BackupError, match="no pg_restore of PostgreSQL 99 or newer"):
        pg_tool("pg_restore", at_least=99)
