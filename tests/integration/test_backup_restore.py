"""Backup and restore, rehearsed. A live knowledge base built by a real worker is backed up by
`manage.py canon_backup`, restored by `manage.py canon_restore` into a new database and an empty
storage root, and the copy — asked by other processes pointed at it — passes kb_verify and
answers every query exactly as the original did. A restored database whose storage lacks a
file is reported, cannot build that document again, and keeps serving its published chunks. A
backup that does not match its manifest is refused before anything changes; queued tasks whose
messages the old broker held are sent again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from django.conf import settings
from psycopg import sql

from ingestion.models import StageResult
from ingestion.relay import outbox_relay_batch
from kb import storage
from kb.backup.layout import stored_files
from kb.models import Document, KnowledgeBase, Publication, Revision
from kb.services.documents import document_create, document_delete, revision_create
from tests.conftest import ROOT, Worker, database_url, wait_for

pytestmark = pytest.mark.integration

MODES = ("vector", "keyword", "hybrid")
QUERIES = ("how many paid vacation days", "travel expenses and receipts", "password rotation")
REASON = "stored file missing: {sha}; restore storage from backup"

VACATION_1 = "# Vacation\n\nEvery employee receives twenty days of paid vacation per year.\n"
VACATION_2 = (
    "# Vacation\n\nEvery employee receives twenty-five days of paid vacation per year.\n\n"
    "## Requests\n\nAsk the people team at least one week in advance.\n"
)
EXPENSES = (
    "Travel expenses are reimbursed within thirty days. Keep every receipt and submit the "
    "expense report with the receipts attached. Economy class for flights under six hours."
)
SECURITY = (
    "# Security\n\nPasswords are rotated every ninety days. Use the password manager; never "
    "reuse a password. Report a lost laptop to the security team at once.\n"
)
OLD_POLICY = "The old vacation policy gave fifteen days of paid vacation and no carry-over."


# --- processes pointed at one database and storage root ------------------------------------


@dataclass(frozen=True)
class Canon:
    """Where one Canon keeps its state: the original, or a restored copy."""

    database: str
    storage_root: Path
    storage_url: str = ""  # s3://bucket/prefix: the files are in a bucket instead


def original() -> Canon:
    return Canon(database_url(), Path(settings.STORAGE_ROOT), settings.STORAGE_URL)


def files_of(at: Canon, s3_server: Any = None) -> list[str]:
    """The stored files' names where `at` keeps them."""
    if not at.storage_url:
        return stored_files(at.storage_root)
    bucket, prefix = at.storage_url.removeprefix("s3://").split("/", 1)
    listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
    return sorted(item["Key"].removeprefix(f"{prefix}/") for item in listed.get("Contents", []))


NUDGES = "test-backup-nudges"  # where the commands' relay nudges go; nothing consumes them


def _env(at: Canon, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=at.database,
        CANON_STORAGE_ROOT=str(at.storage_root),
        CANON_STORAGE_URL=at.storage_url,
        REDIS_URL=settings.CELERY_BROKER_URL,
        CANON_QUEUE=NUDGES,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def _no_stray_nudges() -> Iterator[None]:
    yield
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(NUDGES)


def manage(*args: str, at: Canon) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_env(at),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def probe(*args: str, at: Canon, **extra: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.probe", *args],
        cwd=ROOT,
        env=_env(at, **extra),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def searches(api_key: str, *, at: Canon) -> dict[tuple[str, str], Any]:
    asked = [[mode, query] for mode in MODES for query in QUERIES]
    answers = probe("search", api_key, "handbook", json.dumps(asked), at=at)
    return {(mode, query): hits for (mode, query), hits in zip(asked, answers, strict=True)}


@pytest.fixture
def empty_database() -> Iterator[str]:
    """The URL of a new, empty database on the test server; dropped at the end."""
    name = f"canon_restored_{uuid.uuid4().hex[:10]}"
    server = database_url().rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield f"{server}/{name}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def relations(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public'"
        ).fetchone()
    assert row is not None
    return int(row[0])


# --- the knowledge base that is backed up ------------------------------------------------------


def upload(kb: KnowledgeBase, key: str, text: str, media_type: str = "text/markdown") -> Revision:
    stored = storage.store_bytes(text.encode())
    document = Document.objects.filter(kb=kb, key=key).first()
    name = f"{key}.md" if media_type == "text/markdown" else f"{key}.txt"
    if document is None:
        return document_create(
            kb=kb, key=key, title="", stored=stored, media_type=media_type, original_name=name
        )
    return revision_create(
        document=document, stored=stored, media_type=media_type, original_name=name
    )


def live_revisions(kb: KnowledgeBase) -> dict[str, int]:
    return dict(
        Publication.objects.filter(kb=kb, index_version_id=kb.active_index_version_id).values_list(
            "document__key", "build__revision__number"
        )
    )


def build_live_knowledge_base(kb: KnowledgeBase) -> dict[str, Revision]:
    """Four documents built live by the worker; `vacation` then gets a second revision and
    `old-policy` is deleted (its purge waits for the retention window). Returns the desired
    revisions by key."""
    revisions = {
        "vacation": upload(kb, "vacation", VACATION_1),
        "expenses": upload(kb, "expenses", EXPENSES, media_type="text/plain"),
        "security": upload(kb, "security", SECURITY),
        "old-policy": upload(kb, "old-policy", OLD_POLICY, media_type="text/plain"),
    }
    expected = {key: 1 for key in revisions}
    wait_for(lambda: live_revisions(kb) == expected, what=f"{expected} live")
    revisions["vacation"] = upload(kb, "vacation", VACATION_2)
    expected["vacation"] = 2
    wait_for(lambda: live_revisions(kb) == expected, what="vacation r2 live")
    document_delete(document_id=revisions["old-policy"].document_id, reason="replaced")
    return revisions


def backup_and_restore(
    tmp_path: Path, database: str, name: str, says: str = "", storage_url: str = ""
) -> Canon:
    """canon_backup of the test database into `name`, canon_restore of it into `database` and a
    new storage root (or the bucket of `storage_url`): both must succeed, kb_verify clean (and
    the restore say `says`). Returns where the copy is."""
    made = manage("canon_backup", str(tmp_path / name), at=original())
    assert made.returncode == 0, made.stderr
    restored = Canon(database, tmp_path / "restored-storage", storage_url)
    result = manage("canon_restore", str(tmp_path / name), at=restored)
    assert result.returncode == 0, result.stdout + result.stderr
    print(made.stdout, result.stdout, sep="\n")  # the rehearsal's timings and sizes
    assert "kb_verify: all invariants hold." in result.stdout
    assert says in result.stdout
    return restored


# --- the tests -----------------------------------------------------------------------------


def test_a_live_knowledge_base_restores_whole_and_answers_the_same(
    worker_factory: Any,
    kb: KnowledgeBase,
    api_key: str,
    tmp_path: Path,
    empty_database: str,
    storage_backend: str,
    s3_server: Any,
) -> None:
    # given a live knowledge base with a second revision and a deleted document (its files in
    # the storage root, or in a bucket)
    worker_factory()
    build_live_knowledge_base(kb)
    target = f"s3://{s3_server.new_bucket()}/restored" if storage_backend == "s3" else ""
    before = searches(api_key, at=original())
    assert all(before.values())
    served = {(hit["document_key"], hit["revision"]) for hits in before.values() for hit in hits}
    assert {key for key, _ in served} == {"vacation", "expenses", "security"}
    assert {revision for key, revision in served if key == "vacation"} == {2}

    # when it is backed up into an archive and restored into an empty database and storage
    restored = backup_and_restore(tmp_path, empty_database, "canon.tar.gz", storage_url=target)

    # then the copy holds every stored file and passes kb_verify in a process of its own
    assert files_of(restored, s3_server) == files_of(original(), s3_server)
    if target:  # a bucket of its own: five sources and their five parsed texts
        assert len(files_of(restored, s3_server)) == 10
    verified = manage("kb_verify", at=restored)
    assert verified.returncode == 0, verified.stderr
    # and answers every query as the original: the same chunks, in the same order, same scores
    after = searches(api_key, at=restored)
    for asked, hits in before.items():
        again = after[asked]
        assert [h["chunk_id"] for h in again] == [h["chunk_id"] for h in hits], asked
        assert [(h["document_key"], h["revision"], h["build_id"]) for h in again] == [
            (h["document_key"], h["revision"], h["build_id"]) for h in hits
        ], asked
        assert [h["score"] for h in again] == pytest.approx([h["score"] for h in hits], rel=1e-6)


def test_a_restored_database_whose_storage_lacks_a_file_reports_it_and_keeps_serving(
    worker_factory: Any, kb: KnowledgeBase, api_key: str, tmp_path: Path, empty_database: str
) -> None:
    worker_factory()
    expenses = build_live_knowledge_base(kb)["expenses"]
    restored = backup_and_restore(tmp_path, empty_database, "backup")
    reason = REASON.format(sha=expenses.sha256)

    # when one source file is lost after the restore (a partial copy of the storage), and the
    # text extracted from it too (with it, a re-index would build from that text: parse is a
    # shared stage)
    (restored.storage_root / expenses.storage_path).unlink()
    parsed = StageResult.objects.get(
        stage="parse", status="succeeded", task__build__revision=expenses
    )
    (restored.storage_root / parsed.output["text_path"]).unlink()

    # then the reconciler reports it, escalated at once, on the consistency dashboard
    report = probe("reconcile", at=restored)
    assert report["counts"]["stored_file_missing"] == 1
    (anomaly,) = [a for a in report["dashboard"] if a["kind"] == "anomaly:stored_file_missing"]
    assert anomaly["escalated"]
    assert anomaly["subject"] == f"revision {expenses.pk}"
    assert anomaly["detail"].startswith(reason)
    # and kb_verify names the revision and the document
    verified = manage("kb_verify", at=restored)
    assert verified.returncode != 0
    assert f"[stored-file] revision {expenses.pk} of document {expenses.document_id}: {reason}" in (
        verified.stderr
    )

    # when a worker of the restored Canon builds every document again (a re-index)
    queue = f"test-restored-{uuid.uuid4().hex[:10]}"
    worker = Worker(
        queue,
        tmp_path / "restored-worker.log",
        _env(restored, CANON_QUEUE=queue),
        "prefork",
    )
    try:
        builds = probe("reindex", "handbook", "120", at=restored, CANON_QUEUE=queue)
    finally:
        worker.stop()
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue)

    # then that document's build fails with the reason; the others build
    assert builds.pop("expenses") == {"state": "failed", "error": reason}
    assert set(builds) == {"vacation", "security"}
    assert all(b["state"] in ("ready", "live") and not b["error"] for b in builds.values())
    # and search keeps serving its published chunks (they are complete, in the database)
    hits = searches(api_key, at=restored)[("keyword", "travel expenses and receipts")]
    assert hits[0]["document_key"] == "expenses"


@pytest.mark.parametrize("damaged", ["a stored file", "the database dump"])
def test_a_backup_that_does_not_match_its_manifest_is_refused(
    transactional_db: None, kb: KnowledgeBase, tmp_path: Path, empty_database: str, damaged: str
) -> None:
    # given a backup (no worker needed: the uploads are stored, their builds queued)
    upload(kb, "security", SECURITY + damaged)
    upload(kb, "expenses", EXPENSES, media_type="text/plain")
    backup = tmp_path / "backup"
    assert manage("canon_backup", str(backup), at=original()).returncode == 0
    manifest = json.loads((backup / "manifest.json").read_text())
    relative = (
        f"storage/{manifest['storage']['files'][0]['path']}"
        if damaged == "a stored file"
        else "database.dump"
    )

    # when one byte of it changes
    path = backup / relative
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))

    # then the restore refuses, naming the file, and changes nothing
    target = Canon(empty_database, tmp_path / "restored-storage")
    refused = manage("canon_restore", str(backup), at=target)
    assert refused.returncode != 0
    assert "the backup does not match its manifest; nothing was restored" in refused.stderr
    assert f"{relative}: SHA-256 " in refused.stderr
    assert relations(empty_database) == 0
    assert stored_files(target.storage_root) == []
    checked = manage("canon_restore", "--check-only", str(backup), at=original())
    assert checked.returncode != 0 and relative in checked.stderr


def test_a_restore_refuses_a_database_or_storage_that_is_not_empty(
    transactional_db: None, kb: KnowledgeBase, tmp_path: Path, empty_database: str
) -> None:
    upload(kb, "security", SECURITY + " (refusals)")
    backup = tmp_path / "backup"
    assert manage("canon_backup", str(backup), at=original()).returncode == 0

    into_live = manage("canon_restore", str(backup), at=Canon(database_url(), tmp_path / "empty"))
    assert into_live.returncode != 0 and "is not empty" in into_live.stderr
    into_full_storage = manage(
        "canon_restore", str(backup), at=Canon(empty_database, original().storage_root)
    )
    assert into_full_storage.returncode != 0 and "already holds" in into_full_storage.stderr
    assert relations(empty_database) == 0


def test_a_backup_refuses_a_live_storage_that_already_lacks_a_named_file(
    transactional_db: None, kb: KnowledgeBase, tmp_path: Path, empty_database: str
) -> None:
    # given a revision whose file the live storage has lost
    lost = upload(kb, "expenses", EXPENSES + " (lost before the backup)", media_type="text/plain")
    storage.absolute_path(lost.storage_path).unlink()

    # then a backup fails loudly, naming it, and leaves nothing behind
    failed = manage("canon_backup", str(tmp_path / "backup"), at=original())
    assert failed.returncode != 0
    assert f"{lost.storage_path}: missing" in failed.stderr
    assert not (tmp_path / "backup").exists()

    # unless told to record it; its restore then reports the file through kb_verify
    recorded = manage("canon_backup", "--allow-missing", str(tmp_path / "backup"), at=original())
    assert recorded.returncode == 0, recorded.stderr
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert manifest["missing_at_backup"] == [{"path": lost.storage_path, "problem": "missing"}]
    target = Canon(empty_database, tmp_path / "restored-storage")
    restored = manage("canon_restore", str(tmp_path / "backup"), at=target)
    assert restored.returncode != 0
    assert f"missing already when backed up: {lost.storage_path}" in restored.stdout
    assert "restored, but kb_verify reports 1 violation(s)" in restored.stderr
    assert REASON.format(sha=lost.sha256) in restored.stderr


def test_queued_tasks_whose_messages_the_old_broker_held_are_sent_again(
    transactional_db: None, kb: KnowledgeBase, tmp_path: Path, empty_database: str
) -> None:
    # given two uploads whose messages went to a broker that is not part of the backup
    upload(kb, "security", SECURITY + " (queued)")
    upload(kb, "expenses", EXPENSES + " (queued)", media_type="text/plain")
    assert outbox_relay_batch(send=lambda event: None) == 2

    # when the backup is restored
    restored = backup_and_restore(
        tmp_path, empty_database, "backup", says="tasks:      2 queued task(s) sent again"
    )

    # then each queued task has a new event for the restored relay to send
    with psycopg.connect(restored.database) as conn:
        rows = conn.execute(
            "SELECT t.id, count(e.id) FILTER (WHERE e.published_at IS NULL) "
            "FROM ingestion_ingestiontask t JOIN ingestion_outboxevent e ON e.task_id = t.id "
            "WHERE t.status = 'queued' GROUP BY t.id"
        ).fetchall()
    assert sorted(n for _, n in rows) == [1, 1]
