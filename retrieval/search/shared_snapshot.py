"""Statements of a search read on connections of their own, in the search's own snapshot, while
the search reads its keyword leg (issue 38, item 6).

A hybrid search read its index walks and its keyword leg in series on one connection: at
100,000 chunks the English list's HNSW walk cost as much as the vector leg's (B9 with the English
list, docs/BENCHMARKS.md). PostgreSQL lets a second session read exactly the snapshot of a first
(`pg_export_snapshot()`, `SET TRANSACTION SNAPSHOT`), so the walks run on other backends at the
same time as the keyword leg and see what it sees: the same rows, the same active version, the
same publications, whatever commits meanwhile. One snapshot still answers the search; only the
work is split.

Each other connection belongs to a reader thread (CANON_SNAPSHOT_READERS per process, 2 by
default, counted in the connection budget, `config/dbpool.py`; each with one connection per
database alias, opened on first use from Django's own settings for that alias and kept; a
forked child makes its own; 0 readers: every search reads in series; a search that finds no
reader idle reads in series rather than wait). It touches nothing else.
A search that runs inside a transaction its caller opened (a test's, an atomic block) reads in
series: that transaction's own uncommitted rows are not in an exported snapshot. A reader that
fails (its connection lost, the snapshot gone) rolls back or is closed, and the caller reads
the statement itself, on its own connection, in the same snapshot (`read_or_fetch`): the split
never fails a search that could succeed in series.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections

from retrieval import routing
from retrieval.search.pools import Pool, process_pool
from retrieval.search.snapshot import fetch

logger = logging.getLogger(__name__)

# pg_export_snapshot()'s identifiers: hexadecimal parts joined by "-" ("00000003-0000001B-1").
_SNAPSHOT_ID = re.compile(r"^[0-9A-F]+(-[0-9A-F]+)+$")

Statement = tuple[str, dict[str, Any]]
Rows = list[tuple[Any, ...]]

_pools_lock = threading.Lock()  # guards `_opened`
_local = threading.local()
_opened: list[Any] = []  # every reader connection this process opened (`close_readers`)


def _pool() -> Pool:
    return process_pool("canon-snapshot-reader", settings.SEARCH_SNAPSHOT_READERS)


def exported() -> str | None:
    """The current search snapshot's identifier for another session to read it, or None when
    it cannot be shared: the search reads inside a transaction its caller opened (an atomic
    block of `search_snapshot`), whose own writes an exported snapshot would not hold, or
    there are no readers (CANON_SNAPSHOT_READERS 0). Call inside `search_snapshot`; one
    round trip."""
    connection = routing.db()
    if connection.in_atomic_block or settings.SEARCH_SNAPSHOT_READERS < 1:
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_export_snapshot()")
        row = cursor.fetchone()
    snapshot = str(row[0]) if row else ""
    return snapshot if _SNAPSHOT_ID.match(snapshot) else None


def read_soon(snapshot: str, using: str, statement: Callable[[], Statement]) -> Future[Rows] | None:
    """`statement()` (made on the reader's thread, so it may wait for a vector being embedded)
    read on an idle reader's connection in `snapshot`; its rows when done (`.result()` raises
    what reading raised). None when every reader is busy: the caller reads it in series."""
    pool = _pool()
    if not pool.idle.acquire(blocking=False):  # every reader busy: read in series, not wait
        return None

    def read() -> Rows:
        try:
            return _read(snapshot, using, statement)
        finally:
            pool.idle.release()

    return pool.executor.submit(read)


def read_or_fetch(pending: Future[Rows] | None, statement: Callable[[], Statement]) -> Rows:
    """The rows a reader read (`pending`), or, when there is none or it failed, `statement()`
    read here, on the search's own connection in its snapshot."""
    if pending is not None:
        try:
            return pending.result()
        except Exception as exc:  # the reader is closed; the search reads it in series
            logger.warning("a snapshot reader failed; reading in series: %s", exc)
    return fetch(*statement())


def _read(snapshot: str, using: str, statement: Callable[[], Statement]) -> Rows:
    sql, params = statement()
    raw = _connection(using)
    try:
        with raw.cursor() as cursor:
            # one round trip for both (no parameters: the simple protocol, never prepared)
            cursor.execute(
                "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
                f"SET TRANSACTION SNAPSHOT '{snapshot}'",  # matched _SNAPSHOT_ID: no quote
                prepare=False,
            )
            cursor.execute(sql, params)
            rows = cursor.fetchall()
            cursor.execute("COMMIT", prepare=False)
        return rows
    except Exception:
        _end(raw, using)
        raise


def _end(raw: Any, using: str) -> None:
    """After a failure: leave the connection idle for the next read (the snapshot may simply
    have ended: its search failed or finished without this list), or drop it."""
    try:
        if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raw.execute("ROLLBACK", prepare=False)
    except Exception:
        _drop(using)


def _connection(using: str) -> Any:
    """This thread's connection to database `using`, opened with the parameters Django opens
    its own with (session settings, type loaders, cursor class), in autocommit; never one of
    the web server's pooled connections (`config/dbpool.py`), which its threads borrow."""
    key = (os.getpid(), using)
    held: dict[tuple[int, str], Any] = _local.__dict__.setdefault("connections", {})
    raw = held.get(key)
    if raw is None or raw.closed:
        raw = psycopg.connect(**connections[using].get_connection_params(), autocommit=True)
        held[key] = raw
        with _pools_lock:
            _opened.append(raw)
    return raw


def close_readers() -> None:
    """Close every reader connection of this process (a reader opens a new one when next
    asked): before its databases are dropped, as the tests' teardown does."""
    with _pools_lock:
        opened = list(_opened)
        _opened.clear()
    for raw in opened:
        try:
            raw.close()
        except Exception:  # already gone
            logger.debug("closing a snapshot reader's connection failed", exc_info=True)


def _drop(using: str) -> None:
    held: dict[tuple[int, str], Any] = _local.__dict__.setdefault("connections", {})
    raw = held.pop((os.getpid(), using), None)
    if raw is not None:
        with _pools_lock:
            if raw in _opened:
                _opened.remove(raw)
        try:
            raw.close()
        except Exception:  # already gone
            logger.debug("closing a failed snapshot reader's connection failed", exc_info=True)
