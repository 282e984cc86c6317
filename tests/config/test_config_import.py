"""Importing the `config` package (and with it the Celery app) must not read Django settings:
`devtools.devstack` and the benchmarks import it, then point DATABASE_URL elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os
import devtools.devstack  # imports config, hence config.celery
os.environ["DATABASE_URL"] = "postgresql://probe@127.0.0.1:1/set_after_import"
import django
django.setup()
from django.conf import settings
from config.celery import app
print(settings.DATABASES["default"]["NAME"], app.conf.task_acks_late)
"""


def test_settings_are_read_after_the_environment_is_final() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["set_after_import", "True"], out.stderr
