"""The soak's own processes: a Redis server, Celery workers and a beat, each one a `Service` the
chaos may kill (SIGKILL), stop (SIGSTOP), resume (SIGCONT) and start again.

Every service runs in its own session and is signalled as a process group, so a prefork worker's
pool child is killed or stopped with its parent (as when a machine dies or freezes). Only
processes started here are ever signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

from devtools.devstack import ROOT, redis_server_binary


class Service:
    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str],
        log: Path,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log = log
        self.ready = ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # SIGSTOPped and not yet resumed
        self.starts = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def up(self) -> bool:
        return self.running and not self.stopped

    def start(self, *, wait: float = 0.0) -> None:
        """Start the process (if it is not running); with `wait`, until `ready` holds."""
        with self._lock:
            if self.running:
                return
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("ab") as out:
                out.write(f"\n--- soak: start {self.name} at {time.time():.3f}\n".encode())
                out.flush()
                self.proc = subprocess.Popen(
                    self.argv,
                    cwd=ROOT,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.stopped = False
            self.starts += 1
        deadline = time.monotonic() + wait
        while wait and self.ready is not None and not self.ready():
            if not self.running or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not become ready; see {self.log}")
            time.sleep(0.05)

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        with self._lock:
            self._signal(signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(30)
            self.stopped = False

    def pause(self) -> None:
        with self._lock:
            self._signal(signal.SIGSTOP)
            self.stopped = True

    def resume(self) -> None:
        with self._lock:
            self._signal(signal.SIGCONT)
            self.stopped = False

    def terminate(self, timeout: float = 30.0) -> None:
        """SIGTERM (a warm shutdown: a worker finishes its task first), SIGKILL after timeout."""
        self.resume()
        self._signal(signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def redis_service(port: int, workdir: Path, log: Path, *, durable: bool) -> Service:
    """A Redis of the soak's own. Durable: every write is in the append-only file before Redis
    answers (`appendfsync always`), so a SIGKILL loses no message, as with a production broker
    configured for it; not durable: a kill loses the queues (see docs/SOAK.md)."""
    workdir.mkdir(parents=True, exist_ok=True)
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    argv = [
        redis_server_binary(), "--bind", "127.0.0.1", "--port", str(port), "--save", "",
        "--appendonly", "yes" if durable else "no", "--appendfsync", "always",
        "--maxmemory-policy", "noeviction", "--dir", str(workdir),
    ]  # fmt: skip
    return Service("redis", argv, env=dict(os.environ), log=log, ready=answers)


def worker_service(number: int, *, queue: str, env: dict[str, str], log: Path) -> Service:
    argv = [
        sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queue,
        "--pool", "prefork", "--concurrency", "1",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
        "-l", "info", "-n", f"soak-worker-{number}@%h",
    ]  # fmt: skip
    return Service(f"worker-{number}", argv, env=env, log=log)


def beat_service(*, env: dict[str, str], log: Path) -> Service:
    argv = [
        sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "info",
        "-s", str(log.with_suffix(".schedule")),
    ]  # fmt: skip
    return Service("beat", argv, env=env, log=log)
