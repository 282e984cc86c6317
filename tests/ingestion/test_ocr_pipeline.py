"""OCR through the whole pipeline: a PNG uploaded through the API is built by the worker's
parse stage (OCR, its progress written to the build), published, and found by a word in the
picture; the build's bar says "OCR page 12/40" while OCR runs; an image past the OCR limits
fails its build with the limit named."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from ingestion.pipeline.run import task_execute
from kb.models import Build, KnowledgeBase, Revision
from kb.selectors.builds import build_progress_of
from tests.retrieval.factories import api, build, search
from tests.textkit.extract.ocr_fixtures import encoded, page
from work.models import IngestionTask

# Committed, so the task's lease heartbeat (its own connection) sees the task while OCR runs
# (OCR of a page takes seconds; the heartbeat beats every ttl/4).
pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = "/api/v1/kbs/handbook/documents/"


def upload_png(client: Client, key: str, content: bytes) -> Any:
    response = client.post(
        HANDBOOK,
        {"key": key, "file": SimpleUploadedFile(f"{key}.png", content)},
        headers={"Idempotency-Key": f"upload-{key}"},
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_an_uploaded_picture_is_published_and_found_by_a_word_in_it(
    api_key: str, kb: KnowledgeBase
) -> None:
    client = api(api_key)
    image = page(
        [["The flywheel guard must be bolted", "before the press is switched on."]],
        title="Press safety",
        title_size=56,
    )
    body = upload_png(client, "press-safety", encoded(image, "PNG"))
    revision = Revision.objects.get(document_id=body["document_id"])
    assert revision.media_type == "image/png"

    built = build(revision)
    assert built.state == Build.State.LIVE
    assert built.parse_progress == "OCR page 1/1"
    revision.refresh_from_db()
    assert revision.extracted_title == "Press safety"

    hits = search(client, {"kb": "handbook", "query": "flywheel", "mode": "keyword"}).json()
    assert [hit["document_key"] for hit in hits["hits"]] == ["press-safety"]


def test_the_bar_says_which_page_ocr_reads(kb: KnowledgeBase, api_key: str) -> None:
    body = upload_png(api(api_key), "scan", encoded(page([["Anything."]]), "PNG"))
    building = Build.objects.select_related("revision", "index_version").get(
        revision__document_id=body["document_id"]
    )
    Build.objects.filter(pk=building.pk).update(
        state=Build.State.BUILDING, parse_progress="OCR page 12/40"
    )
    building.refresh_from_db()
    progress = build_progress_of(build=building)
    assert (progress["stage"], progress["label"], progress["percent"]) == (
        "parsing",
        "OCR page 12/40",
        0,
    )
    # Once chunked, the bar counts chunks as before.
    Build.objects.filter(pk=building.pk).update(expected_chunk_count=4)
    building.refresh_from_db()
    assert build_progress_of(build=building)["label"] == "embedding 0/4"


def test_a_picture_past_the_ocr_limit_fails_its_build_readably(
    kb: KnowledgeBase, api_key: str, settings: Any
) -> None:
    settings.OCR_MAX_PIXELS = 10_000
    body = upload_png(api(api_key), "big", encoded(page([["Too big."]]), "PNG"))
    task = IngestionTask.objects.get(build__revision__document_id=body["document_id"])
    IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
    assert task_execute(task_id=task.pk, worker_id="test") == "failed"
    failed = Build.objects.get(revision__document_id=body["document_id"])
    assert failed.state == Build.State.FAILED
    assert "the limit for OCR is 10,000 pixels" in failed.error
