"""Operability endpoints: /healthz (the process answers), /readyz (database, Redis, migrations),
/metrics (Prometheus text format, computed from the database at scrape time so every process
reports the same truth)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from embeddings.breaker import breaker_states

PUBLISH_LATENCY_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
CIRCUIT_STATES = {"closed": 0, "half_open": 1, "open": 2}


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _check_database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        executor = MigrationExecutor(connection)
        unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        connection.close()  # reconnect on the next probe
        return f"down: {type(exc).__name__}"
    return f"{len(unapplied)} migrations not applied" if unapplied else "ok"


def _check_redis() -> str:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1
        )
        client.ping()
    except Exception as exc:
        return f"down: {type(exc).__name__}"
    return "ok"


def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _check_database(), "redis": _check_redis()}
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse({"ready": ready, "checks": checks}, status=200 if ready else 503)


def _rows(sql: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall()


class CanonCollector(Collector):
    """Reads Canon's state from PostgreSQL on each scrape (a few indexed aggregate queries)."""

    def describe(self) -> list[Any]:
        # Without this, registering would call collect(), querying the database at import time.
        return []

    def collect(self) -> Iterator[Any]:
        # Events scheduled for later (a purge at the end of the retention window) are not lag.
        ((unpublished, oldest, scheduled),) = _rows(
            "SELECT count(*) FILTER (WHERE available_at <= now()), "
            "coalesce(extract(epoch FROM now() - min(available_at)), 0), "
            "count(*) FILTER (WHERE available_at > now()) "
            "FROM ingestion_outboxevent WHERE published_at IS NULL AND dead_at IS NULL"
        )
        yield GaugeMetricFamily(
            "canon_outbox_unpublished",
            "Outbox events due and waiting for the relay",
            value=unpublished,
        )
        yield GaugeMetricFamily(
            "canon_outbox_scheduled", "Outbox events scheduled for later", value=scheduled
        )
        yield GaugeMetricFamily(
            "canon_outbox_lag_seconds",
            "Age of the oldest unpublished outbox event",
            value=max(float(oldest), 0.0),
        )
        tasks = GaugeMetricFamily("canon_tasks", "Ingestion tasks by status", labels=["status"])
        for status, count in _rows(
            "SELECT status, count(*) FROM ingestion_ingestiontask GROUP BY status"
        ):
            tasks.add_metric([status], count)
        yield tasks
        ((expired,),) = _rows(
            "SELECT count(*) FROM ingestion_auditevent WHERE kind = 'lease_expired'"
        )
        yield CounterMetricFamily(
            "canon_lease_expiries", "Leases that expired and were swept", value=expired
        )
        anomalies = GaugeMetricFamily(
            "canon_open_anomalies",
            "Reconciler findings by type (escalated and unresolved)",
            labels=["kind"],
        )
        for kind, count in _rows(
            "SELECT kind, count(*) FROM ingestion_auditevent WHERE kind LIKE 'anomaly:%%' "
            "AND escalated AND resolved_at IS NULL GROUP BY kind"
        ):
            anomalies.add_metric([kind.removeprefix("anomaly:")], count)
        yield anomalies
        yield self._publish_latency()
        yield from self._circuits()

    def _publish_latency(self) -> HistogramMetricFamily:
        """Upload (revision created) to live (publish event), over the last 24 hours."""
        columns = ", ".join(
            f"count(*) FILTER (WHERE s <= {bound})" for bound in PUBLISH_LATENCY_BUCKETS
        )
        # Only the constant bucket bounds are interpolated.
        row = _rows(
            f"""
            SELECT {columns}, count(*), coalesce(sum(s), 0) FROM (
                SELECT extract(epoch FROM e.created_at - r.created_at) AS s
                FROM kb_publicationevent e
                JOIN kb_build b ON b.id = e.build_id
                JOIN kb_revision r ON r.id = b.revision_id
                WHERE e.action IN ('publish', 'approve') AND e.created_at > now() - interval '1 day'
            ) latencies
            """  # noqa: S608
        )[0]
        buckets = [(str(bound), row[i]) for i, bound in enumerate(PUBLISH_LATENCY_BUCKETS)]
        buckets.append(("+Inf", row[len(PUBLISH_LATENCY_BUCKETS)]))
        return HistogramMetricFamily(
            "canon_publish_latency_seconds",
            "From upload to live, last 24 hours",
            buckets=buckets,
            sum_value=float(row[-1]),
        )

    def _circuits(self) -> Iterator[GaugeMetricFamily]:
        state = GaugeMetricFamily(
            "canon_provider_circuit_state", "0 closed, 1 half-open, 2 open", labels=["provider"]
        )
        failures = GaugeMetricFamily(
            "canon_provider_consecutive_failures",
            "Consecutive provider failures",
            labels=["provider"],
        )
        try:
            breakers = breaker_states()
        except Exception:
            breakers = []  # Redis down: /readyz says so; metrics still answer
        for breaker in breakers:
            state.add_metric([breaker.name], CIRCUIT_STATES.get(breaker.state, 2))
            failures.add_metric([breaker.name], breaker.failures)
        yield state
        yield failures


REGISTRY.register(CanonCollector())


def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
