"""What the HTTP providers (`openai`, `rerank`) share: `Endpoint`, the one way they call a
service — one pooled client per process and endpoint, a JSON POST bounded in all however slowly
its answer trickles, the breaker shared by every process calling it (asked before, told after),
the server's Retry-After, and the API key kept out of anything that may be logged, raised or
stored. A provider adds only its request's shape, its answer's and its retry policy."""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import re
import time
from typing import Any

import httpx
import redis

from embeddings.base import CircuitOpen
from embeddings.breaker import BreakerOpen, CircuitBreaker, Permit

logger = logging.getLogger(__name__)

_clients: dict[tuple[int, str], httpx.Client] = {}

_BEARER = re.compile(r"Bearer\s+\S+")


def http_client(base_url: str) -> httpx.Client:
    """One pooled client per process and endpoint (rebuilt after a fork)."""
    key = (os.getpid(), base_url)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = httpx.Client(
            headers={"User-Agent": "canon-embeddings/1"}, follow_redirects=False
        )
    return client


def breaker_name(provider: str, base_url: str) -> str:
    """The breaker shared by every process calling this endpoint."""
    return f"{provider}:{base_url.rstrip('/')}"


def breaker_report(
    breaker: CircuitBreaker, permit: Permit | None, failure: str | None = None
) -> None:
    """Tell the breaker how the call its `permit` allowed went (`failure`: a redacted message).
    A call made without a permit (the breaker's store was unreachable) reports nothing; an
    unreachable store is logged, never raised: the call's own outcome is what matters."""
    if permit is None:
        return
    try:
        if failure is None:
            breaker.success(permit)
        else:
            breaker.failure(permit, failure)
    except redis.RedisError as exc:
        logger.warning("circuit breaker store unreachable: %s", exc)


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date), if present."""
    if "retry-after-ms" in headers:
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def redact(text: str, api_key: str) -> str:
    """`text` without `api_key` and without any bearer token (a gateway may echo the header)."""
    if api_key:
        text = text.replace(api_key, "***")
    return _BEARER.sub("Bearer ***", text)


def snippet(body: bytes, api_key: str) -> str:
    """The start of an error body for a message: its `error.message` when it has one (OpenAI's
    shape), whitespace folded, at most 300 characters, redacted."""
    text = body[:2000].decode("utf-8", errors="replace")
    try:
        document = json.loads(text)
        if isinstance(document, dict) and isinstance(document.get("error"), dict):
            text = str(document["error"].get("message", text))
    except json.JSONDecodeError:
        pass
    return redact(" ".join(text.split())[:300], api_key) or "(empty body)"


class TotalTimeout(Exception):
    """The answer did not arrive whole within the call's limit (its body trickled)."""


class Endpoint:
    """One service a provider calls, at `url` (under `base_url`, which names its breaker):
    `label` starts every message about it, `api_key` (may be empty) is sent as a bearer token
    and never appears in a message.

    The breaker is shared by every process calling `base_url` for `provider` (`breaker` to pass
    one in, as tests do). `acquire` before a call, `report` after it; a breaker whose store
    (Redis) is unreachable lets the call through and reports nothing."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        url: str,
        label: str,
        api_key: str,
        threshold: int,
        cooldown: float,
        probe_ttl: float,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.base_url = base_url
        self.url = url
        self.label = label
        self.api_key = api_key
        self.cooldown = cooldown
        self.breaker = breaker or CircuitBreaker(
            breaker_name(provider, base_url),
            label=label,
            threshold=threshold,
            cooldown=cooldown,
            probe_ttl=probe_ttl,
        )

    def acquire(self) -> Permit | None:
        """The breaker's permit for one call, or None when its store is unreachable; raises
        CircuitOpen (no call may be made) with when to come back, jittered so the callers a
        breaker turned away do not all come back at once."""
        try:
            return self.breaker.acquire()
        except BreakerOpen as exc:
            jitter = random.uniform(0, min(1.0, 0.1 * self.cooldown))
            raise CircuitOpen(
                self.redact(f"{self.label}: {exc}"), retry_at=exc.retry_at + jitter
            ) from None
        except redis.RedisError as exc:
            logger.warning("circuit breaker store unreachable (%s); calling without it", exc)
            return None

    def report(self, permit: Permit | None, failure: str | None = None) -> None:
        """How the call `permit` allowed went: None when the service answered (even to refuse
        the request: it is up), else what failed (redacted here)."""
        breaker_report(self.breaker, permit, None if failure is None else self.redact(failure))

    def post_json(
        self, payload: dict[str, Any], *, timeout: httpx.Timeout, limit: float
    ) -> tuple[int, httpx.Headers, bytes]:
        """POST `payload` as JSON and read the whole answer: `timeout` per phase, and at most
        `limit` seconds in all however slowly the body trickles (TotalTimeout). httpx's errors
        propagate; they carry the request, so a caller re-raises them `from None`."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        deadline = time.monotonic() + limit
        client = http_client(self.base_url)
        with client.stream("POST", self.url, json=payload, headers=headers, timeout=timeout) as r:
            chunks = []
            for chunk in r.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TotalTimeout(f"the answer took longer than {limit:.1f}s")
            return r.status_code, r.headers, b"".join(chunks)

    def redact(self, text: str) -> str:
        return redact(text, self.api_key)

    def snippet(self, body: bytes) -> str:
        return snippet(body, self.api_key)
