"""The rerank stage through the search API, against a real local reranking server: the
reranker's order replaces the fused order of a hybrid search, `rerank: false` and an
unconfigured reranker give the fused order untouched, and a reranker that fails, hangs or whose
breaker is open still gives a 200 in the fused order that says it was not reranked."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from psycopg import pq

from devtools.rerank_server import RerankServer, overlap
from embeddings import rerank as rerank_module
from embeddings.rerank import HttpReranker
from kb.models import KnowledgeBase
from kb.services.index_versions import knowledge_base_create
from retrieval.principals import api_key_create
from tests.embedding_server import clear_breakers
from tests.retrieval.factories import api, publish, search

SECRET = "rk-test-" + uuid.uuid4().hex
QUERY = "parking permit renewal form"
DOCUMENTS = {
    "cafeteria": "The cafeteria opens at eight and serves lunch until two.",
    "parking": "Parking is free for visitors in the north lot.",
    "permit": "A parking permit is issued by the front desk for one year.",
    "renewal": "Parking permit renewal: fill in form P-7 before the permit ends.",
    "forms": "Every form of the handbook is listed on the intranet.",
    "travel": "Travel costs are refunded within thirty days.",
}


@pytest.fixture
def published(kb: KnowledgeBase) -> KnowledgeBase:
    for key, text in DOCUMENTS.items():
        publish(kb, key, text)
    return kb


@pytest.fixture
def server(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[RerankServer]:
    """A reranker configured as CANON_RERANK_* would: tei, a key, a short timeout, 30
    candidates, and a breaker of its own."""
    prefix = f"canon-test-breaker:{uuid.uuid4().hex[:10]}"
    monkeypatch.setattr(rerank_module, "_holds", {})
    server = RerankServer().start()
    settings.RERANK_URL = server.url
    settings.RERANK_PROTOCOL = "tei"
    settings.RERANK_MODEL = ""
    settings.RERANK_API_KEY = SECRET
    settings.RERANK_TIMEOUT_SECONDS = 0.5
    settings.RERANK_CANDIDATES = 30
    settings.BREAKER_KEY_PREFIX = prefix
    yield server
    server.stop()
    clear_breakers(prefix)


def ask(api_key: str, **extra: Any) -> dict[str, Any]:
    response = search(api(api_key), {"kb": "handbook", "query": QUERY, "top_k": 10, **extra})
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def ids(body: dict[str, Any]) -> list[int]:
    return [hit["chunk_id"] for hit in body["hits"]]


def test_a_reranker_that_reverses_reverses_the_fused_order(
    published: KnowledgeBase, api_key: str, server: RerankServer
) -> None:
    server.mode = "reverse"  # the last text sent scores highest
    fused = ask(api_key, rerank=False)
    assert len(fused["hits"]) == len(DOCUMENTS)

    reranked = ask(api_key)

    assert (reranked["reranked"], reranked["rerank_reason"]) == (True, None)
    assert ids(reranked) == ids(fused)[::-1]
    # the reranker read the fused hits' texts in the fused order
    assert server.seen[0].texts == [hit["text"] for hit in fused["hits"]]
    assert server.seen[0].authorization == f"Bearer {SECRET}"
    # each hit keeps its fused score; the reranker's is beside it
    fused_scores = {hit["chunk_id"]: hit["score"] for hit in fused["hits"]}
    assert {hit["chunk_id"]: hit["score"] for hit in reranked["hits"]} == fused_scores
    assert [hit["rerank_score"] for hit in reranked["hits"]] == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]


def test_the_cohere_protocol_orders_by_relevance_score(
    published: KnowledgeBase, api_key: str, server: RerankServer, settings: Any
) -> None:
    settings.RERANK_PROTOCOL = "cohere"
    settings.RERANK_MODEL = "rerank-test-1"

    body = ask(api_key)

    assert body["reranked"] is True
    scores = [hit["rerank_score"] for hit in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert all(hit["rerank_score"] == overlap(QUERY, hit["text"]) for hit in body["hits"])
    assert body["hits"][0]["document_key"] == "renewal"  # every word of the query
    (seen,) = server.seen
    assert (seen.protocol, seen.body["model"], seen.body["top_n"]) == (
        "cohere",
        "rerank-test-1",
        len(DOCUMENTS),
    )


def test_only_the_first_candidates_are_reranked(
    published: KnowledgeBase, api_key: str, server: RerankServer, settings: Any
) -> None:
    settings.RERANK_CANDIDATES = 2
    server.mode = "reverse"
    fused = ids(ask(api_key, rerank=False))

    reranked = ids(ask(api_key))

    assert reranked == [fused[1], fused[0], *fused[2:]]
    assert len(server.seen[0].texts) == 2


def test_rerank_false_skips_the_reranker(
    published: KnowledgeBase, api_key: str, server: RerankServer
) -> None:
    body = ask(api_key, rerank=False)

    assert (body["reranked"], body["rerank_reason"]) == (False, "not_requested")
    assert all(hit["rerank_score"] is None for hit in body["hits"])
    assert server.count == 0


def test_unconfigured_gives_the_fused_results_and_says_so(
    published: KnowledgeBase, api_key: str, server: RerankServer, settings: Any
) -> None:
    skipped = ask(api_key, rerank=False)
    settings.RERANK_URL = ""

    body = ask(api_key)

    assert (body["reranked"], body["rerank_reason"]) == (False, "not_configured")
    assert body["hits"] == skipped["hits"]
    assert set(body) == {
        "kb",
        "index_version",
        "knowledge_bases",
        "merged_by",
        "took_ms",
        "as_of",
        "unretained_documents",
        "reranked",
        "rerank_reason",
        "hits",
    }
    assert server.count == 0


@pytest.mark.parametrize("mode", ["vector", "keyword"])
def test_a_single_leg_search_is_not_reranked(
    published: KnowledgeBase, api_key: str, server: RerankServer, mode: str
) -> None:
    body = ask(api_key, mode=mode)

    assert (body["reranked"], body["rerank_reason"]) == (False, "not_hybrid")
    assert server.count == 0


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        ("503", "unavailable"),
        ("429", "unavailable"),
        ("hang", "timeout"),
        ("400", "rejected"),
        ("malformed", "bad_answer"),
        ("nan", "bad_answer"),
    ],
)
def test_a_failing_reranker_leaves_the_fused_order(
    published: KnowledgeBase,
    api_key: str,
    server: RerankServer,
    caplog: pytest.LogCaptureFixture,
    failure: str,
    reason: str,
) -> None:
    server.mode = failure

    with caplog.at_level(logging.DEBUG):
        body = ask(api_key)

    fused = ask(api_key, rerank=False)
    assert (body["reranked"], body["rerank_reason"]) == (False, reason)
    assert body["hits"] == fused["hits"]
    warnings = [r for r in caplog.records if r.name == "retrieval.search.rerank"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert f"search not reranked ({reason})" in warnings[0].getMessage()
    assert SECRET not in caplog.text


def test_an_open_breaker_makes_no_call_and_leaves_the_fused_order(
    published: KnowledgeBase, api_key: str, server: RerankServer, settings: Any
) -> None:
    settings.BREAKER_THRESHOLD = 1
    server.fail_next("503")
    assert ask(api_key)["rerank_reason"] == "unavailable"  # and the breaker opens

    body = ask(api_key)

    assert (body["reranked"], body["rerank_reason"]) == (False, "circuit_open")
    assert body["hits"] == ask(api_key, rerank=False)["hits"]
    assert server.count == 1


@pytest.mark.django_db(transaction=True)
def test_the_reranker_is_called_outside_any_transaction(
    published: KnowledgeBase,
    api_key: str,
    server: RerankServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[bool, Any]] = []
    real = HttpReranker.rerank

    def spy(self: HttpReranker, query: str, texts: Any) -> list[float | None]:
        assert connection.connection is not None
        seen.append((connection.in_atomic_block, connection.connection.info.transaction_status))
        return real(self, query, texts)

    monkeypatch.setattr(HttpReranker, "rerank", spy)

    assert ask(api_key)["reranked"] is True
    assert seen == [(False, pq.TransactionStatus.IDLE)]


def test_an_as_of_search_is_reranked_too(published: KnowledgeBase, server: RerankServer) -> None:
    _, admin_key = api_key_create(tenant=published.tenant, name="admin", can_read_history=True)
    server.mode = "reverse"
    now = ask(admin_key, rerank=False)

    body = ask(admin_key, as_of=timezone.now().isoformat())

    assert body["reranked"] is True
    assert ids(body) == ids(now)[::-1]


def test_explain_shows_the_fused_ranking_beside_the_rerank_score(
    published: KnowledgeBase, api_key: str, server: RerankServer
) -> None:
    body = ask(api_key, explain=True)

    assert body["reranked"] is True
    for hit in body["hits"]:
        assert hit["rerank_score"] == overlap(QUERY, hit["text"])
        assert hit["ranking"]["fused"] is not None


def test_a_search_of_several_knowledge_bases_reranks_the_best_of_all_their_lists(
    published: KnowledgeBase, api_key: str, server: RerankServer
) -> None:
    """Each knowledge base's list is fused as deep as the reranker's candidates (30), not to
    the request's top_k, so the reranker can lift a hit from below any list's top_k."""
    wiki = knowledge_base_create(tenant=published.tenant, name="Wiki", slug="wiki")
    publish(wiki, "permits", "Permit renewal for the parking garage: the form is online.")
    publish(wiki, "garage", "The parking garage closes at night.")
    body = {"kb": ["handbook", "wiki"], "query": QUERY, "top_k": 2}
    fused = search(api(api_key), {**body, "top_k": 10, "rerank": False}).json()
    assert len(fused["hits"]) == len(DOCUMENTS) + 2

    server.mode = "reverse"
    reranked = search(api(api_key), body).json()

    assert reranked["reranked"] is True
    # every hit of both lists went to the reranker, in the merged order
    assert server.seen[0].texts == [hit["text"] for hit in fused["hits"]]
    assert ids(reranked) == ids(fused)[::-1][:2]
