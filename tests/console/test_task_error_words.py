"""Why a task's last attempt failed, in the page's language (issue 41, item 5): the pipeline keeps
a declared reason's code and values on the task beside its English (`IngestionTask.
last_error_reason`, `last_error_params`), and the task list, the task's page, the list's provider
panel and the dashboard word it in the person's language; an error nobody declared shows its
English as stored."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

import embeddings
from kb.models import Build, KnowledgeBase
from kb.roles import INDEX_ADMINS, ensure_roles
from kb.services.documents import build_retry
from tests.console.admin_world import staff
from tests.helpers import run_pending, upload_task
from tests.kb.test_swap_with_known_failures import upload_broken
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}
ENGLISH = {"Accept-Language": "en-US,en;q=0.9"}
DAMAGED_EN = "The PDF is damaged or truncated and cannot be read."
DAMAGED_ZH = "PDF 已损坏或被截断，无法读取。"
TASKS = "/admin/ingestion/ingestiontask/"
DASHBOARD = "/admin/ingestion/ingestiontask/dashboard/"


@pytest.fixture
def ian(kb: KnowledgeBase) -> Client:
    """An index admin of the knowledge base's tenant (the task list and the dashboard)."""
    ensure_roles(Group, Permission)
    client = Client()
    client.force_login(staff("ian", INDEX_ADMINS, kb.tenant))
    return client


def text(response: Any) -> str:
    assert response.status_code == 200, response
    return re.sub(r"\s+", " ", response.content.decode())


def test_a_failed_task_keeps_its_reason_and_reads_in_the_readers_language(
    ian: Client, kb: KnowledgeBase
) -> None:
    upload_broken(kb, "scan")
    assert run_pending() == ["failed"]
    task = IngestionTask.objects.get(document__key="scan")
    assert (task.last_error_code, task.last_error) == ("unparseable", DAMAGED_EN)
    assert (task.last_error_reason, task.last_error_params) == ("pdf.damaged", {})

    for url in (TASKS, f"{TASKS}{task.pk}/change/", DASHBOARD):
        chinese, english = text(ian.get(url, headers=CHINESE)), text(ian.get(url, headers=ENGLISH))
        assert DAMAGED_ZH in chinese and DAMAGED_EN not in chinese, url
        assert DAMAGED_EN in english and DAMAGED_ZH not in english, url


def test_a_task_waiting_on_its_provider_reads_in_the_readers_language_until_it_succeeds(
    ian: Client, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def time_out(*_args: Any, **_kwargs: Any) -> Any:
        raise embeddings.ProviderUnavailable(
            embeddings.base.COULD_NOT_EMBED(model="bge-m3", detail="timed out")
        )

    monkeypatch.setattr("ingestion.pipeline.run.embed", time_out)
    task = upload_task(kb, "travel", "Train tickets are reimbursed.")

    assert run_pending() == ["provider_unavailable"]

    task.refresh_from_db()
    assert task.status == IngestionTask.Status.RETRY_WAIT
    assert task.last_error == "bge-m3 could not embed the batch: timed out"
    assert task.last_error_reason == "embedding.could_not_embed"
    chinese = "bge-m3 无法嵌入这一批文本：timed out"
    # the list's provider panel and its row, and the dashboard's "Waiting to retry"
    assert text(ian.get(TASKS, headers=CHINESE)).count(chinese) == 2
    assert chinese in text(ian.get(DASHBOARD, headers=CHINESE))
    assert task.last_error in text(ian.get(TASKS, headers=ENGLISH))

    monkeypatch.undo()
    IngestionTask.objects.filter(pk=task.pk).update(status="queued", available_at=None)
    assert run_pending() == ["published"]
    task.refresh_from_db()
    assert (task.last_error, task.last_error_reason, task.last_error_params) == ("", "", {})


def test_an_error_nobody_declared_shows_its_english_as_stored(
    ian: Client, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the chunker fell over")

    monkeypatch.setattr("ingestion.pipeline.run.chunk", crash)
    task = upload_task(kb, "travel", "Train tickets are reimbursed.")

    assert run_pending() == ["retry"]

    task.refresh_from_db()
    assert task.last_error == "RuntimeError: the chunker fell over"
    assert (task.last_error_reason, task.last_error_params) == ("", {})
    assert task.last_error in text(ian.get(TASKS, headers=CHINESE))


def test_a_retried_builds_task_keeps_no_stale_reason(kb: KnowledgeBase) -> None:
    upload_broken(kb, "scan")
    run_pending()
    build = Build.objects.get(document__key="scan")

    build_retry(build_id=build.pk, actor=None, reason="try again")

    task = IngestionTask.objects.get(build=build)
    assert (task.last_error, task.last_error_reason, task.last_error_params) == ("", "", {})
