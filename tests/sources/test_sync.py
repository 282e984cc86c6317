"""A sync run over a real folder, run in this process as a worker would (`task_execute`): what
it submits, what it leaves alone, and how carefully it deletes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from ingestion.pipeline.run import task_execute
from ingestion.sweeper import lease_sweep
from kb.models import Build, Document, KnowledgeBase, MetadataField, PublicationEvent, Revision
from kb.services.base import ActionRefused
from kb.services.documents import document_delete, document_restore
from kb.services.metadata import metadata_field_save
from sources.kinds.base import SourceUnavailable
from sources.kinds.folder import FolderKind
from sources.models import Source, SourceItem, SyncRun
from sources.services.runs import (
    sync_deletions_confirm,
    sync_deletions_keep,
    sync_request,
    syncs_start_due,
)
from sources.services.sources import source_pause, source_save
from tests.helpers import run_pending
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(
    transaction=True
)  # real commits: the run claims its task by the database clock


def task_of(run: SyncRun) -> int:
    assert run.task_id is not None
    return run.task_id


def sync(source: Source) -> SyncRun:
    """One sync of `source`, run to its end in this process."""
    run, _ = sync_request(source=source)
    task_execute(task_id=task_of(run), worker_id="test")
    run.refresh_from_db()
    return run


def write(root: Path, path: str, text: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def root_of(source: Source) -> Path:
    return Path(source.config["path"])


def counts(run: SyncRun) -> dict[str, int]:
    names = ("new", "changed", "unchanged", "restored", "deleted", "failed", "skipped")
    return {name: getattr(run, name) for name in names if getattr(run, name)}


class WorkerDied(BaseException):
    """Stands in for the process dying: nothing below catches it."""


def run_until_the_worker_dies(
    source: Source, monkeypatch: pytest.MonkeyPatch, *, after_fetches: int
) -> SyncRun:
    """Start a sync of `source` whose worker dies as it fetches item `after_fetches` + 1 (the
    items before it submitted); the run is left open, its task leased to the dead worker."""
    real_fetch = FolderKind.fetch
    fetched: list[str] = []

    def dying_fetch(self: FolderKind, item: Any) -> Any:
        if len(fetched) == after_fetches:
            raise WorkerDied
        fetched.append(item.path)
        return real_fetch(self, item)

    with monkeypatch.context() as patch:
        patch.setattr(FolderKind, "fetch", dying_fetch)
        run, _ = sync_request(source=source)
        with pytest.raises(WorkerDied):
            task_execute(task_id=task_of(run), worker_id="doomed")
    return run


def test_first_sync_submits_every_item_and_the_second_changes_nothing(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    metadata_field_save(kb=kb, name="team", type="string")
    source = folder_source(access_groups=["staff"], metadata_map={"owner": "team"})
    root = root_of(source)
    write(root, "guide.md", "---\nowner: platform\n---\n# Guide\n\nHow to deploy.\n")
    write(root, "faq/billing.txt", "Invoices go out monthly.")
    write(root, "faq/refunds.txt", "Refunds take five days.")

    run = sync(source)

    assert run.state == SyncRun.State.SUCCEEDED, run.error
    assert counts(run) == {"new": 3}
    assert run.listing_complete
    documents = {d.key: d for d in Document.objects.filter(kb=kb)}
    assert set(documents) == {"share/guide.md", "share/faq/billing.txt", "share/faq/refunds.txt"}
    assert documents["share/guide.md"].access_groups == ["staff"]
    assert documents["share/guide.md"].metadata == {"team": "platform"}
    assert SourceItem.objects.filter(source=source, document__isnull=False).count() == 3
    # Builds were asked for, as for any upload.
    assert Build.objects.filter(document__kb=kb).count() == 3

    again = sync(source)
    assert again.state == SyncRun.State.SUCCEEDED
    assert counts(again) == {"unchanged": 3}
    assert Revision.objects.filter(document__kb=kb).count() == 3


def test_a_changed_file_is_a_new_revision_and_a_touched_one_is_not(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    write(root, "a.txt", "first words")
    write(root, "b.txt", "other words")
    sync(source)

    write(root, "a.txt", "second words, longer")
    stat = (root / "b.txt").stat()
    os.utime(root / "b.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000_000))
    run = sync(source)

    assert counts(run) == {"changed": 1, "unchanged": 1}
    a = Document.objects.get(kb=kb, key="share/a.txt")
    b = Document.objects.get(kb=kb, key="share/b.txt")
    assert a.desired_revision == 2
    assert b.desired_revision == 1  # same bytes: no revision, only the item's version moved
    item = SourceItem.objects.get(source=source, path="b.txt")
    assert (
        item.version == f"{(root / 'b.txt').stat().st_mtime_ns}-{(root / 'b.txt').stat().st_size}"
    )


def test_an_item_gone_from_the_source_is_deleted_restorably_and_comes_back(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    for name in ("a", "b", "c"):
        write(root, f"{name}.txt", f"text of {name}")
    sync(source)

    (root / "b.txt").unlink()
    run = sync(source)

    assert counts(run) == {"unchanged": 2, "deleted": 1}
    b = Document.objects.get(kb=kb, key="share/b.txt")
    assert b.deleted_at is not None and b.purged_at is None
    event = PublicationEvent.objects.filter(document=b).latest("pk")
    assert event.reason == "deleted by sync of Share: gone at the source"

    write(root, "b.txt", "text of b, back again")
    run = sync(source)
    assert counts(run) == {"unchanged": 2, "restored": 1}
    b.refresh_from_db()
    assert b.deleted_at is None
    assert b.desired_revision == 2


def test_a_document_a_person_restores_while_its_item_is_gone_stays(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    for name in ("a", "b", "c"):
        write(root, f"{name}.txt", f"text of {name}")
    sync(source)
    (root / "b.txt").unlink()
    sync(source)
    b = Document.objects.get(kb=kb, key="share/b.txt")
    document_restore(document_id=b.pk, reason="still needed, though gone from the share")

    run = sync(source)

    assert counts(run) == {"unchanged": 2}  # a person's restore is not undone by the next run
    b.refresh_from_db()
    assert b.deleted_at is None


def test_a_mass_deletion_waits_for_a_person(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    for number in range(10):
        write(root, f"page-{number}.txt", f"page {number}")
    sync(source)
    for number in range(8):
        (root / f"page-{number}.txt").unlink()

    run = sync(source)

    assert run.state == SyncRun.State.AWAITING_CONFIRMATION
    assert run.deletions_planned == 8 and run.deleted == 0
    assert "8 of 10 documents (80 %)" in run.deletion_note
    assert not Document.objects.filter(kb=kb, deleted_at__isnull=False).exists()
    assert SourceItem.objects.filter(pending_delete_run=run).count() == 8

    # The next run holds the same deletions and supersedes this one's question.
    later = sync(source)
    assert later.state == SyncRun.State.AWAITING_CONFIRMATION
    run.refresh_from_db()
    assert run.state == SyncRun.State.CANCELLED
    with pytest.raises(ActionRefused):
        sync_deletions_confirm(run_id=run.pk)

    assert sync_deletions_confirm(run_id=later.pk) == 8
    later.refresh_from_db()
    assert later.state == SyncRun.State.SUCCEEDED and later.deleted == 8
    assert Document.objects.filter(kb=kb, deleted_at__isnull=False).count() == 8
    with pytest.raises(ActionRefused):
        sync_deletions_confirm(run_id=later.pk)  # a second confirm changes nothing


def test_keeping_held_documents_deletes_nothing(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    for number in range(6):
        write(root, f"p{number}.txt", f"page {number}")
    sync(source)
    for number in range(6):
        (root / f"p{number}.txt").unlink()

    run = sync(source)

    assert run.state == SyncRun.State.AWAITING_CONFIRMATION
    assert "the listing was empty where the last run saw 6 items" in run.deletion_note
    assert sync_deletions_keep(run_id=run.pk) == 6
    run.refresh_from_db()
    assert run.state == SyncRun.State.SUCCEEDED
    assert not Document.objects.filter(kb=kb, deleted_at__isnull=False).exists()


def test_a_listing_that_fails_deletes_nothing_and_says_why(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    write(root, "a.txt", "alpha")
    write(root, "b.txt", "beta")
    sync(source)
    for path in root.iterdir():
        path.unlink()
    root.rmdir()  # the share is unmounted

    run = sync(source)

    assert run.state == SyncRun.State.FAILED
    assert "The listing failed" in run.error and str(root) in run.error
    assert run.deletion_note.startswith("Nothing was deleted (2 items not seen)")
    assert not run.listing_complete
    assert not Document.objects.filter(kb=kb, deleted_at__isnull=False).exists()


def test_a_bad_file_fails_readably_and_the_others_go_on(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    write(root, "good.txt", "fine text")
    (root / "report.pdf").write_bytes(b"this is not a PDF at all")
    (root / "empty.txt").write_bytes(b"")

    run = sync(source)

    assert counts(run) == {"new": 1, "failed": 2}
    reasons = {problem["path"]: problem["reason"] for problem in run.problems}
    assert "empty" in reasons["empty.txt"]
    assert "report.pdf" in reasons["report.pdf"]
    assert Document.objects.filter(kb=kb).count() == 1
    # Not recorded as taken: the next run tries them again.
    assert not SourceItem.objects.filter(source=source, path="report.pdf", version__gt="").exists()


def test_a_document_a_person_deleted_stays_deleted(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    write(root, "a.txt", "alpha")
    sync(source)
    document = Document.objects.get(kb=kb, key="share/a.txt")
    document_delete(document_id=document.pk)
    write(root, "a.txt", "alpha, edited")

    run = sync(source)

    assert counts(run) == {"skipped": 1}
    assert run.problems[0]["reason"] == "deleted in Canon by a person; restore it to sync it again"
    document.refresh_from_db()
    assert document.deleted_at is not None and document.desired_revision == 1


def test_a_knowledge_base_that_requires_approval_queues_synced_revisions(
    approval_kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source(kb=approval_kb)
    write(root_of(source), "a.txt", "words to approve")
    sync(source)

    run_pending()  # the builds run

    build = Build.objects.get(document__key="share/a.txt")
    assert build.state == Build.State.READY  # awaiting approval, not live


def test_a_run_resumed_after_its_worker_died_submits_nothing_twice(
    kb: KnowledgeBase, folder_source: Callable[..., Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = folder_source()
    root = root_of(source)
    for name in ("a", "b", "c", "d"):
        write(root, f"{name}.txt", f"text {name}")
    run = run_until_the_worker_dies(source, monkeypatch, after_fetches=2)
    assert Document.objects.filter(kb=kb).count() == 2
    # Its lease runs out; the sweeper puts the task back; another worker runs the same run.
    IngestionTask.objects.filter(pk=task_of(run)).update(lease_expires_at=timezone.now())
    assert lease_sweep() == 1
    task_execute(task_id=task_of(run), worker_id="second")

    run.refresh_from_db()
    assert run.state == SyncRun.State.SUCCEEDED
    assert counts(run) == {"new": 4}  # the first attempt's two counted as what they were
    assert Revision.objects.filter(document__kb=kb).count() == 4


def test_a_source_that_stops_answering_stops_the_run_and_deletes_nothing(
    kb: KnowledgeBase, folder_source: Callable[..., Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = folder_source()
    root = root_of(source)
    write(root, "old.txt", "old")
    sync(source)
    (root / "old.txt").unlink()
    write(root, "new.txt", "new")

    def unavailable(self: FolderKind, item: Any) -> Any:
        raise SourceUnavailable("the share went away")

    monkeypatch.setattr(FolderKind, "fetch", unavailable)
    run = sync(source)

    assert run.state == SyncRun.State.FAILED
    assert "the share went away" in run.error
    assert run.deletion_note == "Nothing was deleted: the run stopped before it finished."
    assert Document.objects.get(kb=kb, key="share/old.txt").deleted_at is None


def test_sync_now_twice_is_one_run_and_a_paused_source_is_refused(
    folder_source: Callable[..., Source],
) -> None:
    source = folder_source()
    first, created = sync_request(source=source)
    second, created_again = sync_request(source=source)
    assert created and not created_again and first.pk == second.pk

    task_execute(task_id=task_of(first), worker_id="test")
    source_pause(source=source, paused=True)
    with pytest.raises(ActionRefused, match="paused"):
        sync_request(source=source)


def test_a_run_whose_task_died_is_closed_so_the_source_can_sync_again(
    folder_source: Callable[..., Source],
) -> None:
    source = folder_source()
    run, _ = sync_request(source=source)
    IngestionTask.objects.filter(pk=task_of(run)).update(
        status=IngestionTask.Status.DEAD, last_error="The worker stopped on all 5 attempts."
    )

    second, created = sync_request(source=source)

    run.refresh_from_db()
    assert run.state == SyncRun.State.FAILED and "5 attempts" in run.error
    assert created and second.pk != run.pk


def test_the_schedule_starts_due_sources_once(folder_source: Callable[..., Source]) -> None:
    scheduled = folder_source(sync_every_minutes=60)
    folder_source(slug="manual", name="Manual", folder="manual")

    assert syncs_start_due() == 1
    assert syncs_start_due() == 0  # its run is open
    run = SyncRun.objects.get(source=scheduled)
    assert run.trigger == SyncRun.Trigger.SCHEDULE
    task_execute(task_id=task_of(run), worker_id="test")
    scheduled.refresh_from_db()
    assert scheduled.next_sync_at is not None and scheduled.next_sync_at > timezone.now()
    assert syncs_start_due() == 0  # not due for an hour


def test_metadata_that_does_not_fit_is_left_out_and_said(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    metadata_field_save(kb=kb, name="pages", type="number")
    source = folder_source(metadata_map={"pages": "pages"})
    write(root_of(source), "a.md", "---\npages: many\n---\nText.\n")
    write(root_of(source), "b.md", "---\npages: '12'\n---\nText.\n")

    run = sync(source)

    assert counts(run) == {"new": 2}
    assert Document.objects.get(key="share/b.md").metadata == {"pages": 12}
    assert Document.objects.get(key="share/a.md").metadata == {}
    assert "pages" in run.problems[0]["reason"] and run.problems[0]["path"] == "a.md"
    assert MetadataField.objects.filter(kb=kb).count() == 1


def test_an_s3_tag_change_alone_updates_the_documents_metadata_when_tags_are_read_each_sync(
    kb: KnowledgeBase, s3_server: Any
) -> None:
    """With `tags_each_sync`, a tag-only change (same bytes, same ETag) reaches the document's
    mapped metadata on the next run, without a new revision; without it, it waits for the
    bytes to change."""
    from tests.s3server import ACCESS_KEY, SECRET_KEY

    metadata_field_save(kb=kb, name="team", type="string")
    bucket = s3_server.new_bucket()
    admin = s3_server.client()
    body = b"# Leave\n\n25 days.\n"
    admin.put_object(Bucket=bucket, Key="leave.md", Body=body, Tagging="team=hr")
    sources = {
        how: source_save(
            kb=kb,
            name=f"Bucket {how}",
            slug=f"bucket-{how}",
            kind="s3",
            config={"endpoint_url": s3_server.endpoint, "bucket": bucket, **extra},
            credentials={"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
            metadata_map={"team": "team"},
        )
        for how, extra in (("each", {"tags_each_sync": "yes"}), ("bytes", {}))
    }
    for source in sources.values():
        assert counts(sync(source)) == {"new": 1}
    admin.put_object_tagging(
        Bucket=bucket, Key="leave.md", Tagging={"TagSet": [{"Key": "team", "Value": "people"}]}
    )

    assert counts(sync(sources["each"])) == {"unchanged": 1}  # fetched: same bytes, new tags
    assert counts(sync(sources["bytes"])) == {"unchanged": 1}  # not even fetched
    teams = {d.key: d.metadata.get("team") for d in Document.objects.filter(kb=kb)}
    assert teams == {"bucket-each/leave.md": "people", "bucket-bytes/leave.md": "hr"}
    assert Revision.objects.filter(document__kb=kb).count() == 2  # one each, no new one
