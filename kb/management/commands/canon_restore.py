"""Restore a backup made by canon_backup into an empty database and storage root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.backup import BackupError, backup_check, backup_restore


class Command(BaseCommand):
    help = (
        "Restore a canon_backup directory or archive into the database of DATABASE_URL and the "
        "storage (CANON_STORAGE_ROOT, or the bucket of CANON_STORAGE_URL), both empty: "
        "checksums first, then the files, then "
        "the database, then migrations and kb_verify (docs/BACKUP.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", type=Path)
        parser.add_argument(
            "--force",
            action="store_true",
            help="restore into a non-empty database (its public schema is dropped first) and "
            "storage root (files already there are kept when their bytes are the backup's)",
        )
        parser.add_argument(
            "--check-only",
            action="store_true",
            help="check the backup's checksums against its manifest; restore nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["check_only"]:
                manifest = backup_check(source=options["source"])
                self.stdout.write(
                    f"canon_restore: {options['source']} matches its manifest "
                    f"({len(manifest['storage']['files'])} files and the database dump, made "
                    f"{manifest['created_at']})"
                )
                return
            result = backup_restore(source=options["source"], force=options["force"])
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        rows = result.manifest["counts"]
        lines = [
            f"canon_restore: restored the backup made {result.manifest['created_at']} "
            f"in {result.seconds:.1f} s",
            f"  storage:    {result.files_restored} files restored, {result.files_kept} "
            "already there",
            f"  database:   {rows['documents']} documents, {rows['revisions']} revisions, "
            f"{rows['chunks']} chunks (the manifest's counts)",
            "  migrations: "
            + (
                f"applied {len(result.migrations_applied)} newer than the backup: "
                + ", ".join(result.migrations_applied)
                if result.migrations_applied
                else "the backup's state is this code's"
            ),
            f"  tasks:      {result.tasks_requeued} queued task(s) sent again",
        ]
        lines += [f"  note: {note}" for note in result.notes]
        self.stdout.write("\n".join(lines))
        if result.violations:
            report = "\n".join(f"  {v}" for v in result.violations)
            raise CommandError(
                f"restored, but kb_verify reports {len(result.violations)} violation(s):\n{report}"
            )
        self.stdout.write("kb_verify: all invariants hold.")
