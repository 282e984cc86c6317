"""The reranker against a real local HTTP server: both wire protocols, scores back in the texts'
order, one call and no retry, the error classes (unavailable, rejected, malformed), Retry-After,
the shared circuit breaker, and a key that never leaks."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devtools.rerank_server import RerankServer, overlap
from embeddings import (
    CircuitOpen,
    EmbeddingShapeError,
    ProviderRejected,
    ProviderUnavailable,
)
from embeddings import rerank as rerank_module
from embeddings.breaker import CircuitBreaker, breaker_state
from embeddings.rerank import (
    HttpReranker,
    RerankConfig,
    RerankTimeout,
    reranker_from_settings,
)
from embeddings.transport import breaker_name
from tests.embedding_server import clear_breakers

SECRET = "rk-test-" + uuid.uuid4().hex  # must never leave the Authorization header
QUERY = "parking permit renewal"
TEXTS = [
    "The cafeteria opens at eight.",
    "Renew a parking permit at the front desk.",
    "Parking permit renewal: fill in form P-7 before the permit ends.",
]


class Clock:
    """The breaker's clock, moved by hand so cool-downs pass without waiting."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def server() -> Iterator[RerankServer]:
    server = RerankServer().start()
    yield server
    server.stop()


@pytest.fixture
def prefix() -> Iterator[str]:
    prefix = f"canon-test-breaker:{uuid.uuid4().hex[:10]}"
    yield prefix
    clear_breakers(prefix)


@pytest.fixture(autouse=True)
def _no_retry_after_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no Retry-After remembered (a port may be reused)."""
    monkeypatch.setattr(rerank_module, "_holds", {})


class Harness:
    """Builds rerankers that share one breaker, as web processes calling one URL do."""

    def __init__(self, server: RerankServer, prefix: str) -> None:
        self.config = RerankConfig(
            url=server.url, api_key=SECRET, timeout=0.5, breaker_threshold=10
        )
        self.prefix = prefix
        self.clock = Clock()

    def breaker(self) -> CircuitBreaker:
        return CircuitBreaker(
            breaker_name("rerank", self.config.url),
            threshold=self.config.breaker_threshold,
            cooldown=self.config.breaker_cooldown,
            probe_ttl=5.0,
            prefix=self.prefix,
            clock=self.clock,
        )

    def reranker(self, **overrides: Any) -> HttpReranker:
        self.config = replace(self.config, **overrides)
        return HttpReranker(self.config, breaker=self.breaker())


@pytest.fixture
def harness(server: RerankServer, prefix: str) -> Harness:
    return Harness(server, prefix)


# --- the two protocols ----------------------------------------------------------------------


def test_tei_sends_query_and_texts_and_reads_scores_back_in_the_texts_order(
    harness: Harness, server: RerankServer
) -> None:
    scores = harness.reranker().rerank(QUERY, TEXTS)

    # the server answered best first; the scores come back in the order the texts were sent
    assert scores == [overlap(QUERY, text) for text in TEXTS]
    assert scores[2] == 1.0 and scores[0] == 0.0
    (seen,) = server.seen
    assert seen.protocol == "tei"
    assert seen.body == {"query": QUERY, "texts": TEXTS, "truncate": True}
    assert seen.authorization == f"Bearer {SECRET}"


def test_cohere_sends_model_documents_and_top_n_and_reads_relevance_scores(
    harness: Harness, server: RerankServer
) -> None:
    reranker = harness.reranker(protocol="cohere", model="rerank-test-1")

    scores = reranker.rerank(QUERY, TEXTS)

    assert scores == server.expected(QUERY, TEXTS)
    (seen,) = server.seen
    assert seen.protocol == "cohere"
    assert seen.body == {
        "model": "rerank-test-1",
        "query": QUERY,
        "documents": TEXTS,
        "top_n": 3,
    }
    assert seen.authorization == f"Bearer {SECRET}"


def test_without_a_key_no_authorization_is_sent(harness: Harness, server: RerankServer) -> None:
    harness.reranker(api_key="").rerank(QUERY, TEXTS)

    assert server.seen[0].authorization == ""


def test_no_texts_make_no_call(harness: Harness, server: RerankServer) -> None:
    assert harness.reranker().rerank(QUERY, []) == []
    assert server.count == 0


@pytest.mark.parametrize("protocol", ["tei", "cohere"])
def test_a_capped_answer_leaves_the_unscored_texts_none(
    harness: Harness, server: RerankServer, protocol: str
) -> None:
    server.mode = "capped"

    scores = harness.reranker(protocol=protocol, model="m").rerank(QUERY, TEXTS)

    assert scores == [overlap(QUERY, TEXTS[0]), None, None]


# --- errors: one call, never retried --------------------------------------------------------


@pytest.mark.parametrize("protocol", ["tei", "cohere"])
@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("malformed", "not JSON"),
        ("wrong_shape", "is not a"),
        ("bad_index", "names no text of the 3 sent"),
        ("duplicate", "scored text 0 twice"),
        ("nan", "has no finite"),
        ("none", "scored none of the 3 texts"),
    ],
)
def test_a_malformed_answer_is_a_shape_error(
    harness: Harness, server: RerankServer, protocol: str, mode: str, message: str
) -> None:
    server.mode = mode

    with pytest.raises(EmbeddingShapeError, match=message):
        harness.reranker(protocol=protocol, model="m").rerank(QUERY, TEXTS)

    assert server.count == 1


@pytest.mark.parametrize("status", ["500", "502", "503"])
def test_a_5xx_is_unavailable_and_not_retried(
    harness: Harness, server: RerankServer, status: str
) -> None:
    server.mode = status

    with pytest.raises(ProviderUnavailable, match=f"HTTP {status}: upstream says {status}"):
        harness.reranker().rerank(QUERY, TEXTS)

    assert server.count == 1


def test_a_429_is_unavailable_and_no_call_is_made_before_its_retry_after(
    harness: Harness, server: RerankServer
) -> None:
    server.mode = "429"
    server.retry_after = "30"
    reranker = harness.reranker()

    with pytest.raises(ProviderUnavailable, match="HTTP 429") as limited:
        reranker.rerank(QUERY, TEXTS)
    assert limited.value.retry_after == 30.0

    # another reranker of this process for the same URL waits too, without calling
    server.mode = "ok"
    with pytest.raises(ProviderUnavailable, match="Retry-After") as waiting:
        harness.reranker().rerank(QUERY, TEXTS)
    assert server.count == 1
    assert waiting.value.retry_after is not None and 0 < waiting.value.retry_after <= 30


@pytest.mark.parametrize("status", ["400", "401_echo"])
def test_a_4xx_is_a_refusal_and_leaves_the_breaker_closed(
    harness: Harness, server: RerankServer, status: str
) -> None:
    server.mode = status

    with pytest.raises(ProviderRejected, match="refused the request: HTTP 40"):
        harness.reranker(breaker_threshold=1).rerank(QUERY, TEXTS)

    state = harness.breaker().state()
    assert (state.state, state.failures) == ("closed", 0)


def test_a_hanging_server_times_out(harness: Harness, server: RerankServer) -> None:
    server.mode = "hang"

    with pytest.raises(RerankTimeout, match=r"no answer within 0.3s"):
        harness.reranker(timeout=0.3).rerank(QUERY, TEXTS)

    assert server.count == 1


def test_an_unreachable_server_is_unavailable(harness: Harness, server: RerankServer) -> None:
    reranker = harness.reranker()
    server.stop()

    with pytest.raises(ProviderUnavailable, match=f"rerank {server.url}: ") as raised:
        reranker.rerank(QUERY, TEXTS)

    assert not isinstance(raised.value, RerankTimeout)


# --- the shared circuit breaker -------------------------------------------------------------


def test_failures_open_the_breaker_and_then_no_call_is_made(
    harness: Harness, server: RerankServer
) -> None:
    server.fail_next("503", "malformed")  # a garbage answer counts as a failure too
    first = harness.reranker(breaker_threshold=2)
    with pytest.raises(ProviderUnavailable):
        first.rerank(QUERY, TEXTS)
    with pytest.raises(EmbeddingShapeError):
        first.rerank(QUERY, TEXTS)

    # another process calling the same URL makes no call while it is open
    with pytest.raises(CircuitOpen, match="is open"):
        harness.reranker().rerank(QUERY, TEXTS)

    assert server.count == 2
    state = breaker_state(breaker_name("rerank", server.url), prefix=harness.prefix)
    assert (state.state, state.failures, state.opens) == ("open", 2, 1)
    assert "not JSON" in state.last_error


def test_after_the_cool_down_one_successful_probe_closes_the_breaker(
    harness: Harness, server: RerankServer
) -> None:
    server.fail_next("503")
    with pytest.raises(ProviderUnavailable):
        harness.reranker(breaker_threshold=1).rerank(QUERY, TEXTS)
    assert harness.breaker().state().state == "open"

    harness.clock.advance(harness.config.breaker_cooldown + 1)

    assert harness.reranker().rerank(QUERY, TEXTS) == server.expected(QUERY, TEXTS)
    assert harness.breaker().state().state == "closed"


def test_when_redis_is_unreachable_the_breaker_fails_open(
    harness: Harness, server: RerankServer
) -> None:
    unreachable = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    breaker = CircuitBreaker(
        "rerank:nowhere", threshold=1, cooldown=30, probe_ttl=5, client=unreachable
    )

    reranker = HttpReranker(harness.config, breaker=breaker)

    assert reranker.rerank(QUERY, TEXTS) == server.expected(QUERY, TEXTS)


# --- the key stays secret -------------------------------------------------------------------


def test_the_api_key_never_appears_in_errors_logs_breaker_state_or_repr(
    harness: Harness, server: RerankServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    reranker = harness.reranker(breaker_threshold=1)

    server.mode = "401_echo"
    with pytest.raises(ProviderRejected) as rejected:
        reranker.rerank(QUERY, TEXTS)
    server.mode = "503_echo"
    with pytest.raises(ProviderUnavailable) as unavailable:
        reranker.rerank(QUERY, TEXTS)  # opens the breaker (threshold 1): logged
    with pytest.raises(CircuitOpen) as circuit_open:
        reranker.rerank(QUERY, TEXTS)

    assert server.seen[0].authorization == f"Bearer {SECRET}"  # the server did see it
    assert "Incorrect API key provided: Bearer ***" in str(rejected.value)
    assert "circuit breaker" in caplog.text
    state = harness.breaker().state()
    for text in [
        str(rejected.value),
        str(unavailable.value),
        str(circuit_open.value),
        caplog.text,
        state.last_error,
        repr(reranker),
        repr(harness.config),
    ]:
        assert SECRET not in text


# --- built from the settings ----------------------------------------------------------------


def test_no_url_means_no_reranker(settings: Any) -> None:
    settings.RERANK_URL = ""

    assert reranker_from_settings() is None


def test_the_settings_build_one_reranker_per_configuration(
    settings: Any, server: RerankServer, prefix: str
) -> None:
    settings.RERANK_URL = server.url
    settings.RERANK_PROTOCOL = "cohere"
    settings.RERANK_MODEL = "rerank-test-1"
    settings.RERANK_API_KEY = SECRET
    settings.RERANK_TIMEOUT_SECONDS = 1.5
    settings.BREAKER_KEY_PREFIX = prefix

    reranker = reranker_from_settings()

    assert reranker is not None and reranker is reranker_from_settings()
    assert reranker.endpoint == f"{server.url}/v1/rerank"
    assert (reranker.config.model, reranker.config.timeout) == ("rerank-test-1", 1.5)
    assert reranker.breaker.key == f"{prefix}:rerank:{server.url}"
    assert reranker.rerank(QUERY, TEXTS) == server.expected(QUERY, TEXTS)
    settings.RERANK_TIMEOUT_SECONDS = 1.0
    assert reranker_from_settings() is not reranker
