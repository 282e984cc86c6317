"""Fault matrix row F-M1: the embedding provider answers 429 / 503 / hangs. Real worker processes
call a real local HTTP server: bounded retries, the shared breaker opens, tasks wait in
`retry_wait` / `provider_unavailable` without spending attempts, one half-open probe succeeds
once the server recovers, every document goes live, dimensions never change, kb_verify is clean.
With two workers, the breaker one of them opened keeps the other from calling at all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from django.db import connection

from embeddings import breaker_name
from embeddings.breaker import BreakerState, breaker_state
from ingestion.models import StageResult
from ingestion.task_outcomes import PROVIDER_UNAVAILABLE
from kb.models import Build, IndexVersion, KnowledgeBase, Tenant
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import Principal
from retrieval.search.engine import search
from tests.conftest import wait_for
from tests.embedding_server import EmbeddingServer, clear_breakers
from tests.fault.harness import assert_verified, converge, live_revision, paragraphs, upload
from work.models import IngestionTask

pytestmark = pytest.mark.integration

DIMENSIONS = 32
MODEL = "remote-embedding-v1"
THRESHOLD = 3
ATTEMPTS = 3
SECRET = "sk-fault-" + uuid.uuid4().hex


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer(dimensions=DIMENSIONS, model=MODEL).start()
    yield server
    server.stop()


@pytest.fixture
def provider_env(settings: Any, server: EmbeddingServer) -> Iterator[dict[str, str]]:
    """Worker settings (and the same in this process, which reads the breaker and searches):
    short timeouts, backoffs and cool-down, so the whole outage fits in seconds."""
    prefix = f"canon-test-breaker:{uuid.uuid4().hex[:10]}"
    env = {
        "CANON_OPENAI_BASE_URL": server.url,
        "CANON_OPENAI_API_KEY": SECRET,
        "CANON_BREAKER_KEY_PREFIX": prefix,
        "CANON_BREAKER_THRESHOLD": str(THRESHOLD),
        "CANON_BREAKER_COOLDOWN_SECONDS": "1",
        "CANON_PROVIDER_MAX_ATTEMPTS": str(ATTEMPTS),
        "CANON_PROVIDER_BACKOFF_BASE_SECONDS": "0.05",
        "CANON_PROVIDER_BACKOFF_MAX_SECONDS": "0.2",
        "CANON_PROVIDER_CONNECT_TIMEOUT_SECONDS": "1",
        "CANON_PROVIDER_READ_TIMEOUT_SECONDS": "0.5",
        "CANON_PROVIDER_TOTAL_TIMEOUT_SECONDS": "1",
        "CANON_PROVIDER_BUDGET_SECONDS": "5",
        "CANON_EMBEDDING_BATCH_SIZE": "4",
    }
    settings.OPENAI_BASE_URL = server.url
    settings.OPENAI_API_KEY = SECRET
    settings.BREAKER_KEY_PREFIX = prefix
    yield env
    clear_breakers(prefix)


@pytest.fixture
def remote_kb(tenant: Tenant) -> KnowledgeBase:
    return knowledge_base_create(
        tenant=tenant,
        name="Remote embeddings",
        slug="remote",
        provider="openai",
        model=MODEL,
        dimensions=DIMENSIONS,
    )


def breaker(server: EmbeddingServer) -> BreakerState:
    return breaker_state(breaker_name("openai", server.url))


def task_snapshot() -> list[tuple[str, str, int]]:
    return list(
        IngestionTask.objects.order_by("id").values_list("status", "last_error_code", "attempt")
    )


def all_waiting_on_provider(count: int) -> list[tuple[str, str, int]] | None:
    """The tasks, if all `count` of them wait on the provider right now (one query)."""
    snapshot = task_snapshot()
    waiting = ("retry_wait", PROVIDER_UNAVAILABLE)
    if len(snapshot) == count and all(row[:2] == waiting for row in snapshot):
        return snapshot
    return None


@pytest.mark.parametrize("failure", ["503", "429", "hang"])
def test_f_m1_provider_outage_waits_then_recovers_through_one_probe(
    worker_factory: Any,
    remote_kb: KnowledgeBase,
    server: EmbeddingServer,
    provider_env: dict[str, str],
    failure: str,
) -> None:
    # given a provider that fails every call (429 asks for a 0.3 s pause each time)
    server.mode = failure
    server.retry_after = "0.3"
    worker = worker_factory(pool="solo", **provider_env)
    documents = [upload(remote_kb, f"doc{i}", paragraphs(f"d{i}x", n=6)) for i in range(3)]

    # when the worker tries: bounded retries, then the breaker opens and every task waits
    snapshot = wait_for(
        lambda: all_waiting_on_provider(3), timeout=60, what="all tasks waiting on the provider"
    )

    # then no attempt was spent: waiting on the provider is not the task's fault
    assert snapshot == [("retry_wait", PROVIDER_UNAVAILABLE, 0)] * 3
    assert not Build.objects.filter(state=Build.State.FAILED).exists()
    assert f"failed (attempt 1 of {ATTEMPTS}), retrying in" in worker.log()
    assert breaker(server).events[0].split(" ", 1)[1] == (
        f"open after {THRESHOLD} consecutive failures"
    )

    # when the cool-down passes while the server is still down, the one probe fails and the
    # breaker opens again; the tasks keep waiting, still without spending attempts
    wait_for(lambda: breaker(server).opens >= 2, timeout=60, what="a failed probe")
    snapshot = wait_for(lambda: all_waiting_on_provider(3), timeout=60, what="tasks waiting")
    assert snapshot == [("retry_wait", PROVIDER_UNAVAILABLE, 0)] * 3
    assert "probe failed" in " ".join(breaker(server).events)
    # and the server saw the first task's attempts, then one probe per reopening: never a
    # task's full set of retries while the breaker was open (bounds hold for a probe in flight)
    opens_before = breaker(server).opens
    calls = server.count
    state = breaker(server)
    assert THRESHOLD + opens_before - 1 <= calls <= THRESHOLD + state.opens
    assert SECRET not in state.last_error and SECRET not in worker.log()

    # when the server recovers, a half-open probe succeeds and the breaker closes
    server.mode = "ok"
    converge(lambda: all(live_revision(d) == 1 for d in documents), timeout=60, what="all live")

    # then every document is live, each task succeeded on its first counted attempt
    state = breaker(server)
    assert (state.state, state.failures) == ("closed", 0)
    assert state.events[-2:] == [
        state.events[-2].split(" ", 1)[0] + " half_open probe",
        state.events[-1].split(" ", 1)[0] + " closed probe succeeded",
    ]
    assert task_snapshot() == [("succeeded", "", 1)] * 3
    # the embed stage ran again after each wait: the retries are visible
    for task in IngestionTask.objects.all():
        assert StageResult.objects.get(task=task, stage="embed").attempts >= 2
    # and the embedding space never changed
    version = IndexVersion.objects.get(kb=remote_kb, number=1)
    assert (version.provider, version.model, version.dimensions) == ("openai", MODEL, DIMENSIONS)
    assert set(Build.objects.values_list("state", "dimensions")) == {("live", DIMENSIONS)}
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT vector_dims(embedding) FROM kb_chunk")
        assert cursor.fetchall() == [(DIMENSIONS,)]
    # and vector search works with the same provider
    everyone = Principal(
        tenant_id=remote_kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    hits = search(principal=everyone, kb=remote_kb, query="d1x paragraph 2", mode="vector").hits
    assert hits and hits[0].document_key == "doc1"
    assert_verified()


def test_f_m1_the_breaker_one_worker_opens_stops_the_other_from_calling(
    worker_factory: Any,
    remote_kb: KnowledgeBase,
    server: EmbeddingServer,
    provider_env: dict[str, str],
) -> None:
    # given two workers and a provider that is down, with a cool-down longer than the test
    server.mode = "503"
    env = {**provider_env, "CANON_BREAKER_COOLDOWN_SECONDS": "300"}
    workers = [worker_factory(pool="solo", **env), worker_factory(pool="solo", **env)]

    # when the first document's worker spends its attempts, the breaker opens
    upload(remote_kb, "first", paragraphs("first", n=2))
    wait_for(lambda: all_waiting_on_provider(1), timeout=60, what="the first task waiting")
    assert server.count == THRESHOLD
    assert breaker(server).state == "open"
    openers = [w for w in workers if "failed (attempt 1 of" in w.log()]
    assert len(openers) == 1
    other = next(w for w in workers if w is not openers[0])

    # and more documents arrive, until the other worker has handled some of them
    n = 1
    while "'provider_unavailable'" not in other.log():
        assert n < 20, "the second worker never received a task"
        upload(remote_kb, f"more{n}", paragraphs(f"more{n}", n=2))
        n += 1
        wait_for(partial(all_waiting_on_provider, n), timeout=60, what="tasks waiting")

    # then the other worker ran tasks, met the open breaker and made no call at all
    assert server.count == THRESHOLD
    assert "HTTP Request" not in other.log()
    assert "failed (attempt" not in other.log()
    assert breaker(server).rejected >= n - 1
    assert task_snapshot() == [("retry_wait", PROVIDER_UNAVAILABLE, 0)] * n
