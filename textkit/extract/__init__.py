"""Turning uploaded files into titled, structured text: one module per format.

Every format module offers what `registry` describes (`MEDIA_TYPES`, `EXTENSIONS`, `LABEL`,
`extract(path, *, max_chars) -> Extracted`); `extract` here picks the module, then applies
what holds for every format: text normalised
(`textkit.text.normalize_text`, code keeping its indentation), table-of-contents lines and
the spaces between CJK characters removed from prose, empty blocks dropped, the length limit,
and a one-line title of at most 500 characters.

Every problem with the file itself raises `ParseError` whose message is a sentence a content
manager can act on, a declared reason (`textkit.reasons`: a code, its values and its English
words, which the admin words in the reader's language); such errors are terminal (retrying
cannot help). Reading the file can still
raise `OSError`, which is not the document's fault.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from textkit.extract import cleanup
from textkit.extract.base import (
    APPLICATION_DOCX,
    APPLICATION_PDF,
    BLOCK_KINDS,
    CODE,
    DEFAULT_MAX_CHARS,
    FILE_EMPTY,
    HEADING,
    MAX_TITLE_CHARS,
    NO_TEXT,
    PAGE,
    PARAGRAPH,
    ROW,
    SLIDE,
    TABLE,
    TEXT_HTML,
    TEXT_MARKDOWN,
    TEXT_PLAIN,
    UNSUPPORTED_TYPE,
    Block,
    Extracted,
    Location,
    ParseError,
    UnsupportedMediaType,
    too_long,
)
from textkit.extract.detect import SNIFF_BYTES, detect_media_type
from textkit.extract.registry import (
    EXTRACTORS,
    SUPPORTED_MEDIA_TYPES,
    accepted_extensions,
    accepted_kinds,
    format_label,
)
from textkit.text import normalize_text

__all__ = [
    "APPLICATION_DOCX",
    "APPLICATION_PDF",
    "BLOCK_KINDS",
    "CODE",
    "DEFAULT_MAX_CHARS",
    "EXTRACTORS",
    "HEADING",
    "PAGE",
    "PARAGRAPH",
    "ROW",
    "SLIDE",
    "SNIFF_BYTES",
    "SUPPORTED_MEDIA_TYPES",
    "TABLE",
    "TEXT_HTML",
    "TEXT_MARKDOWN",
    "TEXT_PLAIN",
    "Block",
    "Extracted",
    "Location",
    "ParseError",
    "UnsupportedMediaType",
    "accepted_extensions",
    "accepted_kinds",
    "detect_media_type",
    "extract",
    "format_label",
]


def extract(path: Path, media_type: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> Extracted:
    """Return the title and blocks of the file at `path`.

    Raises ParseError when the file is empty, unreadable as `media_type`, has no text, or yields
    more than `max_chars` characters; UnsupportedMediaType for an unsupported `media_type`.
    """
    extractor = EXTRACTORS.get(media_type)
    if extractor is None:
        raise UnsupportedMediaType(UNSUPPORTED_TYPE(media_type=media_type))
    if path.stat().st_size == 0:
        raise ParseError(FILE_EMPTY())
    raw = extractor(path, max_chars=max_chars)
    blocks: list[Block] = []
    length = -2
    for block in raw.blocks:
        text = _finish_block(block)
        if not text:
            continue
        blocks.append(Block(block.kind, text, level=block.level, location=block.location))
        length += len(text) + 2
        if length > max_chars:
            raise too_long(max_chars)
    if not blocks:
        raise ParseError(NO_TEXT())
    if all(block.kind == HEADING for block in blocks):
        # A page of nothing but headings (a part's title page) says what it says in them:
        # as headings they would only label chunks that do not exist.
        blocks = [Block(PARAGRAPH, block.text, location=block.location) for block in blocks]
    return Extracted(title=_finish_title(raw.title), blocks=blocks, notes=raw.notes)


def _finish_block(block: Block) -> str:
    if block.kind == CODE:
        # Indentation is meaning in code: normalize_text strips the first line's, so it is put
        # back; only the blank lines around the code go.
        first = next((line for line in block.text.split("\n") if line.strip()), "")
        text = normalize_text(block.text)
        return first[: len(first) - len(first.lstrip(" \t"))] + text if text else ""
    if block.kind == HEADING:
        return " ".join(cleanup.join_unspaced(normalize_text(block.text)).split())
    rows = block.kind == TABLE
    return normalize_text(cleanup.clean_prose(normalize_text(block.text), lines_are_rows=rows))


def _finish_title(title: str) -> str:
    title = " ".join(unicodedata.normalize("NFC", title).split())
    return cleanup.join_unspaced(title)[:MAX_TITLE_CHARS]
