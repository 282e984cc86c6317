"""The chunk stage: the parsed blocks -> chunks of the index version's size and overlap
(`textkit.chunker`), each with its stable key."""

from __future__ import annotations

from ingestion.pipeline.stages import JsonDict, fingerprint
from kb import storage
from kb.completeness import manifest_of
from kb.models import IndexVersion
from textkit import chunker
from textkit import extract as extractors


def stored_blocks(text_path: str) -> list[extractors.Block]:
    """The blocks the parse stage stored; a plain-text file (what parse stored before it kept
    headings) is one paragraph block."""
    content = storage.read_text(text_path)
    try:
        return extractors.Extracted.from_json(content).blocks
    except ValueError:
        return [extractors.Block(extractors.PARAGRAPH, content)]


def chunk(text_path: str, version: IndexVersion) -> JsonDict:
    pieces = chunker.chunk_blocks(
        stored_blocks(text_path), size=version.chunk_size, overlap=version.chunk_overlap
    )
    return {
        "chunks": [
            {
                "ordinal": p.ordinal,
                "text": p.text,
                "heading_path": p.heading_path,
                "content_hash": p.content_hash,
                "token_count": p.token_count,
                "char_start": p.char_start,
                "char_end": p.char_end,
                "location": p.location.to_json() if p.location else None,
            }
            for p in pieces
        ],
        "manifest": manifest_of([p.content_hash for p in pieces]),
    }


def chunk_key(
    *, document_id: int, index_version_id: int, revision: int, ordinal: int, content_hash: str
) -> str:
    """Stable across retries of the same build, unique across builds."""
    return fingerprint(document_id, index_version_id, revision, ordinal, content_hash)
