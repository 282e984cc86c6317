"""The pipeline, the reconciler and kb_verify with the stored files in a bucket (moto in server
mode): a corrupted object fails its build readably while the previous revision serves; a lost
one is reported; orphans are collected under the storage lock and a reused one is kept; a purge
works as on the directory."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ingestion.pipeline.run import task_execute
from ingestion.reconciler.files import find_orphan_files, repair_orphan_file
from ingestion.reconciler.runner import reconcile
from kb import storage
from kb.models import Build, Chunk, KnowledgeBase, Revision
from kb.services.documents import document_delete
from kb.storage_lock import STORAGE_LOCK_KEY
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.conftest import database_url
from tests.helpers import upload_task
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

HERONS = "Grey herons wade in shallow water and strike at fish with their long bills. " * 30
EGRETS = "Little egrets wade in shallow water and stir the mud with their yellow feet. " * 30


def _key(env: dict[str, str], relative: str) -> tuple[str, str]:
    bucket, prefix = env["CANON_STORAGE_URL"].removeprefix("s3://").split("/", 1)
    return bucket, f"{prefix}/{relative}"


def _hits(kb: KnowledgeBase, query: str) -> dict[str, int]:
    kb.refresh_from_db()
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    return {
        h.document_key: h.revision
        for h in search(principal=principal, kb=kb, query=query, mode="keyword").hits
    }


def test_a_corrupted_object_fails_its_build_readably_and_the_live_revision_serves(
    kb: KnowledgeBase, s3_storage: dict[str, str], s3_server: Any
) -> None:
    # given revision 1 live from the bucket
    first = upload_task(kb, "birds", HERONS)
    assert task_execute(task_id=first.pk, worker_id="w") == "published"
    # when revision 2's object is overwritten behind Canon's back before it is built
    task = upload_task(kb, "birds", EGRETS)
    revision = Revision.objects.get(builds__tasks=task)
    bucket, key = _key(s3_storage, revision.storage_path)
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=EGRETS.upper().encode())

    # then its build fails, terminally, with a sentence a content manager can act on
    assert task_execute(task_id=task.pk, worker_id="w") == "failed"
    build = Build.objects.get(tasks=task)
    assert build.state == Build.State.FAILED
    assert build.error == (
        f"stored file damaged (its bytes do not match its SHA-256): {revision.sha256}; "
        "restore storage from backup"
    )
    # and search keeps serving revision 1
    assert _hits(kb, "grey herons fish") == {"birds": 1}


def test_a_lost_object_is_reported_by_the_reconciler_and_kb_verify(
    kb: KnowledgeBase, s3_storage: dict[str, str], s3_server: Any
) -> None:
    task = upload_task(kb, "herons", HERONS)
    assert task_execute(task_id=task.pk, worker_id="w") == "published"
    revision = Revision.objects.get(builds__tasks=task)
    bucket, key = _key(s3_storage, revision.storage_path)
    call_command("kb_verify")

    s3_server.client().delete_object(Bucket=bucket, Key=key)

    assert reconcile()["stored_file_missing"] == 1
    with pytest.raises(CommandError, match=f"stored file missing: {revision.sha256}"):
        call_command("kb_verify")
    assert _hits(kb, "grey herons fish") == {"herons": 1}


def test_orphans_are_collected_under_the_storage_lock_and_a_reused_one_is_kept(
    kb: KnowledgeBase, s3_storage: dict[str, str], s3_server: Any, settings: Any
) -> None:
    settings.RECONCILER_ORPHAN_GRACE_SECONDS = 2
    named = upload_task(kb, "herons", HERONS).build.revision  # type: ignore[union-attr]
    orphan = storage.store_bytes(b"an upload that crashed before its commit")
    reused = storage.store_bytes(b"bytes uploaded again later")
    time.sleep(2.5)
    found = {f.detail: f for f in find_orphan_files()}
    assert set(found) == {orphan.path, reused.path}  # the named file is no orphan

    # an upload of the same bytes reuses one before the repair runs (its commit still to come)
    assert storage.store_bytes(b"bytes uploaded again later") == reused
    # a backup holds the storage lock: nothing is deleted meanwhile
    with psycopg.connect(database_url(), autocommit=True) as backup:
        backup.execute("SELECT pg_advisory_lock_shared(%s)", [STORAGE_LOCK_KEY])
        assert list(find_orphan_files()) == []
        assert repair_orphan_file(found[orphan.path]) == "kept: a backup is running"
        backup.execute("SELECT pg_advisory_unlock_shared(%s)", [STORAGE_LOCK_KEY])

    assert repair_orphan_file(found[reused.path]) == "reused meanwhile"
    assert repair_orphan_file(found[orphan.path]) == "deleted the file"
    assert storage.file_problem(orphan.path) == "missing"
    assert storage.file_problem(reused.path) is None
    assert storage.file_problem(named.storage_path) is None
    assert repair_orphan_file(found[orphan.path]) == "deleted the file"  # idempotent
    # the reconciler's own pass finds nothing more (the reused one is young again)
    assert "orphan_file" not in reconcile()


def test_a_purge_on_a_bucket_removes_chunks_and_keeps_history_files(
    kb: KnowledgeBase, s3_storage: dict[str, str], settings: Any
) -> None:
    settings.DELETE_PURGE_DELAY_SECONDS = 0
    task = upload_task(kb, "herons", HERONS)
    assert task_execute(task_id=task.pk, worker_id="w") == "published"
    revision = Revision.objects.get(builds__tasks=task)

    document_delete(document_id=revision.document_id, reason="gone")
    purge = IngestionTask.objects.get(kind="delete")
    assert task_execute(task_id=purge.pk, worker_id="w").startswith("purged")

    assert not Chunk.objects.filter(document_id=revision.document_id).exists()
    assert _hits(kb, "grey herons fish") == {}
    # Revision rows stay as history, so their files do: never an orphan, never deleted
    assert storage.file_problem(revision.storage_path, sha256=revision.sha256) is None
    assert not [f for f in find_orphan_files() if f.detail == revision.storage_path]
    call_command("kb_verify")
