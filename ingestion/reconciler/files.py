"""Stored-file checks: orphan source files (an upload that crashed before its commit), removed
under the storage lock, and files a revision still needs that are missing."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.core.cache import cache

from ingestion.reconciler.findings import (
    BATCH,
    Finding,
)
from kb import storage
from kb.models import Revision
from kb.storage_lock import backup_running, storage_deletion
from kb.verify import needed_sources, stored_file_problem

STORED_FILE_BATCH = 1000  # stats per pass; a cursor in the cache walks all revisions in turn


STORED_FILE_CURSOR = "canon:reconciler:stored-file-cursor"


def find_orphan_files() -> Iterator[Finding]:
    """Source files no Revision names, older than the grace period (a crash between storing the
    bytes and committing the upload). Scans at most BATCH files per pass; none while a backup
    runs (it holds the storage lock, and the repair would not delete)."""
    root = storage.storage_root() / "sources"
    if not root.exists() or backup_running():
        return
    grace = time.time() - settings.RECONCILER_ORPHAN_GRACE_SECONDS
    seen = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            seen += 1
            if seen > BATCH * 10:
                return
            path = Path(dirpath) / name
            relative = str(path.relative_to(storage.storage_root()))
            if path.stat().st_mtime > grace:
                continue
            if Revision.objects.filter(storage_path=relative).exists():
                continue
            yield Finding("orphan_file", "file", 0, None, relative)


def repair_orphan_file(finding: Finding) -> str:
    path = storage.absolute_path(finding.detail)
    with storage_deletion() as allowed:
        if not allowed:
            return "kept: a backup is running"
        if Revision.objects.filter(storage_path=finding.detail).exists():
            return "referenced meanwhile"
        # An upload reusing the file refreshes its mtime under this lock before it commits.
        grace = time.time() - settings.RECONCILER_ORPHAN_GRACE_SECONDS
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime > grace:
                return "reused meanwhile"
        path.unlink(missing_ok=True)
    return "deleted the file"


def find_stored_file_missing() -> Iterator[Finding]:
    """The source file of a revision a document still needs (desired, or behind a published
    build) is missing or has the wrong size: typically a database restored without its storage.
    Search keeps serving the published chunks (they are complete, in the database); what breaks
    is building the document again, so a person must put the file back (restore storage from the
    backup). Checks STORED_FILE_BATCH revisions per pass, resuming where the last pass stopped."""
    try:
        after = int(cache.get(STORED_FILE_CURSOR) or 0)
    except Exception:  # the cache is Redis; losing the cursor only restarts the walk
        after = 0
    rows = needed_sources(after=after, limit=STORED_FILE_BATCH)
    with contextlib.suppress(Exception):
        cache.set(STORED_FILE_CURSOR, rows[-1][0] if len(rows) == STORED_FILE_BATCH else 0, None)
    for revision_id, document_id, kb_id, path, sha256, size in rows:
        problem = stored_file_problem(path, sha256, size)
        if problem:
            yield Finding(
                "stored_file_missing",
                "revision",
                int(revision_id),
                int(kb_id),
                f"{problem} (document {document_id}, {path})",
            )
