"""Plain text: paragraphs separated by blank lines; the title is a short first line."""

from __future__ import annotations

import re
from pathlib import Path

from textkit.extract.base import PARAGRAPH, Block, Extracted
from textkit.extract.encoding import decode, refuse_binary
from textkit.words import gettext_noop

MEDIA_TYPES = ("text/plain",)
EXTENSIONS = {".txt": "text/plain", ".text": "text/plain"}
LABEL = gettext_noop("plain text")


def check_head(head: bytes, media_type: str) -> None:
    refuse_binary(head, gettext_noop("plain text"))


# A first line longer than this is prose, not a title.
MAX_TITLE_LINE = 120

_PARAGRAPH_BREAK_RE = re.compile(r"\n[ \t\r\f\v]*\n")


def extract(path: Path, *, max_chars: int) -> Extracted:
    text = decode(path.read_bytes())
    return Extracted(title=first_line_title(text), blocks=paragraph_blocks(text))


def paragraph_blocks(text: str) -> list[Block]:
    return [Block(PARAGRAPH, part) for part in _PARAGRAPH_BREAK_RE.split(text) if part.strip()]


def first_line_title(text: str) -> str:
    """The first non-blank line, when it is short and more text follows it."""
    stripped = text.lstrip()
    line, newline, rest = stripped[: MAX_TITLE_LINE * 4].partition("\n")
    line = line.strip()
    if not newline or not rest.strip() or len(line) > MAX_TITLE_LINE:
        return ""
    return line
