"""The configuration `make run` serves with, and production's: `check --deploy`, the secret key,
local HTTP, and the service files (deploy/systemd, Procfile) as files. Each settings check runs
`manage.py` in a subprocess, so the settings are read from exactly that environment."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import devstack
from tests.production_support import (
    INSTALL_DIR,
    ROOT,
    SYSTEMD,
    clean_env,
    env_file,
    installed,
    unit,
)

PRODUCTION_KEY = "p" * 40 + "-production-test-key-0123456789abcdef"


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def deploy_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return manage(env, "check", "--deploy", "--fail-level", "WARNING")


def setting(env: dict[str, str], expression: str) -> str:
    result = manage(
        env, "shell", "--no-imports", "-c", f"from django.conf import settings; print({expression})"
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def make_run_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment `make run` gives its processes, with its secret key file generated as
    `make run` generates it (here under tmp_path)."""
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("CANON_SECRET_KEY_FILE", str(tmp_path / "secret_key"))
    devstack.ensure_secret_key()
    return devstack.run_env(clean_env(CANON_SECRET_KEY_FILE=str(tmp_path / "secret_key")))


def test_the_make_run_configuration_passes_the_deploy_check(make_run_env: dict[str, str]) -> None:
    assert "DEBUG" not in make_run_env and "SECRET_KEY" not in make_run_env

    result = deploy_check(make_run_env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues (4 silenced)" in result.stdout
    assert setting(make_run_env, "settings.DEBUG, settings.ALLOWED_HOSTS") == (
        "False ['127.0.0.1', 'localhost']"
    )


def test_make_run_keeps_one_generated_secret_key_readable_by_its_owner_only(
    make_run_env: dict[str, str],
) -> None:
    key_file = Path(make_run_env["CANON_SECRET_KEY_FILE"])
    key = key_file.read_text().strip()

    devstack.ensure_secret_key()  # a second make run

    assert key_file.read_text().strip() == key
    assert len(key) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert setting(make_run_env, "settings.SECRET_KEY") == key


def test_production_without_tls_settings_is_https_only(make_run_env: dict[str, str]) -> None:
    env = clean_env(SECRET_KEY=PRODUCTION_KEY, ALLOWED_HOSTS="canon.example.com")

    assert deploy_check(env).returncode == 0
    assert setting(
        env,
        "settings.SECURE_SSL_REDIRECT, settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE,"
        " settings.SECURE_HSTS_SECONDS, settings.SILENCED_SYSTEM_CHECKS",
    ) == ("True True True 31536000 []")


def test_weakening_production_is_reported_not_silenced() -> None:
    env = clean_env(
        SECRET_KEY=PRODUCTION_KEY, ALLOWED_HOSTS="canon.example.com", SECURE_SSL_REDIRECT="0"
    )

    result = deploy_check(env)

    assert result.returncode != 0
    assert "security.W008" in result.stdout + result.stderr


def test_local_http_serves_loopback_names_only() -> None:
    env = clean_env(
        SECRET_KEY=PRODUCTION_KEY, CANON_LOCAL_HTTP="1", ALLOWED_HOSTS="canon.example.com"
    )

    result = manage(env, "check")

    assert result.returncode != 0
    assert "CANON_LOCAL_HTTP serves plain HTTP to loopback only" in result.stderr


def test_without_a_secret_key_debug_off_refuses_to_start(tmp_path: Path) -> None:
    env = clean_env(CANON_SECRET_KEY_FILE=str(tmp_path / "absent"))

    result = manage(env, "check")

    assert result.returncode != 0
    assert "Set SECRET_KEY" in result.stderr


def test_debug_stays_a_developers_explicit_choice(make_run_env: dict[str, str]) -> None:
    assert setting({**make_run_env, "DEBUG": "1"}, "settings.DEBUG") == "True"
    assert setting(clean_env(DEBUG="1", CANON_SECRET_KEY_FILE="/nonexistent"), "settings.DEBUG")


# --- the service files ------------------------------------------------------------------------


def test_the_procfile_runs_web_worker_beat_and_mcp_from_the_virtualenv() -> None:
    commands = devstack.procfile_commands()

    assert set(commands) == {"web", "worker", "beat", "mcp"}
    assert commands["mcp"] == ["python", "manage.py", "canon_mcp"]
    assert commands["web"][:3] == ["gunicorn", "--config", "config/gunicorn.conf.py"]
    assert commands["worker"][:4] == ["celery", "-A", "config", "worker"]
    assert commands["beat"][:4] == ["celery", "-A", "config", "beat"]
    bindir = str(Path(sys.executable).parent)
    for argv in commands.values():
        assert shutil.which(argv[0], path=bindir), argv[0]
    assert (ROOT / commands["web"][2]).is_file()


@pytest.mark.parametrize(
    ("name", "program"),
    [
        ("canon-web.service", "gunicorn"),
        ("canon-worker.service", "celery"),
        ("canon-beat.service", "celery"),
        ("canon-mcp.service", "python"),
    ],
)
def test_each_systemd_unit_runs_canon_as_its_own_user_from_the_install(
    name: str, program: str
) -> None:
    service = unit(name)["Service"]

    (start,) = service["ExecStart"]
    argv = installed(start)

    assert Path(argv[0]).name == program and os.access(argv[0], os.X_OK), argv
    assert service["WorkingDirectory"] == [INSTALL_DIR]
    assert service["EnvironmentFile"] == ["/etc/canon/canon.env"]
    assert service["User"] == ["canon"]
    assert unit(name)["Install"]["WantedBy"] == ["multi-user.target"]
    for path in argv[1:]:
        if path.startswith(str(ROOT)):
            assert Path(path).exists(), path


def test_the_web_unit_reloads_and_stops_gracefully() -> None:
    service = unit("canon-web.service")["Service"]
    collect, hup = service["ExecReload"]

    assert service["Type"] == ["notify"]  # gunicorn tells systemd when it listens
    assert installed(collect)[1:3] == ["manage.py", "collectstatic"]
    assert hup == "/bin/kill -s HUP $MAINPID"
    assert service["KillMode"] == ["mixed"]
    assert installed(service["ExecStartPre"][0])[1:3] == ["manage.py", "collectstatic"]


def test_the_example_environment_is_production_not_local_http() -> None:
    values = env_file(SYSTEMD / "canon.env")

    assert "DEBUG" not in values and "CANON_LOCAL_HTTP" not in values
    assert values["BEHIND_TLS_PROXY"] == "1"
    assert values["LOG_FORMAT"] == "json"
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS"} <= set(values)
