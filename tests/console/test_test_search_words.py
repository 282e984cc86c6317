"""Test search's hits in words (issue 37, item 8): each column says what its numbers are, a
hybrid hit says which lists found it and whether it is in the query's language, "Why this rank"
tells the fusion's features as what they measure, and a hit says the page, slide or rows its
chunk stands on, as the chunk's own page does."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from console.admin import search_explained
from console.admin.search_explained import fused_words, rank_words
from kb import storage
from kb.models import Chunk, KnowledgeBase
from kb.services.documents import document_create
from retrieval.search import fusion
from tests.retrieval.factories import build, publish

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def _search(client: Client, kb: KnowledgeBase, **params: Any) -> Any:
    response = client.get(f"/admin/kb/knowledgebase/{kb.pk}/search/", params)
    assert response.status_code == 200
    assert response.context["sides"], response.context["form"].errors
    return response


def test_a_hit_says_the_rows_its_chunk_stands_on_as_the_chunk_page_does(
    client: Client, kb: KnowledgeBase
) -> None:
    table = "city,allowance\n" + "".join(f"town{i},{100 + i} euros\n" for i in range(60))
    table += "Lyon,90 euros per night\n"
    build(
        document_create(
            kb=kb,
            key="allowances",
            title="Allowances",
            stored=storage.store_bytes(table.encode()),
            media_type="text/csv",
            original_name="allowances.csv",
        )
    )

    response = _search(client, kb, query="Lyon", mode="keyword")

    row = response.context["sides"][0].rows[0]
    chunk = Chunk.objects.get(pk=row["hit"].chunk_id)
    assert chunk.location and chunk.location["unit"] == "row"
    assert row["where"].startswith("rows ") and row["where"].endswith(str(chunk.location["last"]))
    chunk_page = client.get(f"/admin/kb/chunk/{chunk.pk}/change/").content.decode()
    assert row["where"] in chunk_page  # the same words as the chunk's page
    assert f'<span class="hit-where">{row["where"]}</span>' in response.content.decode()


def test_a_hit_of_a_file_without_pages_names_none(client: Client, kb: KnowledgeBase) -> None:
    publish(kb, "travel", "Train tickets are reimbursed in second class.")

    response = _search(client, kb, query="reimbursed", mode="keyword")

    assert response.context["sides"][0].rows[0]["where"] == ""
    assert "hit-where" not in response.content.decode()


@pytest.mark.parametrize(
    ("mode", "label", "meaning"),
    [
        ("keyword", "BM25", "no fixed top"),
        ("vector", "similarity", "cosine"),
        ("hybrid", "fusion estimate", "It is relative, not a certainty"),
    ],
)
def test_each_column_says_what_its_numbers_are(
    client: Client, kb: KnowledgeBase, mode: str, label: str, meaning: str
) -> None:
    publish(kb, "travel", "Train tickets are reimbursed in second class.")

    response = _search(client, kb, query="reimbursed tickets", mode=mode)

    side = response.context["sides"][0]
    assert side.scores.label == label and meaning in side.scores.meaning
    page = response.content.decode()
    assert f"{label} {side.rows[0]['hit'].score:.3f}" in page
    assert meaning in page
    assert "score 0." not in page  # no bare number that reads as a certainty


def test_a_hit_found_by_meaning_only_in_another_language_says_so(
    client: Client, kb: KnowledgeBase
) -> None:
    publish(kb, "travel", "Train tickets are reimbursed in second class.")
    publish(kb, "travel-zh", "火车票按二等座报销。出差需要提前申请。")

    response = _search(client, kb, query="train tickets reimbursed", mode="hybrid")

    rows = {row["hit"].document_key: row for row in response.context["sides"][0].rows}
    assert rows["travel"]["found_by"] == (
        "found by meaning (vector #1) and by its words (keyword #1)"
    )
    chinese = rows["travel-zh"]["found_by"]
    assert chinese.startswith("found by meaning only (vector #2); not in the keyword list")
    assert chinese.endswith("; in another language than the query")
    assert "; in another language than the query.</div>" in response.content.decode()


def _fused(**values: float) -> dict[str, Any]:
    """A learned explanation of one hit: every feature at `values` (else 0), each contributing
    its value minus 0.1 (so a zero feature lowers the score a little)."""
    return {
        "score": 0.9,
        "contributions": [
            {
                "feature": name,
                "value": values.get(name, 0.0),
                "contribution": values.get(name, 0) - 0.1,
            }
            for name in fusion.FEATURES
        ],
    }


def test_every_feature_of_the_fusion_has_words() -> None:
    assert set(search_explained.FEATURE_WORDS) == {*fusion.FEATURES, *fusion.ENGLISH_FEATURES}


def test_the_english_lists_features_are_told_and_its_absence_said() -> None:
    found = {"in_english": 1.0, "english_reciprocal_rank": 0.5, "en_cos": 0.71}
    words = fused_words(
        {
            "score": 0.8,
            "contributions": [
                {"feature": name, "value": value, "contribution": 0.5 - i * 0.1}
                for i, (name, value) in enumerate(found.items())
            ],
        }
    )
    assert "English rank 1" in words and "English similarity 0.71" in words
    missing = fused_words(
        {
            "score": 0.2,
            "contributions": [
                {"feature": "in_english", "value": 0.0, "contribution": -0.4},
                {"feature": "english_reciprocal_rank", "value": 0.0, "contribution": -0.3},
            ],
        }
    )
    assert "not in the English list" in missing and "English rank" not in missing


def test_the_fusions_features_are_told_as_what_they_measure() -> None:
    words = fused_words(
        _fused(
            cos=0.61,
            in_vector=1,
            vector_reciprocal_rank=1 / 3,
            in_keyword=1,
            keyword_reciprocal_rank=0.5,
            bm25_share=0.46,
            bm25_of_best=1.0,
        ),
        most=20,
    )

    assert "similarity 0.61 (+0.51)" in words
    assert "vector rank 2 (+0.23)" in words and "keyword rank 1 (+0.40)" in words
    assert "matches 46% of what the query's words could score (+0.36)" in words
    assert words.index("raised by") < words.index("lowered by")
    assert not [name for name in fusion.FEATURES if name in words]


def test_a_list_that_did_not_find_the_hit_is_said_once_its_parts_summed() -> None:
    words = fused_words(_fused(cos=0.5, in_vector=1, vector_reciprocal_rank=0.5), most=20)

    # bm25_share, bm25_of_best, in_keyword, keyword_reciprocal_rank and the three cross-language
    # keyword features are all zero: one "not in the keyword list", their parts summed
    assert words.count("not in the keyword list") == 1
    assert "not in the keyword list (\u22120.40)" in words
    # the cross-language features of a hit in the query's language are that, not a match
    assert words.count("in the query's language") == 1
    assert "across languages" not in words


def test_a_hit_in_another_language_is_told_so() -> None:
    words = fused_words(
        _fused(cos=0.4, in_vector=1, vector_reciprocal_rank=0.5, cross=1, cross_x_cos=0.4),
        most=20,
    )

    assert "in another language than the query (+0.90)" in words
    assert "similarity 0.40 across languages (+0.30)" in words


def test_a_hit_the_keyword_gate_kept_says_so() -> None:
    fused = {**_fused(in_keyword=1, keyword_reciprocal_rank=0.5), "score": 0.2}
    at_rank = {**fused, "kept": {"keyword_rank": 1, "at_rank": True, "why": "..."}}
    in_top = {**fused, "kept": {"keyword_rank": 7, "at_rank": False, "why": "..."}}

    assert "kept at rank 1 or better by the keyword gate" in rank_words({"fused": at_rank})
    words = rank_words({"fused": in_top})
    assert "kept in the answer by the keyword gate" in words and "keyword rank 7" in words
    assert "keyword gate" not in rank_words({"fused": fused})
