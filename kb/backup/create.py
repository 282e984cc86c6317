"""Writing a backup (the order and why: kb/backup/__init__.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from kb import storage
from kb.backup.layout import (
    CONTENT_PATH,
    DUMP,
    FORMAT,
    BackupError,
    DirectorySink,
    TarSink,
    is_archive,
    listed,
    live_files,
    tree_size,
)
from kb.backup.postgres import applied_migrations, counts, libpq, pg_tool, run, server_version
from kb.storage_lock import deletions_held


@dataclass(frozen=True)
class BackupResult:
    path: Path
    manifest: dict[str, Any]
    seconds: float
    bytes: int


def backup_create(*, target: Path, allow_missing: bool = False) -> BackupResult:
    """Write a backup of the database and the storage to `target` (a new directory, or a new
    archive when the name ends in .tar / .tar.gz / .tgz). Runs in its own transactions (never
    inside one): the snapshot must be its own. Raises BackupError, leaving no partial backup.

    The database keeps serving and accepting uploads meanwhile; orphan collection waits."""
    if connection.in_atomic_block:
        raise BackupError("a backup takes its own snapshot; do not run it inside a transaction")
    started = time.monotonic()
    version, server_major = server_version()
    pg_dump = pg_tool("pg_dump", at_least=server_major)
    sink: DirectorySink | TarSink = TarSink(target) if is_archive(target) else DirectorySink(target)
    try:
        with deletions_held():
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    # The snapshot stays open, idle, while pg_dump and the file copy run.
                    cursor.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
                    cursor.execute("SELECT pg_export_snapshot()")
                    snapshot = cursor.fetchone()[0]
                migrations = applied_migrations()
                rows = counts()
                referenced = _referenced_sources()
                conninfo, env = libpq()
                run(
                    [
                        str(pg_dump.path),
                        "--format=custom",
                        f"--snapshot={snapshot}",
                        "--no-password",
                        f"--file={sink.dump_path}",
                        f"--dbname={conninfo}",
                    ],
                    env,
                )
            dump_sha, dump_size = sink.dump_written()
            files, notes = _storage_copy(sink)
        copied = {entry["path"] for entry in files}
        missing = [
            {"path": path, "problem": storage.file_problem(path) or "damaged"}
            for path, sha in sorted(referenced.items())
            if path not in copied or not path.endswith(sha)
        ]
        if missing and not allow_missing:
            raise BackupError(
                f"{len(missing)} stored file(s) that revisions name are missing or damaged in "
                f"{storage.location()} (already before this backup):\n"
                + listed(f"{m['path']}: {m['problem']}" for m in missing)
                + "\nFind them (an older backup?) and put them back, or run again with "
                "--allow-missing to record them in the manifest; `kb_verify` names the documents."
            )
        manifest = {
            "format": FORMAT,
            "created_at": timezone.now().isoformat(),
            "migrations": migrations,
            "server": {"version": version, "major": server_major},
            "pg_dump": {"version": pg_dump.version, "major": pg_dump.major},
            "database": {"file": DUMP, "sha256": dump_sha, "size": dump_size},
            "storage": {"files": files, "bytes": sum(entry["size"] for entry in files)},
            "counts": rows,
            "missing_at_backup": missing,
            "notes": notes,
        }
        path = sink.finish(json.dumps(manifest, indent=1, sort_keys=True).encode())
    except BaseException:
        sink.abort()
        raise
    size = path.stat().st_size if path.is_file() else tree_size(path)
    return BackupResult(
        path=path, manifest=manifest, seconds=time.monotonic() - started, bytes=size
    )


def _referenced_sources() -> dict[str, str]:
    """Every stored source a revision names (path → SHA-256), in the current snapshot."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT storage_path, sha256 FROM kb_revision")
        return {str(path): str(sha) for path, sha in cursor.fetchall()}


def _storage_copy(sink: DirectorySink | TarSink) -> tuple[list[dict[str, Any]], list[str]]:
    """Copy every stored file (from the directory, or downloaded from the bucket), hashing it on
    the way; a file whose bytes do not match its name is left out (and noted)."""
    files: list[dict[str, Any]] = []
    notes: list[str] = []
    for relative in live_files():
        match = CONTENT_PATH.match(relative)
        if match is None:
            notes.append(f"{relative}: not a content-addressed name; not backed up")
            continue
        try:
            with storage.local_copy(relative, verify=False) as path:
                sha, size = sink.add_file(relative, path)
        except (FileNotFoundError, storage.StoredFileProblem):
            notes.append(f"{relative}: vanished while backing up; not backed up")
            continue
        if sha != match.group(3):
            sink.discard(relative)
            notes.append(f"{relative}: damaged in the live storage (SHA-256 {sha}); not backed up")
            continue
        files.append({"path": relative, "sha256": sha, "size": size})
    return files, notes
