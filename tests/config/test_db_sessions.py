"""Canon's database sessions (`config.settings`): every session bounds an idle transaction and
keeps TCP alive, whatever the server's configuration, and options given in DATABASE_URL are
kept beside Canon's own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_session_bounds_an_idle_transaction() -> None:
    """The stuck transaction of the sweeper's locked-build test
    (tests/ingestion/test_lease_sweep.py) ends on its own: Canon's sessions carry
    idle_in_transaction_session_timeout (CANON_DB_IDLE_IN_TRANSACTION_SECONDS), whatever the
    server's configuration says."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] == "1min"
        cursor.execute("SHOW tcp_keepalives_idle")
        assert cursor.fetchone()[0] == "30"


def test_options_in_the_database_url_are_kept_beside_canons_own() -> None:
    """Canon's session options are added to `?options=` from DATABASE_URL, not put in its place."""
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DATABASES['default']['OPTIONS']['options'])"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": "postgresql://u@h:5432/d?options=-c%20statement_timeout%3D5000",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "idle_in_transaction_session_timeout=60000" in out
    assert out.strip().endswith("-c statement_timeout=5000")
