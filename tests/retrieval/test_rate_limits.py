"""Reads and writes have their own rate limits (issue 14, item 10): a bulk ingestion does not
spend the searches' budget, nor a busy searcher the uploads'. Counted in the real Redis; every
API operation, found by walking the URL resolver, spends the budget of its kind."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import KnowledgeBase
from retrieval.principals import api_key_create
from tests.retrieval.factories import api, search
from tests.retrieval.routes import Operation, api_operations, call

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("steady_rate_window")]

# POSTs that only read: the search, and the compatibility doors' searches (retrieval.compat).
READS_BY_NAME = {
    ("post", "search"),
    ("post", "dify-retrieval"),
    ("post", "openai-vector-store-search"),
}
VALUES = {
    "kb": "handbook",
    "chunk_id": 10**12,
    "document_id": 10**12,
    "revision": 1,
    "vector_store_id": "handbook",
    "source_id": 10**12,
    "run_id": 10**12,
    "question_set_id": 10**12,
    "evaluation_id": 10**12,
    "other_id": 10**12,
    "calibration_id": 10**12,
}


def is_read(operation: Operation) -> bool:
    return operation.method == "get" or (operation.method, operation.name) in READS_BY_NAME


def upload(client: Client, n: int) -> Any:
    return client.post(
        "/api/v1/kbs/handbook/documents/",
        {"key": f"doc-{n}", "file": SimpleUploadedFile(f"doc-{n}.txt", f"Text {n}.".encode())},
        headers={"Idempotency-Key": f"bulk-{n}"},
    )


def test_a_bulk_upload_past_the_read_budget_is_not_throttled(
    kb: KnowledgeBase, api_key: str, settings: Any
) -> None:
    """The reported case, scaled down: more uploads than the read budget, then searches."""
    settings.CANON_API_RATE = "3/min"
    settings.CANON_API_WRITE_RATE = "12/min"
    client = api(api_key)

    uploads = [upload(client, n).status_code for n in range(10)]
    searches = [search(client, {"kb": "handbook", "query": "text"}).status_code for _ in range(4)]

    assert uploads == [201] * 10
    assert searches == [200, 200, 200, 429]
    assert [upload(client, n).status_code for n in range(10, 13)] == [201, 201, 429]


def _answers(client: Client) -> dict[Operation, int]:
    return {op: call(client, op, op.path(VALUES)).status_code for op in api_operations()}


@pytest.mark.parametrize("spent", ["read", "write"])
def test_every_operation_spends_the_budget_of_its_kind(
    kb: KnowledgeBase, settings: Any, spent: str
) -> None:
    # the spent budget holds one request; the other is wide enough for every operation
    settings.CANON_API_RATE = "1/min" if spent == "read" else "1000/min"
    settings.CANON_API_WRITE_RATE = "1/min" if spent == "write" else "1000/min"
    _, plaintext = api_key_create(tenant=kb.tenant, name=f"spent {spent}")
    client = api(plaintext)
    operations = api_operations()
    assert any(is_read(op) for op in operations) and not all(is_read(op) for op in operations)
    if spent == "read":
        assert client.get("/api/v1/kbs/").status_code == 200
    else:
        assert client.delete(f"/api/v1/documents/{10**12}").status_code == 404

    answers = _answers(client)

    for operation, status in answers.items():
        throttled = is_read(operation) == (spent == "read")
        assert (status == 429) == throttled, (str(operation), status)


def test_session_users_have_both_budgets_too(
    admin_user: User, kb: KnowledgeBase, settings: Any
) -> None:
    settings.CANON_API_RATE = settings.CANON_API_WRITE_RATE = "1/min"
    client = Client()
    client.force_login(admin_user)

    assert client.get("/api/v1/kbs/").status_code == 200
    assert client.get("/api/v1/kbs/").status_code == 429
    assert upload(client, 0).status_code == 201
    assert upload(client, 1).status_code == 429
