"""Small helpers shared by service-level tests."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.test import override_settings

from ingestion.pipeline.run import task_execute
from kb import storage
from kb.models import Document, KnowledgeBase, Revision
from kb.services.documents import document_create, revision_create
from work.models import IngestionTask


def upload_text(kb: KnowledgeBase, key: str, text: str) -> Revision:
    """A new document `key`, or a new revision of it, from plain text, through the services."""
    stored = storage.store_bytes(text.encode())
    document = Document.objects.filter(kb=kb, key=key).first()
    if document is None:
        return document_create(
            kb=kb,
            key=key,
            title=key,
            stored=stored,
            media_type="text/plain",
            original_name=f"{key}.txt",
        )
    return revision_create(
        document=document, stored=stored, media_type="text/plain", original_name=f"{key}.txt"
    )


def upload_task(kb: KnowledgeBase, key: str, text: str) -> IngestionTask:
    """Upload and return the build task of the active index version."""
    revision = upload_text(kb, key, text)
    return IngestionTask.objects.get(
        build__revision=revision, build__index_version_id=kb.active_index_version_id
    )


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2 with few iterations, for the tests' users (Django's advice for test
    speed: a production-strength hash costs a quarter of a second each). Its hashes are ordinary
    pbkdf2_sha256 ones, which a server process of a test verifies with its stock hasher."""

    iterations = 1000


def execute_here(task_id: int) -> str:
    """Run one task in this process, as a worker would; what it did. Inside a test's
    transaction the lease's heartbeat (its own thread and connection) cannot see the task's
    row, so a task that outlives one beat (a quarter of the lease: 15 s, a calibration on a
    loaded machine) would read its lease as lost: here the lease outlasts any test."""
    with override_settings(LEASE_TTL_SECONDS=3600.0):
        return task_execute(task_id=task_id, worker_id="test")


def run_pending() -> list[str]:
    """Run every queued ingestion task in this process, as a worker would; their outcomes."""
    queued = IngestionTask.objects.filter(status="queued").values_list("id", flat=True)
    return [execute_here(task_id) for task_id in queued]
