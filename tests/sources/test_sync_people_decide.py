"""A machine never undoes a person's decision, and a run counts only what it did.

The sequence issue 37 found on a folder, an S3 bucket and a website: sync, a person deletes a
document, the item leaves the source and comes back. The person's deletion stands until a person
restores it; the run that sees the item leave deletes nothing, counts no deletion and writes no
timeline event; the run that sees it back restores nothing. A deletion the sync made itself is
undone when the item comes back — unless a person restored and deleted the document meanwhile.

Also here: a resumed run's counts are the sum of what its attempts did; files of a kind Canon
does not read are said once and counted apart; Canon's own file store failing mid-sync makes the
run wait, not fail."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from ingestion.pipeline.run import task_execute
from ingestion.sweeper import lease_sweep
from kb import storage
from kb.models import Document, KnowledgeBase, PublicationEvent, Revision
from kb.services.documents import document_delete, document_restore
from sources.kinds.base import ListingFailed
from sources.kinds.folder import FolderKind
from sources.models import Source, SourceItem, SyncRun
from sources.services.items import ALREADY_DELETED, PERSON_DELETED
from sources.services.runs import sync_request
from sources.services.sources import source_save
from tests.sources.site_server import Route, SiteServer, html, urlset
from tests.sources.test_sync import (
    counts,
    root_of,
    run_until_the_worker_dies,
    sync,
    task_of,
    write,
)
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)


def said(run: SyncRun, path: str, outcome: str, english: str) -> bool:
    """Whether the run's problems say `english` of `path` (a declared reason's code and values
    are kept beside it, for the admin)."""
    return any(
        (p["path"], p["outcome"], p["reason"]) == (path, outcome, english) for p in run.problems
    )


@pytest.fixture
def person(kb: KnowledgeBase) -> User:
    return User.objects.create_user("editor", password="a-long-test-password", is_staff=True)


def events(document: Document) -> list[str]:
    return list(
        PublicationEvent.objects.filter(document=document)
        .order_by("pk")
        .values_list("action", flat=True)
    )


class Place:
    """Where a source's items live, for the same sequence on each kind: put an item there, take
    it away (moved elsewhere, a backup not restored yet, a page that 404s)."""

    source: Source

    def put(self, path: str, text: str) -> None:
        raise NotImplementedError

    def take(self, path: str) -> None:
        raise NotImplementedError


class FolderPlace(Place):
    def __init__(self, source: Source, elsewhere: Path) -> None:
        self.source, self.root, self.elsewhere = source, root_of(source), elsewhere

    def put(self, path: str, text: str) -> None:
        moved = self.elsewhere / path
        if moved.exists():  # moved back, bytes and all
            moved.rename(self.root / path)
        else:
            write(self.root, path, text)

    def take(self, path: str) -> None:
        self.elsewhere.mkdir(exist_ok=True)
        (self.root / path).rename(self.elsewhere / path)  # moved out of the share


class BucketPlace(Place):
    def __init__(self, source: Source, client: Any, bucket: str) -> None:
        self.source, self.client, self.bucket = source, client, bucket
        self.backup: dict[str, bytes] = {}

    def put(self, path: str, text: str) -> None:
        body = self.backup.pop(path, text.encode())  # a restore from backup: the same bytes
        self.client.put_object(Bucket=self.bucket, Key=path, Body=body)

    def take(self, path: str) -> None:
        self.backup[path] = self.client.get_object(Bucket=self.bucket, Key=path)["Body"].read()
        self.client.delete_object(Bucket=self.bucket, Key=path)


class SitePlace(Place):
    """A site whose sitemap lists every page; taking a page makes it answer 404 for a while."""

    def __init__(self, source: Source, server: SiteServer) -> None:
        self.source, self.server = source, server
        self.pages: dict[str, str] = {}

    def put(self, path: str, text: str) -> None:
        self.pages.setdefault(path, text)
        self.server.page(f"/{path}", html(f"<h1>{path}</h1><p>{self.pages[path]}</p>"))
        self.server.routes["/sitemap.xml"] = Route(
            body=urlset(*(f"{self.server.url}/{page}" for page in sorted(self.pages))),
            content_type="application/xml",
        )

    def take(self, path: str) -> None:
        self.server.page(f"/{path}", html("<p>Not here</p>"), status=404)


@pytest.fixture
def site() -> Iterator[SiteServer]:
    server = SiteServer()
    yield server
    server.stop()


@pytest.fixture(params=["folder", "s3", "website"])
def place(
    request: pytest.FixtureRequest,
    kb: KnowledgeBase,
    folder_source: Callable[..., Source],
    tmp_path: Path,
) -> Place:
    if request.param == "folder":
        return FolderPlace(folder_source(), tmp_path / "elsewhere")
    if request.param == "s3":
        from tests.s3server import ACCESS_KEY, SECRET_KEY

        s3_server = request.getfixturevalue("s3_server")
        bucket = s3_server.new_bucket()
        source = source_save(
            kb=kb,
            name="Share",
            slug="share",
            kind="s3",
            config={"endpoint_url": s3_server.endpoint, "bucket": bucket},
            credentials={"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
        )
        return BucketPlace(source, s3_server.client(), bucket)
    server = request.getfixturevalue("site")
    source = source_save(
        kb=kb,
        name="Share",
        slug="share",
        kind="website",
        config={"sitemap_url": f"{server.url}/sitemap.xml", "delay_seconds": 0},
    )
    return SitePlace(source, server)


NAMES = ("one", "two", "three", "four", "five", "six")


def the_document(kb: KnowledgeBase, name: str) -> Document:
    return Document.objects.get(kb=kb, key=f"share/{name}.html")


def test_a_persons_deletion_stands_whatever_the_source_does(
    kb: KnowledgeBase, place: Place, person: User
) -> None:
    for name in NAMES:
        place.put(f"{name}.html", f"The page about {name}.")
    first = sync(place.source)
    assert first.state == SyncRun.State.SUCCEEDED, first.error
    assert first.new == 6
    three = the_document(kb, "three")
    document_delete(document_id=three.pk, actor=person, reason="withdrawn: out of date")
    deleted_at = Document.objects.get(pk=three.pk).deleted_at
    history = events(three)
    assert history[-1] == "delete"

    # The item is still at the source: the document stays deleted.
    run = sync(place.source)
    assert run.deleted == 0 and run.restored == 0 and run.new == 0
    # The item leaves the source: nothing is deleted, so nothing is counted or written.
    place.take("three.html")
    run = sync(place.source)
    assert run.state == SyncRun.State.SUCCEEDED, run.error
    assert run.deleted == 0, counts(run)
    assert said(run, "three.html", "skipped", ALREADY_DELETED.english)
    assert events(three) == history  # no timeline event: the run did nothing to it
    # The item comes back (moved back, a backup restored, the page answers again): still deleted.
    place.put("three.html", "The page about three.")
    run = sync(place.source)
    assert run.state == SyncRun.State.SUCCEEDED, run.error
    assert run.restored == 0 and run.new == 0, counts(run)
    assert said(run, "three.html", "skipped", PERSON_DELETED.english)
    three.refresh_from_db()
    assert three.deleted_at == deleted_at
    assert events(three) == history
    assert Revision.objects.filter(document=three).count() == 1
    # And the next run again, with nothing new to say about the others.
    run = sync(place.source)
    assert run.restored == 0 and Document.objects.get(pk=three.pk).deleted_at == deleted_at

    # A person restores it: from then on the source keeps it, as any other.
    document_restore(document_id=three.pk, actor=person, reason="needed after all")
    run = sync(place.source)
    assert run.state == SyncRun.State.SUCCEEDED, run.error
    assert run.deleted == 0 and run.restored == 0
    three.refresh_from_db()
    assert three.deleted_at is None
    assert Document.objects.filter(kb=kb, deleted_at__isnull=True).count() == 6


def test_a_deletion_the_sync_made_is_undone_when_the_item_comes_back_unless_a_person_deleted_it(
    kb: KnowledgeBase, place: Place, person: User
) -> None:
    for name in NAMES:
        place.put(f"{name}.html", f"The page about {name}.")
    sync(place.source)
    two = the_document(kb, "two")
    five = the_document(kb, "five")

    place.take("two.html")
    place.take("five.html")
    run = sync(place.source)
    assert run.deleted == 2, counts(run)
    # A person restores one while it is gone, then deletes it again: now it is theirs.
    document_restore(document_id=five.pk, actor=person, reason="checking it")
    document_delete(document_id=five.pk, actor=person, reason="withdrawn for good")

    place.put("two.html", "The page about two.")
    place.put("five.html", "The page about five.")
    run = sync(place.source)

    assert run.restored == 1, counts(run)
    two.refresh_from_db()
    five.refresh_from_db()
    assert two.deleted_at is None
    assert five.deleted_at is not None
    assert events(two)[-1] == "restore"
    assert events(five)[-1] == "delete"
    assert said(run, "five.html", "skipped", PERSON_DELETED.english)


def test_deletions_a_person_made_do_not_count_against_the_threshold(
    kb: KnowledgeBase, folder_source: Callable[..., Source], person: User
) -> None:
    source = folder_source()
    root = root_of(source)
    for number in range(10):
        write(root, f"p{number}.txt", f"page {number}")
    sync(source)
    # A person withdraws half of them; then the share is cleaned up to match.
    for number in range(5):
        document = Document.objects.get(kb=kb, key=f"share/p{number}.txt")
        document_delete(document_id=document.pk, actor=person, reason="withdrawn")
    for number in range(5):
        (root / f"p{number}.txt").unlink()

    run = sync(source)

    # Nothing the sync would delete: no question for a person, no deletion counted.
    assert run.state == SyncRun.State.SUCCEEDED, run.deletion_note
    assert run.deleted == 0 and run.deletions_planned == 0
    assert run.skipped == 5
    assert SourceItem.objects.filter(source=source, gone_at__isnull=False).count() == 5
    assert SourceItem.objects.filter(source=source, sync_deleted_at__isnull=False).count() == 0


def test_a_resumed_run_counts_what_every_attempt_did_even_when_its_last_listing_fails(
    kb: KnowledgeBase, folder_source: Callable[..., Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = folder_source()
    root = root_of(source)
    for number in range(6):
        write(root, f"f{number}.txt", f"file {number}")
    run = run_until_the_worker_dies(source, monkeypatch, after_fetches=4)
    assert Document.objects.filter(kb=kb).count() == 4

    def failing_listing(self: FolderKind, previous: Any) -> Iterator[Any]:
        raise ListingFailed("the share is unmounted")
        yield  # pragma: no cover - a generator

    monkeypatch.setattr(FolderKind, "listing", failing_listing)
    IngestionTask.objects.filter(pk=task_of(run)).update(lease_expires_at=timezone.now())
    assert lease_sweep() == 1
    task_execute(task_id=task_of(run), worker_id="second")

    run.refresh_from_db()
    assert run.state == SyncRun.State.FAILED
    assert "the share is unmounted" in run.error
    assert run.new == 4, counts(run)  # the first attempt's submissions, not 0
    assert run.processed == 4 and run.listed == 6


def test_a_file_of_a_kind_canon_does_not_read_is_said_once_and_counted_apart(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = root_of(source)
    write(root, "notes.txt", "Words.")
    (root / "archive.zip").write_bytes(b"PK\x03\x04 not read")
    (root / "Makefile").write_text("all:\n\techo\n")

    first = sync(source)
    again = sync(source)

    assert counts(first) == {"new": 1}
    assert first.unsupported == 2 and first.failed == 0
    said = {problem["path"]: problem["reason"] for problem in first.problems}
    assert said == {
        "archive.zip": "skipped: not a supported kind of file",
        "Makefile": "skipped: not a supported kind of file",
    }
    assert counts(again) == {"unchanged": 1}
    assert again.unsupported == 2 and again.failed == 0
    assert again.problems == []  # said once


def test_canons_own_file_store_failing_makes_the_run_wait_not_fail(
    kb: KnowledgeBase, folder_source: Callable[..., Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = folder_source()  # no schedule: nobody would start it again
    root = root_of(source)
    write(root, "a.txt", "alpha")
    write(root, "b.txt", "beta")

    def store_down(*args: Any, **kwargs: Any) -> Any:
        raise storage.StorageUnavailable("the bucket did not answer")

    monkeypatch.setattr(storage, "store_chunks", store_down)
    run, _ = sync_request(source=source)
    outcome = task_execute(task_id=task_of(run), worker_id="test")

    run.refresh_from_db()
    task = IngestionTask.objects.get(pk=task_of(run))
    assert outcome == "storage_unavailable"
    assert run.state == SyncRun.State.SYNCING  # still open: it goes on by itself
    assert "Canon's file store" in run.error and "stopped answering" not in run.error
    assert task.status == IngestionTask.Status.RETRY_WAIT
    assert task.attempt == 0  # the store's outage costs the run no attempt
    assert not Document.objects.filter(kb=kb).exists()

    monkeypatch.undo()
    IngestionTask.objects.filter(pk=task.pk).update(available_at=timezone.now())
    task_execute(task_id=task.pk, worker_id="test")
    run.refresh_from_db()
    assert run.state == SyncRun.State.SUCCEEDED, run.error
    assert run.error == "" and counts(run) == {"new": 2}
