"""Issue 26, item 12: test search marks what the keyword index matched — the same analysis
(`textkit.analysis`): stems ("bands" marks "Band"), no stop words ("the" marks nothing), Chinese
words; and the top hybrid hit's score is the fusion's, not always 1."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from console.admin.test_search import highlighted
from kb.models import KnowledgeBase
from tests.retrieval.factories import publish


def test_marks_follow_the_keyword_index_analysis() -> None:
    text = "The Band of a salary: bands 3 and 4 of the staff, see work_mem. 文件大小的上限"
    assert str(highlighted(text, "the salary bands")) == (
        "The <mark>Band</mark> of a <mark>salary</mark>: <mark>bands</mark> 3 and 4 of the "
        "staff, see work_mem. 文件大小的上限"
    )
    assert str(highlighted(text, "work_mem")).count("<mark>") == 1
    assert "<mark>work_mem</mark>" in str(highlighted(text, "work_mem"))
    assert "<mark>文件</mark>" in str(highlighted(text, "文件"))
    assert "<mark>" not in str(highlighted(text, "the of and"))  # stop words only


def test_marks_are_escaped_text() -> None:
    assert str(highlighted("<b>bands</b> & more", "band")) == (
        "&lt;b&gt;<mark>bands</mark>&lt;/b&gt; &amp; more"
    )


@pytest.mark.django_db
def test_the_page_marks_stems_and_not_stop_words(kb: KnowledgeBase, admin_user: User) -> None:
    publish(kb, "salaries", "The salary Band of each role is reviewed in March.")
    publish(kb, "travel", "Train tickets are reimbursed in second class for the band.")
    client = Client()
    client.force_login(admin_user)

    def rows(mode: str) -> list[dict[str, Any]]:
        response = client.get(
            f"/admin/kb/knowledgebase/{kb.pk}/search/",
            {"mode": mode, "query": "the salary bands"},
        )
        assert response.status_code == 200
        result: list[dict[str, Any]] = response.context["sides"][0].rows
        return result

    (top, *_) = rows("keyword")
    assert top["hit"].document_key == "salaries"
    assert str(top["text"]) == (
        "The <mark>salary</mark> <mark>Band</mark> of each role is reviewed in March."
    )
    # hybrid's top score is the learned fusion's figure, not a normalised 1.0
    hybrid = rows("hybrid")
    assert hybrid and hybrid[0]["hit"].score < 1.0
