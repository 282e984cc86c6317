"""Tools for the production tests: Canon's real processes (gunicorn, celery worker and beat) as
the Procfile and the systemd units start them, against the test database and Redis."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SYSTEMD = ROOT / "deploy" / "systemd"
# Where the units and the env file expect Canon's checkout (and its .venv).
INSTALL_DIR = "/opt/canon"
# What a test must set itself rather than inherit from the shell or from pytest-env.
_NOT_INHERITED = (
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "CSRF_TRUSTED_ORIGINS",
    "BEHIND_TLS_PROXY",
    "LOG_FORMAT",
    "CANON_LOCAL_HTTP",
    "CANON_SECRET_KEY_FILE",
    "CANON_STATIC_ROOT",
    "CANON_PRELOAD_EMBEDDING_MODELS",
)


def clean_env(**values: str) -> dict[str, str]:
    """This process's environment without Canon's web and security knobs, plus `values`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _NOT_INHERITED and not k.startswith(("SECURE_", "CANON_WEB_"))
    }
    env.update(values, PYTHONUNBUFFERED="1", PATH=f"{Path(sys.executable).parent}:{env['PATH']}")
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file: section -> key -> its values in order (systemd allows a key more
    than once, e.g. two ExecReload= lines run one after the other). No specifier or quoting
    rules are applied; the units use none."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in (SYSTEMD / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert current is not None and sep, f"{name}: {raw!r} is outside a section or not key=value"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def env_file(path: Path) -> dict[str, str]:
    """An EnvironmentFile: KEY=value lines, whole-line comments."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def installed(command: str) -> list[str]:
    """A unit's command line with this checkout in place of the install directory."""
    return shlex.split(command.replace(INSTALL_DIR, str(ROOT)))


class Service:
    """One long-running process in a session of its own, its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log_path = log
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.name} never logged {text!r}:\n{self.log()}")
            time.sleep(0.1)

    def wait_for_http(self, url: str, timeout: float = 90.0, **kwargs: object) -> httpx.Response:
        deadline = time.monotonic() + timeout
        while True:
            try:
                response = httpx.get(url, timeout=5, **kwargs)  # type: ignore[arg-type]
                if response.status_code < 500:
                    return response
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.name} never answered {url}:\n{self.log()}")
            time.sleep(0.2)

    def group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, as systemd and `make run` stop it; the exit code, or None if it had to be
        killed. Whatever it left in its session is killed too."""
        code: int | None = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                code = None
        else:
            code = self.proc.returncode
        deadline = time.monotonic() + 10
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.group_alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        return code


@contextlib.contextmanager
def procfile_web(logs: Path, **values: str) -> Iterator[tuple[Service, int]]:
    """The Procfile's web process in make run's environment (`values` on top, a key file and
    static files of its own under `logs`), answering /healthz on a free port; it must exit 0."""
    from devtools import devstack
    from tests.conftest import database_url

    port = free_port()
    key_file = logs / "secret_key"
    key_file.write_text(uuid.uuid4().hex * 2)
    env = devstack.run_env(
        clean_env(
            DATABASE_URL=database_url(),
            CANON_SECRET_KEY_FILE=str(key_file),
            CANON_WEB_PORT=str(port),
            CANON_STATIC_ROOT=str(logs / "static"),
            **values,
        )
    )
    env.pop("CANON_DB_POOL", None)  # the web server turns it on itself
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    service = Service("web", devstack.procfile_commands()["web"], env, logs / "web.log")
    try:
        service.wait_for_http(f"http://127.0.0.1:{port}/healthz")
        yield service, port
    finally:
        code = service.stop()
    assert code == 0, service.log()
