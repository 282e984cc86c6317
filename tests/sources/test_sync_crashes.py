"""Real worker processes die inside a sync run: after submitting an item, and after submitting
every item but before deleting. The run converges with no duplicate revision and no missed
deletion, search never sees a partial version, and kb_verify is clean."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Count

from kb.models import Document, KnowledgeBase, Revision
from sources.models import Source, SyncRun
from sources.services.runs import sync_request
from tests.conftest import Worker
from tests.fault.harness import (
    FAULT_LEASE_TTL,
    assert_verified,
    beat_once,
    run_with_searcher,
    wait_for_marker,
)
from tests.sources.conftest import SOURCES_KEY
from work.models import IngestionTask

pytestmark = pytest.mark.integration


def env(settings: Any, **extra: str) -> dict[str, str]:
    return {
        "CANON_LEASE_TTL_SECONDS": FAULT_LEASE_TTL,
        "CANON_SOURCES_ALLOW_PRIVATE": "1",
        "CANON_SOURCES_KEY": SOURCES_KEY,
        "CANON_SOURCES_CACHE_ROOT": str(settings.SOURCES_CACHE_ROOT),
        "CANON_SOURCES_FOLDER_ROOTS": os.pathsep.join(settings.SOURCES_FOLDER_ROOTS),
        **extra,
    }


def finished(run: SyncRun) -> SyncRun | None:
    """The run, once it and every build it asked for are done (a sync delete's purge task waits
    for the retention window: not counted)."""
    building = IngestionTask.objects.filter(
        kind=IngestionTask.Kind.BUILD, status__in=IngestionTask.OPEN_STATUSES
    ).exists()
    return (
        None if building else SyncRun.objects.filter(pk=run.pk, finished_at__isnull=False).first()
    )


def settle(condition: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    """Run the beat's jobs (relay, sweeper) until `condition()` holds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            tasks = list(IngestionTask.objects.values_list("id", "kind", "status", "attempt"))
            pytest.fail(f"no {what} after {timeout}s; tasks: {tasks}")
        beat_once()
        time.sleep(0.2)
    return value


@pytest.mark.parametrize("point", ["SYNC_AFTER_ITEM", "SYNC_BEFORE_DELETIONS"])
def test_a_worker_killed_mid_sync_converges_with_no_duplicate_and_no_missed_deletion(
    transactional_db: None,
    kb: KnowledgeBase,
    folder_source: Callable[..., Source],
    worker_factory: Callable[..., Worker],
    settings: Any,
    tmp_path: Path,
    point: str,
) -> None:
    source = folder_source()
    root = Path(source.config["path"])
    for number in range(6):
        (root / f"page-{number}.txt").write_text(f"Page {number} of the handbook, first edition.")
    first = worker_factory(pool="solo", **env(settings))
    run, _ = sync_request(source=source)
    settle(lambda: finished(run), "the first sync")
    first.stop()  # the doomed worker alone takes the next run
    searcher = run_with_searcher(kb, ["handbook edition"])

    # given: two pages changed, one gone, one new, and a worker that dies part-way
    for number in (0, 1):
        (root / f"page-{number}.txt").write_text(f"Page {number} of the handbook, second edition.")
    (root / "page-5.txt").unlink()
    (root / "page-6.txt").write_text("Page 6 of the handbook, new in the second edition.")
    markers = tmp_path / "markers"
    value = "2" if point == "SYNC_AFTER_ITEM" else "1"
    fault = {f"CANON_FAULT_{point}": value, "CANON_FAULT_MARKER_DIR": str(markers)}
    doomed = worker_factory(pool="solo", **env(settings, **fault))
    run, _ = sync_request(source=source)
    wait_for_marker(markers, point.lower() + ("_2" if point == "SYNC_AFTER_ITEM" else ""))
    assert doomed.wait_exit() == 137

    # then the sweeper hands the run to a live worker, which finishes it
    worker_factory(pool="solo", **env(settings))
    done = settle(lambda: finished(run), "the interrupted sync")
    assert done.state == SyncRun.State.SUCCEEDED, done.error
    assert (done.new, done.changed, done.deleted) == (1, 2, 1)
    assert done.task is not None and done.task.attempt == 2

    revisions = dict(
        Revision.objects.filter(document__kb=kb)
        .values_list("document__key")
        .annotate(n=Count("id"))
    )
    assert revisions == {
        "share/page-0.txt": 2,
        "share/page-1.txt": 2,
        "share/page-2.txt": 1,
        "share/page-3.txt": 1,
        "share/page-4.txt": 1,
        "share/page-5.txt": 1,
        "share/page-6.txt": 1,
    }
    assert Document.objects.get(key="share/page-5.txt").deleted_at is not None
    searcher.stop()
    assert searcher.violations == [], searcher.violations
    assert_verified()
