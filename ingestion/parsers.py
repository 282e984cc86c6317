"""Turning uploaded files into normalised plain text: the facade over `ingestion.extractors`.

`detect_media_type` decides what a file is from its name and first bytes; `parse_file` returns
its text (the blocks of `ingestion.extractors.extract` separated by blank lines). New code that
wants the title and headings calls `ingestion.extractors.extract` directly.
"""

from __future__ import annotations

from pathlib import Path

from ingestion.extractors import (
    APPLICATION_DOCX,
    APPLICATION_PDF,
    DEFAULT_MAX_CHARS,
    SNIFF_BYTES,
    SUPPORTED_MEDIA_TYPES,
    TEXT_HTML,
    TEXT_MARKDOWN,
    TEXT_PLAIN,
    ParseError,
    UnsupportedMediaType,
    detect_media_type,
    extract,
)

__all__ = [
    "APPLICATION_DOCX",
    "APPLICATION_PDF",
    "DEFAULT_MAX_CHARS",
    "SNIFF_BYTES",
    "SUPPORTED_MEDIA_TYPES",
    "TEXT_HTML",
    "TEXT_MARKDOWN",
    "TEXT_PLAIN",
    "ParseError",
    "UnsupportedMediaType",
    "detect_media_type",
    "parse_file",
]


def parse_file(path: Path, media_type: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Return the normalised text of the file at `path`; raises as `extractors.extract`."""
    return extract(path, media_type, max_chars=max_chars).text()
