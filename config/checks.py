"""Canon's system checks (registered by `config.apps.CanonConfig.ready`).

canon.E010: the database connections Canon's processes may open together
(`config.dbpool.ConnectionBudget`) exceed what PostgreSQL leaves them. With
CANON_DB_MAX_CONNECTIONS set it is checked on every `manage.py check` against that figure;
otherwise only when database checks are asked for (`check --database default`, and `migrate`),
against the server's own settings.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.db import DEFAULT_DB_ALIAS, connections

from config.dbpool import ConnectionBudget

HINT = (
    "Lower CANON_DB_POOL_MAX, CANON_WEB_WORKERS or CANON_WORKER_CONCURRENCY, or raise "
    "PostgreSQL's max_connections; docs/PRODUCTION.md, 'Sizing the database connections'."
)


def server_limits(alias: str = DEFAULT_DB_ALIAS) -> tuple[int, int]:
    """max_connections, and the connections the server keeps for roles with the superuser or
    pg_use_reserved_connections privilege (reserved_connections exists from PostgreSQL 16)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('max_connections')::int, "
            "current_setting('superuser_reserved_connections')::int "
            "+ coalesce(current_setting('reserved_connections', true), '0')::int"
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _budget_error(max_connections: int, server_reserved: int, source: str) -> list[CheckMessage]:
    budget: ConnectionBudget = settings.CANON_DB_BUDGET
    problem = budget.problem(max_connections=max_connections, server_reserved=server_reserved)
    if problem is None:
        return []
    return [Error(f"{problem} ({source})", hint=HINT, id="canon.E010")]


@register()
def connection_budget_stated(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Against CANON_DB_MAX_CONNECTIONS, without connecting (3 reserved, PostgreSQL's default)."""
    stated: int | None = settings.CANON_DB_MAX_CONNECTIONS
    if stated is None:
        return []
    return _budget_error(stated, 3, "max_connections from CANON_DB_MAX_CONNECTIONS")


@register(Tags.database)
def connection_budget_of_server(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """Against the server's max_connections, when database checks run on `default`."""
    if settings.CANON_DB_MAX_CONNECTIONS is not None or DEFAULT_DB_ALIAS not in (databases or ()):
        return []
    max_connections, reserved = server_limits()
    return _budget_error(max_connections, reserved, "max_connections from the server")
