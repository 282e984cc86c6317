"""What the rerank stage costs: p50/p95 of a hybrid `search` (top 10) without the reranker and
with it at 10, 30 and 50 candidates, and the ratio.

The reranker is a real HTTP server (devtools/rerank_server.py, `tei` protocol, the word-overlap
scorer) in a process of its own, so its work does not share this process's interpreter. For
each reranked search the bench also records the reranker call as Canon sees it (the round trip,
the candidates' texts sent) and the server's own scoring time, reported apart: Canon's added
cost is the call minus the scoring, plus the legs read deeper (50 candidates read 50 rows a leg
where top 10 reads 30).

The knowledge base is small (`--chunks`, 3,000 by default: B9's Zipf corpus, 200 chunks a
document) and goes through Canon's path (upload services -> outbox -> relay -> a real worker ->
switch) into its own database, `canon_rerank` (Redis db 7), reused by later runs while it holds
the same corpus (`--fresh` rebuilds it). Configurations run interleaved, the order rotating per
query.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from bench import common
from bench.b9_keyword_latency import ZipfCorpus, queries

DB_NAME = "canon_rerank"
REDIS_DB = 7
CANDIDATES = (10, 30, 50)
OFF = "off"


def _serve(conn: Connection) -> None:
    """The reranking server's process: serve until told to stop; hand over scoring times."""
    from devtools.rerank_server import RerankServer

    server = RerankServer().start()
    conn.send(server.url)
    while conn.recv() == "scoring":
        conn.send(server.take_scoring_seconds())
    server.stop()


def _slug(n_docs: int) -> str:
    return f"rerank-zipf-{n_docs}"


def _reusable(n_docs: int) -> bool:
    from kb.models import Chunk, KnowledgeBase

    kb = KnowledgeBase.objects.filter(slug=_slug(n_docs)).first()
    if kb is None or kb.active_index_version is None:
        return False
    return Chunk.objects.filter(kb=kb).count() == n_docs * common.CHUNKS_PER_DOC


def _build(corpus: ZipfCorpus, concurrency: int) -> Any:
    kb = common.tenant_kb(_slug(corpus.n_docs))
    started = time.perf_counter()
    with common.worker(concurrency=concurrency):
        for i in range(corpus.n_docs):
            common.upload(kb, f"doc-{i:05d}", corpus.document(i))
        common.wait_settled(kb)
    print(f"[rerank] {corpus.n_docs} documents live ({time.perf_counter() - started:.0f}s)")
    return kb


class CallTimer:
    """Wraps the reranker's `rerank` to time each call, the part of it spent asking the shared
    breaker (Redis), and the bytes of the request body."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.breaker_seconds: list[float] = []
        self.sent_bytes: list[int] = []
        self._breaker = 0.0

    def clear(self) -> None:
        self.seconds.clear()
        self.breaker_seconds.clear()
        self.sent_bytes.clear()

    def install(self) -> None:
        from embeddings.breaker import CircuitBreaker
        from embeddings.rerank import HttpReranker

        timer = self
        real = HttpReranker.rerank

        def timed(self: HttpReranker, query: str, texts: Sequence[str]) -> list[float | None]:
            timer._breaker = 0.0
            t0 = time.perf_counter()
            try:
                return real(self, query, texts)
            finally:
                timer.seconds.append(time.perf_counter() - t0)
                timer.breaker_seconds.append(timer._breaker)
                timer.sent_bytes.append(len(json.dumps({"query": query, "texts": list(texts)})))

        HttpReranker.rerank = timed  # type: ignore[method-assign]
        for name in ("acquire", "success", "failure"):
            setattr(CircuitBreaker, name, self._timed_breaker(getattr(CircuitBreaker, name)))

    def _timed_breaker(self, method: Any) -> Any:
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                timer._breaker += time.perf_counter() - t0

        return timed


def measure(
    kb: Any, qs: list[str], *, rounds: int, conn: Connection
) -> tuple[dict[str, list[float]], dict[str, dict[str, list[float]]], dict[str, int]]:
    """Latency (ms) per configuration; per reranked configuration the reranker call (ms), the
    server's scoring (ms) and the bytes sent; and searches that fell back, by configuration."""
    from django.conf import settings

    from retrieval.principals import Principal
    from retrieval.search.engine import search

    principal = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    timer = CallTimer()
    timer.install()
    configs = [OFF, *(str(n) for n in CANDIDATES)]

    def run(config: str, q: str) -> tuple[float, bool]:
        if config != OFF:
            settings.RERANK_CANDIDATES = int(config)
        t0 = time.perf_counter()
        result = search(principal=principal, kb=kb, query=q, top_k=10, rerank=config != OFF)
        return (time.perf_counter() - t0) * 1000, result.rerank.reranked

    for q in qs[:6]:  # warm up: statements are prepared after five runs on a connection
        for config in configs:
            run(config, q)
    conn.send("scoring")
    conn.recv()
    timer.clear()

    latency: dict[str, list[float]] = {c: [] for c in configs}
    parts: dict[str, dict[str, list[float]]] = {
        c: {"call_ms": [], "breaker_ms": [], "scoring_ms": [], "sent_kb": []} for c in configs[1:]
    }
    fallbacks = dict.fromkeys(configs[1:], 0)
    turn = 0
    for _ in range(rounds):
        for q in qs:
            for config in configs[turn % 4 :] + configs[: turn % 4]:
                elapsed, reranked = run(config, q)
                latency[config].append(elapsed)
                if config == OFF:
                    continue
                fallbacks[config] += not reranked
                conn.send("scoring")
                parts[config]["scoring_ms"] += [s * 1000 for s in conn.recv()]
                parts[config]["call_ms"] += [s * 1000 for s in timer.seconds]
                parts[config]["breaker_ms"] += [s * 1000 for s in timer.breaker_seconds]
                parts[config]["sent_kb"] += [b / 1024 for b in timer.sent_bytes]
                timer.clear()
            turn += 1
    return latency, parts, fallbacks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=15, help="per query class (4 classes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--fresh", action="store_true", help="rebuild the corpus")
    a = parser.parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per call otherwise
    n_docs = max(1, a.chunks // common.CHUNKS_PER_DOC)

    # The server's process first, before this one holds connections.
    parent, child = multiprocessing.get_context("spawn").Pipe()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(child,))
    server.start()
    url = parent.recv()
    os.environ.update(CANON_RERANK_URL=url, CANON_RERANK_PROTOCOL="tei", CANON_RERANK_TIMEOUT="2.0")
    os.environ["REDIS_URL"] = common.redis_url(REDIS_DB)
    common.DB_NAME = DB_NAME
    admin_url = os.environ.get("DATABASE_URL")
    try:
        common.setup(fresh=a.fresh)
        from django.db import connections

        from kb.models import Chunk

        corpus = ZipfCorpus(n_docs)
        if _reusable(n_docs):
            for i in range(n_docs):  # the texts again, for the words' document frequencies
                corpus.document(i)
            kb = common.tenant_kb(_slug(n_docs))
            print(f"[rerank] reusing {DB_NAME}: {n_docs} documents live", flush=True)
        else:
            connections.close_all()
            if admin_url is None:
                os.environ.pop("DATABASE_URL", None)
            else:
                os.environ["DATABASE_URL"] = admin_url
            common.setup(fresh=True)
            kb = _build(corpus, a.concurrency)
        kb.refresh_from_db()
        chunks = Chunk.objects.filter(kb=kb).count()
        qs = [q for pool in queries(corpus, a.queries).values() for q in pool]
        latency, parts, fallbacks = measure(kb, qs, rounds=a.rounds, conn=parent)
    finally:
        parent.send("stop")
        server.join(10)

    report(chunks, latency, parts, fallbacks)
    return 0


def report(
    chunks: int,
    latency: dict[str, list[float]],
    parts: dict[str, dict[str, list[float]]],
    fallbacks: dict[str, int],
) -> None:
    pct = common.percentile
    off = latency[OFF]
    rows: list[tuple[Any, ...]] = [
        (
            "candidates",
            "n",
            "p50 ms",
            "p95 ms",
            "p50 / off",
            "p95 / off",
            "call p50/p95 ms",
            "scoring p50/p95 ms",
            "breaker p50 ms",
            "call - scoring p50 ms",
            "sent KB",
            "fell back",
        )
    ]
    summary: dict[str, Any] = {"chunks": chunks, "top_k": 10, "mode": "hybrid", "configs": {}}
    for config, values in latency.items():
        entry: dict[str, Any] = {
            "n": len(values),
            "p50_ms": round(pct(values, 50), 2),
            "p95_ms": round(pct(values, 95), 2),
            "p50_over_off": common.ratio(pct(values, 50), pct(off, 50)),
            "p95_over_off": common.ratio(pct(values, 95), pct(off, 95)),
        }
        cells: tuple[Any, ...] = ("", "", "", "", "", "")
        if config != OFF:
            call, breaker, scoring, sent = (
                parts[config][k] for k in ("call_ms", "breaker_ms", "scoring_ms", "sent_kb")
            )
            entry.update(
                call_p50_ms=round(pct(call, 50), 2),
                call_p95_ms=round(pct(call, 95), 2),
                breaker_p50_ms=round(pct(breaker, 50), 2),
                scoring_p50_ms=round(pct(scoring, 50), 3),
                scoring_p95_ms=round(pct(scoring, 95), 3),
                call_minus_scoring_p50_ms=round(pct(call, 50) - pct(scoring, 50), 2),
                sent_kb_mean=round(sum(sent) / max(1, len(sent)), 1),
                fell_back=fallbacks[config],
            )
            cells = (
                f"{entry['call_p50_ms']}/{entry['call_p95_ms']}",
                f"{entry['scoring_p50_ms']}/{entry['scoring_p95_ms']}",
                entry["breaker_p50_ms"],
                entry["call_minus_scoring_p50_ms"],
                entry["sent_kb_mean"],
                entry["fell_back"],
            )
        summary["configs"][config] = entry
        rows.append(
            (
                config,
                entry["n"],
                entry["p50_ms"],
                entry["p95_ms"],
                entry["p50_over_off"],
                entry["p95_over_off"],
                *cells,
            )
        )
    common.report("RERANK", summary, rows)


if __name__ == "__main__":
    raise SystemExit(main())
