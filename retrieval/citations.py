"""Citations pinned to a document revision: every hit names the span of its revision's extracted
text it stands on (`citation_of`), and `revision_text` returns such a span while the revision is
retained — so a citation made today still opens the text it cited after the document changes.

Where the text comes from: the extracted text a build of the revision was chunked from
(`Build.text_path`, set by the pipeline after the parse stage; `retrieval.extracted` reads it).
The build in the knowledge base's active index version is preferred — a hit's offsets count
into its own build's text, and the hits a key gets today come from that version — else any other
build of the revision still retained (newest first). The text is the same for a revision in
every index version as long as extraction is deterministic for the same bytes (the parse stage
is shared across versions by its input: a re-index reuses the text rather than parsing again);
only a change of the extractors between two parses could make them differ, and then the active
version's text is the one today's citations count in.

A revision is retained while some build of it is not collected: retention gives up a
superseded build's chunks once the knowledge base's retention window has passed, and a purge
gives up every build of the document (`kb.services.retention`, `document_purge`). The derived
file itself is never deleted by either, but the revision's text is only served while Canon
keeps the revision, so what a citation opens follows the same window as rollback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Case, F, IntegerField, Value, When

from kb import storage
from kb.models import Build, Document, Revision
from retrieval.documents import document_for
from retrieval.extracted import TextUnreadable, extracted_text
from retrieval.principals import Principal
from retrieval.search.hits import Hit

# The longest span one request returns (characters); a longer read is done in pages.
TEXT_MAX_SPAN = 50_000


def citation_url(*, document_id: int, revision: int, start: int, end: int) -> str:
    return f"/api/v1/documents/{document_id}/revisions/{revision}/text?start={start}&end={end}"


def citation_of(hit: Hit) -> dict[str, Any] | None:
    """The hit's citation: its document, revision and span of the revision's extracted text,
    and the URL that returns that span; None for a chunk written before positions were kept."""
    return citation(
        document_id=hit.document_id, revision=hit.revision, start=hit.char_start, end=hit.char_end
    )


def citation(
    *, document_id: int | None, revision: int, start: int | None, end: int | None
) -> dict[str, Any] | None:
    """A chunk's citation, as a search hit carries it (`citation_of`) and MCP's `fetch`
    answers it; None without positions."""
    if document_id is None or start is None or end is None:
        return None
    return {
        "document_id": document_id,
        "revision": revision,
        "start": start,
        "end": end,
        "url": citation_url(document_id=document_id, revision=revision, start=start, end=end),
    }


class RevisionNotFound(Exception):
    """No such revision of a readable document, or no extracted text for it (not parsed)."""


class TextGone(Exception):
    """The revision's text is no longer served: `code` purged, deleted, not_retained or
    text_missing, and a sentence saying so."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TextUnavailable(Exception):
    """The file store cannot be reached now: try again later."""


class BadSpan(Exception):
    """`start` or `end` (`parameter`) does not fit the text."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.message = message


@dataclass(frozen=True)
class RevisionText:
    document: Document
    revision: int
    start: int
    end: int
    length: int  # the whole extracted text's, in characters
    text: str
    live: bool  # whether search serves this revision now


def revision_text(
    *,
    principal: Principal,
    document_id: int,
    revision: int,
    start: int | None = None,
    end: int | None = None,
) -> RevisionText:
    """`text[start:end]` of revision `revision`'s extracted text (see the module docstring for
    which text). `start` defaults to 0, `end` to TEXT_MAX_SPAN characters on, or the end.

    The access rule is search's: the document must be in the principal's tenant and knowledge
    bases, behind groups it may read (`retrieval.documents.document_for`), else OutOfScope, the
    same as a document that does not exist; a revision it does not have is RevisionNotFound.
    A deleted or purged document, or a revision no longer retained, is TextGone; BadSpan when
    `start`/`end` do not fit the text (or the span is longer than TEXT_MAX_SPAN);
    TextUnavailable when the store cannot be reached. Reads the primary: a document, its
    revision, its builds (three statements), then the stored text."""
    document = document_for(principal=principal, document_id=document_id)
    found = Revision.objects.filter(document_id=document.pk, number=revision).first()
    if found is None:
        raise RevisionNotFound(revision)
    if document.purged_at is not None:
        raise TextGone("purged", f"Document {document.pk} was purged; its text is gone.")
    if document.deleted_at is not None:
        raise TextGone("deleted", f"Document {document.pk} is deleted; its text is not served.")
    builds = list(
        Build.objects.filter(revision_id=found.pk)
        .annotate(
            active=Case(
                When(index_version_id=F("kb__active_index_version_id"), then=Value(0)),
                default=Value(1),
                output_field=IntegerField(),
            )
        )
        .order_by("active", "-id")
        .values_list("text_path", "collected_at")
    )
    retained = [path for path, collected_at in builds if collected_at is None and path]
    if not retained:
        if any(collected_at is not None for _, collected_at in builds):
            raise TextGone(
                "not_retained",
                f"Revision {revision} of document {document.pk} is no longer retained (its "
                "knowledge base's retention window has passed).",
            )
        raise RevisionNotFound(revision)
    text = _first_readable(retained, document_id=document.pk, revision=revision)
    start, end = _span(start, end, len(text))
    live = getattr(document, "live_revision", None) == revision and document.deleted_at is None
    return RevisionText(
        document=document,
        revision=revision,
        start=start,
        end=end,
        length=len(text),
        text=text[start:end],
        live=live,
    )


def _first_readable(paths: list[str], *, document_id: int, revision: int) -> str:
    unreachable = False
    for path in dict.fromkeys(paths):
        try:
            return extracted_text(path)
        except TextUnreadable:
            continue
        except storage.StorageUnavailable:
            unreachable = True
    if unreachable:
        raise TextUnavailable(f"The file store cannot be reached; revision {revision} text.")
    raise TextGone(
        "text_missing",
        f"The extracted text of revision {revision} of document {document_id} is missing from "
        "storage; rebuilding the revision restores it.",
    )


def _span(start: int | None, end: int | None, length: int) -> tuple[int, int]:
    start = 0 if start is None else start
    if start > length:
        raise BadSpan("start", f"Past the end of the text ({length} characters).")
    if end is None:
        return start, min(length, start + TEXT_MAX_SPAN)
    if end < start:
        raise BadSpan("end", "Must not be less than start.")
    if end > length:
        raise BadSpan("end", f"Past the end of the text ({length} characters).")
    if end - start > TEXT_MAX_SPAN:
        raise BadSpan("end", f"A span is at most {TEXT_MAX_SPAN} characters; read it in pages.")
    return start, end
