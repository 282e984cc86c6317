"""The local backend: files under one directory (CANON_STORAGE_ROOT), written to `tmp/`, fsynced,
made read-only and renamed into place, so a crash leaves either nothing or a whole file. Hosts
past one share it only over a file system with atomic rename and honoured fsync (docs/SCALING.md).

Orphan collection reads a file's age from its mtime: a reused upload refreshes it under the
storage lock (`kb.storage_lock.deletions_held`), which the collector takes exclusively."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from kb.storage.base import StorageError, file_sha256
from kb.storage_lock import deletions_held


class LocalBackend:
    def __init__(self, root: Path) -> None:
        self.root = root

    def location(self) -> str:
        return str(self.root)

    def path(self, relative: str) -> Path:
        root = self.root.resolve()
        path = (root / relative).resolve()
        if root not in path.parents:
            raise ValueError(f"path {relative!r} escapes the storage root")
        return path

    def scratch_dir(self) -> Path:
        tmp = self.root / "tmp"  # on the same file system, so the rename is atomic
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp

    def put_file(self, spooled: Path, *, relative: str) -> None:
        final = self.root / relative
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists() and self.keep(relative):
            return
        os.chmod(spooled, 0o444)
        os.replace(spooled, final)

    def size_of(self, relative: str) -> int | None:
        try:
            return self.path(relative).stat().st_size
        except (OSError, ValueError):
            return None

    @contextlib.contextmanager
    def fetched(self, relative: str, *, digest: bool) -> Iterator[tuple[Path, str | None]]:
        try:
            path = self.path(relative)
        except ValueError as exc:
            raise FileNotFoundError(relative) from exc
        sha = file_sha256(path)[0] if digest else None  # FileNotFoundError when missing
        if not digest and not path.is_file():
            raise FileNotFoundError(relative)
        yield path, sha

    def read_bytes(self, relative: str) -> bytes:
        try:
            return self.path(relative).read_bytes()
        except ValueError as exc:
            raise FileNotFoundError(relative) from exc

    def keep(self, relative: str) -> bool:
        """Reuse a file stored before (identical content): its mtime is refreshed under the
        storage lock, which orphan collection takes exclusively to re-check the mtime and delete,
        so a file an upload is about to name cannot be collected before the upload commits.
        False when it was collected meanwhile: the caller puts its own copy in place."""
        try:
            path = self.path(relative)
        except ValueError:
            return False
        with deletions_held():
            try:
                os.utime(path)
            except FileNotFoundError:
                return False
        return True

    def list_files(self, kind: str) -> Iterator[tuple[str, float]]:
        for dirpath, dirnames, filenames in os.walk(self.root / kind):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                with contextlib.suppress(FileNotFoundError):
                    yield path.relative_to(self.root).as_posix(), path.stat().st_mtime

    def kept_at(self, relative: str) -> float | None:
        try:
            return self.path(relative).stat().st_mtime
        except (OSError, ValueError):
            return None

    def delete(self, relative: str) -> None:
        self.path(relative).unlink(missing_ok=True)

    def restore_file(self, source: Path, *, relative: str, sha256: str, move: bool) -> None:
        """As `put_file` does (a temporary file, fsynced, read-only, renamed into place), keeping
        the backup's mtime; a file unpacked from an archive is moved there."""
        destination = self.root / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if move:
            source.chmod(0o444)
            os.replace(source, destination)
            return
        fd, name = tempfile.mkstemp(dir=self.scratch_dir())
        try:
            with source.open("rb") as raw, os.fdopen(fd, "wb") as out:
                digest = _copy_hashing(raw, out)
                out.flush()
                os.fsync(out.fileno())
            if digest != sha256:
                raise StorageError(f"{source} changed while it was restored; restore again")
            shutil.copystat(source, name)
            os.chmod(name, 0o444)
            os.replace(name, destination)
        finally:
            if os.path.exists(name):
                os.unlink(name)


def _copy_hashing(raw: IO[bytes], out: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while block := raw.read(1 << 20):
        digest.update(block)
        out.write(block)
    return digest.hexdigest()
