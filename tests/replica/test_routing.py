"""Which connection each read and write uses, with and without a search replica.

The `replica` alias here is a second connection to the test database itself (`mirror_replica`):
what a statement returns is the same on both, so which connection ran it is all that differs.
tests/replica/test_replica.py does the same against a real standby."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from kb.models import Document, KnowledgeBase, Revision, Tenant
from retrieval import routing
from retrieval.principals import KnowledgeBaseNotFound, Principal, api_key_create
from retrieval.routing import REPLICA
from retrieval.search.engine import search as search_selector
from tests.replica.conftest import DATABASES, replica_alias
from tests.retrieval.factories import api, build, publish, search

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)


@pytest.fixture(scope="module", autouse=True)
def _alias(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    primary = connections.settings[DEFAULT_DB_ALIAS]
    with (
        django_db_blocker.unblock(),
        replica_alias(host=primary["HOST"], port=primary["PORT"], name=primary["NAME"]) as alias,
    ):
        yield alias


@pytest.fixture
def mirror_replica(settings: Any) -> str:
    """The API's searches read `replica`, here a second connection to the test database."""
    settings.SEARCH_DATABASE = REPLICA
    return REPLICA


MODES = ("vector", "keyword", "hybrid")


def sqls(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries]


def reads_chunks(sql: str) -> bool:
    return "kb_chunk" in sql or "kb_posting" in sql or "kb_lexicalstat" in sql


def test_without_a_replica_search_reads_the_primary(kb: KnowledgeBase, api_key: str) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")

    with CaptureQueriesContext(connections[DEFAULT_DB_ALIAS]) as primary:
        responses = [
            search(api(api_key), {"kb": "handbook", "query": "trains reimbursed", "mode": mode})
            for mode in MODES
        ]

    assert routing.search_alias() == DEFAULT_DB_ALIAS
    assert routing.db() is connections[DEFAULT_DB_ALIAS]
    assert [[h["document_key"] for h in r.json()["hits"]] for r in responses] == [["travel"]] * 3
    assert sum(reads_chunks(sql) for sql in sqls(primary)) >= 3


def test_with_a_replica_the_api_search_reads_it_and_the_key_the_primary(
    kb: KnowledgeBase, api_key: str, mirror_replica: str
) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")

    with (
        CaptureQueriesContext(connections[DEFAULT_DB_ALIAS]) as primary,
        CaptureQueriesContext(connections[mirror_replica]) as replica,
    ):
        responses = [
            search(api(api_key), {"kb": "handbook", "query": "trains reimbursed", "mode": mode})
            for mode in MODES
        ]

    assert routing.search_alias() == mirror_replica
    assert [[h["document_key"] for h in r.json()["hits"]] for r in responses] == [["travel"]] * 3
    # The snapshot, the version re-check and every list of the search: on the replica.
    assert [sql for sql in sqls(primary) if reads_chunks(sql)] == []
    assert sum(reads_chunks(sql) for sql in sqls(replica)) >= 3
    assert any("REPEATABLE READ, READ ONLY" in sql for sql in sqls(replica))
    # Who is asking, and which knowledge base: the primary (a revoked key stops at once).
    assert sum("retrieval_apikey" in sql for sql in sqls(primary)) >= 3
    assert not any("retrieval_apikey" in sql for sql in sqls(replica))
    assert sum("kb_knowledgebase" in sql for sql in sqls(primary)) >= 3
    # The replica is only ever read.
    assert [sql for sql in sqls(replica) if not _read_only(sql)] == []


def _read_only(sql: str) -> bool:
    head = sql.lstrip().split(None, 1)[0].upper()
    return head in ("BEGIN", "COMMIT", "SELECT", "SET", "SAVEPOINT", "RELEASE", "WITH")


def test_as_of_through_the_api_reads_the_replica(
    kb: KnowledgeBase, mirror_replica: str, tenant: Tenant
) -> None:
    publish(kb, "travel", "Trains are reimbursed in second class.")
    _, history_key = api_key_create(tenant=tenant, name="index admin", can_read_history=True)
    past = timezone.now().isoformat()

    with (
        CaptureQueriesContext(connections[DEFAULT_DB_ALIAS]) as primary,
        CaptureQueriesContext(connections[mirror_replica]) as replica,
    ):
        response = search(
            api(history_key), {"kb": "handbook", "query": "trains", "as_of": past, "mode": "vector"}
        )

    assert response.status_code == 200, response.content
    assert [h["document_key"] for h in response.json()["hits"]] == ["travel"]
    assert any("kb_publicationevent" in sql for sql in sqls(replica))
    assert not any("kb_publicationevent" in sql for sql in sqls(primary))
    assert [sql for sql in sqls(replica) if not _read_only(sql)] == []


def test_with_a_replica_uploads_publishes_deletes_and_the_admin_use_the_primary(
    kb: KnowledgeBase, api_key: str, mirror_replica: str, admin_user: User
) -> None:
    client = api(api_key)
    admin = Client()
    admin.force_login(admin_user)

    with CaptureQueriesContext(connections[mirror_replica]) as replica:
        uploaded = client.post(
            "/api/v1/kbs/handbook/documents/",
            {"key": "travel", "file": SimpleUploadedFile("travel.txt", b"Trains go second class.")},
            headers={"Idempotency-Key": "u-1"},
        )
        replayed = client.post(
            "/api/v1/kbs/handbook/documents/",
            {"key": "travel", "file": SimpleUploadedFile("travel.txt", b"Trains go second class.")},
            headers={"Idempotency-Key": "u-1"},
        )
        built = build(Revision.objects.get(document__key="travel"))  # the switch
        test_search = admin.get(
            f"/admin/kb/knowledgebase/{kb.pk}/search/", {"query": "trains", "mode": "keyword"}
        )
        detail = client.get(f"/api/v1/documents/{built.document_id}")
        deleted = client.delete(f"/api/v1/documents/{built.document_id}")

    assert uploaded.status_code == 201, uploaded.content
    assert replayed.headers.get("Idempotent-Replayed") == "true"
    assert built.state == "live"
    # The admin's test search reads the primary: who just published sees it at once.
    assert [row["hit"].document_key for row in test_search.context["sides"][0].rows] == ["travel"]
    assert detail.status_code == 200
    assert deleted.status_code == 204
    assert Document.objects.get(pk=built.document_id).deleted_at is not None
    assert sqls(replica) == []


def test_a_write_inside_a_search_transaction_is_refused(mirror_replica: str) -> None:
    """The search's transaction is READ ONLY, so even a replica that would accept writes (this
    mirror does) refuses one made through the search's connection."""
    from django.db import InternalError, transaction

    from retrieval.search.snapshot import snapshot_in_transaction

    with (
        pytest.raises(InternalError, match="read-only transaction"),
        routing.reading(mirror_replica),
        transaction.atomic(using=mirror_replica),
    ):
        snapshot_in_transaction()
        with routing.db().cursor() as cursor:
            cursor.execute("INSERT INTO kb_tenant (name, slug) VALUES ('x', 'x')")
    assert routing.db() is connections[DEFAULT_DB_ALIAS]


def test_with_the_replica_down_search_fails_and_the_rest_of_the_api_works(
    kb: KnowledgeBase, api_key: str, mirror_replica: str
) -> None:
    """No silent fall-back to the primary (docs/PRODUCTION.md): search answers a JSON 503 with
    Retry-After while the key, the knowledge bases, documents and uploads keep working on the
    primary."""
    publish(kb, "travel", "Trains are reimbursed in second class.")
    connections[mirror_replica].close()
    settings = connections.settings[mirror_replica]
    port = settings["PORT"]
    settings["PORT"] = 1  # nothing listens there
    try:
        client = api(api_key, raise_request_exception=False)
        searched = search(client, {"kb": "handbook", "query": "trains"})
        listed = client.get("/api/v1/kbs/handbook/documents/")
        uploaded = client.post(
            "/api/v1/kbs/handbook/documents/",
            {"key": "visas", "file": SimpleUploadedFile("visas.txt", b"Visas are paid.")},
            headers={"Idempotency-Key": "u-2"},
        )
    finally:
        connections[mirror_replica].close()
        settings["PORT"] = port

    assert searched.status_code == 503
    assert searched.json()["error"] == "search_unavailable"
    assert searched["Retry-After"] == "5"
    assert listed.status_code == 200
    assert uploaded.status_code == 201, uploaded.content


def test_a_knowledge_base_the_replica_lacks_is_not_found(
    kb: KnowledgeBase, mirror_replica: str
) -> None:
    """The lookup (primary) found it; the replica has not replayed it yet: the search's own
    re-read of the active version there says KnowledgeBaseNotFound (the API's 404), never an
    error or a search of rows the replica does not have."""
    principal = Principal(
        tenant_id=kb.tenant_id, kb_ids=None, access_groups=frozenset(), all_groups=True
    )
    newer = KnowledgeBase(
        pk=kb.pk + 1000, tenant_id=kb.tenant_id, slug="newer", name="Newer", retention_days=30
    )
    newer.active_index_version = kb.active_index_version

    with pytest.raises(KnowledgeBaseNotFound):
        search_selector(
            principal=principal, kb=newer, query="trains", mode="keyword", using=mirror_replica
        )
