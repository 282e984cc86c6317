"""What a hit carries besides its chunk, for a reader or a model: the matched query terms'
offsets in the chunk (highlights), and on request the passage around it (context) — its
neighbouring chunks, or its heading section — from the same build.

The passage is read after the search, outside its snapshot, in one statement for all hits,
each pinned to its hit's build id. That is consistent with the search: a build's chunks never
change once written (a rebuild is a new build), so the chunks read are those the hit belongs
to, whatever was published meanwhile. The one thing that can happen in between is retention
collecting the build (it was superseded past the retention window, or its document purged): the
hit then has no passage and says so (`Context.unavailable`), rather than one from another build.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from kb import storage
from retrieval.extracted import TextUnreadable, extracted_text
from retrieval.search.hits import Hit, SearchResult
from textkit.analysis import marked_spans

MAX_NEIGHBORS = 3
# A section passage stops growing before it would pass this many characters (the hit's own
# chunk always stands, however long), and reads at most SECTION_MAX_CHUNKS chunks either side.
SECTION_MAX_CHARS = 4000
SECTION_MAX_CHUNKS = 16

COLLECTED = "collected"  # retention removed the build's chunks after the search
MISSING = "missing"  # the hit's chunk is no longer there (the same, caught mid-way)


@dataclass(frozen=True)
class Expansion:
    """What a search asked to see around each hit: `neighbors` chunks either side (0..3), or
    its whole heading section (`section`), up to SECTION_MAX_CHARS."""

    neighbors: int = 0
    section: bool = False

    @property
    def wanted(self) -> bool:
        return self.section or self.neighbors > 0


@dataclass(frozen=True)
class Context:
    """One passage around a hit: `text[hit_start:hit_end]` is the hit's own chunk, and
    `chunks` the first and last ordinals it spans. Without a passage, `unavailable` says why."""

    text: str | None
    hit_start: int | None
    hit_end: int | None
    chunks: tuple[int, int] | None
    unavailable: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "hit_start": self.hit_start,
            "hit_end": self.hit_end,
            "chunks": list(self.chunks) if self.chunks is not None else None,
            "unavailable": self.unavailable,
        }


@dataclass(frozen=True)
class _Piece:
    ordinal: int
    text: str
    char_start: int | None
    char_end: int | None


def highlights(text: str, query: str) -> tuple[tuple[int, int], ...]:
    """The [start, end) offsets in `text` of the query's terms, as the keyword leg matches them
    (`textkit.analysis.marked_spans`: stems, Chinese words, no stop words)."""
    return tuple(marked_spans(text, query))


def hits_cited(
    hits: list[Hit], *, query: str, expansion: Expansion, using: str = DEFAULT_DB_ALIAS
) -> list[Hit]:
    """`hits` with their highlights and, when `expansion` asks, their context (one statement
    for all of them, on database `using`: the one the search read)."""
    contexts = hit_contexts(hits, expansion=expansion, using=using) if expansion.wanted else {}
    return [
        dataclasses.replace(
            hit, highlights=highlights(hit.text, query), context=contexts.get(hit.chunk_id)
        )
        for hit in hits
    ]


_CONTEXT_SQL = """
    SELECT w.hit, b.collected_at IS NOT NULL, b.text_path,
           c.ordinal, c.text, c.char_start, c.char_end
    FROM unnest(%s::bigint[], %s::bigint[], %s::int[], %s::int[], %s::text[])
         AS w(hit, build_id, lo, hi, path)
    JOIN kb_build b ON b.id = w.build_id
    LEFT JOIN kb_chunk c
      ON c.build_id = w.build_id AND c.ordinal BETWEEN w.lo AND w.hi
     AND (w.path IS NULL OR c.heading_path = w.path)
    ORDER BY w.hit, c.ordinal
"""


def hit_contexts(
    hits: list[Hit], *, expansion: Expansion, using: str = DEFAULT_DB_ALIAS
) -> dict[int, Context]:
    """The passage around each hit, by chunk id (see the module docstring for why reading it
    after the search is consistent). Neighbours: `expansion.neighbors` chunks either side of the
    hit in its build. Section: the chunks around it under the same heading path with contiguous
    ordinals, added alternately before and after while the passage stays within
    SECTION_MAX_CHARS. One statement; the extracted texts are then read from storage, each once
    (`retrieval.extracted`)."""
    if not hits or not expansion.wanted:
        return {}
    reach = SECTION_MAX_CHUNKS if expansion.section else min(expansion.neighbors, MAX_NEIGHBORS)
    with connections[using].cursor() as cursor:
        cursor.execute(
            _CONTEXT_SQL,
            [
                [hit.chunk_id for hit in hits],
                [hit.build_id for hit in hits],
                [max(0, hit.ordinal - reach) for hit in hits],
                [hit.ordinal + reach for hit in hits],
                [hit.heading_path if expansion.section else None for hit in hits],
            ],
        )
        rows = cursor.fetchall()
    pieces: dict[int, list[_Piece]] = {}
    collected: set[int] = set()
    text_paths: dict[int, str] = {}
    for hit_id, is_collected, text_path, ordinal, text, char_start, char_end in rows:
        pieces.setdefault(hit_id, [])
        text_paths[hit_id] = text_path or ""
        if is_collected:
            collected.add(hit_id)
        elif ordinal is not None:
            pieces[hit_id].append(_Piece(ordinal, text, char_start, char_end))
    contexts: dict[int, Context] = {}
    for hit in hits:
        if hit.chunk_id in collected or hit.chunk_id not in pieces:
            contexts[hit.chunk_id] = _unavailable(COLLECTED)
            continue
        chosen = _choose(pieces[hit.chunk_id], hit.ordinal, expansion)
        if chosen is None:
            contexts[hit.chunk_id] = _unavailable(MISSING)
            continue
        contexts[hit.chunk_id] = _passage(chosen, hit.ordinal, text_paths[hit.chunk_id])
    return contexts


def _unavailable(reason: str) -> Context:
    return Context(text=None, hit_start=None, hit_end=None, chunks=None, unavailable=reason)


def _choose(pieces: list[_Piece], ordinal: int, expansion: Expansion) -> list[_Piece] | None:
    """The contiguous run of `pieces` (in ordinal order) around the hit's `ordinal` that the
    expansion asks for; None when the hit's own chunk is not among them."""
    by_ordinal = {piece.ordinal: piece for piece in pieces}
    if ordinal not in by_ordinal:
        return None
    first = last = ordinal
    if not expansion.section:
        while first - 1 in by_ordinal and ordinal - (first - 1) <= expansion.neighbors:
            first -= 1
        while last + 1 in by_ordinal and (last + 1) - ordinal <= expansion.neighbors:
            last += 1
        return [by_ordinal[o] for o in range(first, last + 1)]
    # Section: grow alternately before and after, each side until it leaves the section (a
    # gap in ordinals: another heading path) or the passage would pass the limit.
    grow_before = grow_after = True
    while grow_before or grow_after:
        for side in ("before", "after"):
            if side == "before" and grow_before:
                candidate = first - 1
                if candidate in by_ordinal and _span(by_ordinal, candidate, last) <= (
                    SECTION_MAX_CHARS
                ):
                    first = candidate
                else:
                    grow_before = False
            elif side == "after" and grow_after:
                candidate = last + 1
                if candidate in by_ordinal and _span(by_ordinal, first, candidate) <= (
                    SECTION_MAX_CHARS
                ):
                    last = candidate
                else:
                    grow_after = False
    return [by_ordinal[o] for o in range(first, last + 1)]


def _span(by_ordinal: dict[int, _Piece], first: int, last: int) -> int:
    """The passage's length from chunk `first` to chunk `last`: by their offsets when they have
    them, else their texts' lengths together (an upper bound: overlaps count twice)."""
    chosen = [by_ordinal[o] for o in range(first, last + 1)]
    if all(p.char_start is not None and p.char_end is not None for p in chosen):
        return max(p.char_end or 0 for p in chosen) - min(p.char_start or 0 for p in chosen)
    return sum(len(p.text) for p in chosen)


def _passage(chosen: list[_Piece], ordinal: int, text_path: str) -> Context:
    """The chunks as one passage: the slice of the build's extracted text they span when their
    offsets and the text are there (exact: overlaps appear once, and whatever lies between two
    chunks — a heading, a paragraph break — is the document's own), else their texts joined
    with each overlap dropped (`_joined`)."""
    chunks = (chosen[0].ordinal, chosen[-1].ordinal)
    hit = next(piece for piece in chosen if piece.ordinal == ordinal)
    if text_path and all(p.char_start is not None and p.char_end is not None for p in chosen):
        try:
            full = extracted_text(text_path)
        except (TextUnreadable, storage.StorageUnavailable):
            full = None
        start = min(p.char_start or 0 for p in chosen)
        end = max(p.char_end or 0 for p in chosen)
        if full is not None and end <= len(full):
            assert hit.char_start is not None and hit.char_end is not None
            return Context(
                text=full[start:end],
                hit_start=hit.char_start - start,
                hit_end=hit.char_end - start,
                chunks=chunks,
            )
    text, hit_start = _joined(chosen, ordinal)
    return Context(text=text, hit_start=hit_start, hit_end=hit_start + len(hit.text), chunks=chunks)


def _joined(chosen: list[_Piece], ordinal: int) -> tuple[str, int]:
    """The chunks' texts in order, each without the beginning it shares with the passage so far
    (the chunker's overlap: the previous chunk's last sentences), else after a blank line; and
    where the hit's chunk starts in the result."""
    text = ""
    hit_start = 0
    for piece in chosen:
        shared = _overlap(text, piece.text)
        if piece.ordinal == ordinal:
            hit_start = len(text) - shared if shared else len(text) + (2 if text else 0)
        if shared:
            text += piece.text[shared:]
        else:
            text = f"{text}\n\n{piece.text}" if text else piece.text
    return text, hit_start


def _overlap(before: str, after: str) -> int:
    """The length of the longest end of `before` that `after` starts with, cut at word
    boundaries on both sides (so "The" ending one chunk is no overlap with "Then" starting the
    next); 0 when none."""
    for size in range(min(len(before), len(after) - 1), 0, -1):
        if not before.endswith(after[:size]):
            continue
        starts_clean = size == len(before) or not before[-size - 1].isalnum()
        ends_clean = not (after[size - 1].isalnum() and after[size].isalnum())
        if starts_clean and ends_clean:
            return size
    return 0


def result_cited(
    result: SearchResult, *, query: str, expansion: Expansion, using: str = DEFAULT_DB_ALIAS
) -> SearchResult:
    """`result` with its hits cited (`hits_cited`)."""
    return dataclasses.replace(
        result, hits=hits_cited(result.hits, query=query, expansion=expansion, using=using)
    )


def expansion_of(data: dict[str, Any]) -> Expansion:
    """The expansion SearchInput's validated `data` asks for (`neighbors`, `expand`)."""
    return Expansion(
        neighbors=int(data.get("neighbors") or 0), section=data.get("expand") == "section"
    )
