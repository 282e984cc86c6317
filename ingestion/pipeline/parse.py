"""The parse stage: the revision's stored file -> the extracted blocks (`textkit.extract`), kept
as a derived file, and the title the file gave."""

from __future__ import annotations

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Now

from ingestion.pipeline.stages import JsonDict, TerminalError
from kb import storage
from kb.models import Document, Revision
from textkit import extract as extractors
from work import faults
from work.leases import Lease, fenced


def parse(revision: Revision) -> JsonDict:
    """Extract the file into derived storage as `Extracted.to_json` (title, headings, blocks).
    A source file that is missing or not the uploaded bytes fails the build, terminally (a
    retry cannot help until someone restores the file), with a reason a person can act on."""
    problem = storage.file_problem(
        revision.storage_path, size=revision.size, sha256=revision.sha256
    )
    if problem:
        raise TerminalError(
            "stored_file_missing",
            f"stored file {problem}: {revision.sha256}; restore storage from backup",
        )
    storage_path, media_type = revision.storage_path, revision.media_type
    faults.poison(storage.absolute_path(storage_path).read_bytes()[:1_000_000])
    try:
        extracted = extractors.extract(
            storage.absolute_path(storage_path), media_type, max_chars=settings.PARSE_MAX_CHARS
        )
    except extractors.ParseError as exc:
        raise TerminalError("unparseable", str(exc)) from exc
    stored = storage.store_bytes(extracted.to_json(), kind="derived")
    return {
        "text_path": stored.path,
        "text_sha256": stored.sha256,
        "chars": sum(len(block.text) for block in extracted.blocks),
        "title": extracted.title,
    }


def record_title(*, revision: Revision, title: str, lease: Lease) -> None:
    """Write the revision's extracted title, and make it the document's title when the uploader
    gave none (the title is then the key). Fenced; idempotent: both are conditional UPDATEs
    that change nothing the second time, and a title the uploader gave is never replaced."""
    with fenced(lease):
        Revision.objects.filter(pk=revision.pk).exclude(extracted_title=title).update(
            extracted_title=title
        )
        if title:
            Document.objects.filter(pk=revision.document_id, title=F("key")).exclude(
                title=title
            ).update(title=title, updated_at=Now())
