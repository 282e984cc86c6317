"""The parse and chunk stages with structured extraction: the stored form carries headings, the
extracted title reaches the revision (and the document when the uploader gave none), and chunks
carry heading paths whose embedding input is what the cache is keyed by."""

from __future__ import annotations

import hashlib

import pytest

from ingestion.models import EmbeddingCache, StageResult
from ingestion.pipeline.embed import cache_model
from ingestion.pipeline.run import task_execute
from kb import storage
from kb.models import Build, Chunk, Document, KnowledgeBase, Revision
from kb.services.documents import document_create, revision_create
from textkit import extract as extractors
from textkit.chunker import embedding_input
from work.models import IngestionTask

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = """<html><head><title>Leases — Canon 1.0 documentation</title></head><body>
<div class="related" role="navigation"><a href="prev.html">previous</a> |
<a href="next.html">next</a></div>
<div class="body" role="main">
<h1>Leases<a class="headerlink" href="#">¶</a></h1>
<p>A worker holds a lease on the task it runs, renewed by a heartbeat on its own thread.</p>
<h2>Fencing</h2>
<p>Every write that matters checks the lease in the same transaction, so a worker that lost
its lease changes nothing. The check is a conditional update of the task row.</p>
<pre>with fenced(lease):
    write()</pre>
<h2>See Also</h2><p>Heartbeat</p>
</div>
<div class="footer">© Canon authors.</div></body></html>"""


def upload_html(kb: KnowledgeBase, *, key: str, title: str, html: str = PAGE) -> Revision:
    return document_create(
        kb=kb,
        key=key,
        title=title,
        stored=storage.store_bytes(html.encode()),
        media_type=extractors.TEXT_HTML,
        original_name=f"{key}.html",
    )


def build_task(revision: Revision) -> IngestionTask:
    return IngestionTask.objects.get(build__revision=revision)


def test_a_built_html_page_has_its_title_and_heading_paths(kb: KnowledgeBase) -> None:
    revision = upload_html(kb, key="leases.html", title="")
    assert task_execute(task_id=build_task(revision).pk, worker_id="w") == "published"

    revision.refresh_from_db()
    assert revision.extracted_title == "Leases"
    assert Document.objects.get(pk=revision.document_id).title == "Leases"
    build = Build.objects.get(revision=revision)
    chunks = list(Chunk.objects.filter(build=build).order_by("ordinal"))
    assert [chunk.heading_path for chunk in chunks] == ["Leases", "Leases › Fencing"]
    assert chunks[1].text.startswith("Every write that matters")
    assert chunks[1].text.endswith("with fenced(lease):\n    write()\n\nSee Also\n\nHeartbeat")
    for chunk in chunks:
        assert "previous" not in chunk.text and "©" not in chunk.text
        embedded = embedding_input(chunk.heading_path, chunk.text)
        assert chunk.content_hash == hashlib.sha256(embedded.encode()).hexdigest()
        assert EmbeddingCache.objects.filter(
            model=cache_model(build.index_version), content_hash=chunk.content_hash
        ).exists()

    # The parse stage stored the structured form, headings included.
    parsed = StageResult.objects.get(task__build=build, stage=StageResult.Stage.PARSE).output
    stored = extractors.Extracted.from_json(storage.read_text(parsed["text_path"]))
    assert stored.title == "Leases"
    assert [b.text for b in stored.blocks if b.kind == extractors.HEADING] == [
        "Leases",
        "Fencing",
        "See Also",
    ]


def test_a_title_given_by_the_uploader_is_kept(kb: KnowledgeBase) -> None:
    revision = upload_html(kb, key="leases.html", title="Lease handbook")
    task_execute(task_id=build_task(revision).pk, worker_id="w")
    revision.refresh_from_db()
    assert revision.extracted_title == "Leases"
    assert Document.objects.get(pk=revision.document_id).title == "Lease handbook"


def test_the_document_title_is_set_once_and_later_revisions_keep_their_own(
    kb: KnowledgeBase,
) -> None:
    first = upload_html(kb, key="leases.html", title="")
    task_execute(task_id=build_task(first).pk, worker_id="w")
    document = Document.objects.get(pk=first.document_id)
    second = revision_create(
        document=document,
        stored=storage.store_bytes(PAGE.replace("Leases", "Leases, revised").encode()),
        media_type=extractors.TEXT_HTML,
        original_name="leases.html",
    )
    task_execute(task_id=build_task(second).pk, worker_id="w")
    second.refresh_from_db()
    assert second.extracted_title == "Leases, revised"
    # The title is no longer the key, so it now counts as given and is not replaced.
    assert Document.objects.get(pk=document.pk).title == "Leases"


def test_an_unparseable_file_fails_the_build_with_a_readable_message(kb: KnowledgeBase) -> None:
    revision = document_create(
        kb=kb,
        key="broken.pdf",
        title="",
        stored=storage.store_bytes(b"%PDF-1.4\n" + b"\x00garbage" * 100),
        media_type=extractors.APPLICATION_PDF,
        original_name="broken.pdf",
    )
    assert task_execute(task_id=build_task(revision).pk, worker_id="w") == "failed"
    build = Build.objects.get(revision=revision)
    assert build.state == Build.State.FAILED
    assert "damaged or truncated" in build.error


def test_a_chapter_page_of_title_and_contents_goes_live(kb: KnowledgeBase) -> None:
    """Issue 27: such pages failed with "The document produced no text to index"."""
    from tests.textkit.extract.test_html_contents_pages import CHAPTER

    revision = upload_html(kb, key="ch07", title="", html=CHAPTER)
    assert task_execute(task_id=build_task(revision).pk, worker_id="w") == "published"
    texts = " ".join(Chunk.objects.filter(build__revision=revision).values_list("text", flat=True))
    assert "Restoring a single mailbox" in texts
