"""The OpenAPI schema: served, complete, browsable offline, and fuzzed by schemathesis against
the Django WSGI app with zero server errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.test import Client
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application
from kb.models import KnowledgeBase
from retrieval.principals import api_key_create
from sources.services.runs import sync_request
from sources.services.sources import source_save
from tests.retrieval.factories import calibration_of, publish, question_set_with_run

OPERATIONS = {
    ("POST", "/api/v1/search"),
    ("GET", "/api/v1/chunks/{chunk_id}/explain"),
    ("GET", "/api/v1/kbs/"),
    ("GET", "/api/v1/kbs/{kb}/documents/"),
    ("GET", "/api/v1/kbs/{kb}/metadata"),
    ("POST", "/api/v1/kbs/{kb}/documents/"),
    ("GET", "/api/v1/documents/{document_id}"),
    ("DELETE", "/api/v1/documents/{document_id}"),
    ("GET", "/api/v1/documents/{document_id}/revisions/{revision}/text"),
    # retrieval.compat: Dify's External Knowledge API, OpenAI's vector stores.
    ("POST", "/api/dify/retrieval"),
    ("GET", "/api/openai/v1/vector_stores"),
    ("GET", "/api/openai/v1/vector_stores/{vector_store_id}"),
    ("POST", "/api/openai/v1/vector_stores/{vector_store_id}/search"),
    # sources: behind can_manage_sources.
    ("GET", "/api/v1/kbs/{kb}/sources"),
    ("POST", "/api/v1/kbs/{kb}/sources"),
    ("GET", "/api/v1/sources/{source_id}"),
    ("PATCH", "/api/v1/sources/{source_id}"),
    ("POST", "/api/v1/sources/{source_id}/sync"),
    ("GET", "/api/v1/sources/{source_id}/runs"),
    ("GET", "/api/v1/sources/{source_id}/runs/{run_id}"),
    ("POST", "/api/v1/sources/{source_id}/runs/{run_id}/confirm"),
    ("POST", "/api/v1/sources/{source_id}/runs/{run_id}/keep"),
    # evaluation: behind can_manage_sources too.
    ("GET", "/api/v1/kbs/{kb}/question-sets"),
    ("POST", "/api/v1/kbs/{kb}/question-sets"),
    ("GET", "/api/v1/question-sets/{question_set_id}"),
    ("PATCH", "/api/v1/question-sets/{question_set_id}"),
    ("GET", "/api/v1/question-sets/{question_set_id}/questions"),
    ("POST", "/api/v1/question-sets/{question_set_id}/questions"),
    ("PUT", "/api/v1/question-sets/{question_set_id}/questions"),
    ("POST", "/api/v1/question-sets/{question_set_id}/import"),
    ("GET", "/api/v1/kbs/{kb}/evaluations"),
    ("POST", "/api/v1/kbs/{kb}/evaluations"),
    ("GET", "/api/v1/evaluations/{evaluation_id}"),
    ("GET", "/api/v1/evaluations/{evaluation_id}/results"),
    ("GET", "/api/v1/evaluations/{evaluation_id}/compare/{other_id}"),
    ("GET", "/api/v1/kbs/{kb}/calibrations"),
    ("POST", "/api/v1/kbs/{kb}/calibrations"),
    ("POST", "/api/v1/kbs/{kb}/calibrations/roll-back"),
    ("GET", "/api/v1/calibrations/{calibration_id}"),
    ("POST", "/api/v1/calibrations/{calibration_id}/adopt"),
}

# Besides no 5xx: every answer is documented (status, content type, body schema), and every
# request that breaks the schema is refused with a 4xx.
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 20  # per operation and generation mode


@pytest.mark.django_db
def test_the_schema_describes_every_operation_and_the_bearer_key() -> None:
    response = Client().get("/api/schema/?format=json")

    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    served = {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    assert served == OPERATIONS
    assert schema["components"]["securitySchemes"]["ApiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key created in the admin or by `manage.py create_api_key`.",
    }
    upload = schema["paths"]["/api/v1/kbs/{kb}/documents/"]["post"]
    assert "multipart/form-data" in upload["requestBody"]["content"]
    assert {p["name"] for p in upload["parameters"]} >= {"Idempotency-Key"}
    assert set(upload["responses"]) >= {"201", "400", "401", "404", "409", "413", "415", "429"}


@pytest.mark.django_db
def test_the_search_schema_describes_the_rerank_option_and_outcome() -> None:
    schemas = Client().get("/api/schema/?format=json").json()["components"]["schemas"]

    rerank = schemas["SearchInputRequest"]["properties"]["rerank"]
    assert (rerank["type"], rerank["default"]) == ("boolean", True)
    output = schemas["SearchOutput"]
    assert output["properties"]["reranked"]["type"] == "boolean"
    assert {"reranked", "rerank_reason"} <= set(output["required"])
    assert set(schemas["RerankReasonEnum"]["enum"]) == {
        "not_requested",
        "not_configured",
        "not_hybrid",
        "circuit_open",
        "timeout",
        "unavailable",
        "rejected",
        "bad_answer",
    }
    score = schemas["HitOutput"]["properties"]["rerank_score"]
    assert (score["type"], score["nullable"]) == ("number", True)


@pytest.mark.django_db
def test_the_docs_load_no_asset_from_the_internet() -> None:
    response = Client().get("/api/docs/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert assets, html
    assert all(not re.match(r"(https?:)?//", asset) for asset in assets), assets
    assert "cdn" not in html.lower()
    assert '"validatorUrl": null' in html, "no badge from the online validator"


@pytest.fixture
def fuzz_target(
    transactional_db: None, kb: KnowledgeBase, settings: Any, tmp_path: Path
) -> dict[str, Any]:
    settings.CANON_API_RATE = "1000000/min"
    live = publish(kb, "policy", "Refunds are possible within thirty days of purchase.")
    publish(kb, "payroll", "Salaries are paid on the last day.", groups=("finance",))
    _, key = api_key_create(
        tenant=kb.tenant, name="fuzzer", can_read_history=True, can_manage_sources=True
    )
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    source = source_save(
        kb=kb, name="Share", slug="share", kind="folder", config={"path": str(tmp_path)}
    )
    run, _ = sync_request(source=source)
    question_set, evaluation = question_set_with_run(kb)
    calibration = calibration_of(question_set)
    return {
        "headers": {"Authorization": f"Bearer {key}"},
        "path_parameters": {
            "kb": "handbook",
            "chunk_id": live.chunks.get(ordinal=0).pk,
            "document_id": live.document_id,
            "revision": 1,
            "vector_store_id": "handbook",
            "source_id": source.pk,
            "run_id": run.pk,
            "question_set_id": question_set.pk,
            "evaluation_id": evaluation.pk,
            "other_id": evaluation.pk,
            "calibration_id": calibration.pk,
        },
    }


def test_fuzzing_the_schema_finds_no_server_error(fuzz_target: dict[str, Any]) -> None:
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    server_errors: list[str] = []
    nonconforming: list[str] = []
    statuses: dict[int, int] = {}

    def run(operation: Any, mode: GenerationMode, path_parameters: dict[str, Any] | None) -> None:
        known = {
            name: value
            for name, value in (path_parameters or {}).items()
            if f"{{{name}}}" in operation.path
        }
        strategy = operation.as_strategy(generation_mode=mode, path_parameters=known or None)

        @given(case=strategy)
        @hypothesis_settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            response = case.call(headers=fuzz_target["headers"])
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            try:
                negative = mode == GenerationMode.NEGATIVE
                checks = CONFORMANCE + ([negative_data_rejection] if negative else [])
                case.validate_response(response, checks=checks)
            except FailureGroup as exc:
                nonconforming.append(f"{case.operation.label} ({mode}): {str(exc)[:1000]}")
            if response.status_code >= 500:
                server_errors.append(
                    f"{case.operation.label} ({mode}) -> {response.status_code}\n"
                    f"{case.as_curl_command()}\n{response.text[:2000]}"
                )

        check()

    operations = [r.ok() for r in schema.get_all_operations() if isinstance(r, Ok)]
    assert {(op.method.upper(), op.path) for op in operations} == OPERATIONS
    for operation in operations:
        run(operation, GenerationMode.POSITIVE, None)
        run(operation, GenerationMode.NEGATIVE, None)
        if "{" in operation.path:  # again with ids that exist, to reach the answers
            run(operation, GenerationMode.POSITIVE, fuzz_target["path_parameters"])

    assert server_errors == [], "\n\n".join(server_errors[:5])
    assert nonconforming == [], "\n\n".join(nonconforming[:5])
    assert sum(statuses.values()) >= len(OPERATIONS) * EXAMPLES
    assert any(200 <= status < 300 for status in statuses), statuses
