"""One snapshot per search: a repeatable-read, read-only transaction for the lists of a keyword
or hybrid search, or a single statement in autocommit for a vector search's fast path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from retrieval import routing


def fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with routing.db().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def snapshot_in_transaction() -> None:
    """Make the rest of this transaction read one snapshot (vector and keyword lists agree)."""
    connection = routing.db()
    if connection.in_atomic_block and not connection.savepoint_ids:
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


BEGIN_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"


@contextmanager
def search_snapshot(using: str) -> Iterator[None]:
    """The block reads one repeatable-read, read-only snapshot of database `using`, with
    `routing.db()` that connection (`routing.reading`): the lists of a hybrid or keyword search,
    and a vector search's careful path (`search`).

    Outside any transaction (the API, the admin's pages) the block is a transaction of its own
    that begins with its isolation level and read-only mode in one round trip. On any failure
    the transaction is rolled back before the connection serves anything else, or the
    connection closed if that fails: Django takes the connection to be in autocommit mode.

    Inside a transaction the caller opened (a test's, a caller's atomic block) the block is a
    savepoint (Django's atomic block) and that transaction decides the snapshot
    (`snapshot_in_transaction`)."""
    connection = connections[using]
    with routing.reading(using):
        if connection.in_atomic_block or not connection.get_autocommit():
            with transaction.atomic(using=using):
                snapshot_in_transaction()
                yield
            return
        try:
            with connection.cursor() as cursor:
                cursor.execute(BEGIN_SNAPSHOT)
            yield
            with connection.cursor() as cursor:
                cursor.execute("COMMIT")
        except BaseException:
            _end_failed_snapshot(connection)
            raise


@contextmanager
def one_statement(using: str) -> Iterator[None]:
    """The block runs one statement on database `using` (`routing.db()`), which reads its own
    snapshot: in autocommit nothing more, no BEGIN or COMMIT; inside a caller's transaction in
    a savepoint, so a failure leaves that transaction usable, as `search_snapshot` does."""
    connection = connections[using]
    with routing.reading(using):
        if connection.in_atomic_block or not connection.get_autocommit():
            with transaction.atomic(using=using):
                yield
        else:
            yield


def _end_failed_snapshot(connection: BaseDatabaseWrapper) -> None:
    """Leave no transaction open on a connection Django believes is in autocommit mode (the
    next request that borrows it would read inside it): roll back, or close the connection."""
    raw = connection.connection
    if raw is None or raw.closed:
        return
    try:
        if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raw.rollback()
    except Exception:
        connection.close()
