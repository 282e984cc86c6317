"""Immutable, content-addressed storage for uploaded sources and derived artefacts.

A file is written once under a name derived from its SHA-256 (`sources/ab/cd/<sha256>`,
`derived/…`) and never overwritten, so a name stored in a Revision always names the same bytes.
Names from clients are never used. Two backends keep them, chosen by one setting:
`kb.storage.local` (a directory, CANON_STORAGE_ROOT: the default) and `kb.storage.s3` (an
S3-compatible bucket, CANON_STORAGE_URL=s3://bucket/prefix). Everything else calls the functions
here, which behave alike on both:

- writes are put-if-absent and idempotent for identical content (`store_chunks`);
- reads check the bytes against their name (`read_bytes`, `local_copy`), raising
  StoredFileProblem with a reason a person can act on;
- a store that cannot be reached raises StorageUnavailable (retry later), never a hang.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.conf import settings

from kb.storage.base import (
    CONTENT_PATH,
    DAMAGED,
    KINDS,
    MISSING,
    Backend,
    StorageError,
    StorageUnavailable,
    StoredFile,
    StoredFileProblem,
    UploadTooLarge,
    content_path,
    content_sha256,
    file_sha256,
)
from kb.storage.local import LocalBackend

__all__ = [
    "CONTENT_PATH",
    "DAMAGED",
    "KINDS",
    "MISSING",
    "Backend",
    "StorageError",
    "StorageUnavailable",
    "StoredFile",
    "StoredFileProblem",
    "UploadTooLarge",
    "absolute_path",
    "backend",
    "content_path",
    "file_problem",
    "file_sha256",
    "is_local",
    "local_copy",
    "location",
    "read_bytes",
    "read_text",
    "storage_root",
    "store_bytes",
    "store_chunks",
    "stored_file_keep",
]

_backends: dict[tuple[str | None, ...], Backend] = {}
_ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_REGION")


def backend() -> Backend:
    """The backend the settings name; one per process and configuration (boto's clients are
    thread-safe, but not to be shared across a fork)."""
    url = settings.STORAGE_URL
    key = (url, str(settings.STORAGE_ROOT), str(os.getpid()), *map(os.environ.get, _ENVIRONMENT))
    found = _backends.get(key)
    if found is None:
        if url.startswith("s3://"):
            from kb.storage.s3 import S3Backend  # boto3 loads only where a bucket is used

            found = S3Backend(url)
        elif not url:
            found = LocalBackend(storage_root())
        else:
            raise StorageError(
                f"CANON_STORAGE_URL {url!r}: use s3://bucket/prefix or leave it empty"
            )
        _backends[key] = found
    return found


def is_local() -> bool:
    return isinstance(backend(), LocalBackend)


def location() -> str:
    """Where stored files are, for messages: the directory, or the bucket and its endpoint."""
    return backend().location()


def storage_root() -> Path:
    """The local directory (CANON_STORAGE_ROOT); with a bucket it holds nothing."""
    return Path(settings.STORAGE_ROOT)


def absolute_path(relative: str) -> Path:
    """The local file of a stored name (the local backend only: tests and tools)."""
    return LocalBackend(storage_root()).path(relative)


def store_chunks(
    chunks: Iterable[bytes], *, kind: str = "sources", max_bytes: int | None = None
) -> StoredFile:
    """Stream bytes to storage; idempotent for identical content.

    The bytes are spooled to a temporary file first (fsynced), hashed on the way, then put under
    their content name if absent (the local backend renames the file into place atomically), so
    a crash leaves either nothing or a complete file (an orphan the reconciler collects). A file
    already stored is kept instead, its age refreshed under the storage lock. Raises
    UploadTooLarge as soon as more than `max_bytes` have been read, StorageUnavailable when the
    store cannot be reached (nothing was stored)."""
    store = backend()
    digest = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(dir=store.scratch_dir(), prefix="canon-upload-")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise UploadTooLarge(f"the file is larger than the limit of {max_bytes} bytes")
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        sha = digest.hexdigest()
        relative = content_path(kind, sha)
        store.put_file(Path(tmp_name), relative=relative)
        return StoredFile(path=relative, sha256=sha, size=size)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def store_bytes(data: bytes, *, kind: str = "sources") -> StoredFile:
    return store_chunks([data], kind=kind)


def _checked(relative: str, sha: str | None, expected: str | None = None) -> None:
    promised = expected or content_sha256(relative)
    if promised is not None and sha != promised:
        raise StoredFileProblem(relative, DAMAGED)


def read_bytes(relative: str) -> bytes:
    """A stored file's bytes, checked against its name. StoredFileProblem, StorageUnavailable."""
    try:
        data = backend().read_bytes(relative)
    except FileNotFoundError:
        raise StoredFileProblem(relative, MISSING) from None
    _checked(relative, hashlib.sha256(data).hexdigest())
    return data


def read_text(relative: str) -> str:
    return read_bytes(relative).decode("utf-8")


@contextlib.contextmanager
def local_copy(
    relative: str, *, sha256: str | None = None, size: int | None = None, verify: bool = True
) -> Iterator[Path]:
    """A local path holding the stored file while the context lasts: the file itself on the
    local backend, a downloaded temporary copy from a bucket. With `verify`, its bytes are
    checked against its name (and `sha256`, `size` when given) first: StoredFileProblem
    ("missing", "truncated or replaced (…)", DAMAGED). StorageUnavailable."""
    with contextlib.ExitStack() as stack:
        try:  # only the fetch: a FileNotFoundError of the caller's own is not this file's
            path, sha = stack.enter_context(backend().fetched(relative, digest=verify))
        except FileNotFoundError:
            raise StoredFileProblem(relative, MISSING) from None
        if verify:
            actual = path.stat().st_size
            if size is not None and actual != size:
                raise StoredFileProblem(
                    relative, f"truncated or replaced ({actual} bytes, {size} expected)"
                )
            _checked(relative, sha, sha256)
        yield path


def file_problem(
    relative: str, *, size: int | None = None, sha256: str | None = None
) -> str | None:
    """What is wrong with a stored file, or None when it is there as recorded: "missing",
    "truncated or replaced (N bytes, M expected)" or DAMAGED. Reads the whole file only when
    `sha256` is given (else one stat, or one HEAD). StorageUnavailable when it cannot tell."""
    actual = backend().size_of(relative)
    if actual is None:
        return MISSING
    if size is not None and actual != size:
        return f"truncated or replaced ({actual} bytes, {size} expected)"
    if sha256 is not None:
        try:
            with local_copy(relative, sha256=sha256):
                pass
        except StoredFileProblem as exc:
            return exc.problem
    return None


def stored_file_keep(relative: str) -> bool:
    """Keep a stored file that an upload is about to name again (e.g. a form re-submitted after
    a validation error): refresh its age under the storage lock, as a re-upload of the same
    bytes does, so orphan collection leaves it. False when it is gone."""
    if content_sha256(relative) is None:
        return False
    return backend().keep(relative)
