"""Why a sync run failed and why it refused an item, in the page's language (issue 41, item 5):
a run keeps its error in English beside a declared reason's code and values
(`SyncRun.error_reason`, `error_params`; a problem's `code`, `params` and `file`), and the run's
page words them in the person's language (Simplified Chinese here); a run from before shows its
English as stored, and the sources API answers English whatever the client asks."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.test import Client

from ingestion.pipeline.run import task_execute
from kb.models import KnowledgeBase
from retrieval.principals import api_key_create
from sources.models import Source, SyncRun
from sources.services.runs import sync_request
from tests.sources.people import index_admin

pytestmark = pytest.mark.django_db(transaction=True)

CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}
ENGLISH = {"Accept-Language": "en-US,en;q=0.9"}
HAN = re.compile(r"[\u4e00-\u9fff]")

PDF_EN = "report.pdf: The file is named like a PDF, but its content is not a PDF."
PDF_ZH = "report.pdf：文件名像 PDF，但内容不是 PDF。"
EMPTY_EN, EMPTY_ZH = "empty.txt is empty.", "empty.txt 是空文件。"
EXE_EN, EXE_ZH = "skipped: not a supported kind of file", "已跳过：不支持的文件类型"


def sync(source: Source) -> SyncRun:
    run, _ = sync_request(source=source)
    assert run.task_id is not None
    task_execute(task_id=run.task_id, worker_id="test")
    run.refresh_from_db()
    return run


def page(client: Client, run: SyncRun, headers: dict[str, str]) -> str:
    response = client.get(f"/admin/sources/syncrun/{run.pk}/change/", headers=headers)
    assert response.status_code == 200
    return html.unescape(re.sub(r"\s+", " ", response.content.decode()))


@pytest.fixture
def ian(kb: KnowledgeBase) -> Client:
    return index_admin(kb.tenant)


def test_a_failed_listing_reads_in_the_readers_language(
    kb: KnowledgeBase, folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    root = Path(source.config["path"])
    root.rmdir()  # the share is unmounted

    run = sync(source)

    assert run.state == SyncRun.State.FAILED
    assert run.error.startswith("The listing failed: ") and str(root) in run.error
    assert run.error_reason == "sync.listing_failed"
    # the folder's own reason inside (tests/sources/test_kind_words.py words it)
    assert run.error_params["detail"]["code"] == "folder.unreadable"
    chinese, english = page(ian, run, CHINESE), page(ian, run, ENGLISH)
    assert "列举数据源失败：" in chinese and run.error not in chinese
    assert run.error in english and "列举数据源失败" not in english


def test_a_paused_source_reads_in_the_readers_language(
    folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    run, _ = sync_request(source=source)
    Source.objects.filter(pk=source.pk).update(enabled=False)
    assert run.task_id is not None
    task_execute(task_id=run.task_id, worker_id="test")
    run.refresh_from_db()

    assert (run.state, run.error, run.error_reason) == (
        SyncRun.State.CANCELLED,
        "The source was paused.",
        "sync.paused",
    )
    assert "数据源已暂停。" in page(ian, run, CHINESE)
    assert "The source was paused." in page(ian, run, ENGLISH)


def test_refused_items_read_in_the_readers_language(
    kb: KnowledgeBase, folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    root = Path(source.config["path"])
    (root / "good.txt").write_text("fine text")
    (root / "report.pdf").write_bytes(b"this is not a PDF at all")
    (root / "empty.txt").write_bytes(b"")
    (root / "setup.exe").write_bytes(b"MZ\x90\x00")

    run = sync(source)

    reasons = {problem["path"]: problem for problem in run.problems}
    assert reasons["report.pdf"]["reason"] == PDF_EN  # the English as before
    assert reasons["report.pdf"]["file"] == "report.pdf"
    assert reasons["empty.txt"]["reason"] == EMPTY_EN
    assert reasons["setup.exe"]["reason"] == EXE_EN
    assert reasons["setup.exe"]["code"] == "sync.not_supported"
    chinese, english = page(ian, run, CHINESE), page(ian, run, ENGLISH)
    for zh, en in ((PDF_ZH, PDF_EN), (EMPTY_ZH, EMPTY_EN), (EXE_ZH, EXE_EN)):
        assert zh in chinese and en not in chinese, zh
        assert en in english and zh not in english, en


def test_a_run_from_before_shows_its_english_as_stored(
    folder_source: Callable[..., Source], ian: Client
) -> None:
    source = folder_source()
    run = sync(source)
    SyncRun.objects.filter(pk=run.pk).update(
        state=SyncRun.State.FAILED,
        error="The listing failed: an old sentence",
        error_reason="",
        error_params={},
        problems=[{"path": "a.pdf", "outcome": "failed", "reason": "a.pdf: an old refusal"}],
    )

    chinese = page(ian, run, CHINESE)

    assert "The listing failed: an old sentence" in chinese
    assert "a.pdf: an old refusal" in chinese


def test_the_api_answers_english_whatever_the_client_asks(
    kb: KnowledgeBase, folder_source: Callable[..., Source]
) -> None:
    source = folder_source()
    root = Path(source.config["path"])
    (root / "report.pdf").write_bytes(b"this is not a PDF at all")
    run = sync(source)
    root.joinpath("report.pdf").unlink()
    root.rmdir()
    failed = sync(source)
    _, key = api_key_create(tenant=kb.tenant, name="sources", can_manage_sources=True)
    client = Client(headers={"Authorization": f"Bearer {key}", **CHINESE})

    first = client.get(f"/api/v1/sources/{source.pk}/runs/{run.pk}")
    second = client.get(f"/api/v1/sources/{source.pk}/runs/{failed.pk}")

    assert first.status_code == second.status_code == 200
    assert first.json()["problems"] == [
        {"path": "report.pdf", "outcome": "failed", "reason": PDF_EN}
    ]
    assert second.json()["error"] == failed.error
    assert second.json()["error"].startswith("The listing failed: ")
    assert not HAN.search(first.content.decode() + second.content.decode())
