"""The storage lock: no stored file is deleted while a backup runs, or while an upload is about to
name it (`kb.storage`). Deletions take it exclusively, a backup and a reused upload shared."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection, transaction

STORAGE_LOCK_KEY = 0x43616E6F6E04  # "Canon" 4: deleting files from storage


def backup_running() -> bool:
    """Whether a backup holds the storage lock now (orphan collection then does not scan)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT EXISTS (
                SELECT 1 FROM pg_locks
                WHERE locktype = 'advisory' AND granted AND objsubid = 1
                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND classid = %s::bigint::oid AND objid = %s::bigint::oid)
            """,
            [STORAGE_LOCK_KEY >> 32, STORAGE_LOCK_KEY & 0xFFFFFFFF],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


@contextlib.contextmanager
def storage_deletion() -> Iterator[bool]:
    """Wrap every deletion of a stored file: a transaction holding the storage lock exclusively.
    Yields False, and the caller must delete nothing, while a backup holds the lock."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [STORAGE_LOCK_KEY])
            row = cursor.fetchone()
        yield bool(row and row[0])


@contextlib.contextmanager
def deletions_held() -> Iterator[None]:
    """The backup's side of the lock: shared (backups do not exclude each other), held by this
    session until released, or until the session ends if the process dies."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock_shared(%s)", [STORAGE_LOCK_KEY])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_shared(%s)", [STORAGE_LOCK_KEY])
