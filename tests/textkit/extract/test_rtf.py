"""Rich Text (.rtf): paragraphs and tables through striprtf, Chinese in `\\uN` escapes and in
`\\'hh` bytes of code page 936, the title from the info group or a short first line; damaged
files are refused, and pathological ones (deep nesting, many fields on one line, megabytes of
picture data) finish fast."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.textkit.extract.files import parse_file, write
from textkit.extract import (
    PARAGRAPH,
    TABLE,
    ParseError,
    UnsupportedMediaType,
    detect_media_type,
    extract,
)

RTF = "application/rtf"


def gbk_escaped(text: str) -> str:
    return "".join(f"\\'{byte:02x}" for byte in text.encode("gbk"))


WORDPAD_CHINESE = (
    r"{\rtf1\ansi\ansicpg936\deff0\nouicompat{\fonttbl{\f0\fnil\fcharset134 \'cb\'ce\'cc\'e5;}"
    r"{\f1\fnil\fcharset0 Calibri;}}"
    r"{\info{\title " + gbk_escaped("季度报告") + r"}{\author Li}}"
    "\n"
    r"\pard\f0\fs22 " + gbk_escaped("知识库管理系统将在下个季度上线。") + r"\par"
    "\n"
    r"\f1 Plain English line with caf\u233?.\par"
    "\n"
    r"\uc1\u30693?\u35782?\u24211?\par"
    "\n}"
)

WORD_TABLE = (
    r"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0 Times New Roman;}}"
    r"{\colortbl;\red0\green0\blue0;}"
    r"Quarterly Report\par "
    r"Revenue grew in every region.\par "
    r"\trowd\cellx3000\cellx6000 Region\cell Growth\cell\row"
    r"\trowd\cellx3000\cellx6000 North\cell 12%\cell\row"
    r"\pard After the table, {\b bold} and {\field{\*\fldinst{HYPERLINK "
    r'"https://example.com"}}{\fldrslt{a link}}}.\par'
    r"{\*\generator Riched20;}{\pict\pngblip " + "89504e47" * 400 + "}"
    "}"
)


def test_chinese_in_code_page_936_and_unicode_escapes(tmp_path: Path) -> None:
    path = write(tmp_path, "report.rtf", WORDPAD_CHINESE)
    assert detect_media_type("report.rtf", path.read_bytes()[:4096]) == RTF
    extracted = extract(path, RTF)
    assert extracted.title == "季度报告"
    assert [(b.kind, b.text) for b in extracted.blocks] == [
        (PARAGRAPH, "知识库管理系统将在下个季度上线。"),
        (PARAGRAPH, "Plain English line with café."),
        (PARAGRAPH, "知识库"),
    ]


def test_raw_gbk_bytes_are_read_in_the_declared_code_page(tmp_path: Path) -> None:
    data = rb"{\rtf1\ansi\ansicpg936 " + "原始字节的中文。".encode("gbk") + rb"\par Second\par}"
    assert parse_file(write(tmp_path, "raw.rtf", data), RTF) == "原始字节的中文。\n\nSecond"


def test_paragraphs_tables_links_and_first_line_title(tmp_path: Path) -> None:
    extracted = extract(write(tmp_path, "table.rtf", WORD_TABLE), RTF)
    assert extracted.title == "Quarterly Report"
    assert [(b.kind, b.text) for b in extracted.blocks] == [
        (PARAGRAPH, "Quarterly Report"),
        (PARAGRAPH, "Revenue grew in every region."),
        (TABLE, "Region\tGrowth\nNorth\t12%"),
        (PARAGRAPH, "After the table, bold and a link."),
    ]


def test_not_rtf_is_refused_by_its_first_bytes(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedMediaType, match=r"named like a Rich Text \(\.rtf\) document"):
        detect_media_type("notes.rtf", b"Just some text")
    with pytest.raises(ParseError, match=r"not a valid Rich Text \(\.rtf\) document"):
        parse_file(write(tmp_path, "fake.rtf", b"PK\x03\x04 not rtf"), RTF)


def test_rtf_without_text_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "blank.rtf", r"{\rtf1\ansi{\fonttbl{\f0 Arial;}}\par\par}")
    with pytest.raises(ParseError, match="contains no text"):
        parse_file(path, RTF)


def test_truncated_rtf_keeps_what_it_has(tmp_path: Path) -> None:
    path = write(tmp_path, "cut.rtf", WORD_TABLE[: WORD_TABLE.index("Revenue")])
    assert parse_file(path, RTF) == "Quarterly Report"


def test_too_many_groups_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from textkit.extract import rtf

    monkeypatch.setattr(rtf, "MAX_GROUPS", 1000)
    path = write(tmp_path, "groups.rtf", "{\\rtf1 " + "{x}" * 2000 + "}")
    with pytest.raises(ParseError, match="more than 1,000 groups; it may be malicious"):
        parse_file(path, RTF)


@pytest.mark.parametrize(
    "body",
    [
        # 200,000 nested groups.
        "{" * 200_000 + "deep" + "}" * 200_000,
        # Fields on one line: striprtf's hyperlink pattern was quadratic on them.
        "{\\field{\\*\\fldinst{ x}}{\\fldrslt{y}}}" * 20_000,
        # 40 MB of picture data.
        "{\\pict\\pngblip " + "0123456789abcdef" * 2_500_000 + "}text",
        # A crafted font table: striprtf's font pattern took 8 s on 32 KB of it.
        "{\\fonttbl " + "\\f1" * 1_000_000 + "}text",
        # Notes that never close, and many that do, each with a table's marks.
        "{\\footnote x" * 100_000,
        "a{\\chftn}{\\footnote\\pard\\intbl n\\cell\\par}\\par " * 20_000,
    ],
    ids=["nesting", "fields", "picture", "font-table", "open-notes", "notes"],
)
def test_pathological_rtf_finishes_fast(tmp_path: Path, body: str) -> None:
    path = write(tmp_path, "slow.rtf", "{\\rtf1\\ansi " + body + "\\par}")
    started = time.monotonic()
    parse_file(path, RTF)
    assert time.monotonic() - started < 10


def _word_row(*cells: str) -> str:
    """A table row as Word writes it: every cell's paragraphs marked \\intbl, the last one ended
    by \\cell, further ones by \\par."""
    written = "".join(r"\pard\intbl " + cell.replace("\n", r"\par ") + r"\cell " for cell in cells)
    return r"\trowd\cellx3000\cellx6000" + written + r"\pard\intbl\row "


def test_cells_holding_paragraphs_keep_every_row(tmp_path: Path) -> None:
    """Issue 37: a cell of two paragraphs split its row (14 of 21 rows kept as rows) and left
    striprtf's raw `|` in the text."""
    rows = [("Item", "Notes")] + [
        (
            f"Item {n}\nsecond line {n}" if n % 3 == 0 else f"Item {n}",
            f"Note {n}\nmore {n}" if n % 4 == 0 else f"Note {n}",
        )
        for n in range(1, 21)
    ]
    body = "".join(_word_row(*row) for row in rows)
    path = write(tmp_path, "t.rtf", r"{\rtf1\ansi\pard Before\par " + body + r"\pard After\par}")

    blocks = extract(path, RTF).blocks

    assert [b.kind for b in blocks] == [PARAGRAPH, TABLE, PARAGRAPH]
    lines = blocks[1].text.split("\n")
    assert len(lines) == 21
    assert lines[0] == "Item\tNotes"
    assert lines[3] == "Item 3 second line 3\tNote 3"
    assert lines[4] == "Item 4\tNote 4 more 4"
    assert lines[12] == "Item 12 second line 12\tNote 12 more 12"
    assert "|" not in extract(path, RTF).text()


def test_a_bar_typed_in_the_text_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path, "bar.rtf", r"{\rtf1\ansi The shell's pipe is |\par Next.\par}")
    assert [(b.kind, b.text) for b in extract(path, RTF).blocks] == [
        (PARAGRAPH, "The shell's pipe is |"),
        (PARAGRAPH, "Next."),
    ]


def test_a_nested_table_stays_in_its_cell(tmp_path: Path) -> None:
    """Issue 37: the nested table's cells became cells of the outer row."""
    nested_row = (
        r"\pard\intbl\itap2 A\nestcell B\nestcell"
        r"{\*\nesttableprops\trowd\cellx1000\cellx2000\nestrow}{\nonesttables\par}"
    )
    data = (
        r"{\rtf1\ansi"
        + _word_row("Part", "Sizes")
        + r"\trowd\cellx3000\cellx6000\pard\intbl Bolt\cell"
        + r"\pard\intbl Metric:\par "
        + nested_row.replace("A", "M4").replace("B", "4 mm")
        + nested_row.replace("A", "M6").replace("B", "6 mm")
        + r"\pard\intbl\itap1 see catalogue\cell\pard\intbl\row "
        + _word_row("Nut", "M4")
        + r"\pard After the table.\par}"
    )
    blocks = extract(write(tmp_path, "nested.rtf", data), RTF).blocks
    assert [(b.kind, b.text) for b in blocks] == [
        (TABLE, "Part\tSizes\nBolt\tMetric: M4, 4 mm; M6, 6 mm see catalogue\nNut\tM4"),
        (PARAGRAPH, "After the table."),
    ]


def test_a_layout_table_gives_its_nested_table_rows_of_their_own(tmp_path: Path) -> None:
    nested_row = (
        r"\pard\intbl\itap2 A\nestcell B\nestcell"
        r"{\*\nesttableprops\trowd\cellx1000\cellx2000\nestrow}{\nonesttables\par}"
    )
    data = (
        r"{\rtf1\ansi\trowd\cellx6000\pard\intbl Permit\par "
        + nested_row.replace("A", "Task").replace("B", "Lay down")
        + nested_row.replace("A", "Location").replace("B", "Rig floor")
        + r"\pard\intbl\itap1\cell\pard\intbl\row}"
    )
    assert parse_file(write(tmp_path, "form.rtf", data), RTF) == (
        "Permit\nTask\tLay down\nLocation\tRig floor"
    )


def test_footnotes_and_endnotes_follow_their_paragraph(tmp_path: Path) -> None:
    """The footnote destination was dropped with the headers and footers (issue 37: notes are
    the document's own text and always indexed)."""
    data = (
        r"{\rtf1\ansi\pard The survey covered every region.{\super\chftn}"
        r"{\footnote\pard\plain {\super\chftn} Households, not people.\par}\par "
        r"\trowd\cellx3000\cellx6000\pard\intbl Bolt{\super\chftn}"
        r"{\footnote\pard\plain {\super\chftn} Steel.\par}\cell\pard\intbl M4\cell\pard\intbl\row "
        r"\pard Methods are described at the end.{\super\chftn}"
        r"{\footnote\ftnalt\pard\plain {\super\chftn} By telephone.\par}\par "
        r"{\header\pard Example Corp\par}\pard Last paragraph.\par}"
    )
    blocks = extract(write(tmp_path, "notes.rtf", data), RTF).blocks
    assert [(b.kind, b.text) for b in blocks] == [
        (PARAGRAPH, "The survey covered every region.[1]"),
        (PARAGRAPH, "[1] Households, not people."),
        (TABLE, "Bolt[2]\tM4"),
        (PARAGRAPH, "[2] Steel."),
        (PARAGRAPH, "Methods are described at the end.[i]"),
        (PARAGRAPH, "[i] By telephone."),
        (PARAGRAPH, "Last paragraph."),
    ]
