"""Chunking structured documents: heading paths, no fragments, hashes of what is embedded."""

import hashlib
import random

from tests.textkit.test_chunker import WORDS, changed_hashes, sentence
from textkit.chunker import HEADING_SEPARATOR, ChunkPiece, chunk_blocks, embedding_input
from textkit.extract import CODE, HEADING, PARAGRAPH, Block
from textkit.text import token_count


def h(level: int, text: str) -> Block:
    return Block(HEADING, text, level=level)


def p(text: str) -> Block:
    return Block(PARAGRAPH, text)


LONG = (
    "The os module provides a portable way of using operating system dependent functionality. "
    "If you just want to read or write a file see open(), and for paths see os.path."
)


def test_every_chunk_carries_the_headings_above_it_outermost_first() -> None:
    blocks = [
        h(1, "os — Miscellaneous operating system interfaces"),
        p(LONG),
        h(2, "Files and Directories"),
        p(LONG.replace("os module", "directory API")),
        h(3, "Linux extended attributes"),
        p(LONG.replace("os module", "xattr API")),
        h(2, "Process Management"),
        p(LONG.replace("os module", "process API")),
    ]
    pieces = chunk_blocks(blocks, size=400, overlap=50)
    assert [piece.heading_path for piece in pieces] == [
        "os — Miscellaneous operating system interfaces",
        "os — Miscellaneous operating system interfaces › Files and Directories",
        "os — Miscellaneous operating system interfaces › Files and Directories"
        " › Linux extended attributes",
        "os — Miscellaneous operating system interfaces › Process Management",
    ]
    assert HEADING_SEPARATOR == " › "
    # The headings are in the path, not in the text.
    assert [piece.text for piece in pieces] == [block.text for block in blocks[1::2]]


def test_the_content_hash_and_tokens_are_those_of_the_embedded_input() -> None:
    [piece] = chunk_blocks([h(1, "Guide"), h(2, "Setup"), p(LONG)], size=400, overlap=0)
    embedded = "Guide › Setup\n\n" + LONG
    assert embedding_input(piece.heading_path, piece.text) == embedded
    assert piece == ChunkPiece(
        ordinal=0,
        text=LONG,
        content_hash=hashlib.sha256(embedded.encode()).hexdigest(),
        token_count=token_count(embedded),
        heading_path="Guide › Setup",
        char_start=len("Guide\n\nSetup\n\n"),
        char_end=len("Guide\n\nSetup\n\n") + len(LONG),
    )
    # The same text under another heading is another embedding.
    [other] = chunk_blocks([h(1, "Guide"), h(2, "Upgrade"), p(LONG)], size=400, overlap=0)
    assert other.text == piece.text and other.content_hash != piece.content_hash
    # Without headings the input is the text itself, as before headings were kept.
    [plain] = chunk_blocks([p(LONG)], size=400, overlap=0)
    assert plain.content_hash == hashlib.sha256(LONG.encode()).hexdigest()


def test_a_heading_alone_is_never_a_chunk() -> None:
    blocks = [h(1, "Manual"), h(2, "Chapter 1"), h(3, "Overview"), p(LONG), h(2, "Empty")]
    pieces = chunk_blocks(blocks, size=400, overlap=0)
    assert [(piece.heading_path, piece.text) for piece in pieces] == [
        ("Manual › Chapter 1 › Overview", LONG)
    ]


def test_tiny_sections_join_a_neighbour_with_their_heading_as_a_line() -> None:
    blocks = [
        h(1, "ls"),
        h(2, "Synopsis"),
        p("ls [OPTION]... [FILE]..."),
        h(2, "Description"),
        p(LONG),
        h(2, "See Also"),
        p("dir(1), vdir(1)"),
    ]
    pieces = chunk_blocks(blocks, size=400, overlap=0)
    assert [(piece.heading_path, piece.text) for piece in pieces] == [
        (
            "ls › Description",
            f"Synopsis\n\nls [OPTION]... [FILE]...\n\n{LONG}\n\nSee Also\n\ndir(1), vdir(1)",
        )
    ]


def test_no_fragment_stands_alone_in_a_long_document() -> None:
    rng = random.Random(5)
    blocks: list[Block] = [h(1, "Reference")]
    for section in range(40):
        blocks.append(h(2, f"Function {section}"))
        blocks.append(p(" ".join(sentence(rng) for _ in range(rng.randint(0, 12))) or "None."))
        if section % 3 == 0:
            blocks.append(Block(CODE, "x = 1"))
        if section % 5 == 0:
            blocks.append(h(3, "See Also"))
            blocks.append(p(rng.choice(WORDS)))
    pieces = chunk_blocks(blocks, size=600, overlap=60)
    assert len(pieces) > 10
    assert all(len(piece.text) >= 60 for piece in pieces)
    assert all(len(piece.text) <= 600 + 60 + 40 for piece in pieces)
    assert all(piece.heading_path.startswith("Reference") for piece in pieces)


def test_a_tiny_group_joins_the_next_group_of_its_section() -> None:
    # "Note:" alone would be a group of its own before a paragraph that is an anchor.
    long_paragraph = "A paragraph long enough to end its group on its own. " * 2
    text = f"{long_paragraph.strip()}\n\nNote:\n\n{long_paragraph.strip()}"
    pieces = chunk_blocks([p(text)], size=400, overlap=0)
    assert all(len(piece.text) >= 40 for piece in pieces)
    assert any(piece.text.startswith("Note:") for piece in pieces) or len(pieces) == 1


def test_editing_one_section_keeps_other_sections_chunks_identical() -> None:
    rng = random.Random(9)
    sections = [
        [" ".join(sentence(rng) for _ in range(rng.randint(2, 10))) for _ in range(4)]
        for _ in range(30)
    ]

    def document(edited: int | None) -> list[Block]:
        blocks = [h(1, "Guide")]
        for index, paragraphs in enumerate(sections):
            blocks.append(h(2, f"Part {index}"))
            for number, paragraph in enumerate(paragraphs):
                if index == edited and number == 2:
                    paragraph = paragraph.replace(".", ", edited.", 1)
                blocks.append(p(paragraph))
        return blocks

    before = chunk_blocks(document(None), size=800, overlap=100)
    after = chunk_blocks(document(12), size=800, overlap=100)
    assert len(before) > 40
    changed = [
        piece for piece in after if piece.content_hash not in {b.content_hash for b in before}
    ]
    assert changed and all(piece.heading_path == "Guide › Part 12" for piece in changed)
    assert changed_hashes(before, after) <= 3
