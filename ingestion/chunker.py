"""Sentence-aware chunking that keeps chunks far from an edit byte-identical.

The rule, in three layers:

1. Paragraphs (separated by a blank line) are gathered into groups, and every group is chunked
   on its own, so a chunk never crosses a group boundary and no overlap is carried across one.
   A group ends after any paragraph of at least a quarter of `size` characters, and before any
   paragraph whose content hash picks it as an anchor (one in four, decided by the paragraph's
   own text). Short paragraphs (headings, list items) therefore join what follows them, yet
   every boundary depends only on the two paragraphs beside it: an edit re-chunks only the
   group or two around it.
2. Within a group, whole sentences are packed greedily into chunks of at most `size`
   characters; the next chunk starts with the trailing sentences of the previous one that total
   at most `overlap` characters.
3. A sentence longer than `size` is cut into pieces of at most `size` characters (at a space in
   the last quarter when there is one), each starting `overlap` characters before the previous
   cut.

A chunk's text is the exact slice of the input from its first sentence to its last, so the
whitespace between sentences (including paragraph breaks inside a group) is kept.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ingestion.text import token_count

MIN_CHUNK_SIZE = 50

# A paragraph at least this fraction of the chunk size ends its group.
_GROUP_END_FRACTION = 4
# One paragraph in this many (by content hash) starts a new group, which bounds the reach of an
# edit inside a long run of short paragraphs.
_ANCHOR_PERIOD = 4

_PARAGRAPH_BREAK_RE = re.compile(r"\n\s*\n")
# Sentence ends: . ! ? before whitespace; the ideographic full stop, full-width ! ? ; and the
# ellipsis, with or without a space; any line break. Closing quotes and brackets stay with their
# sentence. The leading lookahead lets the engine skip to candidate characters quickly;
# possessive runs behind negative lookbehinds keep long runs of punctuation linear.
_CJK_ENDS = "\u3002\uff01\uff1f\uff1b\u2026"
_SENTENCE_END_RE = re.compile(
    f"(?=[.!?{_CJK_ENDS}\n])"
    "(?:(?<![.!?])[.!?]++[\"'\u201d\u2019)\\]]*+(?=\\s)"
    f"|(?<![{_CJK_ENDS}])[{_CJK_ENDS}]++[\u201d\u2019\u300d\u300f\uff09)\\]]*+"
    "|\n)"
)

Span = tuple[int, int]


@dataclass(frozen=True)
class ChunkPiece:
    """One chunk: its position, its exact text, sha256 hex of the UTF-8 text, its tokens."""

    ordinal: int
    text: str
    content_hash: str
    token_count: int


def chunk_text(text: str, *, size: int, overlap: int) -> list[ChunkPiece]:
    """Split `text` into chunks of at most `size` characters (see the module docstring).

    Requires size >= 50 and 0 <= overlap < size / 2, else ValueError. Whitespace-only text gives
    []. The result depends only on the arguments.
    """
    if size < MIN_CHUNK_SIZE:
        raise ValueError(f"chunk size must be at least {MIN_CHUNK_SIZE} characters, got {size}")
    if overlap < 0 or overlap * 2 >= size:
        raise ValueError(
            f"chunk overlap must be at least 0 and less than half the size {size}, got {overlap}"
        )
    pieces: list[ChunkPiece] = []
    for group in _paragraph_groups(text, size):
        units: list[Span] = []
        for paragraph in group:
            for sentence in _sentences(text, paragraph):
                if sentence[1] - sentence[0] > size:
                    units.extend(_split_long_sentence(text, sentence, size, overlap))
                else:
                    units.append(sentence)
        for start, end in _pack(units, size, overlap):
            chunk = text[start:end]
            pieces.append(
                ChunkPiece(
                    ordinal=len(pieces),
                    text=chunk,
                    content_hash=hashlib.sha256(chunk.encode()).hexdigest(),
                    token_count=token_count(chunk),
                )
            )
    return pieces


def _strip_span(text: str, start: int, end: int) -> Span | None:
    """The span without its surrounding whitespace, or None when nothing else is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _paragraphs(text: str) -> list[Span]:
    spans: list[Span] = []
    start = 0
    for match in _PARAGRAPH_BREAK_RE.finditer(text):
        if span := _strip_span(text, start, match.start()):
            spans.append(span)
        start = match.end()
    if span := _strip_span(text, start, len(text)):
        spans.append(span)
    return spans


def _is_anchor(paragraph: str) -> bool:
    digest = hashlib.blake2b(paragraph.encode(), digest_size=8).digest()
    return digest[0] % _ANCHOR_PERIOD == 0


def _paragraph_groups(text: str, size: int) -> list[list[Span]]:
    groups: list[list[Span]] = []
    previous_length = 0
    for start, end in _paragraphs(text):
        starts_group = (
            not groups
            or previous_length * _GROUP_END_FRACTION >= size
            or _is_anchor(text[start:end])
        )
        if starts_group:
            groups.append([])
        groups[-1].append((start, end))
        previous_length = end - start
    return groups


def _sentences(text: str, paragraph: Span) -> list[Span]:
    start, end = paragraph
    spans: list[Span] = []
    for match in _SENTENCE_END_RE.finditer(text, start, end):
        if span := _strip_span(text, start, match.end()):
            spans.append(span)
        start = match.end()
    if span := _strip_span(text, start, end):
        spans.append(span)
    return spans


def _split_long_sentence(text: str, sentence: Span, size: int, overlap: int) -> list[Span]:
    start, end = sentence
    pieces: list[Span] = []
    while end - start > size:
        limit = start + size
        cut = text.rfind(" ", start + size * 3 // 4, limit + 1)
        if cut == -1:
            cut = limit
        pieces.append((start, start + len(text[start:cut].rstrip())))
        # Progress is guaranteed: cut >= start + size * 3/4 and overlap < size / 2.
        next_start = cut - overlap
        if overlap:
            word_break = text.find(" ", next_start, cut)
            if word_break != -1:
                next_start = word_break + 1
        while text[next_start].isspace():
            next_start += 1
        start = next_start
    pieces.append((start, end))
    return pieces


def _pack(units: list[Span], size: int, overlap: int) -> list[Span]:
    chunks: list[Span] = []
    current: list[Span] = []
    for unit in units:
        if current and unit[1] - current[0][0] > size:
            chunk_end = current[-1][1]
            chunks.append((current[0][0], chunk_end))
            keep = len(current)
            while keep > 0 and chunk_end - current[keep - 1][0] <= overlap:
                keep -= 1
            current = [span for span in current[keep:] if unit[1] - span[0] <= size]
        current.append(unit)
    if current:
        chunks.append((current[0][0], current[-1][1]))
    return chunks
