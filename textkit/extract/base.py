"""What every extractor returns, and the errors it raises.

An extractor turns one file into an `Extracted`: the document's title and its blocks in reading
order. A block is a heading (with its level), a paragraph, a code block or a table; the chunker
uses the headings to give every chunk the path of headings above it. `Extracted.to_json` is the
parse stage's stored output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TEXT_PLAIN = "text/plain"
TEXT_MARKDOWN = "text/markdown"
TEXT_HTML = "text/html"
APPLICATION_PDF = "application/pdf"
APPLICATION_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
SUPPORTED_MEDIA_TYPES = frozenset(
    {TEXT_PLAIN, TEXT_MARKDOWN, TEXT_HTML, APPLICATION_PDF, APPLICATION_DOCX}
)

DEFAULT_MAX_CHARS = 20_000_000
# Revision.extracted_title is a CharField(500).
MAX_TITLE_CHARS = 500

HEADING = "heading"
PARAGRAPH = "paragraph"
CODE = "code"
TABLE = "table"
BLOCK_KINDS = frozenset({HEADING, PARAGRAPH, CODE, TABLE})

# The stored form's name and version; `Extracted.from_json` refuses any other.
FORMAT = "canon.extracted/1"


class ParseError(Exception):
    """The file cannot be turned into text; the message says why, for a content manager."""


class UnsupportedMediaType(ParseError):
    """The file is not of a supported type, or its content does not match its name."""


def too_long(max_chars: int) -> ParseError:
    return ParseError(f"The document is longer than the limit of {max_chars:,} characters.")


@dataclass(frozen=True)
class Block:
    """One block of a document. `level` is 1..6 for a heading and 0 for anything else; the
    text of a code block keeps its indentation and line breaks exactly."""

    kind: str
    text: str
    level: int = 0

    def __post_init__(self) -> None:
        if self.kind not in BLOCK_KINDS:
            raise ValueError(f"unknown block kind {self.kind!r}")
        if (self.kind == HEADING) != (1 <= self.level <= 6):
            raise ValueError("a heading has a level from 1 to 6, and nothing else has one")


@dataclass(frozen=True)
class Extracted:
    """A document's title ("" when none was found) and its blocks in reading order."""

    title: str
    blocks: list[Block] = field(default_factory=list)

    def text(self) -> str:
        """The plain text: the blocks (headings included) separated by blank lines."""
        return "\n\n".join(block.text for block in self.blocks)

    def to_json(self) -> bytes:
        """The stored form: {"format", "title", "blocks": [{"kind", "text"[, "level"]}]}."""
        blocks: list[dict[str, Any]] = []
        for block in self.blocks:
            item: dict[str, Any] = {"kind": block.kind, "text": block.text}
            if block.level:
                item["level"] = block.level
            blocks.append(item)
        document = {"format": FORMAT, "title": self.title, "blocks": blocks}
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Extracted:
        document = json.loads(data)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError(f"not a stored extraction of format {FORMAT}")
        return cls(
            title=document["title"],
            blocks=[
                Block(kind=item["kind"], text=item["text"], level=item.get("level", 0))
                for item in document["blocks"]
            ],
        )
