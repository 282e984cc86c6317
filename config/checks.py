"""Canon's system checks (registered by `config.apps.CanonConfig.ready`).

canon.E010: the database connections Canon's processes may open together
(`config.dbpool.ConnectionBudget`) exceed what PostgreSQL leaves them. With
CANON_DB_MAX_CONNECTIONS set it is checked on every `manage.py check` against that figure;
otherwise only when database checks are asked for (`check --database default`, and `migrate`),
against the server's own settings.

canon.E020/E021: CANON_STORAGE_URL is neither empty nor s3://bucket[/prefix], or
CANON_S3_ADDRESSING_STYLE is not one boto knows: said at start-up rather than at the first
upload. canon.W022: a folder root of CANON_SOURCES_FOLDER_ROOTS is not an absolute path to a
folder (folder sources under it are refused until it is).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DEFAULT_DB_ALIAS, connections

from config.dbpool import ConnectionBudget

HINT = (
    "Lower CANON_DB_POOL_MAX, CANON_WEB_WORKERS, CANON_WORKER_CONCURRENCY or "
    "CANON_SNAPSHOT_READERS, or raise PostgreSQL's max_connections; docs/PRODUCTION.md, "
    "'Sizing the database connections'."
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


ADDRESSING_STYLES = ("auto", "path", "virtual")


@register()
def storage_url(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    url: str = settings.STORAGE_URL
    errors: list[CheckMessage] = []
    if url:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
            errors.append(
                Error(
                    f"CANON_STORAGE_URL {url!r} is not s3://bucket/prefix.",
                    hint="Leave it empty to store files under CANON_STORAGE_ROOT "
                    "(docs/PRODUCTION.md, 'Stored files in a bucket').",
                    id="canon.E020",
                )
            )
    if settings.S3_ADDRESSING_STYLE not in ADDRESSING_STYLES:
        errors.append(
            Error(
                f"CANON_S3_ADDRESSING_STYLE {settings.S3_ADDRESSING_STYLE!r} is not one of "
                f"{', '.join(ADDRESSING_STYLES)}.",
                id="canon.E021",
            )
        )
    return errors


@register()
def sources_folder_roots(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return [
        Warning(
            f"CANON_SOURCES_FOLDER_ROOTS names {root!r}, which is not an absolute path to a "
            "folder; folder sources under it are refused.",
            id="canon.W022",
        )
        for root in settings.SOURCES_FOLDER_ROOTS
        if not (os.path.isabs(root) and os.path.isdir(root))
    ]
