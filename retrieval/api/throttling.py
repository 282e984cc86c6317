"""Per-principal request rate limits, counted in the shared (Redis) cache.

Two budgets per principal: reads (`CANON_API_RATE`: GET, and search, which only reads though it
is a POST) and writes (`CANON_API_WRITE_RATE`: uploads and deletes), so a bulk ingestion never
spends the searches' budget, nor a busy searcher the uploads'. A fixed window per principal and
budget: one atomic INCR per request (one round trip, pipelined with the window's creation), so
concurrent requests on many web processes are counted exactly. If the cache is unreachable the
request is let through and a warning logged: the rate limit protects the service, it is not a
fact worth an outage.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import redis
from django.conf import settings
from django.core.cache import cache
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from retrieval.api.auth import request_principal
from retrieval.principals import Principal

logger = logging.getLogger(__name__)

PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


READ, WRITE = "read", "write"
RATE_SETTINGS = {READ: "CANON_API_RATE", WRITE: "CANON_API_WRITE_RATE"}


def rate_scope(request: Request, view: Any) -> str:
    """The budget a request spends: what its view declares (`rate_scope`, for a POST that only
    reads), else READ for safe methods and WRITE for the others."""
    declared = getattr(view, "rate_scope", None)
    if declared is not None:
        return str(declared)
    return READ if request.method in SAFE_METHODS else WRITE


def parse_rate(rate: str) -> tuple[int, int]:
    """'600/min' -> (600, 60)."""
    count, _, period = rate.partition("/")
    return int(count), PERIODS[period.strip().lower()]


@functools.lru_cache(maxsize=4)
def _redis(url: str, connect_timeout: float, timeout: float) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=connect_timeout, socket_timeout=timeout)


def _count(key: str, *, ttl: int) -> int:
    """Count one request in `key`'s window: create it with its expiry if new, then INCR, in
    one pipelined round trip to the default cache's Redis (its location and timeouts)."""
    config: dict[str, Any] = settings.CACHES["default"]
    options: dict[str, Any] = config.get("OPTIONS", {})
    client = _redis(
        str(config["LOCATION"]),
        float(options.get("socket_connect_timeout", 1.0)),
        float(options.get("socket_timeout", 1.0)),
    )
    pipe = client.pipeline(transaction=False)
    pipe.set(key, 0, ex=ttl, nx=True)
    pipe.incr(key)
    return int(pipe.execute()[1])


def rate_limit_wait(principal: Principal, scope: str) -> float | None:
    """Count one request of `principal` against its `scope` budget (READ or WRITE): None if
    it is within the budget, else the seconds until the window ends. Every door counts here
    (the REST API's throttle, the MCP server's tools), so all of them spend one budget."""
    limit, period = parse_rate(getattr(settings, RATE_SETTINGS[scope]))
    now = time.time()
    window = int(now // period)
    cache_key = cache.make_key(f"throttle:{principal.ident}:{scope}:{period}:{window}")
    try:
        count = _count(cache_key, ttl=period + 1)
    except Exception as exc:  # the cache is down: fail open
        logger.warning("rate limit not checked, the cache is unavailable: %s", exc)
        return None
    if count <= limit:
        return None
    return (window + 1) * period - now


class PrincipalRateThrottle(BaseThrottle):
    """settings.CANON_API_RATE reads and settings.CANON_API_WRITE_RATE writes per period, per
    API key (or per session user), each counted on its own."""

    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        principal = request_principal(request)
        if principal is None:
            return True  # refused by authentication anyway
        self._wait = rate_limit_wait(principal, rate_scope(request, view))
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait
