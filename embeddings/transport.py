"""What the HTTP providers (`openai`, `rerank`) share: one pooled client per process and
endpoint, the breaker's name for an endpoint and its outcome reports, the server's Retry-After,
and redaction of the API key from anything that may be logged, raised or stored."""

from __future__ import annotations

import email.utils
import json
import logging
import os
import re
import time

import httpx
import redis

from embeddings.breaker import CircuitBreaker, Permit

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
