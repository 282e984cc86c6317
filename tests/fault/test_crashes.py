"""Fault matrix rows F-A0, F-A1, F-C1, F-C2, F-B1: real processes die at the seeds' points;
search never sees a partial version; everything converges; kb_verify is clean. The rows that
kill a process between "stored" and "committed" (F-A0, F-A1, F-C2) run on both storage
backends: the directory and a bucket (moto in server mode)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from ingestion.reconciler.runner import reconcile
from kb import storage
from kb.models import Build, Chunk, Document, KnowledgeBase
from tests.fault.harness import (
    FAULT_LEASE_TTL,
    assert_verified,
    converge,
    live_revision,
    manage_subprocess,
    paragraphs,
    run_with_searcher,
    upload,
    wait_for_marker,
)
from work.models import AuditEvent, IngestionTask, OutboxEvent

pytestmark = pytest.mark.integration

WORKER_ENV = {"CANON_LEASE_TTL_SECONDS": FAULT_LEASE_TTL, "CANON_CHUNK_WRITE_BATCH": "5"}


def test_f_a0_upload_process_dies_after_storing_before_its_commit(
    worker_factory: Any, kb: KnowledgeBase, tmp_path: Path, storage_backend: str, settings: Any
) -> None:
    markers = tmp_path / "markers"
    text = f"a0 on {storage_backend}: {paragraphs('gamma')}"
    # given an upload in its own process that dies once its file is stored, before any commit
    code = (
        "from django.core.files.uploadedfile import SimpleUploadedFile as F;"
        "from kb.uploads import upload_accept;"
        f"upload_accept(F('a0.txt', {text.encode()!r}))"
    )
    uploader = manage_subprocess(
        env={"CANON_FAULT_AFTER_STORE": "1", "CANON_FAULT_MARKER_DIR": str(markers)}, code=code
    )
    assert uploader.wait(60) == 137, uploader.stdout.read() if uploader.stdout else ""
    assert list(markers.glob("after_store.*"))
    # then nothing is committed, and the stored file is an orphan
    assert not Document.objects.exists() and not IngestionTask.objects.exists()
    orphan = storage.content_path("sources", hashlib.sha256(text.encode()).hexdigest())
    assert storage.file_problem(orphan) is None

    # when the grace period has passed, the reconciler collects it
    settings.RECONCILER_ORPHAN_GRACE_SECONDS = 1
    time.sleep(2.1)
    assert reconcile()["orphan_file"] >= 1
    assert storage.file_problem(orphan) == "missing"
    assert_verified()

    # and the upload made again stores the bytes again and goes live
    worker_factory(pool="solo", **WORKER_ENV)
    document = upload(kb, "a0", text)
    converge(lambda: live_revision(document) == 1, what="a0 live")
    assert storage.file_problem(orphan) is None
    assert_verified()


def test_f_a1_upload_process_dies_after_commit_before_any_send(
    worker_factory: Any, kb: KnowledgeBase, tmp_path: Path, storage_backend: str
) -> None:
    markers = tmp_path / "markers"
    worker_factory(pool="solo", **WORKER_ENV)
    # given an upload in its own process that dies right after its transaction commits
    code = (
        "from kb.models import KnowledgeBase; from tests.fault.harness import upload, paragraphs;"
        f"upload(KnowledgeBase.objects.get(pk={kb.pk}), 'a1', paragraphs('alpha'))"
    )
    uploader = manage_subprocess(
        env={"CANON_FAULT_AFTER_OUTBOX_COMMIT": "1", "CANON_FAULT_MARKER_DIR": str(markers)},
        code=code,
    )
    assert uploader.wait(60) == 137, uploader.stdout.read() if uploader.stdout else ""
    assert list(markers.glob("after_outbox_commit.*"))
    # then the intent is in the outbox, not yet sent
    event = OutboxEvent.objects.get()
    assert event.published_at is None
    document = kb.documents.get(key="a1")
    assert live_revision(document) is None

    # when the relay runs (beat), the document goes live: never stuck
    converge(lambda: live_revision(document) == 1, what="a1 live")
    event.refresh_from_db()
    assert event.published_at is not None
    assert IngestionTask.objects.get().attempt == 1
    assert_verified()


def test_f_c1_worker_dies_after_chunk_batch_3(
    worker_factory: Any, kb: KnowledgeBase, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    healthy = worker_factory(pool="solo", **WORKER_ENV)
    document = upload(kb, "policy", paragraphs("alpha"))
    converge(lambda: live_revision(document) == 1, what="revision 1 live")
    healthy.stop()
    searcher = run_with_searcher(kb, ["alpha paragraph 3", "beta paragraph 3", "paragraph"])

    # when the worker building revision 2 dies after its third chunk batch
    crashing = worker_factory(
        pool="solo",
        CANON_FAULT_AFTER_CHUNK_BATCH="3",
        CANON_FAULT_MARKER_DIR=str(markers),
        **WORKER_ENV,
    )
    upload(kb, "policy", paragraphs("beta"))
    wait_for_marker(markers, "after_chunk_batch_3")
    assert crashing.wait_exit() == 137

    # then the candidate is incomplete and the live pointer has not moved
    candidate = Build.objects.get(document=document, revision__number=2)
    assert candidate.expected_chunk_count is not None
    assert candidate.chunks.count() == 15 < candidate.expected_chunk_count
    assert live_revision(document) == 1

    # and when a healthy worker returns, the sweeper requeues and revision 2 goes live
    worker_factory(pool="solo", **WORKER_ENV)
    converge(lambda: live_revision(document) == 2, what="revision 2 live")
    searcher.stop()
    searcher.assert_clean()
    assert 1 in searcher.seen["policy"]
    task = IngestionTask.objects.get(build=candidate)
    assert task.attempt == 2
    assert AuditEvent.objects.filter(kind="lease_expired", subject_id=task.pk).exists()
    candidate.refresh_from_db()
    assert candidate.state == Build.State.LIVE
    assert candidate.chunks.count() == candidate.expected_chunk_count
    assert_verified()


def test_f_c2_and_f_b1_worker_dies_after_the_candidate_is_complete_before_the_switch(
    worker_factory: Any, kb: KnowledgeBase, tmp_path: Path, storage_backend: str
) -> None:
    markers = tmp_path / "markers"
    healthy = worker_factory(pool="solo", **WORKER_ENV)
    document = upload(kb, "policy", paragraphs("alpha"))
    converge(lambda: live_revision(document) == 1, what="revision 1 live")
    healthy.stop()
    searcher = run_with_searcher(kb, ["alpha paragraph 1", "beta paragraph 1"])

    crashing = worker_factory(
        pool="solo",
        CANON_FAULT_BEFORE_SWITCH="1",
        CANON_FAULT_MARKER_DIR=str(markers),
        **WORKER_ENV,
    )
    upload(kb, "policy", paragraphs("beta"))
    wait_for_marker(markers, "before_switch")
    assert crashing.wait_exit() == 137

    # F-C2: the complete candidate waits; the old version serves
    candidate = Build.objects.get(document=document, revision__number=2)
    assert candidate.chunks.count() == candidate.expected_chunk_count
    assert live_revision(document) == 1
    chunk_ids = sorted(Chunk.objects.filter(build=candidate).values_list("id", "chunk_key"))

    # F-B1: the retry finds succeeded stage results and rewrites nothing
    worker_factory(pool="solo", **WORKER_ENV)
    converge(lambda: live_revision(document) == 2, what="revision 2 live")
    searcher.stop()
    searcher.assert_clean()
    assert sorted(Chunk.objects.filter(build=candidate).values_list("id", "chunk_key")) == chunk_ids
    task = IngestionTask.objects.get(build=candidate)
    assert task.attempt == 2
    stages = {s.stage: s.attempts for s in task.stage_results.all()}
    assert stages == {"parse": 1, "chunk": 1, "embed": 1, "write": 1}
    assert_verified()
