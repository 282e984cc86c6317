"""A knowledge base on the packaged English model (`minilm`): its documents build and publish
through the pipeline, and a paraphrase that shares no word with its answer finds it."""

from __future__ import annotations

import pytest

from embeddings import MINILM_DIMENSIONS, MINILM_MODEL
from kb.models import Chunk, KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.helpers import run_pending, upload_text

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = {
    "hold": "apt-mark hold marks a package as held back, so it is not upgraded automatically.",
    "printers": "Printers are added through the CUPS web interface on port 631.",
    "timezone": "timedatectl set-timezone changes the system's time zone; no reboot is needed.",
}


@pytest.fixture
def english(tenant: Tenant) -> KnowledgeBase:
    kb = knowledge_base_create(
        tenant=tenant,
        name="English",
        slug="english",
        provider="minilm",
        model=MINILM_MODEL,
        dimensions=MINILM_DIMENSIONS,
    )
    for key, text in PAGES.items():
        upload_text(kb, key, text)
    assert run_pending() == ["published"] * len(PAGES)
    return kb


def test_a_minilm_knowledge_base_finds_an_english_paraphrase(english: KnowledgeBase) -> None:
    principal = Principal(tenant_id=english.tenant_id, kb_ids=None, access_groups=frozenset())

    result = search(
        principal=principal,
        kb=english,
        query="How can I stop a program from being updated with everything else?",
        top_k=3,
        mode="vector",
    )

    assert result.hits[0].document_key == "hold"
    stored = Chunk.objects.filter(index_version_id=english.active_index_version_id)
    assert stored.count() == len(PAGES)
    assert all(len(c.embedding) == MINILM_DIMENSIONS for c in stored)
