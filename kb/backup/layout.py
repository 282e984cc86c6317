"""What a backup is on disk: its files, the manifest check, and the writers of a directory or
an archive."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from kb import storage

FORMAT = "canon.backup/1"
MANIFEST = "manifest.json"
DUMP = "database.dump"
STORAGE = "storage"
KINDS = storage.KINDS
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
CONTENT_PATH = storage.CONTENT_PATH
SHOWN_PROBLEMS = 20


class BackupError(Exception):
    """A backup or restore was refused or failed; the message says why and what to do."""


def stored_files(root: Path) -> list[str]:
    """Relative paths of the files under `root`'s content-addressed kinds, sorted."""
    found = []
    for kind in KINDS:
        for dirpath, dirnames, filenames in os.walk(root / kind):
            dirnames.sort()
            found += [(Path(dirpath) / name).relative_to(root).as_posix() for name in filenames]
    return sorted(found)


def live_files() -> list[str]:
    """The names of every file in the live storage (the directory or the bucket), sorted."""
    store = storage.backend()
    return sorted(relative for kind in KINDS for relative, _written in store.list_files(kind))


def listed(lines: Iterator[str] | list[str]) -> str:
    """Problems one per line, indented; the first SHOWN_PROBLEMS of them."""
    items = list(lines)
    shown = [f"  {line}" for line in items[:SHOWN_PROBLEMS]]
    if len(items) > SHOWN_PROBLEMS:
        shown.append(f"  … and {len(items) - SHOWN_PROBLEMS} more")
    return "\n".join(shown)


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class HashingReader:
    """A file read through SHA-256: what is copied is what is hashed, in one pass."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.digest.update(data)
        self.size += len(data)
        return data


def fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


class DirectorySink:
    """Writes a backup directory (mode 0700); its manifest last, renamed into place."""

    def __init__(self, target: Path) -> None:
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise BackupError(f"{target} exists and is not an empty directory; name a new one")
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root = target
        self.dump_path = target / DUMP

    def dump_written(self) -> tuple[str, int]:
        fsync_file(self.dump_path)
        return storage.file_sha256(self.dump_path)

    def add_file(self, relative: str, source: Path) -> tuple[str, int]:
        destination = self.root / STORAGE / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        with source.open("rb") as raw, destination.open("xb") as out:
            reader = HashingReader(raw)
            shutil.copyfileobj(reader, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        shutil.copystat(source, destination)  # read-only, and the original mtime
        return reader.digest.hexdigest(), reader.size

    def discard(self, relative: str) -> None:
        (self.root / STORAGE / relative).unlink(missing_ok=True)

    def finish(self, manifest: bytes) -> Path:
        partial = self.root / f".{MANIFEST}.partial"
        partial.write_bytes(manifest)
        fsync_file(partial)
        partial.replace(self.root / MANIFEST)
        return self.root

    def abort(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class TarSink:
    """Writes `<target>.partial` (the dump first, the manifest last) and renames it at the end."""

    def __init__(self, target: Path) -> None:
        if target.exists():
            raise BackupError(f"{target} exists; name a new archive")
        target.parent.mkdir(parents=True, exist_ok=True)
        self.target = target
        self.partial = target.with_name(target.name + ".partial")
        self.scratch = Path(tempfile.mkdtemp(prefix=".canon-backup-", dir=target.parent))
        self.dump_path = self.scratch / DUMP
        compressed = target.name.endswith((".tar.gz", ".tgz"))
        self.tar = tarfile.open(self.partial, "w:gz" if compressed else "w")  # noqa: SIM115

    def _add(self, name: str, source: Path) -> tuple[str, int]:
        stat = source.stat()
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o444
        with source.open("rb") as raw:
            reader = HashingReader(raw)
            self.tar.addfile(info, reader)
        return reader.digest.hexdigest(), reader.size

    def dump_written(self) -> tuple[str, int]:
        return self._add(DUMP, self.dump_path)

    def add_file(self, relative: str, source: Path) -> tuple[str, int]:
        return self._add(f"{STORAGE}/{relative}", source)

    def discard(self, relative: str) -> None:
        """A damaged file stays in the archive, unlisted; a restore ignores it."""

    def finish(self, manifest: bytes) -> Path:
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mtime, info.mode = len(manifest), int(time.time()), 0o444
        self.tar.addfile(info, io.BytesIO(manifest))
        self.tar.close()
        fsync_file(self.partial)
        self.partial.replace(self.target)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return self.target

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.tar.close()
        self.partial.unlink(missing_ok=True)
        shutil.rmtree(self.scratch, ignore_errors=True)


def is_archive(path: Path) -> bool:
    return path.name.endswith(ARCHIVE_SUFFIXES)


@contextlib.contextmanager
def opened(source: Path, *, scratch_parent: Path | None) -> Iterator[tuple[Path, bool]]:
    """The backup as a directory: `source` itself, or an archive unpacked into a scratch
    directory under `scratch_parent` (the target storage root's tmp/, so a restore can move the
    files into place instead of copying them). Yields (directory, unpacked)."""
    if source.is_dir():
        yield source, False
        return
    if not source.is_file() or not tarfile.is_tarfile(source):
        raise BackupError(f"{source} is neither a backup directory nor a tar archive")
    if scratch_parent is not None:
        scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="restore-", dir=scratch_parent))
    try:
        with tarfile.open(source, "r:*") as tar:
            tar.extractall(scratch, filter="data")
        yield scratch, True
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def manifest_checked(directory: Path) -> tuple[dict[str, Any], list[str]]:
    """The manifest, once the dump and every file match it (size and SHA-256); the notes say
    what the backup holds beyond it. Raises BackupError listing every mismatch."""
    path = directory / MANIFEST
    if not path.is_file():
        raise BackupError(
            f"{directory} has no {MANIFEST}: not a Canon backup, or an unfinished one "
            "(the manifest is written last)"
        )
    try:
        manifest = json.loads(path.read_text())
    except ValueError as exc:
        raise BackupError(f"{path} is not valid JSON: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{path} is format {manifest.get('format')!r}; this Canon reads {FORMAT}")
    problems = []
    database = manifest["database"]
    problem = _file_mismatch(directory / DUMP, database["sha256"], database["size"])
    if problem:
        problems.append(f"{DUMP}: {problem}")
    named = set()
    for entry in manifest["storage"]["files"]:
        relative = entry["path"]
        match = CONTENT_PATH.match(relative)
        if match is None or match.group(3) != entry["sha256"]:
            problems.append(f"{relative}: not a content-addressed path for {entry['sha256']}")
            continue
        named.add(relative)
        problem = _file_mismatch(directory / STORAGE / relative, entry["sha256"], entry["size"])
        if problem:
            problems.append(f"{STORAGE}/{relative}: {problem}")
    if problems:
        raise BackupError(
            f"the backup does not match its manifest; nothing was restored:\n{listed(problems)}"
        )
    unlisted = [p for p in stored_files(directory / STORAGE) if p not in named]
    notes = [f"{len(unlisted)} file(s) in the backup are not in its manifest; not restored"]
    return manifest, notes if unlisted else []


def _file_mismatch(path: Path, sha256: str, size: int) -> str | None:
    if not path.is_file():
        return "missing"
    actual_sha, actual_size = storage.file_sha256(path)
    if actual_size != size:
        return f"{actual_size} bytes, the manifest says {size}"
    if actual_sha != sha256:
        return f"SHA-256 {actual_sha}, the manifest says {sha256}"
    return None
