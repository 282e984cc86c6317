"""CANON_SEARCH_REPLICA_URL, read by config/settings.py in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

SHOW = """
import json, django
django.setup()
from django.conf import settings
from retrieval import routing
print(json.dumps({
    "aliases": sorted(settings.DATABASES),
    "replica": settings.DATABASES.get("replica"),
    "default_options": settings.DATABASES["default"].get("OPTIONS"),
    "search_alias": routing.search_alias(),
}, default=str))
"""


def settings_with(**env: str) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if k != "CANON_SEARCH_REPLICA_URL"}
    environment.update(DJANGO_SETTINGS_MODULE="config.settings", **env)
    out = subprocess.run(
        [sys.executable, "-c", SHOW],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_unset_there_is_no_replica_and_search_reads_default() -> None:
    shown = settings_with()

    assert shown["aliases"] == ["default"]
    assert shown["search_alias"] == "default"


def test_set_the_replica_alias_is_default_with_another_server_and_a_test_mirror() -> None:
    shown = settings_with(
        CANON_SEARCH_REPLICA_URL="postgresql://reader:secret@replica.example:5433/canon_ro"
    )

    replica = shown["replica"]
    assert isinstance(replica, dict)
    assert shown["aliases"] == ["default", "replica"]
    assert shown["search_alias"] == "replica"
    assert (replica["HOST"], replica["PORT"], replica["NAME"]) == (
        "replica.example",
        5433,
        "canon_ro",
    )
    assert (replica["USER"], replica["PASSWORD"]) == ("reader", "secret")
    assert replica["OPTIONS"] == shown["default_options"]  # pool, binding, application name
    assert replica["TEST"]["MIRROR"] == "default"  # pytest-django creates nothing on it
