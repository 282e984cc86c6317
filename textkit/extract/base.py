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

from textkit.reasons import ReasonedError, reason
from textkit.words import gettext_noop

TEXT_PLAIN = "text/plain"
TEXT_MARKDOWN = "text/markdown"
TEXT_HTML = "text/html"
APPLICATION_PDF = "application/pdf"
APPLICATION_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

# First bytes of binary formats: a file named as text that starts with one is refused.
PDF_MAGIC = b"%PDF-"
ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
MAGIC_NUMBERS = (PDF_MAGIC, ZIP_MAGIC, OLE_MAGIC)

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


class ParseError(ReasonedError):
    """The file cannot be turned into text; the message says why, for a content manager: a
    declared reason (`textkit.reasons`), so the admin words it in the person's language."""


class UnsupportedMediaType(ParseError):
    """The file is not of a supported type, or its content does not match its name."""


# What every format may give; each format declares its own beside its code.
UNSUPPORTED_TYPE = reason(
    "file.unsupported_type", gettext_noop('Documents of type "%(media_type)s" are not supported.')
)
FILE_EMPTY = reason("file.empty", gettext_noop("The file is empty."))
NO_TEXT = reason("file.no_text", gettext_noop("The document contains no text."))
TOO_LONG = reason(
    "file.too_long",
    gettext_noop("The document is longer than the limit of %(limit)s characters."),
)


def too_long(max_chars: int) -> ParseError:
    return ParseError(TOO_LONG(limit=max_chars))


# What a Location counts: PDF and scanned pages, slides, spreadsheet or CSV rows.
PAGE = "page"
SLIDE = "slide"
ROW = "row"
LOCATION_UNITS = frozenset({PAGE, SLIDE, ROW})


@dataclass(frozen=True)
class Location:
    """Where a block stands in its file, for a citation a person can check: `unit` numbers
    `first` to `last` (1-based, inclusive, as the file's own viewer counts), inside `part` when
    the file has named parts (a sheet; "" otherwise). Pages 3 to 4 are Location(PAGE, 3, 4)."""

    unit: str
    first: int
    last: int
    part: str = ""

    def __post_init__(self) -> None:
        if self.unit not in LOCATION_UNITS:
            raise ValueError(f"unknown location unit {self.unit!r}")
        if not 1 <= self.first <= self.last:
            raise ValueError("a location counts from 1 and its last is not before its first")

    def to_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"unit": self.unit, "first": self.first, "last": self.last}
        if self.part:
            item["part"] = self.part
        return item

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Location:
        return cls(item["unit"], item["first"], item["last"], item.get("part", ""))

    def label(self) -> str:
        """For people, with an en dash: "page 3", "pages 3-4", "slide 2", "sheet Q3, rows 2-41"."""
        plural = {PAGE: "pages", SLIDE: "slides", ROW: "rows"}[self.unit]
        span = (
            f"{self.unit} {self.first}"
            if self.first == self.last
            else f"{plural} {self.first}\u2013{self.last}"
        )
        return f"{self.part}, {span}" if self.part else span


def merged_location(locations: list[Location | None]) -> Location | None:
    """The location covering all of `locations` that share the first one's unit and part (a
    chunk's, from its blocks'); None when none has one."""
    known = [location for location in locations if location is not None]
    if not known:
        return None
    same = [loc for loc in known if (loc.unit, loc.part) == (known[0].unit, known[0].part)]
    first, last = min(loc.first for loc in same), max(loc.last for loc in same)
    return Location(known[0].unit, first, last, known[0].part)


@dataclass(frozen=True)
class Block:
    """One block of a document. `level` is 1..6 for a heading and 0 for anything else; the
    text of a code block keeps its indentation and line breaks exactly. `location` says where
    it stands in the file when the format has pages, slides or rows (None otherwise)."""

    kind: str
    text: str
    level: int = 0
    location: Location | None = None

    def __post_init__(self) -> None:
        if self.kind not in BLOCK_KINDS:
            raise ValueError(f"unknown block kind {self.kind!r}")
        if (self.kind == HEADING) != (1 <= self.level <= 6):
            raise ValueError("a heading has a level from 1 to 6, and nothing else has one")


@dataclass(frozen=True)
class Extracted:
    """A document's title ("" when none was found) and its blocks in reading order. `notes`
    say, for a person, what of the file was not read and why ("Pages 2 and 5 have no text
    layer and were not read: OCR is off for this knowledge base."); they are never indexed."""

    title: str
    blocks: list[Block] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The plain text: the blocks (headings included) separated by blank lines."""
        return "\n\n".join(block.text for block in self.blocks)

    def to_json(self) -> bytes:
        """The stored form: {"format", "title", "blocks": [{"kind", "text"[, "level"][,
        "location"]}][, "notes": [...]]}."""
        blocks: list[dict[str, Any]] = []
        for block in self.blocks:
            item: dict[str, Any] = {"kind": block.kind, "text": block.text}
            if block.level:
                item["level"] = block.level
            if block.location is not None:
                item["location"] = block.location.to_json()
            blocks.append(item)
        document: dict[str, Any] = {"format": FORMAT, "title": self.title, "blocks": blocks}
        if self.notes:
            document["notes"] = self.notes
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Extracted:
        document = json.loads(data)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError(f"not a stored extraction of format {FORMAT}")
        return cls(
            title=document["title"],
            blocks=[
                Block(
                    kind=item["kind"],
                    text=item["text"],
                    level=item.get("level", 0),
                    location=Location.from_json(item["location"]) if "location" in item else None,
                )
                for item in document["blocks"]
            ],
            notes=[str(note) for note in document.get("notes", [])],
        )
