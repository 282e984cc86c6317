"""Upload validation and storage, shared by the admin and the API.

A request body is refused before any of it is read when it declares more than any upload could
need, or declares no length at all (`RequestBodyLimitMiddleware`). A file is refused as soon as
it passes UPLOAD_MAX_BYTES while it streams in (`OversizedUploadHandler`); what came before is
on disk, never all in memory (FILE_UPLOAD_MAX_MEMORY_SIZE). Then an upload is checked in this
order: count, size, emptiness, media type from name and magic bytes. Only then are the bytes
stored, under a content-addressed name; the client's file name is kept as metadata only.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile, StopUpload
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.html import escape
from django.utils.translation import get_language, gettext

from kb import storage
from kb.failures import (
    LENGTH_REQUIRED,
    REQUEST_TOO_LARGE,
    UPLOAD_EMPTY,
    UPLOAD_STORE_UNAVAILABLE,
    UPLOAD_TOO_LARGE,
    reason_words,
)
from textkit import extract as parsers
from textkit.reasons import Reason
from work import faults

logger = logging.getLogger(__name__)

SKIPPED_ATTR = "_canon_oversized_uploads"  # their form fields
SKIPPED_NAMES_ATTR = "_canon_oversized_upload_names"
STOP_ATTR = "_canon_stop_at_oversized_upload"
# Room for the multipart framing and the form's other fields around the files.
FORM_OVERHEAD_BYTES = 1024 * 1024


def request_max_bytes() -> int:
    """The largest request body Canon reads: UPLOAD_MAX_FILES files of UPLOAD_MAX_BYTES."""
    return settings.UPLOAD_MAX_BYTES * settings.UPLOAD_MAX_FILES + FORM_OVERHEAD_BYTES


def stop_at_first_oversized(request: HttpRequest) -> None:
    """Call before the body is parsed: a file over the limit ends the reading of the request,
    so the answer (413) goes out before the rest is sent. For one-file requests (the API); the
    admin's forms read on past it, discarding it, to show the error beside the other fields."""
    setattr(request, STOP_ATTR, True)


class OversizedUploadHandler(FileUploadHandler):
    """Stops taking a file as soon as it passes UPLOAD_MAX_BYTES and remembers its field, so
    the form can say why the file is missing instead of storing a truncated copy. Its bytes so
    far are dropped; the rest of the request is skipped over or, after
    `stop_at_first_oversized`, not read at all."""

    def new_file(self, field_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, *args, **kwargs)
        self._received = 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self._received += len(raw_data)
        if self._received > settings.UPLOAD_MAX_BYTES:
            skipped: set[str] = getattr(self.request, SKIPPED_ATTR, set())
            skipped.add(self.field_name)
            setattr(self.request, SKIPPED_ATTR, skipped)
            names: list[str] = getattr(self.request, SKIPPED_NAMES_ATTR, [])
            names.append(clean_filename(self.file_name or ""))
            setattr(self.request, SKIPPED_NAMES_ATTR, names)
            if getattr(self.request, STOP_ATTR, False):
                raise StopUpload(connection_reset=True)
            raise SkipFile()
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


def oversized_messages(request: HttpRequest) -> list[str]:
    """What to tell the uploader about each file refused while it streamed in, in the active
    language: only the admin's forms read on past such a file to say so (the API stops)."""
    limit = settings.UPLOAD_MAX_BYTES // (1024 * 1024)
    return [
        gettext("%(name)s is larger than the limit of %(limit)s MB and was not stored.")
        % {"name": name, "limit": limit}
        for name in getattr(request, SKIPPED_NAMES_ATTR, [])
    ]


class UploadRejected(ValueError):
    """Why an upload was refused, in words for the uploader; `code` and `status` say which check
    refused it, for the API (413 too large, 415 unsupported type, 503 file store unavailable,
    400 otherwise).

    `str(refusal)` is the English (the API's words); for a declared reason, `reason` keeps its
    code and values and `file_name` the file named before it ("name.exe: Files ending in ..."),
    so the admin words it again in the person's language."""

    def __init__(
        self,
        message: str | Reason,
        *,
        code: str = "invalid_file",
        status: int = 400,
        file_name: str = "",
    ) -> None:
        super().__init__(f"{file_name}: {message}" if file_name else str(message))
        self.reason = message if isinstance(message, Reason) else None
        self.file_name = file_name
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
    """Validate and store one uploaded file. Raises UploadRejected with a readable message;
    status 503 when the file store cannot be reached (nothing stored, nothing committed)."""
    name = clean_filename(upload.name or "")
    size = upload.size or 0
    too_large = UPLOAD_TOO_LARGE(name=name, limit=settings.UPLOAD_MAX_BYTES // (1024 * 1024))
    if size > settings.UPLOAD_MAX_BYTES:
        raise UploadRejected(too_large, code="file_too_large", status=413)
    if size == 0:
        raise UploadRejected(UPLOAD_EMPTY(name=name), code="empty_file")
    upload.seek(0)
    head = upload.read(8192)
    try:
        media_type = parsers.detect_media_type(name, head)
    except parsers.UnsupportedMediaType as exc:
        raise UploadRejected(
            exc.reason or str(exc), file_name=name, code="unsupported_media_type", status=415
        ) from exc
    except parsers.ParseError as exc:
        raise UploadRejected(exc.reason or str(exc), file_name=name) from exc
    upload.seek(0)
    try:
        stored = storage.store_chunks(upload.chunks(), max_bytes=settings.UPLOAD_MAX_BYTES)
    except storage.UploadTooLarge as exc:  # it grew past the limit its size declared
        raise UploadRejected(too_large, code="file_too_large", status=413) from exc
    except storage.StorageError as exc:
        # Before any transaction: nothing is committed. The store's address stays in the log.
        logger.warning("upload not stored: %s", exc)
        raise UploadRejected(
            UPLOAD_STORE_UNAVAILABLE(), code="storage_unavailable", status=503
        ) from None
    faults.after_store()  # crash tests: stored, never committed (an orphan to collect)
    return AcceptedUpload(stored=stored, media_type=media_type, original_name=name)


# A file accepted by a form that then failed on another field is kept server-side: the page
# carries a signed token of it (bound to the user's session), so the uploader need not choose it
# again (browsers cannot re-fill a file input). Honoured for an hour.
KEPT_UPLOAD_MAX_AGE_SECONDS = 3600


def _kept_salt(request: HttpRequest) -> str:
    session = getattr(request, "session", None)
    return f"canon.kept-upload:{request.user.pk}:{session.session_key if session else ''}"


def kept_upload_token(request: HttpRequest, accepted: AcceptedUpload) -> str:
    """A signed token of `accepted` that only this user's session can redeem."""
    return signing.dumps(
        {
            "path": accepted.stored.path,
            "sha256": accepted.stored.sha256,
            "size": accepted.stored.size,
            "media_type": accepted.media_type,
            "name": accepted.original_name,
        },
        salt=_kept_salt(request),
        compress=True,
    )


def kept_upload(request: HttpRequest, token: str) -> AcceptedUpload | None:
    """The upload `token` names, if it was signed for this user's session within the last hour,
    names the content-addressed file of its hash, and that file is still stored (it is then
    kept from orphan collection again); else None."""
    if not token:
        return None
    try:
        data = signing.loads(token, salt=_kept_salt(request), max_age=KEPT_UPLOAD_MAX_AGE_SECONDS)
        stored = storage.StoredFile(
            path=str(data["path"]), sha256=str(data["sha256"]), size=int(data["size"])
        )
        media_type, name = str(data["media_type"]), str(data["name"])
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        return None
    if stored.path != f"sources/{stored.sha256[:2]}/{stored.sha256[2:4]}/{stored.sha256}":
        return None
    try:
        if storage.file_problem(stored.path, size=stored.size) or not storage.stored_file_keep(
            stored.path
        ):
            return None
    except storage.StorageError:  # the uploader chooses the file again
        return None
    return AcceptedUpload(stored=stored, media_type=media_type, original_name=name)


class RequestBodyLimitMiddleware:
    """Refuses, before reading a byte of it, a request body that declares more than
    `request_max_bytes()` (413), or that declares no length (411: Django reads a body up to its
    Content-Length, so a chunked one would be read as empty). Under /api/ the answer is
    Canon's JSON error, in English; elsewhere a short page in the language the locale
    middleware chose (it comes first: the admin's pages in the person's language, with nothing
    read but the language cookie and Accept-Language). The production server has no body limit
    of its own (config/gunicorn.conf.py), so this is it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        declared = request.META.get("CONTENT_LENGTH") or ""
        if not declared and request.META.get("HTTP_TRANSFER_ENCODING"):
            return _refusal(request, 411, "length_required", LENGTH_REQUIRED())
        if declared.isdigit() and int(declared) > request_max_bytes():
            too_large = REQUEST_TOO_LARGE(
                limit=request_max_bytes(),
                files=settings.UPLOAD_MAX_FILES,
                mb=settings.UPLOAD_MAX_BYTES // (1024 * 1024),
            )
            return _refusal(request, 413, "request_too_large", too_large)
        return self.get_response(request)


def _refusal(request: HttpRequest, status: int, code: str, why: Reason) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": code, "detail": why.english()}, status=status)
    title = gettext("Upload refused")
    words = reason_words(why.code, why.values, fallback=why.english())
    return HttpResponse(
        f'<!doctype html><html lang="{escape(get_language())}"><meta charset="utf-8">'
        f"<title>{status}</title><h1>{escape(title)}</h1><p>{escape(words)}</p></html>",
        status=status,
    )
