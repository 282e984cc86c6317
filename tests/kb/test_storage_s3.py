"""The S3 backend against a real S3-compatible server (moto in server mode): put-if-absent,
reads checked against the key, a corrupted object refused readably, an unreachable store told
apart (StorageUnavailable), and no credential in any message or log line."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from kb import storage
from kb.models import Document, KnowledgeBase
from kb.storage.s3 import KEPT_TAG, S3Backend
from retrieval.models import IdempotencyRecord
from tests.retrieval.factories import api
from tests.s3server import ACCESS_KEY, SECRET_KEY

pytestmark = pytest.mark.django_db


def _object(s3_server: Any, env: dict[str, str], relative: str) -> dict[str, Any]:
    bucket, prefix = env["CANON_STORAGE_URL"].removeprefix("s3://").split("/", 1)
    return dict(s3_server.client().get_object(Bucket=bucket, Key=f"{prefix}/{relative}"))


def _overwrite(s3_server: Any, env: dict[str, str], relative: str, data: bytes) -> None:
    """Change an object behind Canon's back (a person with the bucket's keys, a bad sync)."""
    bucket, prefix = env["CANON_STORAGE_URL"].removeprefix("s3://").split("/", 1)
    s3_server.client().put_object(Bucket=bucket, Key=f"{prefix}/{relative}", Body=data)


def test_a_file_is_stored_once_under_its_content_name_and_read_back_checked(
    s3_storage: dict[str, str], s3_server: Any
) -> None:
    assert isinstance(storage.backend(), S3Backend)
    data = b"Grey herons wade in shallow water."
    sha = hashlib.sha256(data).hexdigest()

    stored = storage.store_chunks([data[:10], data[10:]])

    assert stored == storage.StoredFile(f"sources/{sha[:2]}/{sha[2:4]}/{sha}", sha, len(data))
    assert storage.read_bytes(stored.path) == data
    with storage.local_copy(stored.path, sha256=sha, size=len(data)) as path:
        assert path.read_bytes() == data
    assert not path.exists()  # the downloaded copy is gone with the context
    assert storage.file_problem(stored.path, size=len(data), sha256=sha) is None
    first = _object(s3_server, s3_storage, stored.path)["LastModified"]

    # a second store of the same bytes writes nothing: it keeps the object (a tag, under the lock)
    assert storage.store_bytes(data) == stored
    again = _object(s3_server, s3_storage, stored.path)
    assert again["LastModified"] == first
    assert again["TagCount"] == 1
    store = storage.backend()
    assert store.kept_at(stored.path) is not None
    assert [name for name, _ in store.list_files("sources")] == [stored.path]
    assert storage.stored_file_keep(stored.path)


def test_a_missing_or_foreign_object_is_reported(s3_storage: dict[str, str]) -> None:
    absent = storage.content_path("sources", "0" * 64)
    assert storage.file_problem(absent) == "missing"
    assert not storage.stored_file_keep(absent)
    assert storage.backend().kept_at(absent) is None
    with pytest.raises(storage.StoredFileProblem, match="stored file missing"):
        storage.read_text(absent)


def test_a_corrupted_object_is_refused_readably(s3_storage: dict[str, str], s3_server: Any) -> None:
    data = b"The original bytes of a handbook page."
    stored = storage.store_bytes(data)
    _overwrite(s3_server, s3_storage, stored.path, data.upper())  # same size, other bytes

    assert storage.file_problem(stored.path, size=len(data)) is None  # a HEAD cannot tell
    assert storage.file_problem(stored.path, sha256=stored.sha256) == storage.DAMAGED
    with pytest.raises(storage.StoredFileProblem) as refused:
        storage.read_bytes(stored.path)
    assert refused.value.problem == "damaged (its bytes do not match its SHA-256)"
    with pytest.raises(storage.StoredFileProblem, match="truncated or replaced"):
        _overwrite(s3_server, s3_storage, stored.path, b"short")
        with storage.local_copy(stored.path, size=len(data)):
            pass


def test_an_unreachable_store_is_unavailable_and_no_credential_is_told(
    s3_storage: dict[str, str], s3_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    stored = storage.store_bytes(b"stored before the outage")
    caplog.set_level(logging.DEBUG)
    s3_server.stop()
    try:
        messages = []
        for attempt in (
            lambda: storage.store_bytes(b"stored during the outage"),
            lambda: storage.read_bytes(stored.path),
            lambda: storage.file_problem(stored.path),
            lambda: list(storage.backend().list_files("sources")),
        ):
            with pytest.raises(storage.StorageUnavailable) as down:
                attempt()
            messages.append(str(down.value))
            assert down.value.__cause__ is None and down.value.__suppress_context__
    finally:
        s3_server.start()
    assert "is unreachable" in messages[0] and s3_storage["CANON_STORAGE_URL"] in messages[0]
    told = "\n".join(messages) + caplog.text
    assert SECRET_KEY not in told and ACCESS_KEY not in told
    assert storage.read_bytes(stored.path) == b"stored before the outage"


def test_refused_credentials_are_an_error_without_them(
    s3_storage: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(storage.StorageError, match="no credentials for the object store"):
        storage.store_bytes(b"who am I")
    assert SECRET_KEY not in caplog.text


def test_an_upload_while_the_store_is_down_is_a_503_and_commits_nothing(
    s3_storage: dict[str, str],
    s3_server: Any,
    kb: KnowledgeBase,
    api_key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    client = api(api_key)
    s3_server.stop()
    try:
        response = client.post(
            "/api/v1/kbs/handbook/documents/",
            {"key": "plan", "file": SimpleUploadedFile("plan.txt", b"The plan.")},
            headers={"Idempotency-Key": "k-503"},
        )
    finally:
        s3_server.start()
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert response.json()["error"] == "storage_unavailable"
    assert "nothing changed" in response.json()["detail"]
    assert SECRET_KEY not in response.content.decode() + caplog.text
    assert s3_server.endpoint not in response.content.decode()  # the store's address stays inside
    assert not Document.objects.exists() and not IdempotencyRecord.objects.exists()

    # the same request once the store is back: stored and committed
    response = client.post(
        "/api/v1/kbs/handbook/documents/",
        {"key": "plan", "file": SimpleUploadedFile("plan.txt", b"The plan.")},
        headers={"Idempotency-Key": "k-503"},
    )
    assert response.status_code == 201
    revision = Document.objects.get().revisions.get()
    assert storage.read_bytes(revision.storage_path) == b"The plan."


def test_the_kept_tag_is_the_later_age(s3_storage: dict[str, str], s3_server: Any) -> None:
    stored = storage.store_bytes(b"an object reused much later")
    store = storage.backend()
    written = store.kept_at(stored.path)
    bucket, prefix = s3_storage["CANON_STORAGE_URL"].removeprefix("s3://").split("/", 1)
    s3_server.client().put_object_tagging(
        Bucket=bucket,
        Key=f"{prefix}/{stored.path}",
        Tagging={"TagSet": [{"Key": KEPT_TAG, "Value": str(int(written or 0) + 3600)}]},
    )
    assert store.kept_at(stored.path) == int(written or 0) + 3600
