"""Backup and restore: one PostgreSQL dump plus the content-addressed storage, taken in an order
that lets no restore lack a file its database names. docs/BACKUP.md is the operator's page.

`layout` (the files on disk, the manifest check), `postgres` (pg_dump / pg_restore for the
server's version), `lock` (the storage lock), `create` and `restore`.

A backup is a directory (or the same in one `.tar` / `.tar.gz`):

    database.dump   `pg_dump --format=custom` of the whole database, from one exported snapshot
    storage/        every file under the storage root's `sources/` and `derived/` (never `tmp/`)
    manifest.json   written last: when, the migration state, the server's version, counts, and
                    the SHA-256 and size of the dump and of every file

Why this order. Stored files are immutable and named by their SHA-256; an upload stores its file
*before* the transaction that names it commits; and the only code that deletes a stored file is
the reconciler's orphan collection (purge and retention delete rows, never files). So a backup

1. takes the storage lock (`STORAGE_LOCK_KEY`) shared for its whole run: orphan collection takes
   it exclusively around each deletion, so nothing is deleted until the backup ends;
2. opens a repeatable-read transaction, exports its snapshot, reads in it the files the
   revisions name, and runs pg_dump on that very snapshot (`--snapshot`);
3. then copies the storage files, hashing each. Every file the dump names was stored before the
   snapshot and none was deleted since, so the copy holds them all; this is checked, and a file
   the dump names that is missing (or damaged) already in the live storage fails the backup,
   unless `allow_missing` records it in the manifest instead.

A restore checks every checksum before it changes anything, refuses a database or storage root
that is not empty (unless `force`), copies the files first and restores the database after (one
transaction), so a Canon process started against the target never sees a revision whose file is
not there yet. Then it migrates to this code's schema, re-sends the queued tasks' messages (the
broker is not part of a backup) and runs `kb_verify`.
"""

from kb.backup.create import BackupResult, backup_create
from kb.backup.layout import BackupError
from kb.backup.postgres import pg_tool
from kb.backup.restore import RestoreResult, backup_check, backup_restore

__all__ = [
    "BackupError",
    "BackupResult",
    "RestoreResult",
    "backup_check",
    "backup_create",
    "backup_restore",
    "pg_tool",
]
