"""B16 sync: how long a sync of a folder source takes when nothing changed (10,000 items), when
1,000 changed, and the first one, with where the time goes (listing, fetching + the upload
checks + storing, submitting: the fenced transaction per item that makes the revision), beside
raw baselines in the same run: walking and stat-ing the same tree (what a no-op sync cannot go
below) and the upload services called directly for the same 1,000 files (what submitting cannot
go below). `python -m bench.b16_sync [--items N] [--changed M]`.

Each run executes in this process as a worker would (`task_execute`); builds are not run (the
revisions' builds are B1's subject), only queued."""

from __future__ import annotations

import os
import shutil
import time

from bench import common


def write_tree(root: str, items: int, edition: int, only: range | None = None) -> None:
    for i in only if only is not None else range(items):
        folder = os.path.join(root, f"d{i // 500:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"page-{i:05d}.txt"), "w") as out:
            out.write(f"Page {i}, edition {edition}. " + "Words about the handbook. " * 40)


def walk_and_stat(root: str) -> int:
    seen = 0
    for folder, _, files in os.walk(root):
        for name in files:
            os.stat(os.path.join(folder, name))
            seen += 1
    return seen


def main() -> None:
    a = common.args(__doc__ or "", items=10_000, changed=1_000)
    common.setup(fresh=True)
    os.environ["CANON_SOURCES_ALLOW_PRIVATE"] = "1"
    from django.conf import settings

    settings.SOURCES_ALLOW_PRIVATE = True
    root = str(common.ROOT / ".data" / "bench-b16")
    settings.SOURCES_FOLDER_ROOTS = [root]  # the one folder this bench's source may read

    from ingestion.pipeline.run import task_execute
    from kb import storage
    from kb.services.documents import document_create
    from sources.models import SyncRun
    from sources.services.runs import sync_request
    from sources.services.sources import source_save

    shutil.rmtree(root, ignore_errors=True)
    write_tree(root, a.items, edition=1)
    kb = common.tenant_kb("b16-sync")
    source = source_save(kb=kb, name="Share", slug="share", kind="folder", config={"path": root})

    def timed_sync() -> tuple[float, SyncRun]:
        run, _ = sync_request(source=source)
        assert run.task_id is not None
        started = time.perf_counter()
        task_execute(task_id=run.task_id, worker_id="bench")
        elapsed = time.perf_counter() - started
        run.refresh_from_db()
        assert run.state == SyncRun.State.SUCCEEDED, run.error
        return elapsed, run

    first_s, first = timed_sync()
    assert first.new == a.items, (first.new, first.problems[:3])
    walk_s = min(_timed(lambda: walk_and_stat(root)) for _ in range(3))
    noop_s, noop = timed_sync()
    assert noop.unchanged == a.items
    write_tree(root, a.items, edition=2, only=range(a.changed))
    changed_s, changed = timed_sync()
    assert changed.changed == a.changed and changed.unchanged == a.items - a.changed

    # Baseline: the same number of files through the upload services directly (store + create).
    baseline_kb = common.tenant_kb("b16-direct")
    started = time.perf_counter()
    for i in range(a.changed):
        data = (f"Page {i}, direct. " + "Words about the handbook. " * 40).encode()
        document_create(
            kb=baseline_kb,
            key=f"direct/{i}",
            title="",
            stored=storage.store_bytes(data),
            media_type="text/plain",
            original_name=f"page-{i}.txt",
        )
    direct_s = time.perf_counter() - started

    def split(run: SyncRun) -> str:
        return (
            f"list {run.seconds_listing:.2f} / fetch {run.seconds_fetching:.2f} / "
            f"submit {run.seconds_submitting:.2f}"
        )

    rows = [
        ("phase", "items", "seconds", "per item ms", "where the time goes (s)", "vs baseline"),
        (
            "first sync (all new)",
            a.items,
            f"{first_s:.2f}",
            f"{1000 * first_s / a.items:.2f}",
            split(first),
            "",
        ),
        (
            "no-op sync (unchanged)",
            a.items,
            f"{noop_s:.2f}",
            f"{1000 * noop_s / a.items:.3f}",
            split(noop),
            f"{common.ratio(noop_s, walk_s)}x walk+stat ({walk_s:.2f}s)",
        ),
        (
            f"{a.changed} changed",
            a.items,
            f"{changed_s:.2f}",
            f"{1000 * changed_s / a.changed:.2f} per changed",
            split(changed),
            f"{common.ratio(changed_s, direct_s)}x direct uploads ({direct_s:.2f}s)",
        ),
    ]
    common.report(
        "B16",
        {
            "items": a.items,
            "changed": a.changed,
            "first_s": first_s,
            "noop_s": noop_s,
            "changed_s": changed_s,
            "walk_stat_s": walk_s,
            "direct_uploads_s": direct_s,
            "first_split": split(first),
            "noop_split": split(noop),
            "changed_split": split(changed),
        },
        rows,
    )


def _timed(fn: object) -> float:
    started = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
