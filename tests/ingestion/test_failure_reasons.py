"""What the pipeline keeps of why a build failed (issue 41, item 5): the English sentence, for the
API and the logs, and the declared reason's code and values (`kb.failures`), for the admin to
word in the reader's language: a file's (with the words among its values), a provider's
refusal, and the pipeline's own when it gives up."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import translation

import embeddings
from kb import storage
from kb.failures import build_error_words
from kb.models import Build, KnowledgeBase
from kb.services.documents import document_create
from tests.helpers import run_pending, upload_task
from textkit import extract as extractors
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)


def failed_build(kb: KnowledgeBase, key: str) -> Build:
    return Build.objects.get(document__key=key, index_version_id=kb.active_index_version_id)


def test_a_file_reason_keeps_its_words_among_its_values(kb: KnowledgeBase) -> None:
    """A .docx that is no ZIP archive: the archive check names the format, a word the admin
    translates too."""
    document_create(
        kb=kb,
        key="memo",
        title="",
        stored=storage.store_bytes(b"this is no zip archive at all"),
        media_type=extractors.APPLICATION_DOCX,
        original_name="memo.docx",
    )

    assert run_pending() == ["failed"]

    build = failed_build(kb, "memo")
    assert build.error == "The file is not a valid Word (.docx) document."
    assert build.error_code == "archive.not_valid"
    assert build.error_params == {"label": "Word (.docx) document"}
    task = IngestionTask.objects.get(build=build)
    assert (task.last_error_code, task.last_error) == ("unparseable", build.error)
    with translation.override("zh-hans"):
        assert build_error_words(build) == "文件不是有效的 Word（.docx）文档。"


def test_a_providers_refusal_is_kept_as_its_reason(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise embeddings.ProviderRejected(
            embeddings.base.REFUSED(provider="openai", status="401", answer="bad key")
        )

    monkeypatch.setattr("ingestion.pipeline.run.embed", refuse)
    upload_task(kb, "travel", "Train tickets are reimbursed.")

    assert run_pending() == ["failed"]

    build = failed_build(kb, "travel")
    assert build.error == "openai refused the request: HTTP 401: bad key"
    assert (build.error_code, build.error_params) == (
        "embedding.refused",
        {"provider": "openai", "status": "401", "answer": "bad key"},
    )
    with translation.override("zh-hans"):
        assert build_error_words(build) == "openai 拒绝了请求：HTTP 401：bad key"


def test_the_pipeline_giving_up_says_so_with_the_last_error_as_it_was(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the chunker fell over")

    monkeypatch.setattr("ingestion.pipeline.run.chunk", crash)
    task = upload_task(kb, "travel", "Train tickets are reimbursed.")
    IngestionTask.objects.filter(pk=task.pk).update(max_attempts=1)

    assert run_pending() == ["retry"]  # its last attempt: it goes dead

    build = failed_build(kb, "travel")
    detail = "RuntimeError: the chunker fell over"
    assert build.error == f"gave up after 1 attempts: {detail}"
    assert (build.error_code, build.error_params) == (
        "build.gave_up",
        {"attempts": 1, "detail": detail},
    )
    with translation.override("zh-hans"):
        assert build_error_words(build) == f"尝试 1 次后放弃：{detail}"
