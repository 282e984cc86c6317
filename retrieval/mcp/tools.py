"""The MCP server's tools as plain synchronous functions of a principal and the tool's
arguments, each a thin adapter over what the REST API calls: `search` builds the body a REST
search would send and hands it to the search request core (`search_request`), whose failures
`refusal` words;
`list_knowledge_bases` is KnowledgeBaseListView's read; `fetch` reads a chunk or a document's
live chunks through `retrieval.chunks`. A refusal is a ToolRefused whose message the caller
reads; anything the principal may not read is refused exactly like what does not exist."""

from __future__ import annotations

import json
from typing import Any

from rest_framework.utils.serializer_helpers import ReturnDict

from kb.models import Chunk, Document
from retrieval.api.search_request import Kind, SearchFailure, SearchRefused, search_request
from retrieval.api.serializers import KnowledgeBaseListOutput, SearchInput, search_body
from retrieval.chunks import chunk_for, live_chunks
from retrieval.citations import citation
from retrieval.documents import knowledge_bases
from retrieval.principals import OutOfScope, Principal

# The search tool's arguments are the REST search body's fields, under the same names. These
# fields of the body it does not offer (tests/mcp holds the two lists to SearchInput's fields):
# `as_of` is the index admins' audit tool, `explain` a ranking diagnosis, neither for an agent;
# a call naming them is refused, saying so (`server.StrictTools`).
SEARCH_FIELDS_NOT_OFFERED = frozenset({"as_of", "explain"})
FETCH_MAX_CHUNKS = 100
MAX_ID = 2**63 - 1


class ToolRefused(Exception):
    """A tool call refused, with the message for the caller (the model reads it)."""


def _errors_text(errors: Any) -> str:
    """SearchInput's errors as one line per field: `field: message`."""
    if isinstance(errors, dict):
        lines = []
        for name, problems in errors.items():
            if isinstance(problems, list) and all(isinstance(p, str) for p in problems):
                text = " ".join(problems)
            else:
                text = json.dumps(problems, ensure_ascii=False)
            lines.append(f"{name}: {text}" if name != "non_field_errors" else text)
        return "; ".join(lines)
    return str(errors)


def refusal(failure: SearchFailure) -> ToolRefused:
    """A refused search (or tool call: RATE_LIMITED) in the tool's words: the REST API's
    messages, an invalid body's problems one per field, and when to try again."""
    if failure.kind is Kind.INVALID:
        return ToolRefused(f"Invalid arguments: {_errors_text(failure.errors)}")
    if failure.kind in (Kind.SEARCH_UNAVAILABLE, Kind.PROVIDER_UNAVAILABLE):
        return ToolRefused(f"{failure.message.removesuffix('.')} in {failure.retry_after} s.")
    return ToolRefused(failure.message)


def search_tool(principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
    """The REST search's answer (`search_body`) for these arguments: the body they make (the
    arguments that are None left out, as a REST client leaves a field out)."""
    body = {name: value for name, value in arguments.items() if value is not None}
    unsupported = sorted(name for name in body if name not in SearchInput().fields)
    if unsupported:
        raise ToolRefused(f"Not supported by this server yet: {', '.join(unsupported)}.")
    try:
        result = search_request(principal=principal, body=body)
    except SearchRefused as exc:
        raise refusal(exc.failure) from exc
    return search_body(result)


def list_knowledge_bases_tool(principal: Principal) -> dict[str, Any]:
    """What the REST API's GET /kbs/ answers: the knowledge bases this principal may search."""
    data = KnowledgeBaseListOutput({"results": knowledge_bases(principal=principal)}).data
    return _plain(data)


def _plain(data: ReturnDict[str, Any] | dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(json.dumps(data)))


def _chunk_body(chunk: Chunk, document: Document, *, live: bool) -> dict[str, Any]:
    """A chunk and its citation: where its text stands in which revision of which document,
    and the `citation` object a search hit of it carries."""
    revision = chunk.build.revision.number
    return {
        "chunk_id": chunk.pk,
        "text": chunk.text,
        "ordinal": chunk.ordinal,
        "kb": document.kb.slug,
        "document_id": document.pk,
        "document_key": document.key,
        "document_title": document.title,
        "revision": revision,
        "build_id": chunk.build_id,
        "heading_path": chunk.heading_path,
        "location": chunk.location,
        "char_start": chunk.char_start,
        "char_end": chunk.char_end,
        "citation": citation(
            document_id=document.pk, revision=revision, start=chunk.char_start, end=chunk.char_end
        ),
        "live": live,
    }


def _id(name: str, value: int) -> int:
    if not 1 <= value <= MAX_ID:
        raise ToolRefused(f"{name}: Ensure this value is a positive id.")
    return value


def fetch_tool(
    principal: Principal,
    *,
    chunk_id: int | None,
    document_id: int | None,
    first_ordinal: int,
    max_chunks: int,
) -> dict[str, Any]:
    """A chunk with its citation, or a document with its live revision and a page of the chunks
    search serves for it. Refused the same way whether it does not exist or may not be read."""
    if (chunk_id is None) == (document_id is None):
        raise ToolRefused("Give exactly one of chunk_id and document_id.")
    if chunk_id is not None:
        _id("chunk_id", chunk_id)
        try:
            readable = chunk_for(principal=principal, chunk_id=chunk_id)
        except OutOfScope as exc:
            raise ToolRefused(f"Chunk {chunk_id} not found.") from exc
        document = readable.document
        return {
            "chunk": _chunk_body(readable.chunk, document, live=readable.live),
            "live_revision": getattr(document, "live_revision", None),
        }
    assert document_id is not None
    _id("document_id", document_id)
    if not 0 <= first_ordinal <= MAX_ID:
        raise ToolRefused("first_ordinal: Ensure this value is greater than or equal to 0.")
    if not 1 <= max_chunks <= FETCH_MAX_CHUNKS:
        raise ToolRefused(f"max_chunks: Ensure this value is between 1 and {FETCH_MAX_CHUNKS}.")
    try:
        page = live_chunks(
            principal=principal,
            document_id=document_id,
            first_ordinal=first_ordinal,
            limit=max_chunks,
        )
    except OutOfScope as exc:
        raise ToolRefused(f"Document {document_id} not found.") from exc
    document = page.document
    return {
        "document": {
            "document_id": document.pk,
            "kb": document.kb.slug,
            "key": document.key,
            "title": document.title,
            "metadata": document.metadata,
            "live_revision": getattr(document, "live_revision", None),
            "live_build_id": getattr(document, "live_build_id", None),
        },
        "chunks": [_chunk_body(chunk, document, live=True) for chunk in page.chunks],
        "next_ordinal": page.next_ordinal,
    }
