"""The search's one snapshot: outside any transaction (as the API runs it) a vector search
whose approximate statement finds top_k rows is that one statement (its own snapshot, whose
rows prove the version active); every other search reads its lists in one repeatable-read,
read-only transaction that begins with both in its BEGIN, the active-version check is made in
that snapshot, and nothing is left open afterwards."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import DataError, connection
from django.test.utils import CaptureQueriesContext
from psycopg.pq import TransactionStatus

from kb.models import KnowledgeBase, Tenant
from kb.services.index_versions import index_version_activate, index_version_create
from retrieval import routing
from retrieval.principals import Principal
from retrieval.search import engine
from retrieval.search.hits import Hit, hits_from_rows
from retrieval.search.snapshot import BEGIN_SNAPSHOT
from retrieval.search.vector import embed_query
from tests.helpers import run_pending
from tests.retrieval.factories import api, publish, search

pytestmark = pytest.mark.django_db(transaction=True)

MODES = ("vector", "keyword", "hybrid")
RECHECK = "SELECT EXISTS (SELECT 1 FROM kb_knowledgebase WHERE id = "


def idle() -> bool:
    """No transaction open on the test's connection, which Django keeps in autocommit mode."""
    raw = connection.connection
    return (
        connection.get_autocommit()
        and raw is not None
        and raw.info.transaction_status == TransactionStatus.IDLE
    )


def everyone(kb: KnowledgeBase) -> Principal:
    return Principal(tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset())


@pytest.mark.parametrize("mode", MODES)
def test_every_list_of_a_search_reads_one_repeatable_read_read_only_transaction(
    kb: KnowledgeBase, api_key: str, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")
    seen: list[tuple[Any, ...]] = []
    hits = hits_from_rows

    def hits_in_their_transaction(rows: list[tuple[Any, ...]]) -> list[Hit]:
        with routing.db().cursor() as cursor:  # where the list was just read
            cursor.execute(
                "SELECT current_setting('transaction_isolation'), "
                "current_setting('transaction_read_only'), now(), pg_backend_pid()"
            )
            seen.append(cursor.fetchone())
        return hits(rows)

    monkeypatch.setattr(engine, "hits_from_rows", hits_in_their_transaction)

    with CaptureQueriesContext(connection) as queries:
        response = search(api(api_key), {"kb": "handbook", "query": "trains", "mode": mode})

    assert response.status_code == 200, response.content
    assert [h["document_key"] for h in response.json()["hits"]] == ["travel"]
    assert len(seen) == (2 if mode == "hybrid" else 1)
    assert {row[:2] for row in seen} == {("repeatable read", "on")}
    assert len({row[2:] for row in seen}) == 1  # one transaction (its start time, its backend)
    statements = [q["sql"] for q in queries.captured_queries]
    # the isolation level and read-only mode are the BEGIN's (the scan settings in its trip)
    begins = [s for s in statements if s.startswith("BEGIN")]
    assert len(begins) == 1 and begins[0].startswith(BEGIN_SNAPSHOT)
    assert not any(s.startswith("SET TRANSACTION") for s in statements)
    assert statements[-1] == "COMMIT"
    assert idle()


def test_a_full_vector_list_is_one_statement_in_autocommit(kb: KnowledgeBase, api_key: str) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")
    publish(kb, "food", "Meals are reimbursed up to a daily limit.")

    with CaptureQueriesContext(connection) as queries:
        response = search(
            api(api_key), {"kb": "handbook", "query": "trains", "mode": "vector", "top_k": 2}
        )

    assert response.status_code == 200, response.content
    assert response.json()["hits"][0]["document_key"] == "travel"
    searched = [q["sql"] for q in queries.captured_queries if "kb_chunk c" in q["sql"]]
    assert len(searched) == 1 and "ORDER BY c.embedding" in searched[0]
    statements = [q["sql"] for q in queries.captured_queries]
    assert not any(s.startswith(("BEGIN", "COMMIT", RECHECK)) for s in statements), statements
    assert idle()


@pytest.mark.parametrize("top_k", [1, 10])
def test_a_swap_between_the_embedding_and_the_snapshot_starts_the_search_again(
    kb: KnowledgeBase, admin_user: User, monkeypatch: pytest.MonkeyPatch, top_k: int
) -> None:
    publish(kb, "a", "Alpha text about rivers.")
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-v2",
        dimensions=128,
        chunk_size=400,
        chunk_overlap=50,
        actor=admin_user,
    )
    run_pending()
    embedded_for: list[int] = []
    embed = embed_query

    def embed_then_swap(version: Any, query: str) -> list[float]:
        embedded_for.append(version.number)
        if version.pk == v1.pk:  # the swap commits after the query was embedded for v1
            index_version_activate(version_id=v2.pk, actor=admin_user, expected_active_id=v1.pk)
        return embed(version, query)

    monkeypatch.setattr(engine, "embed_query", embed_then_swap)
    result = engine.search(
        principal=everyone(kb), kb=kb, query="rivers", mode="vector", top_k=top_k
    )

    assert embedded_for == [1, 2]  # v1's snapshot saw v2 active: embedded again for v2
    assert result.index_version == 2
    assert [h.document_key for h in result.hits] == ["a"]
    assert idle()


@pytest.mark.parametrize("mode", MODES)
def test_the_version_is_re_checked_only_when_the_lists_come_back_empty(
    kb: KnowledgeBase, api_key: str, mode: str
) -> None:
    """A row proves the version active in the snapshot (the visibility rule requires it), so
    only an empty answer costs the re-check; it is made in the same snapshot."""
    publish(kb, "travel", "Trains are reimbursed in second class.")
    client = api(api_key)

    def rechecks(body: dict[str, Any]) -> tuple[int, list[str]]:
        with CaptureQueriesContext(connection) as queries:
            response = search(client, {"kb": "handbook", "mode": mode, **body})
        assert response.status_code == 200, response.content
        statements = [q["sql"] for q in queries.captured_queries]
        begin = next(i for i, s in enumerate(statements) if s.startswith("BEGIN"))
        assert statements[-1] == "COMMIT"
        # the re-check, if any, runs inside the snapshot
        checks = [i for i, s in enumerate(statements) if s.startswith(RECHECK)]
        assert all(begin < i < len(statements) - 1 for i in checks)
        return len(checks), [h["document_key"] for h in response.json()["hits"]]

    assert rechecks({"query": "trains"}) == (0, ["travel"])
    # a filter that leaves nothing (keyword: and nothing matches): the empty answer re-checks
    assert rechecks({"query": "zeppelin", "document_keys": ["none"]}) == (1, [])


def test_a_statement_that_fails_in_the_snapshot_leaves_no_transaction_open(
    kb: KnowledgeBase, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")

    def failing_rows(*args: Any) -> list[tuple[Any, ...]]:
        with routing.db().cursor() as cursor:
            cursor.execute("SELECT 1 / 0")
        return []

    monkeypatch.setattr(engine, "approximate_rows", failing_rows)
    with pytest.raises(DataError):
        engine.search(principal=everyone(kb), kb=kb, query="trains", mode="vector")

    assert idle()
    # the connection writes again: it is not left in the read-only (or aborted) transaction
    Tenant.objects.create(name="Other", slug="other")


def test_an_exception_in_the_snapshot_leaves_no_transaction_open(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")

    def interrupted(*args: Any) -> list[tuple[Any, ...]]:
        raise KeyboardInterrupt  # not an Exception: a worker's timeout, a signal

    monkeypatch.setattr(engine, "keyword_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.search(principal=everyone(kb), kb=kb, query="trains", mode="keyword")

    assert idle()
    assert search(api(None), {"kb": "handbook", "query": "trains"}).status_code == 401


def test_inside_a_callers_transaction_search_reads_that_transaction(kb: KnowledgeBase) -> None:
    """No BEGIN of its own there: a savepoint, and the caller's snapshot."""
    from django.db import transaction

    publish(kb, "travel", "Trains are reimbursed in second class.")
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        result = engine.search(principal=everyone(kb), kb=kb, query="trains", mode="vector")
        assert not idle()

    assert [h.document_key for h in result.hits] == ["travel"]
    assert not any(q["sql"].startswith(BEGIN_SNAPSHOT) for q in queries.captured_queries)
    assert idle()
