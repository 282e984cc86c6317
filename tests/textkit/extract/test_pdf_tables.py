"""PDF tables (textkit/extract/pdf_tables.py): rows that line up in columns become table blocks
with the header row first, a long table is cut into groups that each repeat the header (so each
chunk says what its columns are), whether the columns are separate text objects or gaps inside
one (TeX); lists, tables of contents, prose and code aligned by spaces stay what they are."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.textkit.extract.files import write
from tests.textkit.extract.pdf_fixtures import build_pdf
from textkit.chunker import chunk_blocks
from textkit.extract import PARAGRAPH, TABLE, Block, extract
from textkit.extract.base import PAGE, Location
from textkit.extract.pdf_tables import GROUP_CHARS

PACKAGES = [
    ("Package", "Version", "Size"),
    ("bash", "5.2.15", "1.8 MB"),
    ("coreutils", "9.1", "2.9 MB"),
    ("grep", "3.8", "0.4 MB"),
]


def text(x: float, y: float, words: str, *, font: str = "F1", size: int = 11) -> str:
    escaped = words.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return f"BT /{font} {size} Tf {x} {y} Td ({escaped}) Tj ET"


def grid(rows: Sequence[tuple[str, ...]], columns: tuple[float, ...], top: float) -> list[str]:
    """Each cell its own text object, one row every 16 points."""
    return [
        text(x, top - 16 * number, cell)
        for number, row in enumerate(rows)
        for x, cell in zip(columns, row, strict=True)
        if cell
    ]


def blocks_of(tmp_path: Path, *pages: list[str]) -> list[Block]:
    path = write(tmp_path, "doc.pdf", build_pdf(["\n".join(page) for page in pages]))
    return extract(path, "application/pdf").blocks


def test_a_table_between_paragraphs_is_one_block_with_its_header_first(tmp_path: Path) -> None:
    blocks = blocks_of(
        tmp_path,
        [
            text(72, 740, "The packages installed on the build server are listed below."),
            *grid(PACKAGES, (72, 220, 340), top=700),
            text(72, 620, "Each of them is updated every night by the mirror job."),
        ],
    )

    assert [(b.kind, b.text) for b in blocks] == [
        (PARAGRAPH, "The packages installed on the build server are listed below."),
        (
            TABLE,
            "Package\tVersion\tSize\nbash\t5.2.15\t1.8 MB\ncoreutils\t9.1\t2.9 MB\n"
            "grep\t3.8\t0.4 MB",
        ),
        (PARAGRAPH, "Each of them is updated every night by the mirror job."),
    ]
    assert blocks[1].location == Location(PAGE, 1, 1)


def test_columns_set_apart_inside_one_text_object_are_found_as_tex_writes_them(
    tmp_path: Path,
) -> None:
    # TeX writes a row as one text object, its columns apart by kerning (-8000: 88 points)
    rows = [("Distribution", "R name"), ("beta", "beta"), ("binomial", "binom"), ("normal", "norm")]
    stream = ["BT /F1 11 Tf 14 TL 72 700 Td"]
    for left, right in rows:
        gap = -(150 - 6 * len(left)) * 1000 // 11
        stream.append(f"[({left}) {gap} ({right})] TJ T*")
    stream.append("ET")

    blocks = blocks_of(tmp_path, stream)

    assert [(b.kind, b.text.split("\n")) for b in blocks] == [
        (TABLE, ["Distribution\tR name", "beta\tbeta", "binomial\tbinom", "normal\tnorm"])
    ]


def test_right_aligned_numbers_and_an_empty_cell_stay_in_their_columns(tmp_path: Path) -> None:
    rows = [
        ("Item", "Quantity", "Price"),
        ("Paper", "5", "4.50"),
        ("Toner", "", "89.00"),
        ("Staples", "1200", "2.10"),
    ]
    page = []
    for number, (item, quantity, price) in enumerate(rows):
        y = 700 - 16 * number
        page.append(text(72, y, item))
        if quantity:  # right-aligned at 300 (6 points a digit)
            page.append(text(300 - 6 * len(quantity) if number else 250, y, quantity))
        page.append(text(400 - 6 * len(price) if number else 360, y, price))

    (table,) = blocks_of(tmp_path, page)

    assert table.kind == TABLE
    assert table.text.split("\n") == [
        "Item\tQuantity\tPrice",
        "Paper\t5\t4.50",
        "Toner\t\t89.00",
        "Staples\t1200\t2.10",
    ]


def test_a_long_table_is_cut_into_groups_that_each_repeat_the_header(tmp_path: Path) -> None:
    header = ("Host", "Role", "Address", "Owner")
    rows = [header] + [
        (f"node-{n:02d}", "worker" if n % 3 else "database", f"10.0.{n}.{n + 7}", "platform team")
        for n in range(40)
    ]
    pages = [grid(rows[:44], (72, 180, 290, 420), top=740)]

    blocks = blocks_of(tmp_path, *pages)

    assert blocks and all(b.kind == TABLE for b in blocks)
    assert len(blocks) > 1
    lines = [b.text.split("\n") for b in blocks]
    assert all(group[0] == "Host\tRole\tAddress\tOwner" for group in lines)
    assert all(len(b.text) <= GROUP_CHARS + 60 for b in blocks)
    assert [row for group in lines for row in group[1:]] == ["\t".join(r) for r in rows[1:]]

    # and so every chunk of it says what its columns are
    chunks = chunk_blocks(blocks, size=800, overlap=100)
    assert len(chunks) == len(blocks)
    assert all(chunk.text.startswith("Host\tRole\tAddress\tOwner\n") for chunk in chunks)


def test_lists_contents_prose_and_code_in_columns_are_not_tables(tmp_path: Path) -> None:
    bullets = [
        text(72, 740 - 16 * n, "-") + "\n" + text(90, 740 - 16 * n, words)
        for n, words in enumerate(["Back up the database.", "Rotate the keys.", "Renew it."])
    ]
    contents = [
        text(72, 660 - 16 * n, title) + "\n" + text(500, 660 - 16 * n, str(page))
        for n, (title, page) in enumerate(
            [("Introduction", 1), ("Installing", 4), ("Upgrading", 9), ("Index", 31)]
        )
    ]
    prose = [
        text(72, 560 - 14 * n, "The mirror job runs nightly and records each package it")
        + "\n"
        + text(330, 560 - 14 * n, "fetched together with the checksum it verified before")
        for n in range(3)
    ]
    code = [
        text(72, 480 - 12 * n, line, font="F3", size=10)
        for n, line in enumerate(["x <- c(1, 2)  # two", "y <- x * 2    # doubled", "z <- y"])
    ]

    blocks = blocks_of(tmp_path, [*bullets, *contents, *prose, *code])

    assert TABLE not in {b.kind for b in blocks}, [(b.kind, b.text) for b in blocks]
    words = " ".join(b.text for b in blocks)
    for expected in ("Back up the database.", "Introduction", "checksum it verified", "doubled"):
        assert expected in words


def test_a_cell_that_wraps_onto_a_second_line_stays_in_its_row(tmp_path: Path) -> None:
    options = [
        ("Option", "Default", "Meaning"),
        ("timeout", "30", "Seconds to wait for the server"),
        ("", "", "before giving up on it."),
        ("retries", "3", "How often to try again"),
        ("verbose", "off", "Print each request and"),
        ("", "", "each answer in full."),
    ]
    blocks = blocks_of(
        tmp_path,
        [
            text(72, 740, "The client reads these options from its configuration file."),
            *grid(options, (72, 170, 260), top=700),
            text(72, 580, "Unknown options are reported and ignored."),
        ],
    )

    assert [(b.kind, b.text) for b in blocks] == [
        (PARAGRAPH, "The client reads these options from its configuration file."),
        (
            TABLE,
            "Option\tDefault\tMeaning\n"
            "timeout\t30\tSeconds to wait for the server before giving up on it.\n"
            "retries\t3\tHow often to try again\n"
            "verbose\toff\tPrint each request and each answer in full.",
        ),
        (PARAGRAPH, "Unknown options are reported and ignored."),
    ]


def test_in_a_table_with_padded_rows_a_wrapped_row_label_stays_in_its_row(tmp_path: Path) -> None:
    """Rows 24 points apart (cells padded, as a word processor sets a table), a cell's lines
    13: the label's second line joins its row, and so do a label and a description wrapping
    together, in the middle of the table and in its last row."""

    def row(top: float, *cells: str) -> list[str]:
        return [text(x, top, cell) for x, cell in zip((72, 200, 280), cells, strict=True) if cell]

    blocks = blocks_of(
        tmp_path,
        [
            *row(700, "Leave", "Days", "Who approves"),
            *row(676, "Annual leave", "25", "Your manager"),
            *row(663, "(full time)", "", ""),
            *row(639, "Parental leave", "90", "Human resources,"),
            *row(626, "for either parent", "", "in writing"),
            *row(602, "Sick leave", "10", "Nobody"),
            *row(589, "(per year)", "", ""),
            text(72, 550, "Ask before you book travel."),
        ],
    )

    assert [(b.kind, b.text) for b in blocks] == [
        (
            TABLE,
            "Leave\tDays\tWho approves\n"
            "Annual leave (full time)\t25\tYour manager\n"
            "Parental leave for either parent\t90\tHuman resources, in writing\n"
            "Sick leave (per year)\t10\tNobody",
        ),
        (PARAGRAPH, "Ask before you book travel."),
    ]


def test_where_rows_are_a_line_apart_a_lone_first_column_line_ends_the_table(
    tmp_path: Path,
) -> None:
    """Rows 13 points apart: a line in the first column alone could be a wrapped label or the
    text after the table; it is not taken into the table."""
    lines = [
        ("Leave", "Days", "Who approves"),
        ("Annual leave", "25", "Your manager"),
        ("Sick leave", "10", "Nobody"),
    ]
    blocks = blocks_of(
        tmp_path,
        [
            *[
                text(x, 700 - 13 * number, cell)
                for number, cells in enumerate(lines)
                for x, cell in zip((72, 200, 280), cells, strict=True)
            ],
            text(72, 661, "(per year)"),
        ],
    )

    assert blocks[0].kind == TABLE and blocks[0].text.endswith("Sick leave\t10\tNobody")
    assert "(per year)" not in blocks[0].text


def test_a_line_in_the_first_column_after_a_table_is_not_a_wrapped_cell(tmp_path: Path) -> None:
    blocks = blocks_of(
        tmp_path,
        [
            *grid(PACKAGES, (72, 220, 340), top=700),
            text(72, 636, "All three come from the stable mirror."),
        ],
    )

    assert [b.kind for b in blocks] == [TABLE, PARAGRAPH]
    assert blocks[1].text == "All three come from the stable mirror."
    assert blocks[0].text.endswith("grep\t3.8\t0.4 MB")
