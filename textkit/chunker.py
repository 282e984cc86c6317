"""Sentence-aware chunking that keeps chunks far from an edit byte-identical, and tells every
chunk the headings above it.

A document is a list of blocks (`textkit.extract.Block`). Its headings are never chunks:
they make the heading path ("os — Miscellaneous operating system interfaces › Files and
Directories", outermost first, joined by " › ") of the blocks under them, and the blocks of one
path form a section. Every section is chunked on its own:

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

No fragment under a tenth of `size` stands alone: such a group joins the next group of its
section (the previous one at the section's end); a group's last chunk that small joins the
chunk before it when both fit in `size`, or else takes over that chunk's last sentences; and a
whole section that small ("See Also" and one line) is appended, its headings written as lines,
to the previous chunk when that stays within `size` plus the fragment, or else put before the
next section's first chunk (several in a row that reach the minimum together become one chunk
under the headings they share). A fragment remains only where no sentence boundary allows
otherwise (the tail of a sentence cut at `size`).

A chunk's text is the exact slice of its section from its first sentence to its last (so the
whitespace between sentences, including paragraph breaks inside a group, is kept), except for
a merged section. What is embedded is `embedding_input(heading_path, text)`, and the content
hash and token count are those of that input.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace

from textkit.extract.base import HEADING, PARAGRAPH, Block, Location, merged_location
from textkit.text import token_count

MIN_CHUNK_SIZE = 50
HEADING_SEPARATOR = " \u203a "
# A chunk shorter than size / this is a fragment.
_FRAGMENT_FRACTION = 10

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
    """One chunk: its position, its text, the sha256 hex and approximate token count of what is
    embedded (`embedding_input`), and the headings above it (" › "-joined, "" for none).

    For citations: `char_start`/`char_end` are the range of the document's extracted text
    (`Extracted.text()`, blocks joined by blank lines) from the chunk's first character to its
    last (a chunk that gathered small sections spans the headings between them), and `location`
    the pages, slides or rows its blocks stand on (None when the format has none)."""

    ordinal: int
    text: str
    content_hash: str
    token_count: int
    heading_path: str = ""
    char_start: int = 0
    char_end: int = 0
    location: Location | None = None


def embedding_input(heading_path: str, text: str) -> str:
    """What the embedding model sees for a chunk: its heading path, a blank line, its text."""
    return f"{heading_path}\n\n{text}" if heading_path else text


def chunk_text(text: str, *, size: int, overlap: int) -> list[ChunkPiece]:
    """Split `text` (no headings) into chunks of at most `size` characters (see the module
    docstring). Requires size >= 50 and 0 <= overlap < size / 2, else ValueError.
    Whitespace-only text gives []. The result depends only on the arguments."""
    return chunk_blocks([Block(PARAGRAPH, text)], size=size, overlap=overlap)


@dataclass(frozen=True)
class _Part:
    """A non-heading block inside its section: where its text starts in the section's text and
    in the document's, and its location."""

    section_start: int
    document_start: int
    length: int
    location: Location | None


@dataclass(frozen=True)
class _Section:
    path: list[str]
    text: str
    parts: list[_Part]
    heading_starts: tuple[int, ...] = ()  # each heading of `path`: where it starts in the document

    def where(self, start: int, end: int) -> _Where:
        """The document range and locations of the section's text[start:end]."""
        inside = [
            part
            for part in self.parts
            if part.section_start < end and start < part.section_start + part.length
        ]
        first, last = inside[0], inside[-1]
        return _Where(
            first.document_start + start - first.section_start,
            last.document_start + end - last.section_start,
            [part.location for part in inside],
            self.heading_starts,
        )


@dataclass(frozen=True)
class _Where:
    start: int
    end: int
    locations: list[Location | None]
    heading_starts: tuple[int, ...] = ()  # of the first section's headings

    def __add__(self, other: _Where) -> _Where:
        return _Where(
            min(self.start, other.start),
            max(self.end, other.end),
            self.locations + other.locations,
            self.heading_starts,
        )


# A chunk on its way: (heading path, text, where it comes from).
_Draft = tuple[list[str], str, _Where]


def chunk_blocks(blocks: list[Block], *, size: int, overlap: int) -> list[ChunkPiece]:
    """Chunk a document's blocks (see the module docstring); the arguments as `chunk_text`."""
    _check_arguments(size, overlap)
    fragment = size // _FRAGMENT_FRACTION
    chunks: list[_Draft] = []
    # Small sections that fitted nowhere yet, for the next chunk (or to make one together).
    waiting: list[_Draft] = []
    for section in _sections(blocks):
        path, text = section.path, section.text
        spans = _section_spans(text, size, overlap)
        if not spans:
            continue
        if len(spans) == 1 and spans[0][1] - spans[0][0] < fragment:
            small: _Draft = (path, text[spans[0][0] : spans[0][1]], section.where(*spans[0]))
            if not waiting and chunks and len(chunks[-1][1]) + len(small[1]) <= size + fragment:
                chunks[-1] = _joined(chunks[-1], small)
                continue
            waiting.append(small)
            if sum(len(part) for _, part, _ in waiting) >= fragment:
                chunks.append(_together(waiting))
                waiting = []
            continue
        section_chunks = [
            (path, text[start:end], section.where(start, end)) for start, end in spans
        ]
        if waiting:
            section_chunks[0] = _prefixed(waiting, section_chunks[0])
            waiting = []
        chunks.extend(section_chunks)
    if waiting:
        if chunks:
            chunks[-1] = _joined(chunks[-1], _together(waiting))
        else:
            # Nothing but small sections: together they are the document.
            chunks.append(_together(waiting))
    pieces: list[ChunkPiece] = []
    for path, chunk, where in chunks:
        heading_path = HEADING_SEPARATOR.join(path)
        embedded = embedding_input(heading_path, chunk)
        pieces.append(
            ChunkPiece(
                ordinal=len(pieces),
                text=chunk,
                content_hash=hashlib.sha256(embedded.encode()).hexdigest(),
                token_count=token_count(embedded),
                heading_path=heading_path,
                char_start=where.start,
                char_end=where.end,
                location=merged_location(where.locations),
            )
        )
    return pieces


def _sections(blocks: list[Block]) -> list[_Section]:
    """Every run of non-heading blocks under the same headings, with their heading path. The
    document offsets count as `Extracted.text()` does: every block, then a blank line."""
    sections: list[_Section] = []
    headings: list[tuple[int, str, int]] = []  # level, title, where it starts
    texts: list[str] = []
    parts: list[_Part] = []
    offset = 0
    section_length = 0

    def close() -> None:
        sections.append(
            _Section(
                [title for _, title, _ in headings],
                "\n\n".join(texts),
                parts,
                tuple(start for _, _, start in headings),
            )
        )

    for block in blocks:
        if block.kind == HEADING:
            if texts:
                close()
                texts, parts, section_length = [], [], 0
            while headings and headings[-1][0] >= block.level:
                headings.pop()
            headings.append((block.level, block.text, offset))
        elif block.text.strip():
            if texts:
                section_length += 2
            parts.append(_Part(section_length, offset, len(block.text), block.location))
            texts.append(block.text)
            section_length += len(block.text)
        offset += len(block.text) + 2
    if texts:
        close()
    return sections


def _below(path: list[str], other: list[str]) -> list[str]:
    """The headings of `path` under the ones it shares with `other`."""
    shared = 0
    while shared < min(len(path), len(other)) and path[shared] == other[shared]:
        shared += 1
    return path[shared:]


def _joined(draft: _Draft, small: _Draft) -> _Draft:
    """A chunk followed by a small section, its own headings written as lines."""
    path, text, where = draft
    small_path, small_text, small_where = small
    return path, "\n\n".join([text, *_below(small_path, path), small_text]), where + small_where


def _prefixed(smalls: list[_Draft], draft: _Draft) -> _Draft:
    """Small sections, their own headings written as lines, before a chunk."""
    path, text, where = draft
    parts = [part for small_path, small, _ in smalls for part in (*_below(small_path, path), small)]
    for _, _, small_where in smalls:
        where = small_where + where
    return path, "\n\n".join([*parts, text]), _from_written_headings(smalls[0], path, where)


def _together(smalls: list[_Draft]) -> _Draft:
    """Small sections as one chunk under the headings they share, the others written as lines."""
    shared = smalls[0][0]
    for small_path, _, _ in smalls[1:]:
        shared = shared[: len(shared) - len(_below(shared, small_path))]
    parts = [
        part for small_path, small, _ in smalls for part in (*_below(small_path, shared), small)
    ]
    where = smalls[0][2]
    for _, _, small_where in smalls[1:]:
        where = where + small_where
    return shared, "\n\n".join(parts), _from_written_headings(smalls[0], shared, where)


def _from_written_headings(first: _Draft, path: list[str], where: _Where) -> _Where:
    """`where` of a chunk that begins with the small section `first`: from the first of its
    headings the chunk writes as lines (those not in the chunk's own `path`), so the range
    starts at the chunk's first character."""
    first_path, _, first_where = first
    written = _below(first_path, path)
    if not written or len(first_where.heading_starts) != len(first_path):
        return where
    heading_start = first_where.heading_starts[len(first_path) - len(written)]
    return replace(where, start=min(where.start, heading_start))


def _check_arguments(size: int, overlap: int) -> None:
    if size < MIN_CHUNK_SIZE:
        raise ValueError(f"chunk size must be at least {MIN_CHUNK_SIZE} characters, got {size}")
    if overlap < 0 or overlap * 2 >= size:
        raise ValueError(
            f"chunk overlap must be at least 0 and less than half the size {size}, got {overlap}"
        )


def _section_spans(text: str, size: int, overlap: int) -> list[Span]:
    """The chunks of one section as spans of its text."""
    fragment = size // _FRAGMENT_FRACTION
    spans: list[Span] = []
    for group in _merge_small_groups(_paragraph_groups(text, size), fragment):
        units: list[Span] = []
        for paragraph in group:
            for sentence in _sentences(text, paragraph):
                if sentence[1] - sentence[0] > size:
                    units.extend(_split_long_sentence(text, sentence, size, overlap))
                else:
                    units.append(sentence)
        spans.extend(_no_small_tail(_pack(units, size, overlap), units, size, fragment))
    return spans


def _no_small_tail(packed: list[Span], units: list[Span], size: int, fragment: int) -> list[Span]:
    """A group's last chunk shorter than `fragment` joins the chunk before it when both fit in
    `size`; otherwise it takes over that chunk's last sentences until it is long enough."""
    if len(packed) < 2 or packed[-1][1] - packed[-1][0] >= fragment:
        return packed
    (head_start, _), (_, end) = packed[-2], packed[-1]
    if end - head_start <= size:
        return [*packed[:-2], (head_start, end)]
    for index in range(len(units) - 1, 0, -1):
        tail_start = units[index][0]
        if end - tail_start >= fragment:
            head_end = units[index - 1][1]
            if end - tail_start <= size and head_end - head_start >= fragment:
                return [*packed[:-2], (head_start, head_end), (tail_start, end)]
            break
    return packed


def _merge_small_groups(groups: list[list[Span]], fragment: int) -> list[list[Span]]:
    """Join every group shorter than `fragment` to the next group (the previous one for the
    last), so that no group is a fragment unless it is the section's only one."""
    merged: list[list[Span]] = []
    carried: list[Span] = []
    for group in groups:
        group = carried + group
        carried = []
        if group[-1][1] - group[0][0] < fragment:
            carried = group
        else:
            merged.append(group)
    if carried:
        if merged:
            merged[-1].extend(carried)
        else:
            merged.append(carried)
    return merged


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
