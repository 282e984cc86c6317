"""The admin's build progress (`kb.selectors.builds.build_progress`): honest while embedding, which
with a
local model is most of a build's time. A build paused by a provider outage halfway through its
embedding says "embedding" with the chunks that have vectors; a build whose vectors all came from
the cache has every chunk embedded before its first chunk is written; a finished build shows its
state. Real PostgreSQL, a real OpenAI-compatible server, the pipeline run in-process."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from ingestion.models import StageResult
from ingestion.pipeline.run import task_execute
from ingestion.task_outcomes import PROVIDER_UNAVAILABLE
from kb.models import Build, Document, KnowledgeBase, Tenant
from kb.selectors.builds import EMBED_PERCENT, build_progress
from kb.services.index_versions import knowledge_base_create
from tests.embedding_server import EmbeddingServer, clear_breakers
from tests.helpers import upload_task
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

DIMENSIONS = 16
MODEL = "test-embedding"


def paragraph(i: int) -> str:
    """About 700 characters: one chunk of its own at the default chunk size."""
    return f"Paragraph {i}. " + " ".join(f"w{i}x{j}" for j in range(120))


def progress(document: Document) -> dict[str, Any]:
    (only,) = build_progress(document=document)
    return only


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer(dimensions=DIMENSIONS, model=MODEL).start()
    yield server
    server.stop()


@pytest.fixture
def remote_kb(settings: Any, server: EmbeddingServer, tenant: Tenant) -> Iterator[KnowledgeBase]:
    prefix = f"canon-test-breaker:{uuid.uuid4().hex[:10]}"
    settings.OPENAI_BASE_URL = server.url
    settings.OPENAI_API_KEY = "sk-test-progress"
    settings.BREAKER_KEY_PREFIX = prefix
    settings.BREAKER_THRESHOLD = 100  # an outage here is the provider's retries running out
    settings.PROVIDER_MAX_ATTEMPTS = 2
    settings.PROVIDER_BACKOFF_BASE_SECONDS = 0.01
    settings.PROVIDER_BACKOFF_MAX_SECONDS = 0.02
    settings.EMBEDDING_BATCH_SIZE = 2
    yield knowledge_base_create(
        tenant=tenant,
        name="Embedded elsewhere",
        slug="remote",
        provider="openai",
        model=MODEL,
        dimensions=DIMENSIONS,
    )
    clear_breakers(prefix)


def test_a_new_build_is_queued_and_reading_its_progress_is_one_query(
    kb: KnowledgeBase, django_assert_num_queries: Any
) -> None:
    upload_task(kb, "doc", paragraph(1))
    document = Document.objects.get(key="doc")

    with django_assert_num_queries(1):
        row = progress(document)

    assert (row["stage"], row["label"], row["percent"]) == ("queued", "queued", 0)
    assert (row["embedded"], row["written"], row["expected"]) == (0, 0, None)


def test_a_build_paused_mid_embed_says_embedding_and_counts_chunks_not_texts(
    remote_kb: KnowledgeBase, server: EmbeddingServer, admin_user: User
) -> None:
    # given a document of 8 chunks with 6 distinct texts: paragraphs 1 and 2 appear twice
    text = "\n\n".join(paragraph(i) for i in [1, 2, 3, 4, 5, 6, 1, 2])
    task = upload_task(remote_kb, "doc", text)
    document = Document.objects.get(key="doc")
    # when the first batch (paragraphs 1 and 2) is embedded and then the provider goes down
    server.fail_next("ok", "503", "503")
    assert task_execute(task_id=task.pk, worker_id="w") == PROVIDER_UNAVAILABLE

    # then four of the eight chunks have vectors, and nothing is written yet
    row = progress(document)
    assert row["expected"] == 8
    assert (row["state"], row["stage"]) == (Build.State.BUILDING, "embedding")
    assert (row["embedded"], row["written"]) == (4, 0)
    assert row["percent"] == EMBED_PERCENT * 4 // 8
    assert row["label"] == "embedding 4/8"

    # and the admin says so: the progress view, the document page and the list
    client = Client()
    client.force_login(admin_user)
    polled = client.get(f"/admin/kb/document/{document.pk}/progress/").json()["builds"]
    assert [(b["stage"], b["embedded"], b["label"]) for b in polled] == [
        ("embedding", 4, "embedding 4/8")
    ]
    page = client.get(f"/admin/kb/document/{document.pk}/change/").content.decode()
    assert f'<progress class="bar" max="100" value="{row["percent"]}">' in page
    assert "embedding 4/8" in page
    listing = client.get("/admin/kb/document/").content.decode()
    assert f'<progress max="100" value="{row["percent"]}"></progress> embedding 4/8' in listing

    # when the provider is back, the build resumes from the cache and goes live
    IngestionTask.objects.filter(pk=task.pk).update(available_at=timezone.now())
    assert task_execute(task_id=task.pk, worker_id="w") == "published"

    # then the finished build shows its state, all of it embedded and written
    row = progress(document)
    assert (row["state"], row["stage"]) == (Build.State.LIVE, "live")
    assert (row["embedded"], row["written"], row["expected"]) == (8, 8, 8)
    assert (row["percent"], row["label"]) == (100, "8/8")
    assert sum(len(seen.inputs) for seen in server.seen if seen.mode == "ok") == 6


def test_when_every_vector_is_cached_all_chunks_are_embedded_before_writing(
    kb: KnowledgeBase, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a document whose texts are all in the embedding cache (another document has them)
    text = "\n\n".join(paragraph(i) for i in range(6))
    first = upload_task(kb, "first", text)
    assert task_execute(task_id=first.pk, worker_id="w") == "published"
    second = upload_task(kb, "second", text)
    document = Document.objects.get(key="second")
    # and a slow write stage: three batches of two chunks, half a second after each
    settings.CHUNK_WRITE_BATCH = 2
    monkeypatch.setenv("CANON_FAULT_CHUNK_BATCH_DELAY", "0.5")

    # when a worker builds it, watched as the admin's poll would
    outcome: list[str] = []

    def work() -> None:
        try:
            outcome.append(task_execute(task_id=second.pk, worker_id="w"))
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    seen: list[tuple[str, int, int]] = []
    while worker.is_alive():
        row = progress(document)
        seen.append((row["stage"], row["embedded"], row["written"]))
        time.sleep(0.02)
    worker.join()

    # then no chunk was written before all six had vectors, and none needed the provider
    assert outcome == ["published"]
    assert StageResult.objects.get(task=second, stage="embed").output["embedded"] == 0
    writing = [s for s in seen if s[0] == "writing"]
    assert writing, seen
    assert all(embedded == 6 and written < 6 for _, embedded, written in writing)
    assert all(written == 0 for stage, _, written in seen if stage == "embedding")
    row = progress(document)
    assert (row["stage"], row["embedded"], row["written"], row["percent"]) == ("live", 6, 6, 100)


def test_a_failed_build_shows_its_state(kb: KnowledgeBase) -> None:
    task = upload_task(kb, "empty", "   \n\n  ")
    document = Document.objects.get(key="empty")

    assert task_execute(task_id=task.pk, worker_id="w") == "failed"

    row = progress(document)
    assert (row["state"], row["stage"], row["percent"]) == ("failed", "failed", 0)
    assert row["error"]
