"""A build paused halfway through its embedding, as a person sees it in headless Chromium: the
document page and the document list say "embedding 4/8" beside a bar at 40 %, and keep saying it
while their scripts poll. Screenshots land in artifacts/e2e/."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from ingestion.pipeline.run import task_execute
from ingestion.task_outcomes import PROVIDER_UNAVAILABLE
from kb.models import Document, Tenant, TenantMembership
from kb.services.index_versions import knowledge_base_create
from tests.e2e.browser import PASSWORD, Person
from tests.embedding_server import EmbeddingServer, clear_breakers
from tests.helpers import upload_task

pytestmark = pytest.mark.integration

DIMENSIONS = 16


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer(dimensions=DIMENSIONS).start()
    yield server
    server.stop()


def test_a_build_paused_mid_embed_shows_how_far_embedding_got(
    live_server: Any, browser: Any, server: EmbeddingServer, tenant: Tenant, settings: Any
) -> None:
    prefix = f"canon-test-breaker:{uuid.uuid4().hex[:10]}"
    settings.OPENAI_BASE_URL = server.url
    settings.OPENAI_API_KEY = "sk-test-progress"
    settings.BREAKER_KEY_PREFIX = prefix
    settings.BREAKER_THRESHOLD = 100
    settings.PROVIDER_MAX_ATTEMPTS = 2
    settings.PROVIDER_BACKOFF_BASE_SECONDS = 0.01
    settings.PROVIDER_BACKOFF_MAX_SECONDS = 0.02
    settings.EMBEDDING_BATCH_SIZE = 2
    kb = knowledge_base_create(
        tenant=tenant,
        name="Handbook",
        slug="handbook",
        provider="openai",
        model=server.model,
        dimensions=DIMENSIONS,
    )
    user = User.objects.create_superuser("erin", "", PASSWORD)
    TenantMembership.objects.create(user=user, tenant=tenant)
    # 8 chunks, 6 distinct texts; the provider answers one batch (2 texts, 4 chunks), then fails
    paragraphs = [
        f"Section {i}. " + " ".join(f"w{i}x{j}" for j in range(120))
        for i in [1, 2, 3, 4, 5, 6, 1, 2]
    ]
    task = upload_task(kb, "travel", "\n\n".join(paragraphs))
    server.fail_next("ok", "503", "503")
    assert task_execute(task_id=task.pk, worker_id="w") == PROVIDER_UNAVAILABLE
    document = Document.objects.get(key="travel")

    erin = Person(browser, live_server.url, "erin")
    erin.log_in()
    erin.visit(f"/admin/kb/document/{document.pk}/change/")
    erin.wait_for_text("embedding 4/8")
    bar = browser.find_element("css selector", "#builds progress")
    assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("40", "100")
    browser.execute_script("document.getElementById('builds').scrollIntoView()")
    erin.screenshot("document-mid-embed")
    erin.visit("/admin/kb/document/")
    erin.wait_for_text("r1 v1: embedding 4/8")
    erin.screenshot("list-mid-embed")
    clear_breakers(prefix)
