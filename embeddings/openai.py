"""`openai`: any OpenAI-compatible `POST {base_url}/embeddings` — bounded retries within a budget,
timeouts on every phase, Retry-After honoured, a circuit breaker shared by all workers, the API
key never logged."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from embeddings.base import (
    INPUTS_NOT_NAMED_ONCE,
    OPENAI_PROVIDER,
    REFUSED,
    CircuitOpen,
    EmbeddingShapeError,
    ProviderRejected,
    ProviderSpec,
    ProviderUnavailable,
    check_shape,
    register,
)
from embeddings.breaker import CircuitBreaker
from embeddings.transport import Endpoint, TotalTimeout, retry_after

logger = logging.getLogger(__name__)

# Only these answers are worth trying again; any other error status is a refusal.
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class HttpProviderConfig:
    """How to reach an OpenAI-compatible `/embeddings` endpoint and how hard to try."""

    base_url: str
    api_key: str = field(repr=False)  # from the environment only; never stored, never logged
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    total_timeout: float = 40.0
    max_attempts: int = 4
    budget: float = 45.0
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    breaker_threshold: int = 5
    breaker_cooldown: float = 30.0
    send_dimensions: bool = False

    @classmethod
    def from_settings(cls, base_url: str | None = None) -> HttpProviderConfig:
        from django.conf import settings

        return cls(
            base_url=(base_url or settings.OPENAI_BASE_URL).rstrip("/"),
            api_key=settings.OPENAI_API_KEY,
            connect_timeout=settings.PROVIDER_CONNECT_TIMEOUT_SECONDS,
            read_timeout=settings.PROVIDER_READ_TIMEOUT_SECONDS,
            total_timeout=settings.PROVIDER_TOTAL_TIMEOUT_SECONDS,
            max_attempts=settings.PROVIDER_MAX_ATTEMPTS,
            budget=settings.PROVIDER_BUDGET_SECONDS,
            backoff_base=settings.PROVIDER_BACKOFF_BASE_SECONDS,
            backoff_max=settings.PROVIDER_BACKOFF_MAX_SECONDS,
            breaker_threshold=settings.BREAKER_THRESHOLD,
            breaker_cooldown=settings.BREAKER_COOLDOWN_SECONDS,
            send_dimensions=settings.OPENAI_SEND_DIMENSIONS,
        )


def _worth_retrying(exc: BaseException) -> bool:
    return isinstance(exc, ProviderUnavailable) and not isinstance(exc, CircuitOpen)


def _parse_embeddings(body: bytes) -> list[list[float]]:
    """The vectors of an OpenAI embeddings response, in input order; ValueError when the body is
    not one; EmbeddingShapeError when its indices do not name each input once."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not JSON ({exc})") from None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        raise ValueError("the body has no 'data' list")
    items: list[tuple[int, list[float]]] = []
    for position, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
            raise ValueError(f"data[{position}] has no 'embedding' list")
        index = item.get("index", position)
        if not isinstance(index, int):
            raise ValueError(f"data[{position}] has a non-integer index")
        items.append((index, item["embedding"]))
    items.sort(key=lambda pair: pair[0])
    if [index for index, _ in items] != list(range(len(items))):
        raise EmbeddingShapeError(
            INPUTS_NOT_NAMED_ONCE(indices=str([index for index, _ in items][:20]))
        )
    return [vector for _, vector in items]


class OpenAIEmbeddingProvider:
    """Any OpenAI-compatible `POST {base_url}/embeddings` (OpenAI, Azure-style gateways, vLLM,
    Ollama, text-embeddings-inference, LiteLLM...).

    One `embed` call is one batch: it tries up to `max_attempts` times within `budget` seconds,
    only after connection errors, timeouts, malformed bodies and 429/502/503/504, waiting a
    full-jitter exponential backoff or the server's Retry-After, whichever is longer. Every call
    first asks the shared circuit breaker: while it is open, no call is made and CircuitOpen says
    when to come back. Redis trouble never stops embedding: the breaker then fails open.
    """

    def __init__(
        self,
        *,
        model: str,
        dimensions: int,
        config: HttpProviderConfig,
        breaker: CircuitBreaker | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if dimensions < 1:
            raise ValueError(f"embedding dimensions must be at least 1, got {dimensions}")
        self.name = OPENAI_PROVIDER
        self.model = model
        self.dimensions = dimensions
        self.config = config
        self.label = f"openai {config.base_url}"
        self.endpoint = Endpoint(
            provider=OPENAI_PROVIDER,
            base_url=config.base_url,
            url=f"{config.base_url}/embeddings",
            label=self.label,
            api_key=config.api_key,
            threshold=config.breaker_threshold,
            cooldown=config.breaker_cooldown,
            probe_ttl=min(config.total_timeout, config.budget) + 5.0,
            breaker=breaker,
        )
        self.breaker = self.endpoint.breaker
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"<OpenAIEmbeddingProvider {self.label} {self.model}/{self.dimensions}>"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        batch = list(texts)
        deadline = time.monotonic() + self.config.budget
        retrying = Retrying(
            stop=stop_after_attempt(self.config.max_attempts)
            | stop_before_delay(self.config.budget),
            wait=self._wait,
            retry=retry_if_exception(_worth_retrying),
            before_sleep=self._log_retry,
            sleep=self._sleep,
            reraise=True,
        )
        try:
            vectors: list[list[float]] = retrying(self._attempt, batch, deadline)
        except CircuitOpen:
            raise
        except ProviderUnavailable as exc:
            attempts = retrying.statistics.get("attempt_number", 1)
            raise ProviderUnavailable(
                f"{self.label}: gave up after {attempts} attempt(s): {exc}",
                retry_at=self._retry_at(exc),
                retry_after=exc.retry_after,
            ) from exc
        return vectors

    # one attempt -------------------------------------------------------------------------

    def _attempt(self, texts: list[str], deadline: float) -> list[list[float]]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProviderUnavailable(f"the retry budget of {self.config.budget}s is spent")
        endpoint = self.endpoint
        permit = endpoint.acquire()
        # `from None` below: httpx's exceptions carry the request, Authorization header included,
        # into anything that renders a traceback's objects.
        try:
            status, headers, body = self._post(texts, min(self.config.total_timeout, remaining))
        except (httpx.TimeoutException, TotalTimeout) as exc:
            message = f"no answer within the timeout ({type(exc).__name__})"
            endpoint.report(permit, message)
            raise ProviderUnavailable(message) from None
        except httpx.HTTPError as exc:
            message = endpoint.redact(f"{type(exc).__name__}: {exc}")
            endpoint.report(permit, message)
            raise ProviderUnavailable(message) from None
        if status in RETRYABLE_STATUS:
            message = f"HTTP {status}: {endpoint.snippet(body)}"
            endpoint.report(permit, message)
            raise ProviderUnavailable(message, retry_after=retry_after(headers))
        if not 200 <= status < 300:
            endpoint.report(permit)  # it answered, so it is up; the request is what it refuses
            raise ProviderRejected(
                REFUSED(provider=self.label, status=str(status), answer=endpoint.snippet(body))
            )
        try:
            vectors = _parse_embeddings(body)
        except ValueError as exc:
            message = f"malformed response: {endpoint.redact(str(exc))}"
            endpoint.report(permit, message)
            raise ProviderUnavailable(message) from None
        except EmbeddingShapeError:
            endpoint.report(permit)
            raise
        endpoint.report(permit)
        check_shape(vectors, expected_count=len(texts), dimensions=self.dimensions)
        return vectors

    def _post(self, texts: list[str], limit: float) -> tuple[int, httpx.Headers, bytes]:
        """POST the batch; at most `limit` seconds in all, however slowly the body trickles."""
        payload: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.config.send_dimensions:
            payload["dimensions"] = self.dimensions
        timeout = httpx.Timeout(
            connect=min(self.config.connect_timeout, limit),
            read=min(self.config.read_timeout, limit),
            write=min(self.config.read_timeout, limit),
            pool=min(self.config.connect_timeout, limit),
        )
        return self.endpoint.post_json(payload, timeout=timeout, limit=limit)

    # waiting ------------------------------------------------------------------------------

    def _wait(self, retry_state: RetryCallState) -> float:
        backoff = wait_random_exponential(
            multiplier=self.config.backoff_base, max=self.config.backoff_max
        )(retry_state)
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        retry_after = getattr(exc, "retry_after", None) or 0.0
        return max(backoff, retry_after)

    def _log_retry(self, retry_state: RetryCallState) -> None:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        logger.warning(
            "embedding call to %s failed (attempt %d of %d), retrying in %.2fs: %s",
            self.label,
            retry_state.attempt_number,
            self.config.max_attempts,
            retry_state.upcoming_sleep,
            exc,
        )

    def _retry_at(self, exc: ProviderUnavailable) -> float:
        """When a task that gave up should come back: not before the breaker's next probe or the
        server's Retry-After, and not sooner than about one cool-down."""
        now = time.time()
        candidates = [now + self.config.breaker_cooldown * random.uniform(0.5, 1.0)]
        if exc.retry_after:
            candidates.append(now + exc.retry_after)
        try:
            state = self.breaker.state()
        except redis.RedisError:
            state = None
        if state is not None and state.next_probe_at is not None:
            candidates.append(state.next_probe_at + random.uniform(0, 1.0))
        return max(candidates)


# The dimensions of OpenAI's own models (text-embedding-3-* can be shortened with
# CANON_OPENAI_SEND_DIMENSIONS, so they are not fixed); any other model is the server's to say.
_OPENAI_MODELS = {"text-embedding-ada-002": 1536}

SPEC = register(
    ProviderSpec(
        name=OPENAI_PROVIDER,
        label="openai (an OpenAI-compatible embedding service)",
        default_model="text-embedding-3-small",
        default_dimensions=1536,
        models=_OPENAI_MODELS,
        build=lambda model, dimensions, base_url: OpenAIEmbeddingProvider(
            model=model, dimensions=dimensions, config=HttpProviderConfig.from_settings(base_url)
        ),
    )
)
