"""Immutable, content-addressed storage for uploaded sources and derived artefacts.

A file is written once under a path derived from its SHA-256 and never overwritten, so a path
stored in a Revision always names the same bytes. Names from clients are never used on disk.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from kb.storage_lock import deletions_held


class UploadTooLarge(ValueError):
    pass


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to STORAGE_ROOT
    sha256: str
    size: int


def storage_root() -> Path:
    return Path(settings.STORAGE_ROOT)


def absolute_path(relative: str) -> Path:
    root = storage_root().resolve()
    path = (root / relative).resolve()
    if root not in path.parents:
        raise ValueError(f"path {relative!r} escapes the storage root")
    return path


def _content_path(kind: str, sha256: str) -> str:
    return f"{kind}/{sha256[:2]}/{sha256[2:4]}/{sha256}"


def store_chunks(
    chunks: Iterable[bytes], *, kind: str = "sources", max_bytes: int | None = None
) -> StoredFile:
    """Stream bytes to storage; idempotent for identical content.

    The bytes go to a temporary file first (fsynced), then are renamed into place atomically,
    so a crash leaves either nothing or a complete file (an orphan the reconciler may collect).
    Raises UploadTooLarge as soon as more than `max_bytes` have been read.
    """
    root = storage_root()
    tmp_dir = root / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(dir=tmp_dir)
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
        relative = _content_path(kind, sha)
        final = root / relative
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists() and _reused(final):
            os.unlink(tmp_name)
        else:
            os.chmod(tmp_name, 0o444)
            os.replace(tmp_name, final)
        return StoredFile(path=relative, sha256=sha, size=size)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise


def _reused(path: Path) -> bool:
    """Reuse a file stored before (identical content): its mtime is refreshed under the storage
    lock, which orphan collection takes exclusively to re-check the mtime and delete, so a file
    that an upload is about to name cannot be collected as an orphan before the upload commits.
    False when it was collected meanwhile: the caller puts its own copy in place."""
    with deletions_held():
        try:
            os.utime(path)
        except FileNotFoundError:
            return False
    return True


def store_bytes(data: bytes, *, kind: str = "sources") -> StoredFile:
    return store_chunks([data], kind=kind)


def read_text(relative: str) -> str:
    return absolute_path(relative).read_text(encoding="utf-8")


def file_sha256(path: Path) -> tuple[str, int]:
    """The SHA-256 and size of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def file_problem(
    relative: str, *, size: int | None = None, sha256: str | None = None
) -> str | None:
    """What is wrong with a stored file, or None when it is there as recorded: "missing",
    "truncated or replaced (N bytes, M expected)" or "damaged (its bytes do not match its
    SHA-256)". Reads the whole file only when `sha256` is given."""
    try:
        stat = absolute_path(relative).stat()
    except (OSError, ValueError):
        return "missing"
    if size is not None and stat.st_size != size:
        return f"truncated or replaced ({stat.st_size} bytes, {size} expected)"
    if sha256 is not None and file_sha256(absolute_path(relative))[0] != sha256:
        return "damaged (its bytes do not match its SHA-256)"
    return None


def stored_file_keep(relative: str) -> bool:
    """Keep a stored file that an upload is about to name again (e.g. a form re-submitted after
    a validation error): refresh its mtime under the storage lock, as a re-upload of the same
    bytes does, so orphan collection leaves it. False when it is gone."""
    try:
        path = absolute_path(relative)
    except ValueError:
        return False
    return path.exists() and _reused(path)
