"""OpenDocument presentation (.odp), read as a PowerPoint deck is (`pptx`): every slide a
heading "Slide N: <title>", its frames top to bottom, then left to right (tables with a line per
row), then its notes under "Notes"; every block located at its slide. A slide without text gives
no block, and a deck without any is refused with the reason. The title is meta.xml's, else the
first slide's title. The archive is checked first (zip bombs, encryption, DTDs)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from textkit.extract import odfxml
from textkit.extract.base import (
    HEADING,
    PARAGRAPH,
    SLIDE,
    TABLE,
    Block,
    Extracted,
    Location,
    ParseError,
)
from textkit.extract.odfxml import q
from textkit.extract.pptx import NO_TEXT
from textkit.words import gettext_noop

MEDIA_TYPES = ("application/vnd.oasis.opendocument.presentation",)
EXTENSIONS = {".odp": MEDIA_TYPES[0]}
LABEL = gettext_noop("OpenDocument presentation (.odp)")


def check_head(head: bytes, media_type: str) -> None:
    odfxml.check_head(head, LABEL)


def extract(path: Path, *, max_chars: int) -> Extracted:
    title, blocks = odfxml.read(path, kind="presentation", label=LABEL, blocks=_blocks)
    if not any(block.text.strip() for block in blocks):
        raise ParseError(NO_TEXT())
    if not title:
        first = next((block.text for block in blocks if block.kind == HEADING), "")
        title = re.sub(r"^Slide \d+(?:: )?", "", first)
    return Extracted(title=title, blocks=blocks)


def _blocks(events: odfxml.Events) -> Iterator[Block]:
    """Slide by slide, each let go once read."""
    number = 0
    for event, element in events:
        if event == "end" and element.tag == q("draw:page"):
            number += 1
            yield from _slide_blocks(number, element)
            odfxml.let_go(element)


def _slide_blocks(number: int, page: Any) -> Iterator[Block]:
    """The slide's heading and blocks; none when it has no text."""
    here = Location(SLIDE, number, number)
    frames = [child for child in page.iterchildren() if child.tag != q("presentation:notes")]
    title_frame = next(
        (frame for frame in frames if frame.get(q("presentation:class")) == "title"), None
    )
    title = "" if title_frame is None else " ".join(_paragraphs(title_frame).split())
    blocks = [
        block
        for frame in sorted(frames, key=_position)
        if frame is not title_frame
        for block in _frame_blocks(frame, here)
        if block.text.strip()
    ]
    notes = [
        text
        for element in page.iterchildren(q("presentation:notes"))
        for frame in element.iterchildren(q("draw:frame"))
        if frame.get(q("presentation:class")) == "notes"
        for text in [_paragraphs(frame)]
        if text.strip()
    ]
    if notes:
        blocks.append(Block(HEADING, "Notes", 2, here))
        blocks.append(Block(PARAGRAPH, "\n".join(notes), location=here))
    if title or blocks:
        yield Block(HEADING, f"Slide {number}: {title}" if title else f"Slide {number}", 1, here)
        yield from blocks


def _frame_blocks(frame: Any, here: Location) -> Iterator[Block]:
    if frame.tag == q("draw:g"):
        for member in sorted(frame.iterchildren(), key=_position):
            yield from _frame_blocks(member, here)
        return
    for table in frame.iterchildren(q("table:table")):
        yield Block(TABLE, odfxml.table_text(table), location=here)
    text = _paragraphs(frame)
    if text.strip():
        yield Block(PARAGRAPH, text, location=here)


def _paragraphs(frame: Any) -> str:
    """The frame's paragraphs and list items outside its tables, a line each."""
    lines = [
        odfxml.inline_text(paragraph)
        for paragraph in frame.iter(q("text:p"), q("text:h"))
        if not any(parent.tag == q("table:table") for parent in paragraph.iterancestors())
    ]
    return "\n".join(line for line in lines if line.strip())


_LENGTH_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*(cm|mm|in|pt|pc|px)?")
_PER_CM = {"cm": 1.0, "mm": 0.1, "in": 2.54, "pt": 2.54 / 72, "pc": 2.54 / 6, "px": 2.54 / 96}


def _position(frame: Any) -> tuple[float, float]:
    """(top, left) in centimetres; a frame without a position counts as at the top left."""
    return _length(frame.get(q("svg:y"))), _length(frame.get(q("svg:x")))


def _length(value: str | None) -> float:
    match = _LENGTH_RE.match(value or "")
    return float(match.group(1)) * _PER_CM[match.group(2) or "cm"] if match else 0.0
