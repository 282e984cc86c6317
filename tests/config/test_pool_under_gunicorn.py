"""Search through the web processes' connection pool, served by gunicorn as the Procfile starts
it (gthread workers): concurrent searches on every thread answer, each worker holds exactly
its pool's connections and reuses them request after request, and a revoked key is refused at
the next request, pool or not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest
from django.db import connection
from django.utils import timezone

from kb.models import KnowledgeBase
from retrieval.models import ApiKey
from retrieval.principals import api_key_create
from tests.production_support import procfile_web
from tests.retrieval.factories import publish

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

THREADS = 3


class Web:
    def __init__(self, url: str, arbiter: int) -> None:
        self.url = url
        self.arbiter = arbiter


@pytest.fixture(scope="module")
def web(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """The Procfile's web process: one worker of THREADS threads."""
    with procfile_web(
        tmp_path_factory.mktemp("pooled-web"),
        CANON_WEB_WORKERS="1",
        CANON_WEB_THREADS=str(THREADS),
        CANON_API_RATE="100000/min",
    ) as (service, port):
        yield Web(f"http://127.0.0.1:{port}", service.proc.pid)


def _worker_backends(web: Web) -> list[tuple[int, str]]:
    """(backend pid, state) of the web worker's connections, found by their application name."""
    workers = [child.pid for child in psutil.Process(web.arbiter).children()]
    assert len(workers) == 1, workers
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, state FROM pg_stat_activity WHERE application_name = %s ORDER BY pid",
            [f"canon-{workers[0]}"],
        )
        return [(int(pid), str(state)) for pid, state in cursor.fetchall()]


def _search_many(web: Web, key: str, n: int) -> list[tuple[int, list[str]]]:
    body = {"kb": "handbook", "query": "cafeteria", "mode": "vector", "top_k": 2}

    def one(_: int) -> tuple[int, list[str]]:
        response = httpx.post(
            f"{web.url}/api/v1/search", json=body, headers={"Authorization": f"Bearer {key}"}
        )
        hits = response.json().get("hits", []) if response.status_code == 200 else []
        return response.status_code, sorted(h["document_key"] for h in hits)

    with ThreadPoolExecutor(max_workers=2 * THREADS) as pool:
        return list(pool.map(one, range(n)))


def test_searches_on_every_thread_share_the_pool_and_a_revocation_counts_at_once(
    web: Web, kb: KnowledgeBase
) -> None:
    publish(kb, "open", "The cafeteria opens at eight in the morning.")
    publish(kb, "secret", "The cafeteria secret recipe is salt.", groups=("finance",))
    key, plaintext = api_key_create(tenant=kb.tenant, name="pooled", access_groups=["finance"])

    alone = _search_many(web, plaintext, 1)
    # One request opened the pool, which opens one connection per thread (min = max = threads)
    # at once; persistent connections would be one, that request's thread's.
    backends = _worker_backends(web)
    deadline = time.monotonic() + 30
    while len(backends) < THREADS and time.monotonic() < deadline:
        time.sleep(0.2)
        backends = _worker_backends(web)
    first = _search_many(web, plaintext, 60)
    second = _search_many(web, plaintext, 60)

    assert alone + first + second == [(200, ["open", "secret"])] * 121
    assert len(backends) == THREADS, backends
    # The concurrent requests borrowed the same connections, none left inside a transaction.
    assert _worker_backends(web) == backends
    assert all(state == "idle" for _, state in backends), backends

    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    refused = _search_many(web, plaintext, 2 * THREADS)

    assert [status for status, _ in refused] == [401] * (2 * THREADS)
