"""A streaming standby of the test server, and the `replica` alias.

The standby is copied (`pg_basebackup -R`, devtools/standby.py) once per session, after
pytest-django created the test database, so the standby has it; it is stopped and deleted at the
end. Data a test writes reaches it only once committed: the tests here are transactional.

Each module defines the alias for its tests (`replica_alias`), before pytest-django sets up a
test, so the tests can name it in `databases`. It is a test mirror of `default` (as the settings
make it when CANON_SEARCH_REPLICA_URL is set): nothing is flushed or created on it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, connections

from devtools.standby import Standby, StandbyUnavailable, start_standby
from retrieval.routing import REPLICA
from tests.conftest import database_url

DATABASES = [DEFAULT_DB_ALIAS, REPLICA]


@pytest.fixture(scope="session")
def standby(django_db_setup: None, django_db_blocker: Any) -> Iterator[Standby]:
    try:
        server = start_standby(primary_url=database_url())
    except StandbyUnavailable as exc:
        pytest.skip(f"no standby of the test server can be made here: {exc}")
    yield server
    server.stop()


@contextmanager
def replica_alias(*, host: str, port: int | str, name: str) -> Iterator[str]:
    """The `replica` alias (default's settings, another server) for the block. Threads that
    open a connection to it close it themselves; this thread's is closed here."""
    connections.settings[REPLICA] = {
        **copy.deepcopy(connections.settings[DEFAULT_DB_ALIAS]),
        "HOST": host,
        "PORT": port,
        "NAME": name,
        "TEST": {**connections.settings[DEFAULT_DB_ALIAS]["TEST"], "MIRROR": DEFAULT_DB_ALIAS},
    }
    try:
        yield REPLICA
    finally:
        connections[REPLICA].close()
        del connections[REPLICA]
        del connections.settings[REPLICA]
