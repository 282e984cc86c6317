"""Retrieval's Prometheus metrics, observed in each web process (a scrape sees the process it
reaches; `/metrics` serves the default registry, `config.health`)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

SEARCH_LATENCY = Histogram(
    "canon_search_latency_seconds",
    "Search API latency",
    ["mode"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)

RERANK_OUTCOMES = Counter(
    "canon_search_rerank",
    "Hybrid searches that called the reranker, by outcome: reranked, or the reason the fused "
    "order was answered (circuit_open, timeout, unavailable, rejected, bad_answer)",
    ["outcome"],
)
