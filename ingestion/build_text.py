"""What a build was made of: the text the parse stage extracted (its derived file, named by the
build's parse StageResult) and where each of the build's chunks lies in it.

Chunks store their text, not their offsets; a chunk is found in the parsed plain text (the
blocks joined by blank lines, as the chunker joins them) searching forward from where the
previous chunk started, so overlaps are found too. A chunk the chunker assembled from small
sections may still be found (it joins them with the same blank lines); when it is not, it has
no range. Chunk rows are read without their vectors.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from django.db.models import QuerySet

from ingestion.models import StageResult
from kb import storage
from kb.models import Build, Chunk
from textkit import extract as extractors


@dataclass(frozen=True)
class ParsedText:
    title: str
    text: str  # the plain text: blocks (headings too) separated by blank lines
    headings: int
    blocks: int
    notes: tuple[str, ...] = ()  # what of the file was not read, and why (Extracted.notes)


def build_parsed_text(*, build: Build) -> ParsedText | None:
    """The extraction the parse stage stored for `build`, or None when there is none (not
    parsed yet, or the derived file is gone or unreadable: a rebuild parses again). Read from
    `Build.text_path` (which a build that reused another's parse has too), else the parse
    StageResult of the build's tasks (builds made before text_path), then the derived file."""
    path: str | None = build.text_path
    if not path:
        output = (
            StageResult.objects.filter(
                task__build_id=build.pk,
                stage=StageResult.Stage.PARSE,
                status=StageResult.Status.SUCCEEDED,
            )
            .order_by("-id")
            .values_list("output", flat=True)
            .first()
        )
        path = (output or {}).get("text_path")
    if not path:
        return None
    try:
        content = storage.read_text(path)
    except storage.StorageError:  # gone, damaged, or the store unreachable: the page says so
        return None
    try:
        extracted = extractors.Extracted.from_json(content)
    except ValueError:  # stored before the parse stage kept headings: the plain text
        return ParsedText(title="", text=content, headings=0, blocks=1)
    return ParsedText(
        title=extracted.title,
        text=extracted.text(),
        headings=sum(1 for b in extracted.blocks if b.kind == extractors.HEADING),
        blocks=len(extracted.blocks),
        notes=tuple(extracted.notes),
    )


def build_chunks(*, build: Build) -> QuerySet[Chunk]:
    """The build's chunks in order, without their embedding or keyword vector."""
    return Chunk.objects.filter(build_id=build.pk).defer("embedding", "lexical").order_by("ordinal")


@dataclass(frozen=True)
class ChunkSpan:
    chunk: Chunk
    start: int | None  # offset in the parsed text; None: not found as one piece
    end: int | None
    overlap: int  # characters shared with the previous chunk

    @property
    def size(self) -> int:
        return len(self.chunk.text)

    @property
    def where(self) -> str:
        """The pages, slides or rows the chunk stands on ("page 3"), "" when unknown."""
        location = self.chunk.location
        return extractors.Location.from_json(location).label() if location else ""


def chunk_spans(chunks: list[Chunk], text: str | None) -> list[ChunkSpan]:
    """Where each chunk (in ordinal order) lies in the parsed `text`: the range the chunker
    recorded (`Chunk.char_start`), or for chunks written before it did, where its text is found
    after the previous one's start."""
    spans: list[ChunkSpan] = []
    search_from = 0
    previous_end: int | None = None
    for chunk in chunks:
        if text is not None and chunk.char_start is not None and chunk.char_end is not None:
            start, end = chunk.char_start, chunk.char_end
            overlap = max(0, previous_end - start) if previous_end is not None else 0
            spans.append(ChunkSpan(chunk, start, end, overlap))
            search_from, previous_end = start + 1, end
            continue
        start = text.find(chunk.text, search_from) if text is not None and chunk.text else -1
        if start < 0:
            spans.append(ChunkSpan(chunk, None, None, 0))
            continue
        end = start + len(chunk.text)
        overlap = max(0, previous_end - start) if previous_end is not None else 0
        spans.append(ChunkSpan(chunk, start, end, overlap))
        search_from, previous_end = start + 1, end
    return spans


@dataclass(frozen=True)
class TextPiece:
    text: str
    chunk: int | None  # the ordinal of the chunk this text belongs to (the latest started)
    starts: list[int]  # ordinals of chunks starting right before this piece
    overlapped: bool  # inside two chunks (the overlap)


def marked_text(text: str, spans: list[ChunkSpan], *, start: int, end: int) -> list[TextPiece]:
    """`text[start:end]` cut at every chunk boundary inside it, each piece saying which chunk it
    belongs to, which chunks start there and whether two chunks share it: the page draws the
    boundaries from this."""
    located = [s for s in spans if s.start is not None and s.end is not None]
    cuts = {start, end}
    for s in located:
        for position in (s.start, s.end):
            if position is not None and start < position < end:
                cuts.add(position)
    points = sorted(cuts)
    pieces: list[TextPiece] = []
    for left, right in itertools.pairwise(points):
        inside = [s for s in located if s.start is not None and s.start <= left < (s.end or 0)]
        pieces.append(
            TextPiece(
                text=text[left:right],
                chunk=inside[-1].chunk.ordinal if inside else None,
                starts=[s.chunk.ordinal for s in located if s.start == left],
                overlapped=len(inside) > 1,
            )
        )
    return pieces
