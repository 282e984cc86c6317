"""Reads of chunks for citations, scoped by a principal: a chunk (or a document's live chunks)
the principal may read, or the same OutOfScope as one that does not exist.

A chunk is readable when its document is (tenant, the key's knowledge bases, access groups:
`retrieval.documents.document_for`) and not deleted, and its build was published at some time
and is still retained: a citation taken from a search hit keeps opening the text it cited after
the document changes, until retention collects that build. A build that never went live
(pending, failed, awaiting approval) is never read here."""

from __future__ import annotations

from dataclasses import dataclass

from kb.models import Chunk, Document, PublicationEvent
from retrieval.documents import document_for
from retrieval.principals import OutOfScope, Principal

# The actions whose event names a build that was made live.
_MADE_LIVE = (
    PublicationEvent.Action.PUBLISH,
    PublicationEvent.Action.APPROVE,
    PublicationEvent.Action.ROLLBACK,
    PublicationEvent.Action.RESTORE,
)
_HEAVY = ("embedding", "lexical")


@dataclass(frozen=True)
class ReadableChunk:
    chunk: Chunk
    document: Document  # with `live_revision` and `live_build_id` (None when nothing is live)

    @property
    def live(self) -> bool:
        """Is this chunk's build the one search serves for its document now?"""
        return getattr(self.document, "live_build_id", None) == self.chunk.build_id


def chunk_for(*, principal: Principal, chunk_id: int) -> ReadableChunk:
    """The chunk with its document, if the principal may read it (module docstring); raises
    OutOfScope otherwise, the same for 'does not exist' and 'may not read'."""
    chunk = (
        Chunk.objects.defer(*_HEAVY).select_related("build__revision").filter(pk=chunk_id).first()
    )
    if chunk is None:
        raise OutOfScope(chunk_id)
    document = document_for(principal=principal, document_id=chunk.document_id)
    if document.deleted_at is not None or chunk.build.collected_at is not None:
        raise OutOfScope(chunk_id)
    published = PublicationEvent.objects.filter(
        build_id=chunk.build_id, action__in=_MADE_LIVE
    ).exists()
    if not published:
        raise OutOfScope(chunk_id)
    return ReadableChunk(chunk=chunk, document=document)


@dataclass(frozen=True)
class DocumentChunks:
    document: Document  # with `live_revision` and `live_build_id`
    chunks: list[Chunk]  # of the live build, in ordinal order
    next_ordinal: int | None  # where the next page starts, None at the end


def live_chunks(
    *, principal: Principal, document_id: int, first_ordinal: int, limit: int
) -> DocumentChunks:
    """A readable, not deleted document and up to `limit` chunks of the build search serves for
    it now, from ordinal `first_ordinal` (none when nothing is live). Raises OutOfScope."""
    document = document_for(principal=principal, document_id=document_id)
    if document.deleted_at is not None:
        raise OutOfScope(document_id)
    build_id = getattr(document, "live_build_id", None)
    if build_id is None:
        return DocumentChunks(document=document, chunks=[], next_ordinal=None)
    rows = list(
        Chunk.objects.defer(*_HEAVY)
        .select_related("build__revision")
        .filter(build_id=build_id, ordinal__gte=first_ordinal)
        .order_by("ordinal")[: limit + 1]
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return DocumentChunks(
        document=document, chunks=rows, next_ordinal=rows[-1].ordinal + 1 if more else None
    )
