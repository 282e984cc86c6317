"""From an admin upload to a search hit, through the outbox, the relay, a real Celery worker
process, Redis and PostgreSQL/pgvector."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kb.models import Build, Document, KnowledgeBase, Publication
from tests.conftest import wait_for
from work.models import IngestionTask

pytestmark = pytest.mark.integration

REVISION_1 = "\n\n".join(
    [
        "Vacation policy. Every employee receives twenty days of paid vacation per year.",
        "Requests go to the team lead at least two weeks in advance.",
        "休假政策，每位员工每年享有二十天带薪休假。",
    ]
)
REVISION_2 = "\n\n".join(
    [
        "Vacation policy. Every employee receives twenty-five days of paid vacation per year.",
        "Requests go to the people team at least one week in advance.",
        "休假政策，每位员工每年享有二十五天带薪休假。",
    ]
)


def live_build(document: Document) -> Build | None:
    document.refresh_from_db()
    kb = KnowledgeBase.objects.get(pk=document.kb_id)
    publication = Publication.objects.filter(
        document=document, index_version_id=kb.active_index_version_id
    ).first()
    return (
        Build.objects.select_related("revision").get(pk=publication.build_id)
        if publication
        else None
    )


def search(client: Client, api_key: str, query: str, **extra: Any) -> dict[str, Any]:
    response = client.post(
        "/api/v1/search",
        {"kb": "handbook", "query": query, **extra},
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert response.status_code == 200, response.content
    return response.json()


def form_errors(response: Any) -> str:
    context = response.context or {}
    form = context["adminform"].form if "adminform" in context else None
    return f"{response.status_code}: {form.errors if form else response.content[:500]!r}"


def upload_document(client: Client, kb: KnowledgeBase, name: str, content: bytes) -> Document:
    response = client.post(
        "/admin/kb/document/add/",
        {
            "kb": kb.pk,
            "key": "vacation",
            "title": "Vacation policy",
            "access_groups": "",
            "file": SimpleUploadedFile(name, content),
            "revisions-TOTAL_FORMS": "0",
            "revisions-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, form_errors(response)
    return Document.objects.get(kb=kb, key="vacation")


def upload_revision(client: Client, document: Document, name: str, content: bytes) -> None:
    response = client.post(
        f"/admin/kb/document/{document.pk}/change/",
        {
            "title": document.title,
            "access_groups": "",
            "new_revision": SimpleUploadedFile(name, content),
            "revisions-TOTAL_FORMS": "0",
            "revisions-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, form_errors(response)


def test_upload_goes_live_and_a_new_revision_replaces_it(
    worker_factory: Any, kb: KnowledgeBase, admin_user: Any, api_key: str
) -> None:
    worker_factory()
    client = Client()
    client.force_login(admin_user)

    # given revision 1 uploaded through the admin and built by the worker
    document = upload_document(client, kb, "vacation.md", REVISION_1.encode())
    first = wait_for(lambda: live_build(document), what="revision 1 live")
    assert first.revision.number == 1
    hits = search(client, api_key, "paid vacation days", mode="vector")["hits"]
    assert hits and all(h["revision"] == 1 for h in hits)
    assert any("twenty days" in h["text"] for h in hits)

    # when revision 2 is uploaded
    upload_revision(client, document, "vacation-v2.md", REVISION_2.encode())
    second = wait_for(
        lambda: (b := live_build(document)) and b.revision.number == 2 and b,
        what="revision 2 live",
    )

    # then search serves revision 2 only, from its live build
    for mode in ("vector", "keyword", "hybrid"):
        result = search(client, api_key, "vacation days 休假", mode=mode)
        assert result["index_version"] == 1
        assert result["hits"], mode
        assert {h["revision"] for h in result["hits"]} == {2}, mode
        assert {h["build_id"] for h in result["hits"]} == {second.pk}, mode
        assert {h["document_key"] for h in result["hits"]} == {"vacation"}
        assert not any("twenty days" in h["text"] for h in result["hits"])
    chinese = search(client, api_key, "带薪休假", mode="keyword")["hits"]
    assert chinese and "二十五天" in chinese[0]["text"]

    first.refresh_from_db()
    assert first.state == Build.State.SUPERSEDED
    assert second.state == Build.State.LIVE
    assert second.chunks.count() == second.expected_chunk_count > 0
    assert set(IngestionTask.objects.values_list("status", flat=True)) == {"succeeded"}

    # and the admin shows both revisions, their builds and which one is served
    page = client.get(f"/admin/kb/document/{document.pk}/change/").content.decode()
    assert "live r2" in page
    assert 'v1: <b class="role canon-role-served">served now</b>' in page
    assert 'v1: <b class="role canon-role-superseded">superseded</b>' in page


def test_unparseable_revision_fails_readably_and_revision_1_keeps_serving(
    worker_factory: Any, kb: KnowledgeBase, admin_user: Any, api_key: str
) -> None:
    worker_factory()
    client = Client()
    client.force_login(admin_user)
    document = upload_document(client, kb, "vacation.txt", REVISION_1.encode())
    first = wait_for(lambda: live_build(document), what="revision 1 live")

    # a PDF that passes the upload check (magic bytes) but cannot be parsed
    upload_revision(client, document, "broken.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog")
    failed = wait_for(
        lambda: Build.objects.filter(
            document=document, revision__number=2, state=Build.State.FAILED
        ).first(),
        what="revision 2 build failed",
    )

    assert "PDF" in failed.error
    assert failed.chunks.count() == 0
    task = IngestionTask.objects.get(build=failed)
    assert task.status == IngestionTask.Status.FAILED
    assert task.last_error_code == "unparseable"
    current = live_build(document)
    assert current is not None and current.pk == first.pk
    hits = search(client, api_key, "paid vacation", mode="hybrid")["hits"]
    assert hits and {h["build_id"] for h in hits} == {first.pk}
    page = client.get(f"/admin/kb/document/{document.pk}/change/").content.decode()
    assert "live r1" in page and "r2 failed" in page


def test_admin_rejects_bad_files_up_front_and_creates_nothing(
    db: None, kb: KnowledgeBase, admin_user: Any
) -> None:
    client = Client()
    client.force_login(admin_user)
    cases = {
        "empty.txt": (b"", "is empty"),
        "garbage.pdf": (b"\x00\x01\x02 definitely not a pdf", "PDF"),
        "program.exe": (b"MZ\x90\x00", "exe"),
    }
    for name, (content, message) in cases.items():
        response = client.post(
            "/admin/kb/document/add/",
            {
                "kb": kb.pk,
                "key": name,
                "title": name,
                "access_groups": "",
                "file": SimpleUploadedFile(name, content),
                "revisions-TOTAL_FORMS": "0",
                "revisions-INITIAL_FORMS": "0",
            },
        )
        assert response.status_code == 200, name
        errors = " ".join(str(e) for e in response.context["adminform"].form.errors.values())
        assert message.lower() in errors.lower(), (name, errors)
    assert Document.objects.count() == 0
    assert IngestionTask.objects.count() == 0
