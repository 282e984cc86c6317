"""What every storage backend shares: the stored-file record, the errors, content-addressed
names, and the interface a backend implements (`Backend`)."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

KINDS = ("sources", "derived")
CONTENT_PATH = re.compile(r"^(?:sources|derived)/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})$")


class UploadTooLarge(ValueError):
    pass


class StorageError(Exception):
    """The store refused or failed an operation. Messages name the store and the key, never a
    credential (`kb.storage.s3` builds them from error codes, not from boto's text)."""


class StorageUnavailable(StorageError):
    """The store cannot be reached now (refused, timed out, 5xx, throttled): try again later.
    An upload answers 503 with nothing committed; a build waits without spending an attempt."""


class StoredFileProblem(StorageError):
    """A stored file is missing or is not the bytes its name says; `problem` is the readable
    reason ("missing", "damaged (its bytes do not match its SHA-256)", ...)."""

    def __init__(self, relative: str, problem: str) -> None:
        super().__init__(f"stored file {problem}: {relative}")
        self.relative = relative
        self.problem = problem


DAMAGED = "damaged (its bytes do not match its SHA-256)"
MISSING = "missing"


@dataclass(frozen=True)
class StoredFile:
    path: str  # the content-addressed name, relative to the storage root or bucket prefix
    sha256: str
    size: int


def content_path(kind: str, sha256: str) -> str:
    return f"{kind}/{sha256[:2]}/{sha256[2:4]}/{sha256}"


def content_sha256(relative: str) -> str | None:
    """The SHA-256 a content-addressed name promises, or None for any other name."""
    match = CONTENT_PATH.match(relative)
    return match.group(3) if match else None


def file_sha256(path: Path) -> tuple[str, int]:
    """The SHA-256 and size of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


class Backend(Protocol):
    """Immutable, content-addressed files. Every method is safe to call concurrently from any
    process; none runs inside a transaction it needs (the storage lock takes its own)."""

    def location(self) -> str:
        """Where the files are, for messages (a directory, or s3://bucket/prefix): no secret."""
        ...

    def scratch_dir(self) -> Path | None:
        """Where an upload is spooled before it has a name (None: the system's temp dir)."""
        ...

    def put_file(self, spooled: Path, *, relative: str) -> None:
        """Put-if-absent the spooled bytes under `relative` (their content name); a file there
        already is kept instead (the storage lock refreshes its age). `spooled` is consumed or
        left for the caller to remove."""
        ...

    def size_of(self, relative: str) -> int | None:
        """The stored size, or None when there is no such file."""
        ...

    def fetched(
        self, relative: str, *, digest: bool
    ) -> contextlib.AbstractContextManager[tuple[Path, str | None]]:
        """A local path holding the file's bytes while the context lasts, and their SHA-256
        when `digest` (computed while copying, for a remote store). FileNotFoundError."""
        ...

    def read_bytes(self, relative: str) -> bytes:
        """The whole file (small files: derived text). FileNotFoundError."""
        ...

    def keep(self, relative: str) -> bool:
        """Refresh the file's age under the storage lock (shared), so orphan collection leaves it
        until the upload naming it commits. False when it is gone."""
        ...

    def list_files(self, kind: str) -> Iterator[tuple[str, float]]:
        """(relative name, last-written time as a UNIX timestamp) of every file of `kind`."""
        ...

    def kept_at(self, relative: str) -> float | None:
        """When the file was last written or kept (UNIX time); None when it is gone."""
        ...

    def delete(self, relative: str) -> None:
        """Remove a file; only orphan collection calls this, holding the storage lock."""
        ...

    def restore_file(self, source: Path, *, relative: str, sha256: str, move: bool) -> None:
        """Put a backup's copy of a file in place, checking its bytes against `sha256` on the
        way; `move`: the source may be consumed (an unpacked archive's scratch copy)."""
        ...
