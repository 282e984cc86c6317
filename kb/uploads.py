"""Upload validation and storage, shared by the admin and (later) the API.

An upload is checked in this order: count, size (while streaming, before it is fully read),
emptiness, media type from name and magic bytes. Only then are the bytes stored, under a
content-addressed name; the client's file name is kept as metadata only.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile

from ingestion import parsers
from kb import storage

SKIPPED_ATTR = "_canon_oversized_uploads"


class OversizedUploadHandler(FileUploadHandler):
    """Stops reading a file as soon as it passes UPLOAD_MAX_BYTES and remembers its field, so
    the form can say why the file is missing instead of storing a truncated copy."""

    def new_file(self, field_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, *args, **kwargs)
        self._received = 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self._received += len(raw_data)
        if self._received > settings.UPLOAD_MAX_BYTES:
            skipped: set[str] = getattr(self.request, SKIPPED_ATTR, set())
            skipped.add(self.field_name)
            setattr(self.request, SKIPPED_ATTR, skipped)
            raise SkipFile()
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


class UploadRejected(ValueError):
    """Why an upload was refused, in words for the uploader; `code` and `status` say which check
    refused it, for the API (413 too large, 415 unsupported type, 400 otherwise)."""

    def __init__(self, message: str, *, code: str = "invalid_file", status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


@dataclass(frozen=True)
class AcceptedUpload:
    stored: storage.StoredFile
    media_type: str
    original_name: str


def clean_filename(name: str) -> str:
    """A display name: no directories, control or bidi-override characters, bounded length."""
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(
        ch for ch in name if unicodedata.category(ch) not in {"Cc", "Cf"} and ch not in "\x00"
    ).strip()
    if len(name) > 200:
        stem, dot, ext = name.rpartition(".")
        name = (stem[: 200 - len(ext) - 1] + dot + ext) if dot and len(ext) <= 10 else name[:200]
    return name or "upload"


def upload_accept(upload: UploadedFile) -> AcceptedUpload:
    """Validate and store one uploaded file. Raises UploadRejected with a readable message."""
    name = clean_filename(upload.name or "")
    size = upload.size or 0
    if size > settings.UPLOAD_MAX_BYTES:
        raise UploadRejected(
            f"{name} is larger than the limit of {settings.UPLOAD_MAX_BYTES // (1024 * 1024)} MB.",
            code="file_too_large",
            status=413,
        )
    if size == 0:
        raise UploadRejected(f"{name} is empty.", code="empty_file")
    upload.seek(0)
    head = upload.read(8192)
    try:
        media_type = parsers.detect_media_type(name, head)
    except parsers.UnsupportedMediaType as exc:
        raise UploadRejected(f"{name}: {exc}", code="unsupported_media_type", status=415) from exc
    except parsers.ParseError as exc:
        raise UploadRejected(f"{name}: {exc}") from exc
    upload.seek(0)
    try:
        stored = storage.store_chunks(upload.chunks(), max_bytes=settings.UPLOAD_MAX_BYTES)
    except storage.UploadTooLarge as exc:
        raise UploadRejected(f"{name}: {exc}.", code="file_too_large", status=413) from exc
    return AcceptedUpload(stored=stored, media_type=media_type, original_name=name)
