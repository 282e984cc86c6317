"""The web processes' connection pool and the connection budget (config/dbpool.py): defaults
from the web server's threads, environment overrides, and system check canon.E010 refusing a
configuration that oversubscribes PostgreSQL, with the arithmetic in its message."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from config import dbpool
from config.dbpool import ConnectionBudget, pool_settings

ROOT = Path(__file__).resolve().parents[2]


def budget(**overrides: int) -> ConnectionBudget:
    values = dict(
        web_instances=1,
        web_workers=2,
        pool_max=4,
        worker_instances=1,
        worker_concurrency=2,
        operator_reserved=5,
    )
    values.update(overrides)
    return ConnectionBudget(**values)


# --- the pool's settings -------------------------------------------------------------------------


def test_the_pool_is_off_by_default_and_sized_by_the_web_threads() -> None:
    default = pool_settings({})
    threads = pool_settings({"CANON_WEB_THREADS": "8"})

    assert (default.enabled, default.min_size, default.max_size) == (False, 4, 4)
    assert (threads.min_size, threads.max_size) == (8, 8)
    assert default.timeout == 10.0


def test_the_pool_default_is_gunicorns_default_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CANON_WEB_THREADS", raising=False)
    config = runpy.run_path(str(ROOT / "config" / "gunicorn.conf.py"))

    assert config["threads"] == dbpool.WEB_THREADS_DEFAULT


def test_the_environment_overrides_the_pool() -> None:
    pool = pool_settings(
        {
            "CANON_DB_POOL": "1",
            "CANON_WEB_THREADS": "8",
            "CANON_DB_POOL_MIN": "2",
            "CANON_DB_POOL_MAX": "6",
            "CANON_DB_POOL_TIMEOUT": "2.5",
        }
    )

    assert pool.enabled
    assert pool.options() == {"min_size": 2, "max_size": 6, "timeout": 2.5, "name": "canon-web"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CANON_DB_POOL_MAX": "many"}, "CANON_DB_POOL_MAX must be a whole number, not 'many'"),
        ({"CANON_DB_POOL_MAX": "0"}, "CANON_DB_POOL_MAX must be at least 1, not 0"),
        ({"CANON_DB_POOL_MIN": "5", "CANON_DB_POOL_MAX": "3"}, "is larger than CANON_DB_POOL_MAX"),
        ({"CANON_DB_POOL_TIMEOUT": "soon"}, "CANON_DB_POOL_TIMEOUT must be seconds"),
    ],
)
def test_a_bad_pool_setting_is_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pool_settings(env)


def _settings_in_a_process(**env: str) -> dict[str, object]:
    code = (
        "import json, django; from django.conf import settings; django.setup(); "
        "d = settings.DATABASES['default']; "
        "print(json.dumps({'age': d['CONN_MAX_AGE'], 'pool': d['OPTIONS'].get('pool'), "
        "'prepare': d['OPTIONS'].get('prepare_threshold'), "
        "'total': settings.CANON_DB_BUDGET.total}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CANON_DB_POOL")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_a_pooled_process_has_no_persistent_connections_and_still_prepares() -> None:
    pooled = _settings_in_a_process(CANON_DB_POOL="1", CANON_WEB_THREADS="3")
    plain = _settings_in_a_process(CANON_DB_POOL="0")

    assert pooled["age"] == 0  # Django refuses a pool with persistent connections
    assert pooled["pool"] == {"min_size": 3, "max_size": 3, "timeout": 10.0, "name": "canon-web"}
    assert pooled["prepare"] == 5  # statements are still prepared on each pooled connection
    assert plain["pool"] is None and plain["age"] == 60


def test_settings_count_every_process_kind() -> None:
    figures = _settings_in_a_process(
        CANON_WEB_INSTANCES="3",
        CANON_WEB_WORKERS="4",
        CANON_WEB_THREADS="5",
        CANON_WORKER_INSTANCES="2",
        CANON_WORKER_CONCURRENCY="3",
    )

    # each process's pool (web) or task and heartbeat (workers), and its 2 snapshot readers
    assert figures["total"] == 3 * 4 * (5 + 2) + 2 * 3 * (2 + 2) + 1


# --- the budget ----------------------------------------------------------------------------------


def test_the_budget_is_seed_003s_sum_over_every_process_kind() -> None:
    seed_example = budget(web_instances=10, web_workers=4, pool_max=20)

    assert seed_example.web == 800
    assert seed_example.workers == 1 * 2 * 2  # each child's task connection and its heartbeat's
    assert seed_example.total == 800 + 4 + 1  # and beat's
    assert seed_example.allowed(max_connections=1000, server_reserved=3) == 992
    assert seed_example.problem(max_connections=1000, server_reserved=3) is None
    problem = seed_example.problem(max_connections=500, server_reserved=3)
    assert problem is not None
    assert "may open 805 database connections" in problem
    assert "10 instance(s) x 4 process(es) x pool 20 = 800" in problem
    assert "more than the 492 PostgreSQL leaves them" in problem


def test_the_budget_counts_each_processs_snapshot_readers() -> None:
    readers = budget(web_instances=3, web_workers=4, pool_max=4, snapshot_readers=2)

    assert readers.web == 3 * 4 * (4 + 2)
    assert readers.workers == 1 * 2 * (2 + 2)
    assert "3 instance(s) x 4 process(es) x (pool 4 + 2 readers) = 72" in readers.arithmetic()
    assert "2 child(ren) x (2 + 2 readers) = 8" in readers.arithmetic()


# --- the system check ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_check_asks_the_server_and_refuses_an_oversubscribed_configuration() -> None:
    from config.checks import server_limits

    max_connections, reserved = server_limits()
    over = budget(web_instances=1, web_workers=1, pool_max=max_connections)

    with override_settings(CANON_DB_BUDGET=budget(), CANON_DB_MAX_CONNECTIONS=None):
        call_command("check", databases=["default"])  # fits: no error
    with (
        override_settings(CANON_DB_BUDGET=over, CANON_DB_MAX_CONNECTIONS=None),
        pytest.raises(SystemCheckError) as refused,
    ):
        call_command("check", databases=["default"])

    message = str(refused.value)
    assert "canon.E010" in message
    assert f"may open {over.total} database connections" in message
    assert f"max_connections {max_connections} - {reserved} reserved by the server" in message
    # the hint names what to lower
    assert "CANON_DB_POOL_MAX" in message and "CANON_SNAPSHOT_READERS" in message


@pytest.mark.django_db
def test_migrate_stops_a_release_that_oversubscribes_the_server() -> None:
    with (
        override_settings(CANON_DB_BUDGET=budget(pool_max=100_000), CANON_DB_MAX_CONNECTIONS=None),
        pytest.raises(SystemCheckError, match=r"canon\.E010"),
    ):
        call_command("migrate", plan=True, verbosity=0, skip_checks=False)


def test_a_stated_max_connections_is_checked_without_connecting() -> None:
    with override_settings(CANON_DB_BUDGET=budget(), CANON_DB_MAX_CONNECTIONS=21):
        call_command("check")  # 13 <= 21 - 3 - 5
    with (
        override_settings(CANON_DB_BUDGET=budget(), CANON_DB_MAX_CONNECTIONS=15),
        pytest.raises(
            SystemCheckError, match=r"may open 13 .* more than the 7 .*CANON_DB_MAX_CONN"
        ),
    ):
        call_command("check")


@pytest.mark.django_db
def test_the_pool_check_command_prints_the_sum(capsys: pytest.CaptureFixture[str]) -> None:
    with override_settings(CANON_DB_BUDGET=budget(), CANON_DB_MAX_CONNECTIONS=None):
        call_command("canon_pool_check")
    out = capsys.readouterr().out
    assert "web 1 instance(s) x 2 process(es) x pool 4 = 8" in out
    assert "ok: 13 <=" in out

    with (
        override_settings(CANON_DB_BUDGET=budget(), CANON_DB_MAX_CONNECTIONS=10),
        pytest.raises(CommandError, match="may open 13 database connections"),
    ):
        call_command("canon_pool_check")
