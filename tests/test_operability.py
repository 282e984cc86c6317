"""/healthz, /readyz and /metrics."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from ingestion.pipeline.run import task_execute
from kb import storage
from kb.models import KnowledgeBase
from kb.services.documents import document_create, revision_create
from kb.services.index_versions import knowledge_base_create
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)


def test_healthz_answers() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_reports_each_dependency(settings: object) -> None:
    ready = Client().get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "redis": "ok"}

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # type: ignore[attr-defined]
    down = Client().get("/readyz")
    assert down.status_code == 503
    assert down.json()["checks"]["redis"].startswith("down")
    assert down.json()["checks"]["database"] == "ok"

    settings.REDIS_URL = settings.CELERY_BROKER_URL  # type: ignore[attr-defined]
    assert Client().get("/readyz").status_code == 200


def test_metrics_parse_with_the_prometheus_parser(kb: KnowledgeBase) -> None:
    revision = document_create(
        kb=kb,
        key="doc",
        title="Doc",
        stored=storage.store_bytes(b"Some text."),
        media_type="text/plain",
        original_name="doc.txt",
    )
    task_execute(task_id=IngestionTask.objects.get(build__revision=revision).pk, worker_id="w")
    queued = revision_create(
        document=revision.document,
        stored=storage.store_bytes(b"Other text."),
        media_type="text/plain",
        original_name="doc.txt",
    )

    response = Client().get("/metrics")

    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    tasks = {s.labels["status"]: s.value for s in families["canon_tasks"].samples}
    assert tasks == {"succeeded": 1.0, "queued": 1.0}
    assert families["canon_outbox_unpublished"].samples[0].value == 2.0
    latency = families["canon_publish_latency_seconds"]
    count = next(s.value for s in latency.samples if s.name.endswith("_count"))
    assert count == 1.0
    assert queued.number == 2


def test_json_logs_carry_the_pipeline_ids(kb: KnowledgeBase, tmp_path: Any) -> None:
    """A worker-like process with LOG_FORMAT=json logs one JSON object per line with task_id,
    build_id and lease_owner."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT, database_url

    revision = document_create(
        kb=kb,
        key="doc",
        title="Doc",
        stored=storage.store_bytes(b"Some text."),
        media_type="text/plain",
        original_name="doc.txt",
    )
    task = IngestionTask.objects.get(build__revision=revision)
    env = {
        **os.environ,
        "LOG_FORMAT": "json",
        "DATABASE_URL": database_url(),
        "CANON_STORAGE_ROOT": str(storage.storage_root()),
    }
    code = (
        "from ingestion.pipeline.run import task_execute; "
        f"task_execute(task_id={task.pk}, worker_id='json-worker')"
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    finished = next(r for r in records if r["message"].startswith("task finished"))
    assert finished["task_id"] == task.pk
    assert finished["build_id"] == task.build_id
    assert finished["lease_owner"] == "json-worker"
    assert finished["level"] == "INFO" and finished["logger"] == "ingestion.pipeline.run"


def test_readyz_fails_while_the_database_is_unreachable_and_recovers() -> None:
    from django.db import connection

    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"  # nothing listens there
    try:
        down = Client().get("/readyz")
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert down.status_code == 503
    assert down.json()["checks"]["database"].startswith("down")
    assert Client().get("/readyz").status_code == 200


def test_search_latency_is_exported(kb: KnowledgeBase, api_key: str) -> None:
    client = Client()
    body = {"kb": kb.slug, "query": "anything", "mode": "keyword"}
    headers = {"Authorization": f"Bearer {api_key}"}
    assert (
        client.post(
            "/api/v1/search", body, content_type="application/json", headers=headers
        ).status_code
        == 200
    )

    families = {
        f.name: f for f in text_string_to_metric_families(client.get("/metrics").content.decode())
    }
    counts = [
        s.value
        for s in families["canon_search_latency_seconds"].samples
        if s.name.endswith("_count") and s.labels["mode"] == "keyword"
    ]
    assert counts and counts[0] >= 1


def test_search_answers_503_while_the_query_cannot_be_embedded(
    tenant: Any, api_key: str, monkeypatch: Any
) -> None:
    import embeddings

    kb = knowledge_base_create(
        tenant=tenant, name="Remote", slug="remote", provider="openai", model="m", dimensions=8
    )

    def down(*args: object, **kwargs: object) -> None:
        raise embeddings.ProviderUnavailable("the embedding service is down", retry_after=7)

    monkeypatch.setattr(embeddings.OpenAIEmbeddingProvider, "embed", down)
    response = Client().post(
        "/api/v1/search",
        {"kb": kb.slug, "query": "x", "mode": "hybrid"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert response.status_code == 503
    assert response["Retry-After"] == "7"
    assert response.json()["error"] == "provider_unavailable"


def test_production_settings_pass_the_deploy_check() -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "DEBUG": "0", "SECRET_KEY": "x" * 60 + "-deploy-check-only-0123456789"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check", "--deploy", "--fail-level", "WARNING"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
