"""The admin-only override an evaluation of a pending revision searches with
(`search(served_instead={document: build})`): that build is served instead of the document's
live one, in the same snapshot and under the same rule; everything else is as it was; a normal
search, its statements and the API are untouched by it."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kb.models import Build, KnowledgeBase
from retrieval.principals import Principal, api_key_create
from retrieval.search.engine import MODES, search
from retrieval.search.hits import SearchResult
from tests.retrieval.factories import api, build, publish, upload
from tests.retrieval.factories import search as api_search

pytestmark = pytest.mark.django_db

OLD = "The cafeteria opens at eight and serves porridge."
NEW = "The cafeteria opens at seven and serves pancakes with maple syrup."


@pytest.fixture
def pending(approval_kb: KnowledgeBase) -> Build:
    """`menu` is live at revision 1; revision 2 is built and waits for approval. `hours` and
    the restricted `payroll` are live beside it."""
    approval_kb.require_approval = False
    approval_kb.save()
    publish(approval_kb, "menu", OLD)
    publish(approval_kb, "hours", "The library opens at nine on weekdays.")
    publish(approval_kb, "payroll", "Salaries with pancakes are paid monthly.", groups=("hr",))
    approval_kb.require_approval = True
    approval_kb.save()
    waiting = build(upload(approval_kb, "menu", NEW))
    assert waiting.state == Build.State.READY
    return waiting


def everyone(kb: KnowledgeBase) -> Principal:
    return Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())


def texts(result: SearchResult, key: str) -> set[str]:
    return {hit.text for hit in result.hits if hit.document_key == key}


@pytest.mark.parametrize("mode", MODES)
def test_the_pending_build_is_served_instead_of_the_live_one(
    approval_kb: KnowledgeBase, pending: Build, mode: str
) -> None:
    kb = approval_kb
    instead = {pending.document_id: pending.pk}

    served = search(
        principal=everyone(kb), kb=kb, query="pancakes maple", mode=mode, served_instead=instead
    )
    normal = search(principal=everyone(kb), kb=kb, query="pancakes maple", mode=mode)

    assert texts(served, "menu") == {NEW}, served.hits
    assert {hit.build_id for hit in served.hits if hit.document_key == "menu"} == {pending.pk}
    assert texts(normal, "menu") <= {OLD}  # search itself still serves revision 1
    assert all(hit.revision == 1 for hit in normal.hits if hit.document_key == "menu")
    # the rest of the rule holds: a document behind a group the reader lacks stays out
    assert "payroll" not in {hit.document_key for hit in served.hits}


def test_the_other_documents_answer_as_they_do_without_it(
    approval_kb: KnowledgeBase, pending: Build
) -> None:
    kb = approval_kb
    query = "library opens weekdays"
    normal = search(principal=everyone(kb), kb=kb, query=query, mode="keyword")
    served = search(
        principal=everyone(kb),
        kb=kb,
        query=query,
        mode="keyword",
        served_instead={pending.document_id: pending.pk},
    )

    def others(result: SearchResult) -> list[tuple[int, str]]:
        return [(h.chunk_id, h.document_key) for h in result.hits if h.document_key != "menu"]

    assert others(served) == others(normal) and others(normal)


def test_a_build_of_another_document_serves_nothing_in_its_place(
    approval_kb: KnowledgeBase, pending: Build
) -> None:
    kb = approval_kb
    hours = Build.objects.get(document__key="hours", state=Build.State.LIVE)

    result = search(
        principal=everyone(kb),
        kb=kb,
        query="library opens nine weekdays cafeteria",
        mode="keyword",
        served_instead={pending.document_id: hours.pk},  # a pairing that does not hold
    )

    keys = [hit.document_key for hit in result.hits]
    assert "menu" not in keys  # its live pointer set aside, nothing put in its place
    assert keys.count("hours") == 1  # the other build is not served twice, nor as `menu`


RULE = "JOIN kb_document d ON d.id = p.document_id"


def test_a_normal_search_runs_the_statements_it_always_ran(
    approval_kb: KnowledgeBase, pending: Build
) -> None:
    kb = approval_kb
    for mode in MODES:
        with CaptureQueriesContext(connection) as normal:
            search(principal=everyone(kb), kb=kb, query="cafeteria opens", mode=mode)
        with CaptureQueriesContext(connection) as served:
            search(
                principal=everyone(kb),
                kb=kb,
                query="cafeteria opens",
                mode=mode,
                served_instead={pending.document_id: pending.pk},
            )
        # the statements that apply the visibility rule (the keyword leg's first read of the
        # postings does not)
        statements = [q["sql"] for q in normal.captured_queries if RULE in q["sql"]]
        assert statements, mode
        for sql in statements:
            # the pointer table itself, joined as it always was; no override relation
            assert "JOIN kb_publication p\n" in sql, sql
            assert "kb_build sb" not in sql and "kb_publication op" not in sql
        overridden = [q["sql"] for q in served.captured_queries if RULE in q["sql"]]
        assert len(overridden) == len(statements)
        assert all("JOIN kb_publication p\n" not in sql for sql in overridden)


def test_the_api_cannot_ask_for_it(approval_kb: KnowledgeBase, pending: Build) -> None:
    kb = approval_kb
    _, key = api_key_create(tenant=kb.tenant, name="reader", knowledge_bases=[kb])
    body: dict[str, Any] = {"kb": kb.slug, "query": "pancakes maple syrup", "mode": "keyword"}

    response = api_search(
        api(key), {**body, "served_instead": {str(pending.document_id): pending.pk}}
    )

    assert response.status_code in (200, 400), response.content
    if response.status_code == 200:  # ignored: the live revision answers, as without it
        hits = response.json()["hits"]
        assert all(hit["revision"] == 1 for hit in hits if hit["document_key"] == "menu")
        assert NEW not in response.content.decode()
