"""Which database a search reads: the primary, or a streaming read replica (hot standby).

There is no global database router. Every write, and every read that is not a search, goes to
Django's `default` alias as before. A replica (`CANON_SEARCH_REPLICA_URL`, alias `replica`) is
read only where a caller asks for it by alias: the API's search and search-as-of pass
`using=search_alias()` to `retrieval.search.engine.search` / `search_as_of`, which run their one
repeatable-read, read-only transaction on `connections[alias]`; `reading(alias)` makes the
search's raw SQL (`db()`, also in `retrieval.search.lexical.bm25`) use that connection for
exactly that long.

What stays on the primary, and why:

- the API key lookup (`retrieval.principals.principal_from_key`): a revoked key, or a group
  taken from a key, must stop reading at once, not after the replica's lag; and the lookup
  writes `last_used_at`;
- the knowledge base lookup (`knowledge_base_for`): the search re-reads the active version in
  its own snapshot on the replica anyway (a swap the replica has not replayed yet is searched
  in the replica's version; a knowledge base it has not replayed yet is not found);
- uploads, deletes, idempotency records, the switch
  (`kb.services.publication.build_publish`), the admin's pages and its test search
  (read-your-writes for the person who just published), explain and the document list and
  detail (they report the primary's state, builds in progress included).

A write attempted through the replica's connection fails loudly: the search transaction is
READ ONLY, and a standby refuses every write anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

REPLICA = "replica"

_reading: ContextVar[str] = ContextVar("canon_search_database", default=DEFAULT_DB_ALIAS)


def search_alias() -> str:
    """The alias the API's searches read: `replica` when CANON_SEARCH_REPLICA_URL configures
    one (settings.SEARCH_DATABASE), else `default`."""
    alias = str(getattr(settings, "SEARCH_DATABASE", DEFAULT_DB_ALIAS))
    if alias not in connections.settings:
        raise LookupError(f"SEARCH_DATABASE names {alias!r}, which DATABASES does not define")
    return alias


@contextmanager
def reading(alias: str) -> Iterator[BaseDatabaseWrapper]:
    """Within the block, `db()` is `connections[alias]` (in this thread or task only). Only
    read-only code enters it with another alias than `default`: the search selectors."""
    token = _reading.set(alias)
    try:
        yield connections[alias]
    finally:
        _reading.reset(token)


def db() -> BaseDatabaseWrapper:
    """The connection the current search reads (`default` outside `reading`)."""
    return connections[_reading.get()]
