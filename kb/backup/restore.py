"""Checking and restoring a backup."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.models import Exists, OuterRef
from django.utils import timezone

from kb import storage
from kb.backup.layout import (
    DUMP,
    STORAGE,
    BackupError,
    listed,
    live_files,
    manifest_checked,
    opened,
)
from kb.backup.postgres import (
    counts,
    database_clear,
    libpq,
    pg_tool,
    relations,
    run,
    server_version,
)
from kb.verify import Violation, verify
from work.models import IngestionTask, OutboxEvent
from work.outbox import outbox_add


@dataclass
class RestoreResult:
    manifest: dict[str, Any]
    files_restored: int
    files_kept: int
    migrations_applied: list[str]
    tasks_requeued: int
    violations: list[Violation]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def backup_restore(*, source: Path, force: bool = False) -> RestoreResult:
    """Restore a backup into the database of DATABASE_URL and the storage (CANON_STORAGE_ROOT,
    or the bucket of CANON_STORAGE_URL), both empty (`force`: the database's public schema is
    dropped first, and stored files already there are kept when their bytes are the backup's;
    no other file is touched). Nothing changes before every checksum has matched. Raises
    BackupError.

    Run it with no Canon process using the target (workers, beat, web) until it has finished."""
    started = time.monotonic()
    store = storage.backend()
    clear = False
    if relations():
        if not force:
            raise BackupError(
                f"the database {connection.settings_dict['NAME']!r} is not empty; restore into an "
                "empty one, or pass --force to drop its public schema first"
            )
        clear = True
    present = set(live_files())
    if present and not force:
        raise BackupError(
            f"the storage {store.location()} already holds {len(present)} file(s); restore "
            "into an empty one, or pass --force to keep the files whose bytes are the backup's"
        )
    with opened(source, scratch_parent=store.scratch_dir()) as (directory, unpacked):
        manifest, notes = manifest_checked(directory)
        unknown = _unknown_migrations(manifest)
        if unknown:
            raise BackupError(
                "the backup comes from a newer Canon (migrations this code does not know: "
                + ", ".join(unknown[:10])
                + "); restore it with that version"
            )
        entries = manifest["storage"]["files"]
        clashes = [
            e["path"]
            for e in entries
            if e["path"] in present and storage.file_problem(e["path"], sha256=e["sha256"])
        ]
        if clashes:
            raise BackupError(
                "files in the storage differ from the backup's; nothing was restored:\n"
                + listed(clashes)
            )
        version, server_major = server_version()
        pg_restore = pg_tool("pg_restore", at_least=max(server_major, manifest["pg_dump"]["major"]))
        if server_major < manifest["server"]["major"]:
            notes.append(
                f"the backup comes from PostgreSQL {manifest['server']['version']} and is "
                f"restored into {version}: PostgreSQL does not promise that works"
            )
        if clear:
            database_clear()
        restored = _storage_restore(directory, entries, present, move=unpacked)
        conninfo, env = libpq()
        run(
            [
                str(pg_restore.path),
                "--single-transaction",
                "--exit-on-error",
                "--no-owner",
                "--no-privileges",
                "--no-password",
                f"--dbname={conninfo}",
                str(directory / DUMP),
            ],
            env,
            after=f"The {restored} storage file(s) were restored; the database is unchanged (one "
            "transaction). Fix the cause, then run canon_restore again with --force.",
        )
    connection.close()  # a new session sees the restored schema
    now = counts()
    if now != manifest["counts"]:
        differ = [f"{k}: {now.get(k)} (manifest {v})" for k, v in manifest["counts"].items()]
        raise BackupError(
            "the restored database's rows differ from the manifest:\n" + listed(differ)
        )
    applied = _migrate()
    requeued = _tasks_requeue()
    for missing in manifest.get("missing_at_backup", []):
        notes.append(f"missing already when backed up: {missing['path']} ({missing['problem']})")
    return RestoreResult(
        manifest=manifest,
        files_restored=restored,
        files_kept=len(entries) - restored,
        migrations_applied=applied,
        tasks_requeued=requeued,
        violations=verify(),
        notes=notes,
        seconds=time.monotonic() - started,
    )


def backup_check(*, source: Path) -> dict[str, Any]:
    """Check a backup's checksums without restoring it; return its manifest."""
    with opened(source, scratch_parent=None) as (directory, _unpacked):
        manifest, _notes = manifest_checked(directory)
    return manifest


def _unknown_migrations(manifest: dict[str, Any]) -> list[str]:
    """Migrations the backup's database has that this code does not know (a newer Canon)."""
    known = set(MigrationLoader(None, ignore_no_migrations=True).graph.nodes)
    return [
        f"{app}.{name}"
        for app, names in manifest["migrations"].items()
        for name in names
        if (app, name) not in known
    ]


def _storage_restore(
    directory: Path, entries: list[dict[str, Any]], present: set[str], *, move: bool
) -> int:
    """Put each file in place through the storage backend (the directory: as `kb.storage`
    writes, keeping the backup's mtime, moved when unpacked from an archive; the bucket: a
    put-if-absent whose SHA-256 checksum the store verifies). Returns how many."""
    store = storage.backend()
    restored = 0
    for entry in entries:
        relative = entry["path"]
        if relative in present:
            continue
        try:
            store.restore_file(
                directory / STORAGE / relative, relative=relative, sha256=entry["sha256"], move=move
            )
        except storage.StorageError as exc:
            raise BackupError(f"{relative}: {exc}") from None
        restored += 1
    return restored


def _migrate() -> list[str]:
    """Bring a backup from an older Canon to this code's schema (as `make run` does at start)."""
    from django.core.management import call_command

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    names = [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]
    if names:
        call_command("migrate", interactive=False, verbosity=0)
    return names


def _tasks_requeue() -> int:
    """The broker's messages are not in a backup: a queued task whose events were all published
    would wait for a message the target's broker never had. Give each a new event (a duplicate
    message is harmless: a claim is a conditional UPDATE). Returns how many."""
    now = timezone.now()
    pending = OutboxEvent.objects.filter(
        task=OuterRef("pk"), published_at__isnull=True, dead_at__isnull=True
    )
    requeued = 0
    with transaction.atomic():
        for task in IngestionTask.objects.filter(
            status__in=[IngestionTask.Status.QUEUED, IngestionTask.Status.RETRY_WAIT]
        ).exclude(Exists(pending)):
            wait = (task.available_at - now).total_seconds() if task.available_at else 0.0
            outbox_add(task=task, delay=max(0.0, wait))
            requeued += 1
    return requeued
