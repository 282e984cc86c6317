"""Footnotes and endnotes, as every word-processing format writes them into its text: the
reference leaves a mark where it stands ("[1]", "[i]"), and the note follows the paragraph (or
table) that refers to it as a paragraph starting with that mark, where a chunk reads it with
what it explains. Notes are the document's own text and always read (issue 37)."""

from __future__ import annotations

from collections.abc import Iterable

from textkit.extract.base import PARAGRAPH, Block

FOOTNOTE, ENDNOTE = "footnote", "endnote"

_ROMAN: tuple[tuple[int, str], ...] = (
    *((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"), (50, "l")),
    *((40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")),
)


def mark(kind: str, number: int) -> str:
    """The note's mark as Word numbers notes by default: 1, 2, 3 for footnotes; i, ii, iii for
    endnotes."""
    if kind == FOOTNOTE:
        return str(number)
    written = ""
    for value, letters in _ROMAN:
        count, number = divmod(number, value)
        written += letters * count
    return written


def note_block(note_mark: str, paragraphs: Iterable[str]) -> Block | None:
    """The note as one paragraph: "[mark] " and its paragraphs a line each; None when it has no
    text."""
    text = "\n".join(line for line in (paragraph.strip() for paragraph in paragraphs) if line)
    if not text:
        return None
    return Block(PARAGRAPH, f"[{note_mark}] {text}" if note_mark else text)
