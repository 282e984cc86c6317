"""Stored-file checks: orphan source files (an upload that crashed before its commit), removed
under the storage lock, and files a revision still needs that are missing."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

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

logger = logging.getLogger(__name__)

STORED_FILE_BATCH = 1000  # stats per pass; a cursor in the cache walks all revisions in turn


STORED_FILE_CURSOR = "canon:reconciler:stored-file-cursor"


def find_orphan_files() -> Iterator[Finding]:
    """Source files no Revision names, older than the grace period (a crash between storing the
    bytes and committing the upload). Lists at most BATCH * 10 files per pass (a directory walk,
    or the bucket's listing by prefix); none while a backup runs (it holds the storage lock, and
    the repair would not delete). A file's age is the later of its last write and its last reuse
    (`kb.storage` backends' `kept_at`). A store that cannot be reached ends the pass's scan."""
    if backup_running():
        return
    grace = time.time() - settings.RECONCILER_ORPHAN_GRACE_SECONDS
    store = storage.backend()
    try:
        for seen, (relative, written) in enumerate(store.list_files("sources"), 1):
            if seen > BATCH * 10:
                return
            if written > grace or Revision.objects.filter(storage_path=relative).exists():
                continue
            kept = store.kept_at(relative)
            if kept is None or kept > grace:
                continue
            yield Finding("orphan_file", "file", 0, None, relative)
    except storage.StorageUnavailable as exc:
        logger.warning("orphan collection skipped this pass: %s", exc)


def repair_orphan_file(finding: Finding) -> str:
    """Delete the orphan under the storage lock (exclusive), after checking again that no
    Revision names it and that no upload reused it meanwhile (a reuse refreshes its age under
    the same lock, shared, before its commit). Idempotent: a file gone already is "deleted"."""
    store = storage.backend()
    with storage_deletion() as allowed:
        if not allowed:
            return "kept: a backup is running"
        if Revision.objects.filter(storage_path=finding.detail).exists():
            return "referenced meanwhile"
        grace = time.time() - settings.RECONCILER_ORPHAN_GRACE_SECONDS
        try:
            kept = store.kept_at(finding.detail)
            if kept is not None and kept > grace:
                return "reused meanwhile"
            store.delete(finding.detail)
        except storage.StorageUnavailable:
            return "kept: the file store is unreachable"
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
        try:
            problem = stored_file_problem(path, sha256, size)
        except storage.StorageUnavailable as exc:
            logger.warning("stored files not checked this pass: %s", exc)
            return
        if problem:
            yield Finding(
                "stored_file_missing",
                "revision",
                int(revision_id),
                int(kb_id),
                f"{problem} (document {document_id}, {path})",
            )
