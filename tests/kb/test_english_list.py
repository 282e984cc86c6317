"""The English list (issue 38, item 3): a version that asks for it embeds each chunk not in
Chinese a second time with the packaged English model (`Chunk.embedding_en`), builds a second
HNSW index over those vectors, and has both checked, swapped and purged with it; kb_verify
reports a missing or stray English vector."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from embeddings import MINILM_DIMENSIONS, MINILM_MODEL, MINILM_PROVIDER
from kb import ann
from kb.models import Build, Chunk, IndexVersion, KnowledgeBase
from kb.services.base import ActionRefused
from kb.services.index_versions import (
    index_version_activate,
    index_version_create,
    knowledge_base_create,
)
from kb.services.retention import retention_collect
from kb.verify import verify
from tests.helpers import run_pending, upload_text
from textkit.text import mostly_chinese

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: CONCURRENTLY, on_commit

ENGLISH = "apt-mark hold marks a package as held back, so it is not upgraded automatically."
CHINESE = "打印机通过 CUPS 的网页界面添加，端口是 631，添加以后就可以打印文件了。"


def new_version(kb: KnowledgeBase, **extra: Any) -> IndexVersion:
    return index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-english",
        dimensions=64,
        chunk_size=400,
        chunk_overlap=50,
        **extra,
    )


def index_definition(name: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        row = cursor.fetchone()
    return row[0] if row else None


@pytest.fixture
def bilingual(kb: KnowledgeBase) -> KnowledgeBase:
    upload_text(kb, "hold", ENGLISH)
    upload_text(kb, "printers", CHINESE)
    assert run_pending() == ["published", "published"]
    return kb


def test_the_english_vectors_are_written_swapped_and_purged_with_their_version(
    bilingual: KnowledgeBase,
) -> None:
    kb = bilingual
    v1 = kb.active_index_version
    assert v1 is not None and not v1.english_list

    # given a new version that asks for the English list, built
    v2 = new_version(kb, english_list=True)
    assert (v2.english_provider, v2.english_model, v2.english_dimensions) == (
        MINILM_PROVIDER,
        MINILM_MODEL,
        MINILM_DIMENSIONS,
    )
    assert run_pending() == ["published", "published"]

    # then each chunk not in Chinese has an English vector of the list's dimensions, and the
    # Chinese one none; every build expected exactly those
    chunks = list(Chunk.objects.filter(index_version=v2))
    english = [c for c in chunks if not mostly_chinese(c.text)]
    assert english and len(english) < len(chunks)
    assert all(len(c.embedding_en) == MINILM_DIMENSIONS for c in english)
    assert all(c.embedding_en is None for c in chunks if mostly_chinese(c.text))
    builds = list(Build.objects.filter(index_version=v2))
    assert sum(b.english_expected or 0 for b in builds) == len(english)
    # the progress counted a chunk once it had both its vectors
    assert all(b.chunks_embedded == b.expected_chunk_count for b in builds)
    # v1's chunks, of a version without the list, have none
    assert not Chunk.objects.filter(index_version=v1, embedding_en__isnull=False).exists()

    # and the version's two indexes are built; the English one over the English vectors only
    assert ann.ann_index_state(v2.pk) == "ready"
    definition = index_definition(ann.english_index_name(v2.pk))
    assert definition is not None
    assert f"vector({MINILM_DIMENSIONS})" in definition and "embedding_en IS NOT NULL" in definition
    assert verify() == []

    # the swap brings the list in; a version without it, swapped in later, takes it out
    index_version_activate(version_id=v2.pk, actor=None)
    v3 = new_version(kb)
    assert not v3.english_list
    run_pending()
    index_version_activate(version_id=v3.pk, actor=None)
    assert index_definition(ann.english_index_name(v3.pk)) is None
    assert ann.ann_index_state(v3.pk) == "ready"

    # when v2's retention ends, its English vectors and index go with its chunks
    KnowledgeBase.objects.filter(pk=kb.pk).update(retention_days=0)
    IndexVersion.objects.filter(pk__in=[v1.pk, v2.pk]).update(
        retired_at=timezone.now() - timedelta(days=1)
    )
    retention_collect()
    assert not Chunk.objects.filter(index_version=v2).exists()
    assert index_definition(ann.english_index_name(v2.pk)) is None
    assert index_definition(ann.ann_index_name(v2.pk)) is None
    assert verify() == []


def test_kb_verify_reports_a_missing_or_a_stray_english_vector(bilingual: KnowledgeBase) -> None:
    kb = bilingual
    v2 = new_version(kb, english_list=True)
    run_pending()
    english = Chunk.objects.filter(index_version=v2, embedding_en__isnull=False).first()
    assert english is not None

    # an English vector lost from a verified build
    Chunk.objects.filter(pk=english.pk).update(embedding_en=None)
    problems = [v.detail for v in verify() if v.build_id == english.build_id]
    assert problems == ["0 of 1 English vectors are written"], problems

    # an English vector on a chunk of a version without the list
    Chunk.objects.filter(pk=english.pk).update(embedding_en=[0.1] * MINILM_DIMENSIONS)
    stray = Chunk.objects.filter(index_version=kb.active_index_version_id).first()
    assert stray is not None
    Chunk.objects.filter(pk=stray.pk).update(embedding_en=[0.1] * MINILM_DIMENSIONS)
    problems = [v.detail for v in verify() if v.build_id == stray.build_id]
    assert problems == ["1 chunks have an English vector no list asks for"], problems


def test_the_english_list_is_the_default_for_use_and_refused_beside_minilm(
    tenant: Any, settings: Any
) -> None:
    settings.ENGLISH_LIST_DEFAULT = True
    on_use = knowledge_base_create(
        tenant=tenant,
        name="Use",
        slug="use",
        provider="use",
        model="use-multilingual-v3",
        dimensions=512,
    )
    assert on_use.active_index_version is not None
    assert on_use.active_index_version.english_list
    on_hash = knowledge_base_create(tenant=tenant, name="Hash", slug="hash", provider="hash")
    assert on_hash.active_index_version is not None
    assert not on_hash.active_index_version.english_list
    settings.ENGLISH_LIST_DEFAULT = False
    off = knowledge_base_create(
        tenant=tenant,
        name="Off",
        slug="off",
        provider="use",
        model="use-multilingual-v3",
        dimensions=512,
    )
    assert off.active_index_version is not None and not off.active_index_version.english_list

    with pytest.raises(ActionRefused, match="reads English already"):
        index_version_create(
            kb_id=on_hash.pk,
            provider=MINILM_PROVIDER,
            model=MINILM_MODEL,
            dimensions=MINILM_DIMENSIONS,
            chunk_size=800,
            chunk_overlap=100,
            english_list=True,
        )


def test_the_new_version_form_offers_the_english_list(kb: KnowledgeBase, admin_user: Any) -> None:
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(admin_user)
    url = reverse("admin:kb_indexversion_new", args=[kb.pk])
    # given the form of a knowledge base on `hash`, the list is offered, not ticked
    page = client.get(url).content.decode()
    assert 'name="english_list"' in page and "all-MiniLM-L6-v2" in page
    assert 'name="english_list" id="id_english_list" checked' not in page
    # when an index admin ticks it, the version is created with it
    data = {"provider": "hash", "model": "", "dimensions": "", "chunk_size": 800}
    response = client.post(url, {**data, "chunk_overlap": 100, "english_list": "on"})
    assert response.status_code == 302
    version = IndexVersion.objects.get(kb=kb, number=2)
    assert version.english_list and version.english_dimensions == MINILM_DIMENSIONS
    # and beside the English model itself it is a form error, not a version
    minilm = {**data, "provider": MINILM_PROVIDER, "chunk_overlap": 100, "english_list": "on"}
    response = client.post(url, minilm)
    assert response.status_code == 200 and "english_list" in response.context["form"].errors
    assert not IndexVersion.objects.filter(kb=kb, number=3).exists()
