"""API tests count requests against their own rate-limit counters: a fresh cache key prefix per
test, so neither earlier runs nor other test processes sharing Redis can throttle them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _own_rate_limit_counters(settings: Any) -> None:
    caches = {name: dict(config) for name, config in settings.CACHES.items()}
    caches["default"]["KEY_PREFIX"] = f"canon-test-{uuid.uuid4().hex}"
    settings.CACHES = caches
