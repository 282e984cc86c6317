"""Canon's four processes started exactly as the systemd units and the Procfile say, against
the test database and Redis: the web answers its probes and takes an upload, the worker builds
it, beat sends the periodic jobs, the MCP server answers its probe on its own port, and SIGTERM
stops each one cleanly (exit 0, nothing left)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings

from devtools import devstack
from kb.models import KnowledgeBase
from tests.conftest import database_url
from tests.production_support import (
    ROOT,
    SYSTEMD,
    Service,
    clean_env,
    env_file,
    free_port,
    installed,
    unit,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

UNITS = {
    "web": "canon-web.service",
    "worker": "canon-worker.service",
    "beat": "canon-beat.service",
    "mcp": "canon-mcp.service",
}

# Seconds a request to the started processes may take: on a loaded 2-core machine (CI, a suite
# beside other work) a gunicorn worker that just booted answered after httpx's default 5 s.
SLOW = 60


def _systemd(env: dict[str, str], logs: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The units' commands, run as systemd would: ExecStartPre first, the example environment
    file (deploy/systemd/canon.env) under the test's own values."""
    commands = {}
    for name, unit_name in UNITS.items():
        service = unit(unit_name)["Service"]
        for command in service.get("ExecStartPre", []):
            subprocess.run(installed(command), cwd=ROOT, env=env, check=True)
        (start,) = service["ExecStart"]
        commands[name] = installed(start)
    # The example names its public host; requests come "through the proxy" for it.
    return commands, {"Host": "canon.example.com", "X-Forwarded-Proto": "https"}


def _procfile(env: dict[str, str], logs: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    subprocess.run(
        ["python", "manage.py", "collectstatic", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    return devstack.procfile_commands(), {}


@pytest.fixture
def queue() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(name)


@pytest.mark.parametrize("how", ["systemd", "procfile"])
def test_web_worker_and_beat_serve_build_schedule_and_stop_cleanly(
    how: str, kb: KnowledgeBase, api_key: str, queue: str, tmp_path: Path
) -> None:
    port, mcp_port = free_port(), free_port()
    test_values = {
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.CELERY_BROKER_URL,
        "SECRET_KEY": uuid.uuid4().hex * 2,
        "CANON_QUEUE": queue,
        "CANON_WEB_BIND": f"127.0.0.1:{port}",  # systemd's env file
        "CANON_WEB_PORT": str(port),  # make run's
        "CANON_MCP_BIND": f"127.0.0.1:{mcp_port}",  # never the default port a developer uses
        "CANON_WEB_WORKERS": "1",
        "CANON_WORKER_CONCURRENCY": "1",
        "CANON_STORAGE_ROOT": str(settings.STORAGE_ROOT),
        "CANON_STATIC_ROOT": str(tmp_path / "static"),
        "CANON_PRELOAD_EMBEDDING_MODELS": "",  # the test's knowledge base embeds with hash
    }
    if how == "systemd":
        env = clean_env(**{**env_file(SYSTEMD / "canon.env"), **test_values})
        commands, headers = _systemd(env, tmp_path)
    else:
        env = devstack.run_env(clean_env(**test_values))
        commands, headers = _procfile(env, tmp_path)
    services = {
        name: Service(name, argv, env, tmp_path / f"{name}.log") for name, argv in commands.items()
    }
    codes: dict[str, int | None] = {}
    try:
        web = f"http://127.0.0.1:{port}"
        services["worker"].wait_for_log("ready.")
        health = services["web"].wait_for_http(f"{web}/healthz", headers=headers)
        ready = httpx.get(f"{web}/readyz", headers=headers, timeout=SLOW)
        assert health.status_code == 200, health.text
        assert ready.status_code == 200 and ready.json()["ready"] is True, ready.text

        upload = httpx.post(
            f"{web}/api/v1/kbs/{kb.slug}/documents/",
            headers={**headers, "Authorization": f"Bearer {api_key}", "Idempotency-Key": "p-1"},
            data={"key": "policy"},
            files={"file": ("policy.txt", b"Remote work is allowed three days a week.")},
            timeout=SLOW,
        )
        assert upload.status_code == 201, upload.text
        document = upload.json()["document_id"]
        deadline = time.monotonic() + 90
        while True:  # the worker builds it; its relay runs on beat's schedule and on commit
            detail = httpx.get(
                f"{web}/api/v1/documents/{document}",
                headers={**headers, "Authorization": f"Bearer {api_key}"},
                timeout=SLOW,
            ).json()
            if detail.get("live_revision") == 1:
                break
            assert time.monotonic() < deadline, (detail, services["worker"].log())
            time.sleep(0.5)
        services["beat"].wait_for_log("Sending due task outbox-relay")
        (name,) = re.findall(r"([\w.-]+@[\w.-]+) ready\.", services["worker"].log())
        ping = subprocess.run(
            ["celery", "-A", "config", "inspect", "ping", "-d", name, "-t", "10"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert ping.returncode == 0 and "pong" in ping.stdout, ping.stdout + ping.stderr
        if how == "systemd":  # `systemctl reload canon-web`: its ExecReload lines, in order
            web_pid = str(services["web"].proc.pid)
            for command in unit("canon-web.service")["Service"]["ExecReload"]:
                argv = [arg.replace("$MAINPID", web_pid) for arg in installed(command)]
                subprocess.run(argv, cwd=ROOT, env=env, check=True)
            services["web"].wait_for_log("Handling signal: hup")
            services["web"].wait_for_log("Worker exiting")  # the old one, after the new booted
            assert httpx.get(f"{web}/readyz", headers=headers, timeout=SLOW).status_code == 200
        mcp = services["mcp"].wait_for_http(f"http://127.0.0.1:{mcp_port}/healthz")
        assert mcp.status_code == 200, mcp.text
    finally:
        for name in services:
            codes[name] = services[name].stop()
    assert codes == dict.fromkeys(services, 0), {n: s.log()[-3000:] for n, s in services.items()}
    assert set(services) == {"web", "worker", "beat", "mcp"}
    assert "Application shutdown complete" in services["mcp"].log()
    assert "Shutting down: Master" in services["web"].log()
    if how == "systemd":  # LOG_FORMAT=json: every line of the web's log is one JSON object
        lines = [json.loads(line) for line in services["web"].log().splitlines() if line]
        assert {"status": 201, "method": "POST", "logger": "gunicorn.access"}.items() <= next(
            line for line in lines if line.get("path", "").endswith("/documents/")
        ).items()
