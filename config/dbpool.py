"""Database connections: the web processes' pool, and the budget of connections every Canon
process may open together (docs/PRODUCTION.md "Sizing the database connections").

The web server (config/gunicorn.conf.py) turns Django's native psycopg pool on for its
processes (`CANON_DB_POOL=1`), one pool per process, as large as the process has threads: a
request borrows one connection at its first query and gives it back when it ends, so a thread
never waits for another's. Prepared statements belong to a server connection and so stay with
the pooled connection across requests.

Celery workers and beat keep Django's persistent connections (`DATABASE_CONN_MAX_AGE`) and no
pool: a prefork child runs one task at a time on its one connection, and a task's lease
heartbeat (work.leases.Heartbeat) opens its own on its thread and closes it when the task
ends; a pool there would only add idle connections and maintenance threads to every child.

The budget is seed 003's arithmetic, with every process kind Canon runs:

    web instances x web processes x pool max
    + worker instances x worker children x 2 (the task's connection and its heartbeat's)
    + 1 (beat)
    <= max_connections - superuser_reserved_connections - reserved_connections
       - CANON_DB_RESERVED_CONNECTIONS (the operator's own: migrate, shells, backups, monitors)

`connection_budget()` computes it from settings; the system check `canon.E010` compares it with
what PostgreSQL allows. It asks the server (`SHOW max_connections`, ...) only when database
checks are asked for: `manage.py check --database default`, and `manage.py migrate`, which
runs them before it migrates, so a release whose settings oversubscribe the database stops
there. `CANON_DB_MAX_CONNECTIONS` states the server's figure instead, and then every
`manage.py check` compares without connecting. `manage.py canon_pool_check` prints the sum.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# gunicorn.conf.py's default threads per web process (CANON_WEB_THREADS); a test holds the two
# equal.
WEB_THREADS_DEFAULT = 4
# A Celery worker child's connections while it runs a task: the task's, and its heartbeat's.
CONNECTIONS_PER_WORKER_CHILD = 2
BEAT_CONNECTIONS = 1


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name) or str(default)
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def web_workers_default() -> int:
    """gunicorn.conf.py's default processes per web instance (CANON_WEB_WORKERS)."""
    return min(max(_cores(), 2), 8)


@dataclass(frozen=True)
class PoolSettings:
    """The web processes' pool: `enabled` in processes the web server starts (CANON_DB_POOL),
    `min_size`..`max_size` connections (CANON_DB_POOL_MIN / CANON_DB_POOL_MAX, by default the
    process's threads, CANON_WEB_THREADS), and how long a request waits for a free one before
    it fails (CANON_DB_POOL_TIMEOUT seconds)."""

    enabled: bool
    min_size: int
    max_size: int
    timeout: float

    def options(self) -> dict[str, Any]:
        """Django's `OPTIONS["pool"]` (psycopg_pool.ConnectionPool's arguments)."""
        return {
            "min_size": self.min_size,
            "max_size": self.max_size,
            "timeout": self.timeout,
            "name": "canon-web",
        }


def pool_settings(env: Mapping[str, str]) -> PoolSettings:
    """The pool's settings from the environment; ValueError names a bad value."""
    enabled = env.get("CANON_DB_POOL", "0").strip().lower() in {"1", "true", "yes", "on"}
    threads = _int(env, "CANON_WEB_THREADS", WEB_THREADS_DEFAULT, minimum=1)
    max_size = _int(env, "CANON_DB_POOL_MAX", threads, minimum=1)
    # Every connection kept open: one closed when idle loses the statements prepared on it.
    min_size = _int(env, "CANON_DB_POOL_MIN", max_size)
    if min_size > max_size:
        raise ValueError(
            f"CANON_DB_POOL_MIN ({min_size}) is larger than CANON_DB_POOL_MAX ({max_size})"
        )
    raw_timeout = env.get("CANON_DB_POOL_TIMEOUT") or "10"
    try:
        timeout = float(raw_timeout)
    except ValueError:
        raise ValueError(f"CANON_DB_POOL_TIMEOUT must be seconds, not {raw_timeout!r}") from None
    return PoolSettings(enabled=enabled, min_size=min_size, max_size=max_size, timeout=timeout)


@dataclass(frozen=True)
class ConnectionBudget:
    """How many connections Canon's processes may hold at once, by kind, from the operator's
    settings (CANON_WEB_INSTANCES, CANON_WEB_WORKERS, CANON_DB_POOL_MAX, CANON_WORKER_INSTANCES,
    CANON_WORKER_CONCURRENCY, CANON_DB_RESERVED_CONNECTIONS, CANON_SNAPSHOT_READERS: each
    process's search readers, `retrieval.search.shared_snapshot`, one connection each)."""

    web_instances: int
    web_workers: int
    pool_max: int
    worker_instances: int
    worker_concurrency: int
    operator_reserved: int
    snapshot_readers: int = 0

    @property
    def web(self) -> int:
        return self.web_instances * self.web_workers * (self.pool_max + self.snapshot_readers)

    @property
    def workers(self) -> int:
        per_child = CONNECTIONS_PER_WORKER_CHILD + self.snapshot_readers
        return self.worker_instances * self.worker_concurrency * per_child

    @property
    def total(self) -> int:
        return self.web + self.workers + BEAT_CONNECTIONS

    def allowed(self, *, max_connections: int, server_reserved: int) -> int:
        """What is left for Canon of the server's max_connections."""
        return max_connections - server_reserved - self.operator_reserved

    def arithmetic(self) -> str:
        readers = self.snapshot_readers
        pool = f"(pool {self.pool_max} + {readers} readers)" if readers else f"pool {self.pool_max}"
        child = (
            f"({CONNECTIONS_PER_WORKER_CHILD} + {readers} readers)"
            if readers
            else str(CONNECTIONS_PER_WORKER_CHILD)
        )
        return (
            f"web {self.web_instances} instance(s) x {self.web_workers} process(es) x {pool} = "
            f"{self.web}; workers {self.worker_instances} instance(s) x "
            f"{self.worker_concurrency} child(ren) x {child} = "
            f"{self.workers}; beat {BEAT_CONNECTIONS}; total {self.total}"
        )

    def problem(self, *, max_connections: int, server_reserved: int) -> str | None:
        """Why this budget does not fit the server, or None."""
        allowed = self.allowed(max_connections=max_connections, server_reserved=server_reserved)
        if self.total <= allowed:
            return None
        return (
            f"Canon's processes may open {self.total} database connections ({self.arithmetic()})"
            f", more than the {allowed} PostgreSQL leaves them (max_connections "
            f"{max_connections} - {server_reserved} reserved by the server - "
            f"{self.operator_reserved} CANON_DB_RESERVED_CONNECTIONS)."
        )


def connection_budget(env: Mapping[str, str], *, pool: PoolSettings) -> ConnectionBudget:
    return ConnectionBudget(
        web_instances=_int(env, "CANON_WEB_INSTANCES", 1, minimum=1),
        web_workers=_int(env, "CANON_WEB_WORKERS", web_workers_default(), minimum=1),
        pool_max=pool.max_size,
        worker_instances=_int(env, "CANON_WORKER_INSTANCES", 1),
        worker_concurrency=_int(env, "CANON_WORKER_CONCURRENCY", os.cpu_count() or 1, minimum=1),
        operator_reserved=_int(env, "CANON_DB_RESERVED_CONNECTIONS", 5),
        snapshot_readers=snapshot_readers(env),
    )


def snapshot_readers(env: Mapping[str, str]) -> int:
    """CANON_SNAPSHOT_READERS: how many threads of a process read a hybrid search's index walks
    on connections of their own (`retrieval.search.shared_snapshot`; 0: in series)."""
    return _int(env, "CANON_SNAPSHOT_READERS", 2)
