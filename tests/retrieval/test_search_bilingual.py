"""The default mode across languages: a Chinese question finds the English page that answers
it, and an English question the Chinese page, even when the keyword leg only finds a common word
in a page of the question's own language (the packaged multilingual model, `use`)."""

from __future__ import annotations

import pytest
from django.test import override_settings

from embeddings import USE_DIMENSIONS, USE_MODEL
from kb.models import KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.helpers import run_pending, upload_text

pytestmark = pytest.mark.django_db(transaction=True)

ENGLISH = (
    "Joining path components. os.path.join(path, *paths) joins one or more path components "
    "intelligently. If a component is an absolute path, all previous components are thrown away "
    "and joining continues from the absolute path component. Joining does not change the "
    "current working directory."
)
CHINESE = (
    "设置系统时区。使用 timedatectl set-timezone 命令可以修改系统的时区，例如设置为 "
    "Asia/Shanghai。时区数据保存在 /usr/share/zoneinfo 路径下，修改后无需重新启动。"
)


@pytest.fixture
def bilingual(tenant: Tenant) -> KnowledgeBase:
    kb = knowledge_base_create(
        tenant=tenant,
        name="Bilingual",
        slug="bilingual",
        provider="use",
        model=USE_MODEL,
        dimensions=USE_DIMENSIONS,
    )
    upload_text(kb, "paths-en", ENGLISH)
    upload_text(kb, "timezone-zh", CHINESE)
    assert run_pending() == ["published", "published"]
    return kb


def first_document(kb: KnowledgeBase, query: str, **settings: object) -> str:
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())
    with override_settings(**settings):
        result = search(principal=principal, kb=kb, query=query, top_k=2, mode="hybrid")
    return result.hits[0].document_key


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("拼接文件路径时如果其中一段是绝对路径会怎样？", "paths-en"),
        ("How do I change the computer's time zone?", "timezone-zh"),
    ],
)
def test_the_default_mode_finds_the_page_in_the_other_language(
    bilingual: KnowledgeBase, query: str, answer: str
) -> None:
    assert first_document(bilingual, query) == answer
