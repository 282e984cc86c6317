"""The OpenAI-compatible provider against a real local HTTP server: batching, retries only on
retryable failures with backoff that honours Retry-After, timeouts, shape guards, the shared
circuit breaker (opens, blocks, one half-open probe decides) and a key that never leaks. Then the
pipeline: waiting for the provider without burning attempts, terminal shape errors, the admin."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.utils import timezone
from redis.backoff import NoBackoff
from redis.retry import Retry

from embeddings import (
    CircuitOpen,
    EmbeddingShapeError,
    HttpProviderConfig,
    OpenAIEmbeddingProvider,
    ProviderRejected,
    ProviderUnavailable,
    breaker_name,
    get_provider,
)
from embeddings.breaker import BreakerOpen, CircuitBreaker, breaker_state, redis_client
from ingestion.models import StageResult
from ingestion.pipeline.run import task_execute
from ingestion.task_outcomes import PROVIDER_UNAVAILABLE
from kb import storage
from kb.models import Build, Document, IndexVersion, KnowledgeBase, Tenant, TenantMembership
from kb.services.documents import document_create
from kb.services.index_versions import knowledge_base_create
from tests.embedding_server import EmbeddingServer, clear_breakers
from work.models import IngestionTask, OutboxEvent

SECRET = "sk-test-" + uuid.uuid4().hex  # a key that must never leave the Authorization header
DIMENSIONS = 16
MODEL = "test-embedding"


class Clock:
    """The breaker's clock, moved by hand so cool-downs pass without waiting."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer(dimensions=DIMENSIONS, model=MODEL).start()
    yield server
    server.stop()


@pytest.fixture
def prefix() -> Iterator[str]:
    prefix = f"canon-test-breaker:{uuid.uuid4().hex[:10]}"
    yield prefix
    clear_breakers(prefix)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def config(server: EmbeddingServer) -> HttpProviderConfig:
    return HttpProviderConfig(
        base_url=server.url,
        api_key=SECRET,
        connect_timeout=2.0,
        read_timeout=0.3,
        total_timeout=2.0,
        max_attempts=3,
        budget=10.0,
        backoff_base=0.01,
        backoff_max=0.05,
        breaker_threshold=10,
        breaker_cooldown=30.0,
    )


class Harness:
    """Builds providers that share one breaker key, as workers calling one endpoint do."""

    def __init__(self, config: HttpProviderConfig, prefix: str, clock: Clock) -> None:
        self.config = config
        self.prefix = prefix
        self.clock = clock
        self.sleeps: list[float] = []

    def breaker(self) -> CircuitBreaker:
        return CircuitBreaker(
            breaker_name("openai", self.config.base_url),
            threshold=self.config.breaker_threshold,
            cooldown=self.config.breaker_cooldown,
            probe_ttl=5.0,
            prefix=self.prefix,
            clock=self.clock,
        )

    def provider(self, **overrides: Any) -> OpenAIEmbeddingProvider:
        """A provider (think: a worker) with this harness's settings, `overrides` applied."""
        return OpenAIEmbeddingProvider(
            model=MODEL,
            dimensions=DIMENSIONS,
            config=replace(self.config, **overrides),
            breaker=self.breaker(),
            sleep=self.sleeps.append,  # record waits instead of sleeping
        )


@pytest.fixture
def harness(config: HttpProviderConfig, prefix: str, clock: Clock) -> Harness:
    return Harness(config, prefix, clock)


def with_threshold(harness: Harness, threshold: int) -> OpenAIEmbeddingProvider:
    harness.config = replace(harness.config, breaker_threshold=threshold)
    return harness.provider()


# --- calls and retries ----------------------------------------------------------------------


def test_a_batch_is_one_request_and_vectors_come_back_in_order(
    harness: Harness, server: EmbeddingServer
) -> None:
    texts = ["vacation policy", "知识库管理", "expense reports"]

    vectors = harness.provider().embed(texts)

    assert vectors == server.expected(texts)
    assert server.count == 1
    assert server.seen[0].inputs == texts
    assert server.seen[0].model == MODEL
    assert server.seen[0].authorization == f"Bearer {SECRET}"


def test_429_waits_at_least_retry_after_then_succeeds(
    harness: Harness, server: EmbeddingServer
) -> None:
    server.retry_after = "2"
    server.fail_next("429")

    vectors = harness.provider().embed(["rate limited"])

    assert vectors == server.expected(["rate limited"])
    assert server.count == 2
    assert len(harness.sleeps) == 1
    assert harness.sleeps[0] >= 2.0  # the backoff alone would be at most 0.05


def test_retry_after_beyond_the_budget_gives_up_at_once_and_says_when_to_return(
    harness: Harness, server: EmbeddingServer
) -> None:
    server.retry_after = "120"
    server.mode = "429"

    with pytest.raises(ProviderUnavailable, match="HTTP 429") as raised:
        harness.provider(budget=5.0).embed(["rate limited"])

    assert server.count == 1
    assert harness.sleeps == []
    assert raised.value.retry_at is not None
    assert raised.value.retry_at >= time.time() + 100


def test_503_is_retried_with_jittered_backoff_until_it_succeeds(
    harness: Harness, server: EmbeddingServer
) -> None:
    server.fail_next("503", "503")

    vectors = harness.provider().embed(["flaky"])

    assert vectors == server.expected(["flaky"])
    assert server.count == 3
    assert len(harness.sleeps) == 2
    assert all(0 <= s <= 0.05 for s in harness.sleeps)


def test_retries_stop_at_the_attempt_cap(harness: Harness, server: EmbeddingServer) -> None:
    server.mode = "502"

    with pytest.raises(ProviderUnavailable, match=r"gave up after 3 attempt\(s\): HTTP 502"):
        harness.provider().embed(["down"])

    assert server.count == 3


def test_a_hanging_server_times_out_and_is_retried(
    harness: Harness, server: EmbeddingServer
) -> None:
    server.mode = "hang"

    with pytest.raises(ProviderUnavailable, match="no answer within the timeout"):
        harness.provider(max_attempts=2).embed(["anyone there?"])

    assert server.count == 2


def test_a_malformed_body_is_retried_then_reported(
    harness: Harness, server: EmbeddingServer
) -> None:
    server.mode = "malformed"

    with pytest.raises(ProviderUnavailable, match="malformed response: the body is not JSON"):
        harness.provider().embed(["garbage back"])

    assert server.count == 3


def test_a_500_is_a_refusal_and_is_not_retried(harness: Harness, server: EmbeddingServer) -> None:
    server.mode = "500"

    with pytest.raises(ProviderRejected, match="HTTP 500: upstream says 500"):
        harness.provider().embed(["boom"])

    assert server.count == 1


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("wrong_dims", f"has {DIMENSIONS - 1} dimensions; expected {DIMENSIONS}"),
        ("wrong_count", "returned 1 vectors for 2 texts"),
    ],
)
def test_a_wrong_shape_is_terminal_and_never_retried(
    harness: Harness, server: EmbeddingServer, mode: str, message: str
) -> None:
    server.mode = mode

    with pytest.raises(EmbeddingShapeError, match=message):
        harness.provider().embed(["one", "two"])

    assert server.count == 1


# --- the circuit breaker --------------------------------------------------------------------


def test_the_breaker_opens_after_n_failures_and_then_no_call_is_made(
    harness: Harness, server: EmbeddingServer, clock: Clock
) -> None:
    server.mode = "503"
    harness.config = replace(harness.config, breaker_threshold=3, max_attempts=5)
    first, other_worker = harness.provider(), harness.provider()

    # when one caller fails three times in a row (its attempt cap is 5)
    with pytest.raises(CircuitOpen) as raised:
        first.embed(["down"])

    # then the breaker opened after the third failure and the fourth attempt never went out
    assert server.count == 3
    state = breaker_state(breaker_name("openai", server.url), prefix=harness.prefix)
    assert (state.state, state.failures, state.opens) == ("open", 3, 1)
    assert state.next_probe_at == pytest.approx(clock.now + 30.0)
    assert "HTTP 503" in state.last_error
    assert raised.value.retry_at is not None
    assert raised.value.retry_at >= clock.now + 30.0

    # and another caller of the same endpoint (another worker) makes no call at all
    server.mode = "ok"
    with pytest.raises(CircuitOpen, match="is open"):
        other_worker.embed(["blocked"])
    assert server.count == 3
    assert breaker_state(breaker_name("openai", server.url), prefix=harness.prefix).rejected == 2


def test_after_the_cool_down_one_probe_decides(
    harness: Harness, server: EmbeddingServer, clock: Clock
) -> None:
    harness.config = replace(harness.config, breaker_threshold=2, max_attempts=2)
    server.mode = "503"
    with pytest.raises(ProviderUnavailable):
        harness.provider().embed(["down"])
    breaker = harness.breaker()
    assert breaker.state().state == "open"

    # given the cool-down has passed, the first caller holds the only probe
    clock.advance(31)
    probe = breaker.acquire()
    assert probe.probe
    with pytest.raises(BreakerOpen) as waiting:
        breaker.acquire()
    assert waiting.value.state == "half_open"

    # when the probe fails, the breaker opens for another cool-down
    breaker.failure(probe, "HTTP 503: still down")
    state = breaker.state()
    assert (state.state, state.opens) == ("open", 2)
    assert state.next_probe_at == pytest.approx(clock.now + 30.0)
    with pytest.raises(CircuitOpen):
        harness.provider().embed(["still blocked"])

    # when the server recovers and the next cool-down passes, the probe's success closes it
    server.mode = "ok"
    clock.advance(31)
    calls_before = server.count
    assert harness.provider().embed(["back"]) == server.expected(["back"])
    assert server.count == calls_before + 1
    state = breaker.state()
    assert (state.state, state.failures, state.probe_in_flight) == ("closed", 0, False)
    assert [event.split(" ", 1)[1] for event in state.events] == [
        "open after 2 consecutive failures",
        "half_open probe",
        "open probe failed",
        "half_open probe",
        "closed probe succeeded",
    ]
    assert harness.provider().embed(["flowing"]) == server.expected(["flowing"])


def test_a_success_resets_the_count_of_consecutive_failures(
    harness: Harness, server: EmbeddingServer
) -> None:
    provider = with_threshold(harness, 3)
    server.fail_next("503", "503")
    provider.embed(["recovers"])
    server.fail_next("503", "503")
    provider.embed(["recovers again"])

    state = harness.breaker().state()
    assert (state.state, state.failures) == ("closed", 0)
    assert server.count == 6


def test_when_redis_is_unreachable_the_breaker_fails_open(
    harness: Harness, server: EmbeddingServer
) -> None:
    unreachable = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    breaker = CircuitBreaker(
        "openai:nowhere", threshold=1, cooldown=30, probe_ttl=5, client=unreachable
    )
    provider = OpenAIEmbeddingProvider(
        model=MODEL, dimensions=DIMENSIONS, config=harness.config, breaker=breaker
    )

    assert provider.embed(["still works"]) == server.expected(["still works"])


# --- the key stays secret -------------------------------------------------------------------


def test_the_api_key_never_appears_in_errors_logs_or_breaker_state(
    harness: Harness, server: EmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = with_threshold(harness, 2)

    server.mode = "401_echo"
    with pytest.raises(ProviderRejected) as rejected:
        provider.embed(["who am I"])
    server.mode = "503_echo"
    with pytest.raises(ProviderUnavailable) as unavailable:
        provider.embed(["overloaded"])

    assert server.seen[0].authorization == f"Bearer {SECRET}"  # the server did see it
    messages = [str(rejected.value), str(unavailable.value)]
    state = harness.breaker().state()
    assert "Incorrect API key provided: Bearer ***" in messages[0]
    for text in [*messages, caplog.text, state.last_error, repr(provider), repr(harness.config)]:
        assert SECRET not in text


# --- choosing a provider --------------------------------------------------------------------


def test_get_provider_builds_the_openai_provider_from_settings(
    settings: Any, server: EmbeddingServer, prefix: str
) -> None:
    settings.OPENAI_BASE_URL = server.url + "/"
    settings.OPENAI_API_KEY = SECRET
    settings.BREAKER_KEY_PREFIX = prefix

    provider = get_provider(provider="openai", model=MODEL, dimensions=DIMENSIONS)

    assert isinstance(provider, OpenAIEmbeddingProvider)
    assert (provider.name, provider.model, provider.dimensions) == ("openai", MODEL, DIMENSIONS)
    assert provider.endpoint.url == server.url + "/embeddings"
    assert provider.embed(["hello"]) == server.expected(["hello"])


# --- the pipeline ---------------------------------------------------------------------------


@pytest.fixture
def openai_settings(settings: Any, server: EmbeddingServer, prefix: str) -> Any:
    settings.OPENAI_BASE_URL = server.url
    settings.OPENAI_API_KEY = SECRET
    settings.BREAKER_KEY_PREFIX = prefix
    settings.BREAKER_THRESHOLD = 2
    settings.BREAKER_COOLDOWN_SECONDS = 30.0
    settings.PROVIDER_MAX_ATTEMPTS = 2
    settings.PROVIDER_BACKOFF_BASE_SECONDS = 0.01
    settings.PROVIDER_BACKOFF_MAX_SECONDS = 0.02
    settings.PROVIDER_READ_TIMEOUT_SECONDS = 0.5
    settings.EMBEDDING_BATCH_SIZE = 4
    return settings


@pytest.fixture
def openai_kb(tenant: Tenant, openai_settings: Any) -> KnowledgeBase:
    return knowledge_base_create(
        tenant=tenant,
        name="Embedded elsewhere",
        slug="remote",
        provider="openai",
        model=MODEL,
        dimensions=DIMENSIONS,
    )


def upload(kb: KnowledgeBase, key: str, text: str) -> IngestionTask:
    stored = storage.store_bytes(text.encode())
    revision = document_create(
        kb=kb, key=key, title=key, stored=stored, media_type="text/plain", original_name="x.txt"
    )
    return IngestionTask.objects.get(build__revision=revision)


def build_of(task: IngestionTask) -> Build:
    return Build.objects.get(tasks__pk=task.pk)


def paragraphs(tag: str, n: int) -> str:
    return "\n\n".join(
        f"{tag} paragraph {i}. " + " ".join(f"{tag}{i}w{j}" for j in range(120)) for i in range(n)
    )


pipeline_test = pytest.mark.django_db(transaction=True)


@pipeline_test
def test_chunks_are_embedded_in_batches_of_the_configured_size(
    openai_kb: KnowledgeBase, server: EmbeddingServer
) -> None:
    task = upload(openai_kb, "long", paragraphs("alpha", 10))

    assert task_execute(task_id=task.pk, worker_id="w") == "published"

    build = build_of(task)
    assert build.state == Build.State.LIVE
    sizes = [len(seen.inputs) for seen in server.seen]
    assert sum(sizes) == build.expected_chunk_count
    assert max(sizes) == 4 and len(sizes) >= 3
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT vector_dims(embedding) FROM kb_chunk WHERE build_id = %s", [build.pk]
        )
        assert cursor.fetchall() == [(DIMENSIONS,)]


@pipeline_test
def test_while_the_breaker_is_open_tasks_wait_without_spending_attempts(
    openai_kb: KnowledgeBase, server: EmbeddingServer, prefix: str
) -> None:
    server.mode = "503"
    first = upload(openai_kb, "first", "The first document.")
    second = upload(openai_kb, "second", "The second document.")

    # when the first task's attempts fail (threshold 2), and the second runs after it
    assert task_execute(task_id=first.pk, worker_id="w1") == PROVIDER_UNAVAILABLE
    assert task_execute(task_id=second.pk, worker_id="w2") == PROVIDER_UNAVAILABLE

    # then only the first task called; the breaker is open; both wait for its next probe
    assert server.count == 2
    state = breaker_state(breaker_name("openai", server.url), prefix=prefix)
    assert state.state == "open" and state.next_probe_at is not None
    for task in IngestionTask.objects.filter(pk__in=[first.pk, second.pk]):
        assert task.status == IngestionTask.Status.RETRY_WAIT
        assert task.last_error_code == PROVIDER_UNAVAILABLE
        assert task.attempt == 0  # the claim's attempt was given back
        assert task.available_at is not None
        assert task.available_at.timestamp() >= state.next_probe_at
        event = OutboxEvent.objects.filter(task=task).latest("id")
        assert event.available_at >= task.available_at  # never delivered before it may run
        assert build_of(task).state == Build.State.BUILDING
    assert "circuit breaker" in IngestionTask.objects.get(pk=second.pk).last_error

    # and when the cool-down has passed and the server is back, the probe succeeds
    server.mode = "ok"
    redis_client().hset(state_key(prefix, server), "next_probe_at", str(time.time() - 1))
    IngestionTask.objects.update(available_at=timezone.now())
    assert task_execute(task_id=first.pk, worker_id="w1") == "published"
    assert task_execute(task_id=second.pk, worker_id="w2") == "published"

    assert breaker_state(breaker_name("openai", server.url), prefix=prefix).state == "closed"
    for task in IngestionTask.objects.all():
        assert (task.status, task.attempt) == (IngestionTask.Status.SUCCEEDED, 1)
    embed = StageResult.objects.get(task_id=first.pk, stage="embed")
    assert embed.attempts == 2


def state_key(prefix: str, server: EmbeddingServer) -> str:
    return f"{prefix}:{breaker_name('openai', server.url)}"


@pipeline_test
def test_wrong_dimensions_fail_the_build_and_never_change_the_index_version(
    openai_kb: KnowledgeBase, server: EmbeddingServer
) -> None:
    server.mode = "wrong_dims"
    task = upload(openai_kb, "doc", "A document the provider answers badly for.")

    assert task_execute(task_id=task.pk, worker_id="w") == "failed"

    task.refresh_from_db()
    build = build_of(task)
    assert (task.status, task.last_error_code) == ("failed", "EmbeddingShapeError")
    assert build.state == Build.State.FAILED
    assert f"expected {DIMENSIONS}" in build.error
    assert server.count == 1
    version = IndexVersion.objects.get(kb=openai_kb, number=1)
    assert (version.provider, version.model, version.dimensions) == ("openai", MODEL, DIMENSIONS)
    assert not build.chunks.exists()


@pipeline_test
def test_the_api_key_is_never_written_to_the_database(
    openai_kb: KnowledgeBase, server: EmbeddingServer
) -> None:
    server.mode = "401_echo"
    task = upload(openai_kb, "doc", "Who am I?")

    assert task_execute(task_id=task.pk, worker_id="w") == "failed"

    with connection.cursor() as cursor:
        for table, column in [
            ("ingestion_ingestiontask", "last_error"),
            ("kb_build", "error"),
            ("ingestion_stageresult", "output::text"),
            ("ingestion_outboxevent", "last_error"),
            ("kb_indexversion", "row_to_json(kb_indexversion)::text"),
        ]:
            cursor.execute(
                f"SELECT count(*) FROM {table} WHERE {column} LIKE %s",  # noqa: S608
                [f"%{SECRET}%"],
            )
            assert cursor.fetchone() == (0,), table
    assert "Incorrect API key provided: Bearer ***" in Build.objects.get().error


# --- the admin ------------------------------------------------------------------------------


@pipeline_test
def test_the_admin_shows_breaker_state_and_tasks_waiting_on_the_provider(
    openai_kb: KnowledgeBase, server: EmbeddingServer, admin_user: User, tenant: Tenant
) -> None:
    server.mode = "503"
    waiting = upload(openai_kb, "waiting", "Waits for the provider.")
    task_execute(task_id=waiting.pk, worker_id="w")
    server.mode = "ok"
    broken = upload(openai_kb, "broken", "Fails because of itself.")
    IngestionTask.objects.filter(pk=broken.pk).update(
        status="failed", last_error_code="unparseable"
    )
    client = Client()
    client.force_login(admin_user)

    page = client.get("/admin/ingestion/ingestiontask/").content.decode()
    provider_only = client.get("/admin/ingestion/ingestiontask/?why=provider").context["cl"]

    assert f"openai {server.url}" in page
    assert "<strong>open</strong>" in page
    assert "HTTP 503" in page
    assert '<strong id="count-provider">1</strong>' in page
    assert '<strong id="count-failed">1</strong>' in page
    assert [t.pk for t in provider_only.result_list] == [waiting.pk]

    # a staff user of another tenant sees none of these tasks
    other = Tenant.objects.create(name="Other", slug="other")
    staff = User.objects.create_user("staff", password="a-long-test-password", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_ingestiontask"))
    TenantMembership.objects.create(user=staff, tenant=other)
    client.force_login(staff)
    page = client.get("/admin/ingestion/ingestiontask/").content.decode()
    assert '<strong id="count-provider">0</strong>' in page
    assert Document.objects.count() == 2
