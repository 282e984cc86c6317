"""A knowledge base's extraction settings through the parse stage (issue 37): its OCR mode and
the server's switches (CANON_OCR=off, CANON_OCR_MAX_PAGES=0), which win over it; its choice of
DOCX page headers and footers; and the parse stage's shared results, never reused across
builds read under other options (two knowledge bases holding the same file, a setting changed
before a re-index)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import docx
import pytest
from django.contrib.auth.models import User
from django.test import Client
from pypdf import PdfReader, PdfWriter

from ingestion.build_text import build_parsed_text
from ingestion.pipeline.run import task_execute
from kb import storage
from kb.models import Build, KnowledgeBase, Revision, Tenant
from kb.services.documents import document_create
from kb.services.index_versions import index_version_create, knowledge_base_create
from tests.helpers import run_pending
from tests.retrieval.factories import api, build, search
from tests.textkit.extract.ocr_fixtures import encoded, page, scanned_pdf
from tests.textkit.extract.pdf_fixtures import make_pdf
from work.models import IngestionTask

# Committed: the task's lease heartbeat (its own connection) must see the task while OCR runs.
pytestmark = pytest.mark.django_db(transaction=True)

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def mixed_pdf() -> bytes:
    """Typed pages 1 and 3; pages 2 and 4 scanned (no text layer)."""
    writer = PdfWriter()
    for data in (
        make_pdf([["The compressor is serviced every spring."]]),
        scanned_pdf([page([["Scanned warranty card for the compressor."]])]),
        make_pdf([["Filters are changed every autumn."]]),
        scanned_pdf([page([["Scanned delivery note."]])]),
    ):
        for pdf_page in PdfReader(io.BytesIO(data)).pages:
            writer.add_page(pdf_page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def upload(kb: KnowledgeBase, key: str, data: bytes, media_type: str, name: str) -> Revision:
    return document_create(
        kb=kb,
        key=key,
        title=key,
        stored=storage.store_bytes(data),
        media_type=media_type,
        original_name=name,
    )


def failed_build(revision: Revision) -> Build:
    task = IngestionTask.objects.get(build__revision=revision)
    IngestionTask.objects.filter(pk=task.pk).update(available_at=None)
    assert task_execute(task_id=task.pk, worker_id="test") == "failed"
    failed = Build.objects.get(revision=revision)
    assert failed.state == Build.State.FAILED
    return failed


def squeezed(text: str) -> str:
    return "".join(text.split())


# --- the server's switches ------------------------------------------------------------------


def test_ocr_max_pages_zero_skips_ocr_the_typed_pages_go_live_and_the_build_says_which(
    kb: KnowledgeBase, api_key: str, admin_user: User, settings: Any
) -> None:
    """It used to fail the whole PDF ("the limit is 0 pages per document")."""
    settings.OCR_MAX_PAGES = 0
    built = build(upload(kb, "compressor", mixed_pdf(), PDF, "compressor.pdf"))

    assert built.state == Build.State.LIVE
    assert built.parse_progress == ""  # no OCR ran
    parsed = build_parsed_text(build=built)
    assert parsed is not None
    assert parsed.text == (
        "The compressor is serviced every spring.\n\nFilters are changed every autumn."
    )
    note = (
        "Pages 2 and 4 have no text layer and were not read: OCR is off on this server "
        "(CANON_OCR_MAX_PAGES=0)."
    )
    assert parsed.notes == (note,)
    hits = search(api(api_key), {"kb": "handbook", "query": "autumn filters", "mode": "keyword"})
    assert [hit["document_key"] for hit in hits.json()["hits"]] == ["compressor"]
    # and the build's page in the admin says what was not read
    client = Client()
    client.force_login(admin_user)
    chunks_page = client.get(f"/admin/kb/chunk/of-build/{built.pk}/").content.decode()
    assert (
        f'<ul class="messagelist" id="parse-notes"><li class="warning">{note}</li>' in chunks_page
    )


def test_the_server_switch_wins_over_the_knowledge_base(kb: KnowledgeBase, settings: Any) -> None:
    settings.OCR_ENABLED = False
    KnowledgeBase.objects.filter(pk=kb.pk).update(ocr_mode=KnowledgeBase.OcrMode.ALWAYS)
    png = encoded(page([["A photo of the notice board."]]), "PNG")
    failed = failed_build(upload(kb, "notice", png, "image/png", "notice.png"))
    assert failed.error.startswith(
        "OCR is off on this server (CANON_OCR=off), and an image's text can only be read by OCR."
    )


# --- the knowledge base's setting -----------------------------------------------------------


def test_an_image_in_a_knowledge_base_with_ocr_off_fails_its_build_readably(
    kb: KnowledgeBase,
) -> None:
    KnowledgeBase.objects.filter(pk=kb.pk).update(ocr_mode=KnowledgeBase.OcrMode.OFF)
    png = encoded(page([["A photo of the notice board."]]), "PNG")
    failed = failed_build(upload(kb, "notice", png, "image/png", "notice.png"))
    assert failed.error == (
        "OCR is off for this knowledge base, and an image's text can only be read by OCR. Turn "
        "OCR on, or upload the document with a text layer (a PDF or a word-processing file)."
    )


def test_a_parse_is_not_shared_with_a_knowledge_base_that_reads_the_file_otherwise(
    kb: KnowledgeBase, tenant: Tenant
) -> None:
    """The parse stage's result is shared by every build of the same bytes: a knowledge base
    with OCR off must not take the OCR'd text of another, nor the other way round."""
    ocr_off = knowledge_base_create(
        tenant=tenant, name="Archive", slug="archive", ocr_mode=KnowledgeBase.OcrMode.OFF
    )
    data = mixed_pdf()
    read = build(upload(kb, "compressor", data, PDF, "compressor.pdf"))
    skipped = build(upload(ocr_off, "compressor", data, PDF, "compressor.pdf"))
    read_again = build(upload(kb, "compressor-copy", data, PDF, "copy.pdf"))

    read_text = build_parsed_text(build=read)
    skipped_text = build_parsed_text(build=skipped)
    assert read_text is not None and skipped_text is not None
    assert "Scannedwarrantycard" in squeezed(read_text.text) and not read_text.notes
    assert "Scanned" not in skipped_text.text
    assert skipped_text.notes == (
        "Pages 2 and 4 have no text layer and were not read: OCR is off for this knowledge base.",
    )
    # the same options still share the parse: the copy in the first knowledge base reused it
    # (and its build's page shows the text it was cut from all the same)
    assert read_again.text_path == read.text_path != skipped.text_path
    assert build_parsed_text(build=read_again) == read_text


def test_a_setting_changed_before_a_reindex_is_read_by_the_new_version(
    kb: KnowledgeBase,
) -> None:
    KnowledgeBase.objects.filter(pk=kb.pk).update(ocr_mode=KnowledgeBase.OcrMode.OFF)
    kb.refresh_from_db()
    first = build(upload(kb, "compressor", mixed_pdf(), PDF, "compressor.pdf"))
    first_text = build_parsed_text(build=first)
    assert first_text is not None and "Scanned" not in first_text.text

    KnowledgeBase.objects.filter(pk=kb.pk).update(ocr_mode=KnowledgeBase.OcrMode.PAGES_WITHOUT_TEXT)
    active = kb.active_index_version
    assert active is not None
    version = index_version_create(
        kb_id=kb.pk,
        provider=active.provider,
        model="canon-hash-reindexed",
        dimensions=active.dimensions,
        chunk_size=active.chunk_size,
        chunk_overlap=active.chunk_overlap,
    )
    IngestionTask.objects.filter(status="queued").update(available_at=None)
    assert set(run_pending()) <= {"published", "ready"}
    second = Build.objects.get(index_version=version, document__key="compressor")
    second_text = build_parsed_text(build=second)
    assert second_text is not None
    assert "Scannedwarrantycard" in squeezed(second_text.text) and not second_text.notes


def docx_with_header(path: Path) -> bytes:
    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = "Example Corp: internal"
    document.add_paragraph("The pump station keeps two spare impellers.")
    document.save(str(path))
    return path.read_bytes()


def test_page_headers_and_footers_are_indexed_where_the_knowledge_base_says(
    kb: KnowledgeBase, tenant: Tenant, tmp_path: Path
) -> None:
    with_headers = knowledge_base_create(
        tenant=tenant, name="Records", slug="records", extract_headers_footers=True
    )
    data = docx_with_header(tmp_path / "pumps.docx")
    plain = build_parsed_text(build=build(upload(kb, "pumps", data, DOCX, "pumps.docx")))
    headed = build_parsed_text(build=build(upload(with_headers, "pumps", data, DOCX, "pumps.docx")))
    assert plain is not None and headed is not None
    assert "Example Corp" not in plain.text
    assert "Example Corp: internal" in headed.text
    assert "two spare impellers" in plain.text and "two spare impellers" in headed.text


def test_the_api_shows_the_knowledge_bases_extraction_settings(
    kb: KnowledgeBase, api_key: str
) -> None:
    KnowledgeBase.objects.filter(pk=kb.pk).update(
        ocr_mode=KnowledgeBase.OcrMode.ALWAYS, extract_headers_footers=True
    )
    body = api(api_key).get("/api/v1/kbs/").json()
    [handbook] = [item for item in body["results"] if item["slug"] == "handbook"]
    assert (handbook["ocr_mode"], handbook["extract_headers_footers"]) == ("always", True)
