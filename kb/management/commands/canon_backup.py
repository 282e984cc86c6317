"""Back up the database and the content-addressed storage into one directory or archive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.backup import BackupError, backup_create


class Command(BaseCommand):
    help = (
        "Back up Canon: a pg_dump of the database from one snapshot, then every stored file, "
        "and a manifest of checksums (docs/BACKUP.md). TARGET is a new directory, or an "
        "archive ending in .tar, .tar.gz or .tgz."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("target", type=Path)
        parser.add_argument(
            "--allow-missing",
            action="store_true",
            help="record stored files that revisions name but the live storage lacks, "
            "instead of failing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = backup_create(target=options["target"], allow_missing=options["allow_missing"])
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        manifest = result.manifest
        rows = manifest["counts"]
        storage = manifest["storage"]
        self.stdout.write(
            "\n".join(
                [
                    f"canon_backup: wrote {result.path} ({result.bytes:,} bytes) "
                    f"in {result.seconds:.1f} s",
                    f"  database: PostgreSQL {manifest['server']['version']}, "
                    f"{manifest['database']['size']:,} bytes dumped by "
                    f"{manifest['pg_dump']['version']}",
                    f"  storage:  {len(storage['files'])} files, {storage['bytes']:,} bytes",
                    f"  rows:     {rows['knowledge_bases']} knowledge bases, "
                    f"{rows['documents']} documents ({rows['documents_deleted']} deleted), "
                    f"{rows['revisions']} revisions, {rows['chunks']} chunks",
                ]
            )
        )
        for missing in manifest["missing_at_backup"]:
            self.stderr.write(
                f"  missing in the live storage: {missing['path']} ({missing['problem']})"
            )
        for note in manifest["notes"]:
            self.stderr.write(f"  note: {note}")
