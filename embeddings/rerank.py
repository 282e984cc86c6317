"""Rerankers: one relevance score per text for a query, from a service speaking one of two common
wire protocols (`CANON_RERANK_PROTOCOL`):

- `tei` (Hugging Face text-embeddings-inference): `POST {url}/rerank` with
  `{"query", "texts", "truncate": true}`, answered by `[{"index", "score"}, ...]`;
- `cohere` (Cohere's `/v1/rerank`, also spoken by Jina and many gateways): `POST {url}/v1/rerank`
  with `{"model", "query", "documents", "top_n"}`, answered by
  `{"results": [{"index", "relevance_score"}, ...]}`.

Either may answer in any order, and with fewer results than texts when the server caps them.
A call sits on a search's path, so it is made once, within one timeout, never retried: the
caller answers in its own order instead. The shared circuit breaker (`embeddings.breaker`, one
per URL) stops calls to a reranker that keeps failing; a Retry-After stops this process's calls
until it passes. The API key is sent only in the Authorization header: never logged, raised,
stored in the breaker or shown by repr.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from embeddings.base import (
    EmbeddingShapeError,
    ProviderRejected,
    ProviderUnavailable,
)
from embeddings.breaker import CircuitBreaker
from embeddings.transport import Endpoint, TotalTimeout, retry_after

logger = logging.getLogger(__name__)

TEI = "tei"
COHERE = "cohere"
PROTOCOLS = (TEI, COHERE)
# The provider part of the breaker's name: `rerank:<url>`.
RERANK_PROVIDER = "rerank"
# A Retry-After longer than this is read as this: a wrong header must not switch reranking off
# in a process for hours.
MAX_HOLD_SECONDS = 300.0


class RerankTimeout(ProviderUnavailable):
    """The reranker gave no (complete) answer within the timeout."""


class Reranker(Protocol):
    """Scores texts against a query: one score per text, in the texts' order; None for a text
    the service did not score (it capped its answer). Higher is more relevant."""

    def rerank(self, query: str, texts: Sequence[str]) -> list[float | None]: ...


@dataclass(frozen=True)
class RerankConfig:
    """How to reach a reranker; `url` is the service's base (no path, no credentials)."""

    url: str
    protocol: str = TEI
    model: str = ""
    api_key: str = field(default="", repr=False)  # from the environment only; never logged
    timeout: float = 2.0
    breaker_threshold: int = 5
    breaker_cooldown: float = 30.0

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown rerank protocol {self.protocol!r}; known: tei, cohere")
        if not self.timeout > 0:
            raise ValueError("the rerank timeout must be positive")

    @classmethod
    def from_settings(cls) -> RerankConfig | None:
        """The configured reranker (CANON_RERANK_*), or None when CANON_RERANK_URL is empty."""
        from django.conf import settings

        if not settings.RERANK_URL:
            return None
        return cls(
            url=settings.RERANK_URL.rstrip("/"),
            protocol=settings.RERANK_PROTOCOL,
            model=settings.RERANK_MODEL,
            api_key=settings.RERANK_API_KEY,
            timeout=settings.RERANK_TIMEOUT_SECONDS,
            breaker_threshold=settings.BREAKER_THRESHOLD,
            breaker_cooldown=settings.BREAKER_COOLDOWN_SECONDS,
        )


# Per process: the monotonic time before which a URL that sent Retry-After is not called.
_holds: dict[str, float] = {}
_holds_lock = threading.Lock()


class HttpReranker:
    """A reranking service over HTTP (`tei` or `cohere`, see the module's docstring).

    `rerank` raises, and never retries:
    - CircuitOpen: the shared breaker is open (or another process holds its probe); no call made;
    - RerankTimeout: no complete answer within `timeout` seconds (connect, send, and the whole
      body);
    - ProviderUnavailable: unreachable, any 5xx or a 429 (`retry_after` set from the answer's
      Retry-After, and this process makes no call before it passes), or a Retry-After hold;
    - ProviderRejected: any other 4xx (the service is up; it refuses this request);
    - EmbeddingShapeError: the answer is not JSON of the protocol's shape, names an index
      outside the texts or twice, scores nothing, or a score is not a finite number.
    All but ProviderRejected count as failures of the breaker. Redis trouble never stops
    reranking: the breaker then fails open.
    """

    def __init__(self, config: RerankConfig, *, breaker: CircuitBreaker | None = None) -> None:
        self.config = config
        path = "/rerank" if config.protocol == TEI else "/v1/rerank"
        self.endpoint = f"{config.url}{path}"
        self.label = f"rerank {config.url}"
        self.service = Endpoint(
            provider=RERANK_PROVIDER,
            base_url=config.url,
            url=self.endpoint,
            label=self.label,
            api_key=config.api_key,
            threshold=config.breaker_threshold,
            cooldown=config.breaker_cooldown,
            probe_ttl=config.timeout + 5.0,
            breaker=breaker,
        )
        self.breaker = self.service.breaker

    def __repr__(self) -> str:
        return f"<HttpReranker {self.config.protocol} {self.config.url}>"

    def rerank(self, query: str, texts: Sequence[str]) -> list[float | None]:
        if not texts:
            return []
        self._check_hold()
        service = self.service
        permit = service.acquire()
        # `from None` below: httpx's exceptions carry the request, Authorization header included,
        # into anything that renders a traceback's objects.
        try:
            status, headers, body = self._post(query, list(texts))
        except (httpx.TimeoutException, TotalTimeout):
            message = f"{self.label}: no answer within {self.config.timeout:g}s"
            service.report(permit, message)
            raise RerankTimeout(message) from None
        except httpx.HTTPError as exc:
            message = service.redact(f"{self.label}: {type(exc).__name__}: {exc}")
            service.report(permit, message)
            raise ProviderUnavailable(message) from None
        if status == 429 or status >= 500:
            wait = retry_after(headers)
            message = f"{self.label}: HTTP {status}: {service.snippet(body)}"
            service.report(permit, message)
            if wait:
                self._hold(wait)
            raise ProviderUnavailable(message, retry_after=wait)
        if not 200 <= status < 300:
            service.report(permit)  # it answered, so it is up; the request is what it refuses
            raise ProviderRejected(
                f"{self.label} refused the request: HTTP {status}: {service.snippet(body)}"
            )
        try:
            scores = scores_in_order(self.config.protocol, body, len(texts))
        except EmbeddingShapeError as exc:
            # On a search's path a reranker answering garbage costs every search a round trip
            # for nothing: let the breaker stop calling it.
            message = service.redact(f"{self.label}: {exc}")
            service.report(permit, message)
            raise EmbeddingShapeError(message) from None
        service.report(permit)
        return scores

    # the call -----------------------------------------------------------------------------

    def _payload(self, query: str, texts: list[str]) -> dict[str, Any]:
        if self.config.protocol == TEI:
            return {"query": query, "texts": texts, "truncate": True}
        return {
            "model": self.config.model,
            "query": query,
            "documents": texts,
            "top_n": len(texts),
        }

    def _post(self, query: str, texts: list[str]) -> tuple[int, httpx.Headers, bytes]:
        """POST the texts; at most `timeout` seconds per phase and for the whole body, however
        slowly it trickles."""
        limit = self.config.timeout
        return self.service.post_json(
            self._payload(query, texts), timeout=httpx.Timeout(limit), limit=limit
        )

    # Retry-After --------------------------------------------------------------------------

    def _check_hold(self) -> None:
        with _holds_lock:
            until = _holds.get(self.config.url, 0.0)
        left = until - time.monotonic()
        if left > 0:
            raise ProviderUnavailable(
                f"{self.label}: asked to wait (Retry-After), {left:.1f}s left",
                retry_after=left,
                retry_at=time.time() + left,
            )

    def _hold(self, seconds: float) -> None:
        with _holds_lock:
            _holds[self.config.url] = time.monotonic() + min(seconds, MAX_HOLD_SECONDS)


def scores_in_order(protocol: str, body: bytes, count: int) -> list[float | None]:
    """The scores of a `protocol` answer for `count` texts, in the texts' order (None where the
    answer has none); EmbeddingShapeError when the body is not such an answer."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise EmbeddingShapeError("the reranker's answer is not JSON") from None
    if protocol == TEI:
        items, key = document, "score"
    else:
        items = document.get("results") if isinstance(document, dict) else None
        key = "relevance_score"
    if not isinstance(items, list):
        where = "a list" if protocol == TEI else "a 'results' list"
        raise EmbeddingShapeError(f"the reranker's answer is not {where}")
    scores: list[float | None] = [None] * count
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise EmbeddingShapeError(f"result {position} is not an object")
        index: Any = item.get("index")
        score: Any = item.get(key)
        if type(index) is not int or not 0 <= index < count:
            raise EmbeddingShapeError(
                f"result {position} names no text of the {count} sent (index {index!r})"
            )
        if scores[index] is not None:
            raise EmbeddingShapeError(f"the reranker scored text {index} twice")
        if type(score) not in (int, float) or not math.isfinite(score):
            raise EmbeddingShapeError(f"result {position} has no finite {key!r}")
        scores[index] = float(score)
    if count and all(score is None for score in scores):
        raise EmbeddingShapeError(f"the reranker scored none of the {count} texts")
    return scores


@functools.lru_cache(maxsize=4)
def _reranker(config: RerankConfig, breaker_prefix: str) -> HttpReranker:
    # One per configuration, so a process builds its breaker once; `breaker_prefix` (read by
    # CircuitBreaker from the settings) is part of the key so a changed prefix gets its own.
    return HttpReranker(config)


def reranker_from_settings() -> HttpReranker | None:
    """The reranker CANON_RERANK_URL names, or None when it is empty (reranking is off)."""
    from django.conf import settings

    config = RerankConfig.from_settings()
    return None if config is None else _reranker(config, settings.BREAKER_KEY_PREFIX)
