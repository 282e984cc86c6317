"""The search engine on a realistic table: the active version's HNSW index is used, filters
never starve the result, and Chinese text is found by keyword and hybrid queries."""

from __future__ import annotations

import pytest
from django.db import connection

from embeddings import get_provider
from ingestion.pipeline.run import task_execute
from kb import storage
from kb.ann import ann_index_drop, ann_index_ensure, ann_index_name
from kb.models import KnowledgeBase, Tenant
from kb.services.documents import document_create
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from retrieval.search.vector import vector_query
from retrieval.search.visibility import search_params
from tests.retrieval.factories import live_builds_without_chunks
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENTS = 100
CHUNKS_PER_DOCUMENT = 200


@pytest.fixture
def big_kb(tenant: Tenant) -> KnowledgeBase:
    """100 live documents of 200 chunks (20,000 rows, random 64-d vectors); only one document
    (1 % of the rows) has no access group, the rest need group `secret`."""
    kb = knowledge_base_create(tenant=tenant, name="Big", slug="big", dimensions=64)
    version = kb.active_index_version
    assert version is not None
    live_builds_without_chunks(kb, documents=DOCUMENTS, chunks=CHUNKS_PER_DOCUMENT)
    ann_index_drop(version_id=version.pk)  # a bulk build beats 20,000 graph inserts
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO kb_chunk (kb_id, build_id, document_id, index_version_id, ordinal,
                                  chunk_key, text, content_hash, token_count, embedding,
                                  lexical, created_at)
            SELECT b.kb_id, b.id, b.document_id, b.index_version_id, o,
                   md5(b.id || '-' || o), 'chunk ' || o || ' of build ' || b.id,
                   md5(b.id || '-' || o), 5,
                   (SELECT array_agg(random() - 0.5)::real[] FROM generate_series(1, %s)
                     WHERE o IS NOT NULL)::vector,
                   to_tsvector('simple', 'chunk ' || o), now()
            FROM kb_build b, generate_series(0, %s - 1) AS o
            WHERE b.kb_id = %s
            """,
            [version.dimensions, CHUNKS_PER_DOCUMENT, kb.pk],
        )
        cursor.execute("ANALYZE kb_chunk, kb_document, kb_publication, kb_build, kb_revision")
    ann_index_ensure(version_id=version.pk)
    return kb


def test_vector_search_uses_the_active_versions_hnsw_index(big_kb: KnowledgeBase) -> None:
    version = big_kb.active_index_version
    assert version is not None
    # a reader of every group: the common case, where the index is the fast path
    principal = Principal(
        tenant_id=big_kb.tenant_id, kb_ids=None, access_groups=frozenset({"secret"})
    )
    vector = get_provider(provider="hash", model=version.model, dimensions=version.dimensions)
    sql, params = vector_query(
        search_params(principal=principal, kb=big_kb),
        version,
        vector.embed(["chunk 7"])[0],
        10,
    )
    with connection.cursor() as cursor:  # the session's settings, as search runs it
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert ann_index_name(version.pk) in plan, plan


def test_filters_never_starve_the_result_when_one_percent_is_visible(
    big_kb: KnowledgeBase,
) -> None:
    outsider = Principal(tenant_id=big_kb.tenant_id, kb_ids=None, access_groups=frozenset())
    insider = Principal(
        tenant_id=big_kb.tenant_id, kb_ids=None, access_groups=frozenset({"secret"})
    )

    for top_k in (10, 50, 100):
        hits = search(principal=outsider, kb=big_kb, query="chunk", top_k=top_k, mode="vector").hits
        assert len(hits) == top_k
        assert {h.document_key for h in hits} == {"doc-0"}
    hits = search(principal=insider, kb=big_kb, query="chunk", top_k=100, mode="vector").hits
    assert len(hits) == 100
    assert len({h.document_key for h in hits}) > 1


CHINESE = (
    "数据库连接池的大小应该根据并发请求数量来设置。\n\n"
    "向量索引使用分层可导航小世界图来加速近似最近邻搜索。"
)


def test_chinese_documents_are_found_by_chinese_keyword_and_hybrid_queries(
    kb: KnowledgeBase,
) -> None:
    for key, text in (("zh", CHINESE), ("en", "Connection pools and vector indexes in English.")):
        revision = document_create(
            kb=kb,
            key=key,
            title=key,
            stored=storage.store_bytes(text.encode()),
            media_type="text/plain",
            original_name=f"{key}.txt",
        )
        task = IngestionTask.objects.get(build__revision=revision)
        assert task_execute(task_id=task.pk, worker_id="w") == "published"
    principal = Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())

    for mode in ("keyword", "hybrid"):
        hits = search(principal=principal, kb=kb, query="向量索引", mode=mode).hits
        assert hits, mode
        assert hits[0].document_key == "zh"
        assert "向量索引" in hits[0].text
    keyword = search(principal=principal, kb=kb, query="连接池", mode="keyword").hits
    assert [h.document_key for h in keyword] == ["zh"]
