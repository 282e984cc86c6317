"""Why a sync run deleted nothing, why its deletions wait and a person's answer, in the page's
language (issue 41, item 5): a run keeps its deletion note in English (the API's words) beside
the declared reasons its sentences are (`SyncRun.deletion_note_reasons`), and every admin page
that shows the note (the run's page, the confirm and keep pages' "why it waits") words them in
the person's language (Simplified Chinese here), with what the source's kind said inside. A run
from before, or a note whose reasons no longer say its English, shows its English as stored."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kb.models import KnowledgeBase
from retrieval.principals import api_key_create
from sources.kinds.base import SourceUnavailable
from sources.kinds.folder import FolderKind
from sources.models import Source, SyncRun
from sources.services.runs import sync_deletions_confirm, sync_request, syncs_start_due
from tests.sources.people import awaiting_run, index_admin, synced_document
from tests.sources.test_sync_run_words import CHINESE, ENGLISH, HAN, page, sync
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

HELD_EN = (
    "Deletions wait for confirmation: 8 of 10 documents (80 %) would be deleted, over the "
    "source's threshold of 20 %."
)
HELD_ZH = "删除等待确认：将删除 10 个文档中的 8 个（80%），超过数据源的删除阈值 20%。"
EMPTY_EN = "Deletions wait for confirmation: the listing was empty where the last run saw 6 items."
EMPTY_ZH = "删除等待确认：本次列举结果为空，而上次运行列举到 6 个条目。"


@pytest.fixture
def ian(kb: KnowledgeBase) -> Client:
    return index_admin(kb.tenant)


def files(source: Source, count: int) -> Path:
    root = Path(source.config["path"])
    for number in range(count):
        (root / f"page-{number}.txt").write_text(f"page {number}")
    return root


def confirm_pages(client: Client, run: SyncRun, headers: dict[str, str]) -> list[str]:
    """The run's page and its confirm and keep pages, each saying why its deletions wait."""
    base = f"/admin/sources/syncrun/{run.pk}"
    pages = [page(client, run, headers)]
    for url in (f"{base}/confirm-deletions/", f"{base}/keep-documents/"):
        response = client.get(url, headers=headers)
        assert response.status_code == 200
        pages.append(html.unescape(re.sub(r"\s+", " ", response.content.decode())))
    return pages


def both(client: Client, run: SyncRun) -> tuple[str, str]:
    return page(client, run, CHINESE), page(client, run, ENGLISH)


def test_a_failed_listing_says_why_nothing_was_deleted_with_the_kinds_reason(
    folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    root = files(source, 2)
    sync(source)
    for path in root.iterdir():
        path.unlink()
    root.rmdir()  # the share is unmounted

    run = sync(source)

    english = (
        "Nothing was deleted (2 items not seen): the listing was incomplete: "
        f"The folder {root} cannot be read: no such file or directory."
    )
    assert run.deletion_note == english  # the English as before
    [record] = run.deletion_note_reasons
    assert record["code"] == "sync.note.incomplete" and record["params"]["items"] == 2
    assert record["params"]["detail"]["code"] == "folder.unreadable"
    zh = (
        "没有删除任何内容（2 个条目未被列举到）：列举不完整："
        f"无法读取文件夹 {root}：no such file or directory。"
    )
    chinese, in_english = both(ian, run)
    assert zh in chinese and english not in chinese
    assert english in in_english and zh not in in_english


def test_held_deletions_say_why_they_wait_on_every_page_and_the_confirmation_after(
    kb: KnowledgeBase, folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    root = files(source, 10)
    sync(source)
    for number in range(8):
        (root / f"page-{number}.txt").unlink()

    run = sync(source)

    assert run.state == SyncRun.State.AWAITING_CONFIRMATION
    assert run.deletion_note == HELD_EN
    for chinese in confirm_pages(ian, run, CHINESE):
        assert HELD_ZH in chinese and HELD_EN not in chinese
    for english in confirm_pages(ian, run, ENGLISH):
        assert HELD_EN in english and HELD_ZH not in english

    # the next run holds them instead: this one says so
    later = sync(source)
    run.refresh_from_db()
    assert later.state == SyncRun.State.AWAITING_CONFIRMATION
    superseded = f"Superseded by sync run {later.pk}, which holds its deletions."
    assert run.deletion_note == superseded
    chinese, english = both(ian, run)
    assert f"已被同步运行 {later.pk} 取代，待确认的删除改由该运行保留。" in chinese
    assert superseded not in chinese and superseded in english

    response = ian.post(
        f"/admin/sources/syncrun/{later.pk}/confirm-deletions/",
        {"reason": "retired"},
        headers=CHINESE,
    )

    assert response.status_code == 302
    later.refresh_from_db()
    assert later.deletion_note == f"{HELD_EN} Confirmed: 8 deleted."
    chinese, english = both(ian, later)
    assert f"{HELD_ZH}已确认：已删除 8 个文档。" in chinese and "Confirmed" not in chinese
    assert later.deletion_note in english and "已确认" not in english


def test_kept_documents_are_said_after_why_they_waited(
    folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    root = files(source, 6)
    sync(source)
    for path in root.iterdir():
        path.unlink()
    run = sync(source)
    assert run.deletion_note == EMPTY_EN

    response = ian.post(
        f"/admin/sources/syncrun/{run.pk}/keep-documents/", {"reason": "outage"}, headers=CHINESE
    )

    assert response.status_code == 302
    run.refresh_from_db()
    kept = " Kept: a person chose not to delete these 6 documents."
    assert run.deletion_note == EMPTY_EN + kept
    chinese, english = both(ian, run)
    assert f"{EMPTY_ZH}已保留：有人选择不删除这 6 个文档。" in chinese and "Kept" not in chinese
    assert EMPTY_EN + kept in english
    # the rest of the page too: the answer's sentence, and where the time went
    assert "保留：6 个文档已保留，照常提供。" in chinese
    assert (
        "等待工作进程" in chinese and "等待人工答复" in chinese and "从请求到结束。等待" in chinese
    )
    IngestionTask.objects.filter(sync_run=run).update(attempt=2)
    chinese, english = both(ian, run)
    assert "从请求到结束，共尝试 2 次（某个工作进程中途停止" in chinese
    assert "计入“运行的其余部分”）。等待工作进程：" in chinese
    assert "From the request to the end, over 2 attempts (a worker stopped part-way" in english
    assert "“the rest of the run”). Waiting for a worker: other work" in english


def test_runs_that_did_not_finish_say_so_in_the_readers_language(
    folder_source: Callable[..., Source], ian: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = folder_source()
    root = files(source, 1)
    sync(source)
    (root / "page-0.txt").unlink()
    (root / "new.txt").write_text("new")

    def unavailable(self: FolderKind, item: Any) -> Any:
        raise SourceUnavailable("the share went away")

    monkeypatch.setattr(FolderKind, "fetch", unavailable)
    stopped = sync(source)
    monkeypatch.undo()
    orphan, _ = sync_request(source=source)  # its worker gave up without a word
    IngestionTask.objects.filter(sync_run=orphan).update(status=IngestionTask.Status.FAILED)
    syncs_start_due()
    orphan.refresh_from_db()

    for run, english, zh in (
        (
            stopped,
            "Nothing was deleted: the run stopped before it finished.",
            "没有删除任何内容：运行在完成之前就停止了。",
        ),
        (
            orphan,
            "Nothing was deleted: the run did not finish.",
            "没有删除任何内容：运行没有完成。",
        ),
    ):
        assert run.deletion_note == english
        chinese, in_english = both(ian, run)
        assert zh in chinese and english not in chinese
        assert english in in_english and zh not in in_english


def test_a_note_from_before_or_not_said_by_its_reasons_shows_its_english(
    folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    for path in ("a.txt", "b.txt", "c.txt"):
        synced_document(source, path, f"text of {path}")
    old = awaiting_run(source, ["a.txt", "b.txt"])  # its note written before reasons were kept
    assert old.deletion_note_reasons == []
    for chinese in confirm_pages(ian, old, CHINESE):
        assert old.deletion_note in chinese

    # a person confirms with today's code: the answer's sentence after the old English
    sync_deletions_confirm(run_id=old.pk)
    old.refresh_from_db()
    assert old.deletion_note.endswith(". Confirmed: 2 deleted.")
    assert old.deletion_note in page(ian, old, CHINESE)

    # a code no longer declared, or reasons an older process's English no longer matches
    SyncRun.objects.filter(pk=old.pk).update(
        deletion_note="An old sentence.",
        deletion_note_reasons=[{"code": "sync.note.retired", "params": {}}],
    )
    assert "An old sentence." in page(ian, old, CHINESE)
    SyncRun.objects.filter(pk=old.pk).update(
        deletion_note="Nothing was deleted: the run did not finish.",
        deletion_note_reasons=[{"code": "sync.note.stopped", "params": {}}],
    )
    assert "Nothing was deleted: the run did not finish." in page(ian, old, CHINESE)


def test_the_api_answers_the_english_note(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = files(source, 10)
    sync(source)
    for number in range(8):
        (root / f"page-{number}.txt").unlink()
    run = sync(source)
    _, key = api_key_create(tenant=kb.tenant, name="sources", can_manage_sources=True)
    client = Client(headers={"Authorization": f"Bearer {key}", **CHINESE})

    held = client.get(f"/api/v1/sources/{source.pk}/runs/{run.pk}")
    confirmed = client.post(f"/api/v1/sources/{source.pk}/runs/{run.pk}/confirm")

    assert held.status_code == confirmed.status_code == 200
    run.refresh_from_db()
    assert [r["code"] for r in run.deletion_note_reasons] == [
        "sync.note.held_over_threshold",
        "sync.note.confirmed",
    ]
    assert held.json()["deletion_note"] == HELD_EN
    assert confirmed.json()["deletion_note"] == f"{HELD_EN} Confirmed: 8 deleted."
    assert not HAN.search(held.content.decode() + confirmed.content.decode())
