"""Where a chunk comes from, for citations: its character range in the document's extracted
text (`Extracted.text()`) and the pages, slides or rows of the blocks it was cut from."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from textkit.chunker import chunk_blocks
from textkit.extract.base import (
    HEADING,
    PAGE,
    PARAGRAPH,
    ROW,
    Block,
    Extracted,
    Location,
    merged_location,
)


def page(number: int, text: str) -> Block:
    return Block(PARAGRAPH, text, location=Location(PAGE, number, number))


SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank. "


def test_every_chunk_is_the_slice_of_the_extracted_text_its_range_names() -> None:
    blocks = [
        Block(HEADING, "Guide", level=1),
        page(1, SENTENCE * 8),
        Block(HEADING, "Setup", level=2, location=Location(PAGE, 2, 2)),
        page(2, SENTENCE * 3),
        page(3, SENTENCE * 9),
    ]
    text = Extracted("Guide", blocks).text()
    pieces = chunk_blocks(blocks, size=300, overlap=40)
    assert len(pieces) > 4
    for piece in pieces:
        assert text[piece.char_start : piece.char_end] == piece.text


def test_a_chunk_knows_the_pages_its_blocks_stand_on() -> None:
    blocks = [page(1, "Short intro paragraph on page one."), page(2, SENTENCE * 2)]
    [piece] = chunk_blocks(blocks, size=400, overlap=0)
    assert piece.location == Location(PAGE, 1, 2)
    assert piece.location.label() == "pages 1\u20132"

    pieces = chunk_blocks([page(4, SENTENCE * 4), page(5, SENTENCE * 4)], size=300, overlap=0)
    assert [p.location for p in pieces] == [Location(PAGE, 4, 4), Location(PAGE, 5, 5)]


def test_rows_of_a_sheet_merge_into_one_range() -> None:
    rows = [Location(ROW, 2, 11, "Q3"), Location(ROW, 12, 20, "Q3"), None]
    assert merged_location(rows) == Location(ROW, 2, 20, "Q3")
    assert merged_location(rows).label() == "Q3, rows 2\u201320"  # type: ignore[union-attr]
    # a range never reaches into another sheet: the first one's part wins
    assert merged_location([Location(ROW, 5, 9, "Q3"), Location(ROW, 1, 4, "Q4")]) == Location(
        ROW, 5, 9, "Q3"
    )


def test_formats_without_locations_give_none() -> None:
    [piece] = chunk_blocks([Block(PARAGRAPH, SENTENCE)], size=300, overlap=0)
    assert piece.location is None
    assert merged_location([None, None]) is None


def test_small_sections_gathered_into_one_chunk_span_their_range() -> None:
    blocks = [
        Block(HEADING, "A", level=1),
        page(1, "See also one."),
        Block(HEADING, "B", level=1),
        page(2, "See also two."),
    ]
    text = Extracted("", blocks).text()
    [piece] = chunk_blocks(blocks, size=400, overlap=0)
    # The chunk writes heading A as its first line, so its range starts there.
    assert piece.text.startswith("A\n\nSee also one.")
    assert (piece.char_start, piece.char_end) == (0, len(text))
    assert piece.location == Location(PAGE, 1, 2)


def test_a_gathered_chunk_that_writes_its_first_heading_starts_its_range_there() -> None:
    """Small sections under different headings gathered into one chunk write their headings as
    lines: the range starts at the first of them, the chunk's first character (hypothesis found
    a range that started at the first section's text instead)."""
    blocks = [
        Block(HEADING, "Leave", level=1),
        Block(PARAGRAPH, "Ask early."),
        Block(HEADING, "Travel", level=1),
        Block(PARAGRAPH, "Book trains."),
    ]
    text = Extracted("", blocks).text()
    [piece] = chunk_blocks(blocks, size=400, overlap=0)
    assert piece.text == "Leave\n\nAsk early.\n\nTravel\n\nBook trains."
    assert (piece.char_start, piece.char_end) == (0, len(text))
    assert text[piece.char_start : piece.char_end] == piece.text


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.text(alphabet="ab .\n。你", min_size=1, max_size=300),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_chunk_cut_from_one_section_is_exactly_its_range(items: list[tuple[bool, str]]) -> None:
    """Whatever the text, a chunk's range starts and ends inside the text, and a chunk that is
    one section's slice (not a gathering of small ones) is exactly the text its range names."""
    blocks = [
        Block(HEADING, text.strip() or "h", level=1) if heading else Block(PARAGRAPH, text)
        for heading, text in items
        if not heading or text.strip()
    ]
    text = Extracted("", blocks).text()
    for piece in chunk_blocks(blocks, size=60, overlap=10):
        assert 0 <= piece.char_start < piece.char_end <= len(text)
        if piece.text in text:
            assert text[piece.char_start : piece.char_end].startswith(piece.text[:1])
