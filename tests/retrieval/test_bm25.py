"""The keyword leg: BM25 scores as computed by hand, statistics kept per build, a bounded plan
for common words, and narrow scopes that read deeper instead of starving."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.db import connection, transaction

from kb.models import (
    Chunk,
    IndexVersion,
    KnowledgeBase,
    LexicalStat,
    Posting,
)
from retrieval.principals import Principal
from retrieval.search.engine import search
from retrieval.search.hits import COLUMNS
from retrieval.search.lexical import bm25
from retrieval.search.visibility import search_params, visible_sql
from tests.retrieval.factories import live_builds_without_chunks, publish

pytestmark = pytest.mark.django_db


def everyone(kb: KnowledgeBase, groups: frozenset[str] = frozenset()) -> Principal:
    return Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=groups)


@pytest.fixture
def fruit(kb: KnowledgeBase) -> KnowledgeBase:
    """Three one-chunk documents whose terms are known:
    a = appl appl banana (length 3), b = banana cherri (2), c = cherri x3 date (4)."""
    publish(kb, "a", "apple banana apple")
    publish(kb, "b", "banana cherry")
    publish(kb, "c", "cherry cherry cherry date")
    assert sorted(
        length or 0 for length in Chunk.objects.values_list("lexical_length", flat=True)
    ) == [2, 3, 4]
    return kb


def test_scores_are_bm25_as_computed_by_hand(fruit: KnowledgeBase) -> None:
    # N = 3 chunks, average length 3, k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + .5) / (df + .5))
    idf_df1 = math.log(1 + 2.5 / 1.5)  # 0.980829
    idf_df2 = math.log(1 + 1.5 / 2.5)  # 0.470004

    def weight(tf: int, length: int) -> float:
        return tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / 3))

    hits = search(principal=everyone(fruit), kb=fruit, query="cherries", mode="keyword").hits
    assert [h.document_key for h in hits] == ["c", "b"]
    assert hits[0].score == pytest.approx(idf_df2 * weight(3, 4), abs=1e-9)  # 0.689339
    assert hits[1].score == pytest.approx(idf_df2 * weight(1, 2), abs=1e-9)  # 0.544215

    hits = search(principal=everyone(fruit), kb=fruit, query="apple banana", mode="keyword").hits
    assert [h.document_key for h in hits] == ["a", "b"]
    assert hits[0].score == pytest.approx(idf_df1 * weight(2, 3) + idf_df2 * weight(1, 3))
    assert hits[1].score == pytest.approx(idf_df2 * weight(1, 2))
    assert hits[0].score == pytest.approx(1.818644, abs=1e-6)


def test_statistics_are_per_build_and_a_new_revision_replaces_nothing_else(
    fruit: KnowledgeBase,
) -> None:
    version = fruit.active_index_version
    assert version is not None
    stats = {
        (row.build.document.key, row.term): (row.chunks, row.length)
        for row in LexicalStat.objects.select_related("build__document")
    }
    assert stats[("a", "")] == (1, 3) and stats[("a", "appl")] == (1, 0)
    assert stats[("c", "cherri")] == (1, 0) and ("c", "appl") not in stats
    weights = bm25.query_weights(version_id=version.pk, query="cherry kiwi")
    assert weights.terms == ["cherri"]  # a term no chunk has cannot match
    assert weights.avg_length == pytest.approx(3.0)

    # the superseded build keeps counting until retention gives it up, as a search engine
    # counts deleted documents until a merge
    publish(fruit, "c", "date date")
    weights = bm25.query_weights(version_id=version.pk, query="date")
    assert weights.max_df == 2
    assert Posting.objects.filter(term="date").count() == 2


def test_a_p1_version_keeps_its_tsvector_ranking(kb: KnowledgeBase) -> None:
    assert kb.active_index_version is not None
    IndexVersion.objects.filter(pk=kb.active_index_version.pk).update(pipeline_version="p1")
    kb.refresh_from_db()
    publish(kb, "zh", "向量索引加速搜索。")
    publish(kb, "en", "Vector indexes in English.")

    assert not Posting.objects.exists()
    assert Chunk.objects.filter(lexical__isnull=False).count() == 2
    hits = search(principal=everyone(kb), kb=kb, query="向量索引", mode="keyword").hits
    assert [h.document_key for h in hits] == ["zh"]


DOCUMENTS = 50
CHUNKS = 100


@pytest.fixture
def common_words(kb: KnowledgeBase) -> KnowledgeBase:
    """5,000 live chunks that all contain the word "common"; chunk o also has "o<o>". Only
    document 0 has no access group. Postings and statistics are written as the writer would."""
    version = kb.active_index_version
    assert version is not None
    live_builds_without_chunks(kb, documents=DOCUMENTS, chunks=CHUNKS)
    with connection.cursor() as cursor:
        # document 0's chunks are the longest, so they rank last for "common"
        cursor.execute(
            """
            INSERT INTO kb_chunk (kb_id, build_id, document_id, index_version_id, ordinal,
                                  chunk_key, text, content_hash, token_count, lexical_length,
                                  created_at)
            SELECT b.kb_id, b.id, b.document_id, b.index_version_id, o, md5(b.id || '-' || o),
                   'common o' || o, md5(b.id || '-' || o), 2,
                   CASE WHEN d.key = 'doc-0' THEN 50 ELSE 2 END, now()
            FROM kb_build b JOIN kb_document d ON d.id = b.document_id,
                 generate_series(0, %s - 1) AS o
            WHERE b.kb_id = %s
            """,
            [CHUNKS, kb.pk],
        )
        for term in ("common", "o"):
            cursor.execute(
                """
                INSERT INTO kb_posting (chunk_id, index_version_id, term, tf, impact)
                SELECT c.id, c.index_version_id,
                       CASE WHEN %s = 'o' THEN 'o' || c.ordinal ELSE %s END, 1,
                       2.2 / (1 + 1.2 * (0.25 + 0.75 * c.lexical_length / 100.0))
                FROM kb_chunk c WHERE c.kb_id = %s
                """,
                [term, term, kb.pk],
            )
        cursor.execute(
            """
            INSERT INTO kb_lexicalstat (build_id, index_version_id, term, chunks, length)
            SELECT c.build_id, c.index_version_id, p.term, count(*), 0
            FROM kb_posting p JOIN kb_chunk c ON c.id = p.chunk_id GROUP BY 1, 2, 3
            UNION ALL
            SELECT build_id, index_version_id, '', count(*), sum(lexical_length)
            FROM kb_chunk GROUP BY 1, 2
            """
        )
        cursor.execute("ANALYZE kb_chunk, kb_posting, kb_lexicalstat, kb_publication")
    return kb


def explain(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        row = cursor.fetchone()
    assert row is not None
    return row[0][0]["Plan"]


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in nodes(child))]


def test_a_common_word_reads_a_bounded_number_of_postings(common_words: KnowledgeBase) -> None:
    kb = common_words
    version = kb.active_index_version
    assert version is not None
    params = search_params(principal=everyone(kb, frozenset({"secret"})), kb=kb)
    weights = bm25.query_weights(version_id=version.pk, query="common")
    assert weights.max_df == DOCUMENTS * CHUNKS
    bound = {
        **params,
        "bm25_terms": weights.terms,
        "bm25_idfs": weights.idfs,
        "bm25_depth": 200,
        "bm25_avg": weights.avg_length,
        "limit": 10,
    }

    # the candidates: the best 200 postings of the term, from the (version, term, impact) index
    # under a LIMIT, though 5,000 chunks contain it
    bound = {**bound, "bm25_cut": [True], "bm25_keep": 200}
    plan = explain(bm25.candidates_query(version_id=version.pk), bound)
    reads = [n for n in nodes(plan) if n.get("Relation Name") == "kb_posting"]
    assert reads and all(n.get("Index Name") == "posting_term_impact" for n in reads), plan
    assert all(n["Actual Rows"] <= 200 for n in reads), plan
    limits = [n for n in nodes(plan) if n["Node Type"] == "Limit"]
    assert any(n["Plans"][0].get("Index Name") == "posting_term_impact" for n in limits), plan
    with connection.cursor() as cursor:
        cursor.execute(bm25.candidates_query(version_id=version.pk), bound)
        ids = [row[0] for row in cursor.fetchall()]
    assert len(ids) == 200

    # the ranking: driven by the candidates' ids, every row read by a primary key
    plan = explain(
        bm25.ranking_query(
            columns=COLUMNS,
            visible=lambda chunks: visible_sql(iv=version.pk, params=params, chunks=chunks),
        ),
        {**bound, "bm25_ids": ids},
    )
    for node in nodes(plan):
        if node.get("Relation Name") in ("kb_posting", "kb_chunk"):
            assert node["Node Type"] != "Seq Scan", plan
            assert node["Actual Rows"] * node.get("Actual Loops", 1) <= 200, plan


def test_a_narrow_scope_reads_deeper_instead_of_starving(
    common_words: KnowledgeBase, settings: object
) -> None:
    kb = common_words
    # document 0's 100 chunks are the worst 100 for "common": outside any first read of 200
    outsider = everyone(kb)
    for top_k in (1, 10, 100):
        hits = search(principal=outsider, kb=kb, query="common", top_k=top_k, mode="keyword").hits
        assert len(hits) == top_k
        assert {h.document_key for h in hits} == {"doc-0"}
    insider = everyone(kb, frozenset({"secret"}))
    hits = search(principal=insider, kb=kb, query="common o7", top_k=10, mode="keyword").hits
    # every document's chunk 7 has both terms, and the short ones score higher
    assert all(h.ordinal == 7 for h in hits) and "doc-0" not in {h.document_key for h in hits}


def test_candidates_are_ordered_by_an_upper_bound_on_their_score(
    kb: KnowledgeBase, settings: Any
) -> None:
    publish(kb, "a", "rare rare common")
    publish(kb, "b", "common common common common")
    publish(kb, "c", "common")
    version = kb.active_index_version
    assert version is not None
    chunk = {c.document.key: c.pk for c in Chunk.objects.select_related("document")}
    weights = bm25.query_weights(version_id=version.pk, query="rare common")
    assert weights.terms == ["rare", "common"] and weights.dfs == [1, 3]

    def candidates(depth: int, keep: int) -> list[int]:
        bound: dict[str, Any] = {
            "bm25_terms": weights.terms,
            "bm25_idfs": weights.idfs,
            "bm25_cut": [df > depth for df in weights.dfs],
            "bm25_depth": depth,
            "bm25_keep": keep,
        }
        with connection.cursor() as cursor:
            cursor.execute(bm25.candidates_query(version_id=version.pk), bound)
            return [row[0] for row in cursor.fetchall()]

    # one posting per term: "rare" lists a (whole), "common" is cut after b. a's bound is its
    # rare weight plus common's last weight read, above b's common weight; c was never read.
    assert candidates(1, 3) == [chunk["a"], chunk["b"]]
    assert candidates(1, 1) == [chunk["a"]]
    assert candidates(5, 5)[-1] == chunk["c"]

    # a search that wants more than the first read holds reads deeper
    settings.KEYWORD_CANDIDATES = 1
    hits = search(principal=everyone(kb), kb=kb, query="rare common", top_k=3, mode="keyword").hits
    assert [h.document_key for h in hits] == ["a", "b", "c"]
