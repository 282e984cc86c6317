"""`canon_bootstrap` (what `make run` calls): the demo knowledge base gets the default embedding
(`make run` makes it the packaged multilingual model); one that exists keeps its index version."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from kb.models import KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from work.models import IngestionTask

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_settings(settings: Any, tmp_path: Path) -> Any:
    settings.BASE_DIR = tmp_path  # .data/bootstrap.json goes here, not into the work tree
    settings.EMBEDDING_PROVIDER = "use"
    settings.EMBEDDING_MODEL = "use-multilingual-v3"
    settings.EMBEDDING_DIMENSIONS = 512
    return settings


def bootstrap() -> str:
    out = io.StringIO()
    call_command("canon_bootstrap", stdout=out)
    return out.getvalue()


def test_the_demo_knowledge_base_embeds_with_the_packaged_model(demo_settings: Any) -> None:
    output = bootstrap()

    version = KnowledgeBase.objects.get(slug="handbook").active_index_version
    assert version is not None
    assert (version.provider, version.model, version.dimensions) == (
        "use",
        "use-multilingual-v3",
        512,
    )
    assert "handbook embeds with use use-multilingual-v3 (512d)" in output


def test_an_existing_hash_knowledge_base_is_left_alone_and_the_switch_is_named(
    demo_settings: Any,
) -> None:
    # given an old .data whose handbook was created on hash
    tenant = Tenant.objects.create(slug="demo", name="Demo")
    knowledge_base_create(
        tenant=tenant,
        name="Handbook",
        slug="handbook",
        provider="hash",
        model="canon-hash-v1",
        dimensions=384,
    )

    output = bootstrap()

    kb = KnowledgeBase.objects.get(slug="handbook")
    assert kb.index_versions.count() == 1
    assert kb.active_index_version is not None
    assert kb.active_index_version.provider == "hash"
    assert "handbook embeds with hash canon-hash-v1 (384d); the default is now use" in output
    assert "New index version…" in output


def test_the_sample_handbook_is_uploaded_once_in_english_and_chinese(demo_settings: Any) -> None:
    from kb.models import Document

    bootstrap()
    keys = set(Document.objects.values_list("key", flat=True))
    assert {"vacation-policy", "leave-zh", "remote-work-zh"} <= keys and len(keys) == 6
    assert IngestionTask.objects.filter(build__document__key="leave-zh").count() == 1

    # a second run (make run again) adds nothing, even after the documents were deleted
    Document.objects.filter(key="onboarding").update(key="renamed")
    bootstrap()
    assert Document.objects.count() == 6
    assert not Document.objects.filter(key="onboarding").exists()


def test_the_sample_handbook_can_be_skipped(demo_settings: Any) -> None:
    from kb.models import Document

    demo_settings.DEMO_DOCUMENTS = False
    bootstrap()
    assert not Document.objects.exists()


@pytest.mark.django_db(transaction=True)  # a claim compares with now(): one per transaction
def test_the_readme_questions_find_their_answers_in_the_sample_handbook(
    demo_settings: Any,
) -> None:
    """The README's two example questions, against the sample built with the packaged model:
    the first hit is the passage that answers them."""
    from django.test import Client

    from ingestion.pipeline.run import task_execute
    from retrieval.principals import api_key_create

    bootstrap()
    for task_id in IngestionTask.objects.values_list("pk", flat=True):
        assert task_execute(task_id=task_id, worker_id="test") == "published", (
            IngestionTask.objects.get(pk=task_id).last_error
        )
    _, key = api_key_create(tenant=Tenant.objects.get(slug="demo"), name="readme")
    client = Client(headers={"Authorization": f"Bearer {key}"})

    def first_hit(query: str) -> str:
        body = {"kb": "handbook", "query": query}
        response = client.post("/api/v1/search", body, content_type="application/json")
        assert response.status_code == 200
        return str(response.json()["hits"][0]["text"])

    assert "25 vacation days" in first_hit("how many vacation days do I get")
    assert "每周最多可以在家办公两天" in first_hit("在家办公每周几天")


def test_the_demo_gets_a_folder_source_over_the_shared_folder_once(
    demo_settings: Any, tmp_path: Path
) -> None:
    from sources.models import Source

    share = tmp_path / "share"
    demo_settings.SOURCES_FOLDER_ROOTS = [str(share)]

    output = bootstrap()
    bootstrap()

    source = Source.objects.get()
    assert (source.kb.slug, source.kind, source.slug, source.config) == (
        "handbook",
        "folder",
        "share",
        {"path": str(share)},
    )
    assert (share / "shared-folder.md").read_text().startswith("# The shared folder")
    assert f"put files in {share} and press *Sync now…*" in output


def test_without_a_folder_root_the_demo_has_no_source(demo_settings: Any) -> None:
    from sources.models import Source

    demo_settings.SOURCES_FOLDER_ROOTS = []

    output = bootstrap()

    assert not Source.objects.exists() and "source:" not in output
