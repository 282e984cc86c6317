"""A hybrid search's index walks read on connections of their own in the search's snapshot
(`retrieval.search.shared_snapshot`): a reader sees exactly what the search's own connection
sees, whatever commits meanwhile; a hybrid search reads its vector leg's and its English list's
walks on two; a reader that fails leaves the search to read its walk in series; so does a
search inside a caller's transaction, and one that finds no reader idle; a reader whose
snapshot is gone stays usable."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from kb.models import KnowledgeBase, Tenant
from retrieval.search import engine, shared_snapshot
from retrieval.search.engine import search
from retrieval.search.snapshot import fetch, search_snapshot
from tests.retrieval.test_search_english import PARAPHRASE, knowledge_base, reader

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def english(tenant: Tenant) -> KnowledgeBase:
    return knowledge_base(tenant, "english", english_list=True)


def _commit_elsewhere(sql: str, params: list[Any]) -> None:
    """`sql` committed by a session of its own (not Django's connection)."""
    params_ = connection.get_connection_params()
    with psycopg.connect(
        dbname=params_["dbname"],
        user=params_.get("user"),
        host=params_.get("host"),
        port=params_.get("port"),
        password=params_.get("password"),
        autocommit=True,
    ) as other:
        other.execute(sql, params)


def _readers(monkeypatch: pytest.MonkeyPatch, before: Any = None) -> list[str]:
    """Record each reader's thread (and run `before` on it before it reads)."""
    threads: list[str] = []
    read = shared_snapshot._read

    def recorded(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        if before is not None:
            before()
        return read(*args)

    monkeypatch.setattr(shared_snapshot, "_read", recorded)
    return threads


LIVE = "SELECT count(*) FROM kb_document WHERE kb_id = %(kb)s AND deleted_at IS NULL"


def test_a_reader_reads_the_exported_snapshot_not_what_commits_meanwhile(
    english: KnowledgeBase,
) -> None:
    with search_snapshot("default"):
        snapshot = shared_snapshot.exported()
        assert snapshot is not None
        # committed by another session after the search's snapshot was taken
        _commit_elsewhere(
            "UPDATE kb_document SET deleted_at = now() WHERE kb_id = %s AND key = 'hold'",
            [english.pk],
        )
        seen = shared_snapshot.read_soon(snapshot, "default", lambda: (LIVE, {"kb": english.pk}))
        assert seen is not None
        assert seen.result() == fetch(LIVE, {"kb": english.pk}) == [(5,)]
    assert fetch(LIVE, {"kb": english.pk}) == [(4,)]


def _series(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each index walk the search reads on its own connection instead of a reader's
    rows: "vector" or "english"."""
    read_here: list[str] = []
    fetch_, walk = shared_snapshot.fetch, engine.approximate_rows

    def fetched(sql: str, params: dict[str, Any]) -> Any:
        read_here.append("english" if "embedding_en" in sql else "vector")
        return fetch_(sql, params)

    def walked(*args: Any) -> Any:
        read_here.append("vector")
        return walk(*args)

    monkeypatch.setattr(shared_snapshot, "fetch", fetched)
    monkeypatch.setattr(engine, "approximate_rows", walked)
    return read_here


def test_a_hybrid_search_reads_its_index_walks_on_readers(
    english: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads, read_here = _readers(monkeypatch), _series(monkeypatch)
    result = search(principal=reader(english), kb=english, query=PARAPHRASE, explain=True)

    # both walks, the vector leg's and the English list's, each on a reader
    assert len(threads) == 2 and all(t.startswith("canon-snapshot-reader") for t in threads)
    assert read_here == []  # the readers' rows served
    assert result.hits[0].document_key == "hold"
    assert result.ranking is not None
    assert result.ranking.hits[result.hits[0].chunk_id]["english"]["rank"] == 1


def test_a_reader_that_fails_leaves_the_search_to_read_the_walk_itself(
    english: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = search(principal=reader(english), kb=english, query=PARAPHRASE, explain=True)

    def broken(*args: Any) -> Any:
        raise psycopg.OperationalError("the reader's connection was lost")

    monkeypatch.setattr(shared_snapshot, "_read", broken)
    read_here = _series(monkeypatch)
    result = search(principal=reader(english), kb=english, query=PARAPHRASE, explain=True)

    assert sorted(read_here) == ["english", "vector"]  # both walks, read here

    assert [h.chunk_id for h in result.hits] == [h.chunk_id for h in expected.hits]
    assert result.ranking is not None
    assert result.ranking.hits[result.hits[0].chunk_id]["english"]["rank"] == 1


def test_a_search_inside_a_callers_transaction_reads_the_walk_in_series(
    english: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads, read_here = _readers(monkeypatch), _series(monkeypatch)
    with transaction.atomic():
        result = search(principal=reader(english), kb=english, query=PARAPHRASE)
    assert threads == [] and sorted(read_here) == ["english", "vector"]
    assert result.hits[0].document_key == "hold"


def test_a_reader_whose_snapshot_has_ended_is_left_idle_for_the_next(
    english: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a snapshot nobody exports: the reader fails to import it and rolls back, keeping its
    # connection open and idle rather than dropping it
    gone = shared_snapshot.read_soon("00000003-0000001B-1", "default", lambda: ("SELECT 1", {}))
    assert gone is not None
    with pytest.raises(psycopg.Error, match="snapshot"):
        gone.result()
    assert shared_snapshot._opened
    for raw in shared_snapshot._opened:
        assert not raw.closed
        assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    threads = _readers(monkeypatch)
    result = search(principal=reader(english), kb=english, query=PARAPHRASE, explain=True)
    assert threads and result.hits[0].document_key == "hold"


def test_a_search_that_finds_no_reader_idle_reads_in_series(
    english: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = search(principal=reader(english), kb=english, query=PARAPHRASE)
    idle = shared_snapshot._pool().idle
    taken = 0
    while idle.acquire(blocking=False):  # every reader busy with another search
        taken += 1
    try:
        threads, read_here = _readers(monkeypatch), _series(monkeypatch)
        result = search(principal=reader(english), kb=english, query=PARAPHRASE)
    finally:
        for _ in range(taken):
            idle.release()
    assert taken == 2  # CANON_SNAPSHOT_READERS
    assert threads == [] and sorted(read_here) == ["english", "vector"]
    assert [h.chunk_id for h in result.hits] == [h.chunk_id for h in expected.hits]
