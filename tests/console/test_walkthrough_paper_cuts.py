"""The rest of the admin walkthrough's list (issue 37, item 9), page by page: one numbering of
chunks, an empty Metadata box, a build error said once per build, words people use ("Knowledge
base", a list titled by what it lists, who did what when no person did), a deleted document's
failure off the dashboard, a retired version's button named for the way back to it, no
"Sources › Sources", formats by name rather than media type, and the new-version form's facts.
(The OCR label of a text PDF: tests/textkit/extract/test_pdf_ocr.py; what fits 1,400 pixels:
tests/e2e/test_walkthrough_browser.py.)"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from console.admin.scoping import TenantScopedAdmin
from console.dashboard import dashboard
from console.templatetags.canon_words import AUTOMATIC, NO_PERSON, UNRECORDED
from kb import storage
from kb.models import Build, Chunk, Document, IndexVersion, KnowledgeBase
from kb.roles import INDEX_ADMINS, ensure_roles
from kb.services.documents import document_create, document_delete
from kb.services.index_versions import index_version_activate, index_version_create
from tests.console.admin_world import staff
from tests.helpers import run_pending, upload_text
from tests.kb.test_swap_with_known_failures import upload_broken
from tests.retrieval.factories import build, publish
from work.models import IngestionTask

pytestmark = pytest.mark.django_db

BROKEN = "The PDF is damaged or truncated and cannot be read."


@pytest.fixture
def root(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def ian(kb: KnowledgeBase) -> Client:
    ensure_roles(Group, Permission)
    client = Client()
    client.force_login(staff("ian", INDEX_ADMINS, kb.tenant))
    return client


def text_of(page: str) -> str:
    """What a person reads: the page without its tags (attributes, such as a title, dropped)."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def run_queued() -> None:
    """Every queued task, as a worker would: inside the test's transaction the database clock
    stands still before their `available_at`, so they are made available first."""
    IngestionTask.objects.filter(status=IngestionTask.Status.QUEUED).update(available_at=None)
    run_pending()


def new_version(kb: KnowledgeBase) -> IndexVersion:
    return index_version_create(
        kb_id=kb.pk,
        provider="hash",
        model="canon-hash-small",
        dimensions=128,
        chunk_size=400,
        chunk_overlap=50,
    )


def test_a_chunks_page_counts_it_one_way(root: Client, kb: KnowledgeBase) -> None:
    built = publish(kb, "travel", "Train tickets are reimbursed. " * 200)
    chunk = Chunk.objects.filter(build=built).order_by("-ordinal").first()
    assert chunk is not None and chunk.ordinal > 0

    page = text_of(root.get(f"/admin/kb/chunk/{chunk.pk}/change/").content.decode())

    number = chunk.ordinal + 1  # every page counts chunks from 1
    assert f"chunk {number} of build {built.pk}" in page
    assert f"Chunk: {number}" in page
    assert f"chunk {chunk.ordinal} of build" not in page


def test_the_add_forms_metadata_box_starts_empty(root: Client, kb: KnowledgeBase) -> None:
    page = root.get("/admin/kb/document/add/").content.decode()

    box = re.search(r'<textarea name="metadata"[^>]*>(.*?)</textarea>', page, re.DOTALL)
    assert box is not None and box.group(1).strip() == ""
    assert "null" not in box.group(1)
    # and an empty box still adds a document without metadata
    assert "REVISIONS" not in page.upper().split("<FORM", 1)[1]  # no empty Revisions table


def test_a_build_error_is_said_once_per_build(root: Client, kb: KnowledgeBase) -> None:
    upload_broken(kb, "scan")
    run_queued()
    document = Document.objects.get(kb=kb, key="scan")

    page = root.get(f"/admin/kb/document/{document.pk}/change/").content.decode()
    progress = root.get(f"/admin/kb/document/{document.pk}/progress/").json()

    # the status line, and the build's own row in Builds; not in its role, nor under Revisions
    assert page.count(BROKEN) == 2
    assert re.search(r'<td class="error">\s*' + re.escape(BROKEN), page)
    assert f"r1 failed: {BROKEN}" in text_of(page)
    assert [b["role"] for b in progress["builds"]] == ["failed"]
    assert [b["error"] for b in progress["builds"]] == [BROKEN]


def test_lists_are_titled_by_what_they_list(root: Client, kb: KnowledgeBase) -> None:
    upload_text(kb, "travel", "Train tickets.")
    for model, model_admin in admin.site._registry.items():
        if not isinstance(model_admin, TenantScopedAdmin):
            continue
        opts = model._meta
        response = root.get(f"/admin/{opts.app_label}/{opts.model_name}/")
        assert response.status_code == 200, opts.label
        page = response.content.decode()
        assert "to change</" not in page and "to view</" not in page, opts.label
        title = str(opts.verbose_name_plural)
        assert f"<h1>{title[:1].upper()}{title[1:]}</h1>" in page, opts.label
    # a popup, where one row is picked, keeps Django's words
    popup = root.get("/admin/kb/document/?_popup=1&_to_field=id").content.decode()
    assert "Select document" in popup


def test_every_form_names_the_knowledge_base_in_words(root: Client, kb: KnowledgeBase) -> None:
    pages = [
        "/admin/kb/document/add/",
        "/admin/kb/document/upload/",
        "/admin/sources/source/add/",
        f"/admin/kb/knowledgebase/{kb.pk}/search/",
    ]
    for url in pages:
        page = text_of(root.get(url).content.decode())
        assert "Kb:" not in page and "Kb " not in page, url
    assert "Knowledge base:" in text_of(root.get("/admin/kb/document/upload/").content.decode())


def test_who_did_it_is_said_in_words_people_use(root: Client, kb: KnowledgeBase) -> None:
    publish(kb, "travel", "Train tickets are reimbursed.")  # uploaded by no one, published
    document = Document.objects.get(kb=kb, key="travel")
    document_delete(document_id=document.pk, actor=None, reason="through the API")

    timeline = text_of(root.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/").content.decode())
    history = text_of(root.get(f"/admin/kb/document/{document.pk}/change/").content.decode())

    for page in (timeline, history):
        assert "API or system" not in page and " pipeline " not in page
        assert AUTOMATIC in page  # the publish
        assert NO_PERSON in page  # the deletion through the API
    assert "uploaded" in timeline and timeline.count(NO_PERSON) >= 2  # the upload too


def test_what_no_person_did_outside_the_api_and_syncs_says_no_person_is_recorded(
    root: Client, kb: KnowledgeBase
) -> None:
    new_version(kb)  # as a script would: people create versions in the admin

    timeline = text_of(root.get(f"/admin/kb/knowledgebase/{kb.pk}/timeline/").content.decode())

    assert "new index version" in timeline
    assert f"new index version v2 {UNRECORDED}" in timeline
    assert NO_PERSON not in timeline


def test_a_deleted_documents_failure_leaves_the_dashboard(kb: KnowledgeBase) -> None:
    upload_broken(kb, "scan")
    upload_broken(kb, "gone")
    run_queued()
    document_delete(
        document_id=Document.objects.get(kb=kb, key="gone").pk, actor=None, reason="old"
    )

    board = dashboard(tenant_ids=[kb.tenant_id])

    scan = Document.objects.get(kb=kb, key="scan")
    assert [t.document_id for t in board.dead] == [scan.pk]
    assert board.tasks_by_status.get("failed") == 1
    assert board.tasks_failed_deleted == 1


def test_the_dashboard_page_counts_a_deleted_documents_failure_as_history(
    root: Client, kb: KnowledgeBase
) -> None:
    upload_broken(kb, "gone")
    run_queued()
    document_delete(
        document_id=Document.objects.get(kb=kb, key="gone").pk, actor=None, reason="old"
    )

    page = root.get("/admin/ingestion/ingestiontask/dashboard/").content.decode()

    assert "failed for a document since deleted (history)" in page
    assert ">gone<" not in page and "gone</td>" not in page


def test_a_retired_version_offers_the_way_back_named_for_what_it_does(
    ian: Client, kb: KnowledgeBase
) -> None:
    upload_text(kb, "travel", "Train tickets are reimbursed in second class. " * 20)
    run_queued()
    v1 = kb.active_index_version
    assert v1 is not None
    v2 = new_version(kb)
    run_queued()
    index_version_activate(version_id=v2.pk, actor=None, expected_active_id=v1.pk)

    # after the swap: v1 is where the rollback goes, and its row says so
    row = version_row(kb_page(ian, kb), 1)
    assert "Roll back to v1…" in row and "Compare…" not in row
    assert f'href="/admin/kb/knowledgebase/{kb.pk}/index-versions/rollback/"' in row

    # after the rollback: v2 is a swap forward again, and its row says so
    index_version_activate(
        version_id=v1.pk, actor=None, expected_active_id=v2.pk, action="rollback"
    )
    row = version_row(kb_page(ian, kb), 2)
    assert "Swap v2 in again…" in row and "Approve swap" not in row
    assert f'href="/admin/kb/knowledgebase/{kb.pk}/index-versions/{v2.pk}/activate/"' in row


def kb_page(client: Client, kb: KnowledgeBase) -> str:
    return client.get(f"/admin/kb/knowledgebase/{kb.pk}/change/").content.decode()


def version_row(page: str, number: int) -> str:
    match = re.search(rf'<tr id="version-{number}".*?</tr>', page, re.DOTALL)
    assert match is not None, f"no row for v{number}"
    return match.group(0)


def test_no_breadcrumb_says_sources_twice(
    root: Client, kb: KnowledgeBase, tmp_path: Any, settings: Any
) -> None:
    from sources.services.sources import source_save

    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    source = source_save(
        kb=kb, name="Share", slug="share", kind="folder", config={"path": str(tmp_path)}
    )
    for url in (
        "/admin/sources/source/",
        f"/admin/sources/source/{source.pk}/change/",
        f"/admin/sources/source/{source.pk}/history/",
        f"/admin/sources/source/{source.pk}/sync/",
        "/admin/sources/syncrun/",
    ):
        crumbs = re.search(
            r'<div class="breadcrumbs">(.*?)</div>', root.get(url).content.decode(), re.DOTALL
        )
        assert crumbs is not None, url
        words = text_of(crumbs.group(1))
        assert "Sources › Sources" not in words, (url, words)
        assert "Syncing ›" in words, (url, words)


def test_a_folders_path_gets_a_wide_input(
    root: Client, kb: KnowledgeBase, tmp_path: Any, settings: Any
) -> None:
    page = root.get("/admin/sources/source/add/").content.decode()

    path_input = re.search(r'<input[^>]*name="config__folder__path"[^>]*>', page)
    assert path_input is not None and "vLargeTextField" in path_input.group(0)


def test_formats_are_named_as_the_upload_pages_name_them(root: Client, kb: KnowledgeBase) -> None:
    build(
        document_create(
            kb=kb,
            key="allowances",
            title="Allowances",
            stored=storage.store_bytes(b"city,allowance\nLyon,90\n"),
            media_type="text/csv",
            original_name="allowances.csv",
        )
    )
    document = Document.objects.get(kb=kb, key="allowances")
    built = Build.objects.get(document=document)

    pages = {
        "document": root.get(f"/admin/kb/document/{document.pk}/change/").content.decode(),
        "chunks": root.get(f"/admin/kb/chunk/of-build/{built.pk}/").content.decode(),
        "home": root.get(f"/admin/kb/knowledgebase/{kb.pk}/home/").content.decode(),
    }

    for name, page in pages.items():
        words = text_of(page)
        assert "CSV (.csv)" in words, name
        assert "text/csv" not in words, name  # only in a title, on hover
    assert "kind of file" in text_of(pages["document"]).lower()


def test_the_new_version_form_says_the_facts_not_where_they_are(
    ian: Client, kb: KnowledgeBase
) -> None:
    page = text_of(ian.get(f"/admin/kb/knowledgebase/{kb.pk}/index-versions/new/").content.decode())

    assert "BENCHMARKS" not in page and "docs/" not in page
    assert "half the memory" in page and "recall 0.94" in page
