"""A source's file changes → the next sync publishes the revision → search serves the new text,
never a mix; the file is deleted at the source → search stops returning it at the switch; a
restore brings it back. Real Celery worker processes, Redis, PostgreSQL, the real API."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kb.models import Document, KnowledgeBase
from kb.services.documents import document_restore
from sources.models import Source, SyncRun
from sources.services.runs import sync_request
from tests.conftest import Worker, wait_for
from tests.sources.conftest import SOURCES_KEY

pytestmark = pytest.mark.integration


def texts(client: Client, api_key: str, query: str) -> list[str]:
    response = client.post(
        "/api/v1/search",
        {"kb": "handbook", "query": query, "mode": "keyword", "top_k": 10},
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert response.status_code == 200, response.content
    return [hit["text"] for hit in response.json()["hits"]]


def synced(source: Source) -> SyncRun:
    run, _ = sync_request(source=source)
    return wait_for(
        lambda: SyncRun.objects.filter(pk=run.pk, finished_at__isnull=False).first(),
        what=f"sync run {run.pk} to finish",
    )


def sources_worker(worker_factory: Callable[..., Worker], settings: Any) -> Worker:
    """A real worker process that may read the tests' folder sources."""
    return worker_factory(
        CANON_SOURCES_ALLOW_PRIVATE="1",
        CANON_SOURCES_KEY=SOURCES_KEY,
        CANON_SOURCES_CACHE_ROOT=str(settings.SOURCES_CACHE_ROOT),
        CANON_SOURCES_FOLDER_ROOTS=os.pathsep.join(settings.SOURCES_FOLDER_ROOTS),
    )


def test_a_change_at_the_source_is_served_whole_and_a_deletion_stops_it(
    transactional_db: None,
    kb: KnowledgeBase,
    api_key: str,
    folder_source: Callable[..., Source],
    worker_factory: Callable[..., Worker],
    settings: Any,
) -> None:
    sources_worker(worker_factory, settings)
    client = Client()
    source = folder_source()
    root = Path(source.config["path"])
    (root / "leave.md").write_text("# Leave\n\nEvery employee has twenty days of paid leave.\n")
    (root / "travel.md").write_text("# Travel\n\nTrain tickets are booked by the office.\n")

    run = synced(source)
    assert run.state == SyncRun.State.SUCCEEDED and run.new == 2, run.error
    wait_for(lambda: texts(client, api_key, "paid leave"), what="the first revision served")

    (root / "leave.md").write_text("# Leave\n\nEvery employee has thirty days of paid leave.\n")
    run = synced(source)
    assert run.changed == 1 and run.unchanged == 1

    def new_text_served() -> bool:
        served = " ".join(texts(client, api_key, "paid leave"))
        # Never a mix: until the switch the old text alone, after it the new alone.
        assert ("twenty" in served) != ("thirty" in served), served
        return "thirty" in served

    wait_for(new_text_served, what="the new revision served")

    (root / "travel.md").unlink()
    run = synced(source)
    assert run.deleted == 1
    assert texts(client, api_key, "train tickets") == []  # gone at the switch: the delete's commit

    travel = Document.objects.get(kb=kb, key="share/travel.md")
    document_restore(document_id=travel.pk, reason="restored by a person")
    assert any("Train tickets" in text for text in texts(client, api_key, "train tickets"))


def test_a_document_deleted_through_the_api_stays_out_of_search_when_its_file_moves_and_returns(
    transactional_db: None,
    kb: KnowledgeBase,
    api_key: str,
    folder_source: Callable[..., Source],
    worker_factory: Callable[..., Worker],
    settings: Any,
    tmp_path: Path,
) -> None:
    """Issue 37's sequence, as a person and a service see it: six files synced, one deleted
    through the API, its file moved out of the share and back. Search never serves it again,
    and no run claims to have deleted or restored it."""
    sources_worker(worker_factory, settings)
    client = Client()
    source = folder_source()
    root = Path(source.config["path"])
    topics = ("leave", "travel", "payroll", "laptops", "parking", "canteen")
    for topic in topics:
        text = f"# {topic.title()}\n\nThe {topic} policy of the office.\n"
        (root / f"{topic}.md").write_text(text)
    assert synced(source).new == 6
    wait_for(lambda: texts(client, api_key, "parking policy"), what="the files served")
    parking = Document.objects.get(kb=kb, key="share/parking.md")

    response = client.delete(
        f"/api/v1/documents/{parking.pk}", headers={"Authorization": f"Bearer {api_key}"}
    )
    assert response.status_code == 204, response.content
    assert not any("parking" in text for text in texts(client, api_key, "parking policy"))

    elsewhere = tmp_path / "archive"
    elsewhere.mkdir()
    (root / "parking.md").rename(elsewhere / "parking.md")
    run = synced(source)
    assert (run.deleted, run.restored) == (0, 0)
    (elsewhere / "parking.md").rename(root / "parking.md")
    run = synced(source)
    assert (run.deleted, run.restored, run.new) == (0, 0, 0)

    parking.refresh_from_db()
    assert parking.deleted_at is not None
    assert not any("parking" in text for text in texts(client, api_key, "parking policy"))
