"""Failed sign-ins, counted in the shared cache (Redis) within a window: per address and user
name (a password guessed at from one place), and per address (names sprayed from one place:
five times the limit). A user name alone is never locked, so nobody elsewhere can lock the
break-glass superuser out by failing on purpose. Losing the cache loses the counts, no fact."""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger("canon.identity")

SPRAY_FACTOR = 5


def _keys(address: str | None, username: str | None) -> list[tuple[str, int]]:
    limit = settings.SIGN_IN_MAX_FAILURES
    where = address or "-"
    keys = [(f"identity:fail:addr:{where}", limit * SPRAY_FACTOR)]
    if username:
        name = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
        keys.append((f"identity:fail:name:{where}:{name}", limit))
    return keys


def _window() -> int:
    return max(1, settings.SIGN_IN_FAILURE_WINDOW_MINUTES) * 60


def sign_in_locked(*, address: str | None, username: str | None = None) -> int | None:
    """Seconds until sign-in from `address` (as `username`) is allowed again, or None when it
    is allowed now."""
    for key, limit in _keys(address, username):
        try:
            found = cache.get_many([key, f"{key}:since"])
        except Exception:  # the cache is down: count nothing, refuse nothing
            return None
        if found.get(key, 0) >= limit:
            since = float(found.get(f"{key}:since", time.time()))
            return max(1, math.ceil(since + _window() - time.time()))
    return None


def sign_in_failed(*, address: str | None, username: str | None = None) -> None:
    """Count one failure (atomically: Redis INCR). Each counter's window starts at its first
    failure and ends with it."""
    window = _window()
    for key, _ in _keys(address, username):
        try:
            cache.add(f"{key}:since", time.time(), timeout=window)
            cache.add(key, 0, timeout=window)
            cache.incr(key)
        except Exception:  # expired between add and incr, or the cache is down
            logger.warning("a failed sign-in could not be counted", exc_info=True)


def sign_in_succeeded(*, address: str | None, username: str | None = None) -> None:
    """A good sign-in clears its own name's counter (not the address's)."""
    for key, _ in _keys(address, username)[1:]:
        try:
            cache.delete_many([key, f"{key}:since"])
        except Exception:
            return
