"""PDF: the text of every page; encrypted, truncated, garbage, image-only and too long files
refused (one only owner-protected read); words set apart by kerning not glued, layout line
breaks undone, running headers, footers, page numbers and dot leaders dropped, CJK wraps
removed; the title and headings from metadata and bookmarks, else a short first line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.textkit.extract.files import parse_file, write
from tests.textkit.extract.pdf_fixtures import (
    build_pdf,
    encrypt_pdf,
    make_pdf,
    text_page,
    with_metadata_and_outline,
)
from textkit.extract import (
    APPLICATION_PDF,
    HEADING,
    PARAGRAPH,
    ParseError,
    detect_media_type,
    extract,
)


class TestPdf:
    def test_extracts_text_of_every_page(self, tmp_path: Path) -> None:
        data = make_pdf([["Hello PDF world.", "Second line (with parens)."], ["Page two."]])
        path = write(tmp_path, "doc.pdf", data)
        assert detect_media_type("doc.pdf", data[:4096]) == APPLICATION_PDF
        assert parse_file(path, APPLICATION_PDF) == (
            "Hello PDF world.\nSecond line (with parens).\n\nPage two."
        )

    def test_encrypted_pdf_is_refused(self, tmp_path: Path) -> None:
        data = encrypt_pdf(make_pdf([["Secret text."]]), user_password="u", owner_password="o")
        with pytest.raises(ParseError, match="The PDF is encrypted; upload an unencrypted copy"):
            parse_file(write(tmp_path, "enc.pdf", data), APPLICATION_PDF)

    def test_pdf_protected_only_by_an_owner_password_is_read(self, tmp_path: Path) -> None:
        data = encrypt_pdf(make_pdf([["Readable text."]]), user_password="", owner_password="o")
        assert parse_file(write(tmp_path, "owner.pdf", data), APPLICATION_PDF) == "Readable text."

    @pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
    def test_truncated_pdf_is_refused(self, tmp_path: Path, keep: float) -> None:
        data = make_pdf([["Some text here."], ["More text."]])
        path = write(tmp_path, "cut.pdf", data[: int(len(data) * keep)])
        with pytest.raises(ParseError, match="damaged or truncated"):
            parse_file(path, APPLICATION_PDF)

    @pytest.mark.parametrize("header", [b"%PDF-1.4\n", b""])
    def test_garbage_is_refused(self, tmp_path: Path, header: bytes) -> None:
        path = write(tmp_path, "junk.pdf", header + os.urandom(2000))
        with pytest.raises(ParseError, match="damaged or truncated"):
            parse_file(path, APPLICATION_PDF)

    def test_pdf_of_empty_pages_is_refused(self, tmp_path: Path) -> None:
        # Nothing on the pages at all, so nothing for OCR either (scans: test_pdf_ocr.py).
        path = write(tmp_path, "empty.pdf", make_pdf([[], []]))
        with pytest.raises(ParseError, match="The PDF has no text: its pages are empty"):
            parse_file(path, APPLICATION_PDF)

    def test_pdf_longer_than_the_limit_is_refused(self, tmp_path: Path) -> None:
        path = write(tmp_path, "long.pdf", make_pdf([["A" * 60]] * 5))
        with pytest.raises(ParseError, match="longer than the limit of 200 characters"):
            parse_file(path, APPLICATION_PDF, max_chars=200)


def test_pdf_words_set_apart_by_kerning_are_not_glued(tmp_path: Path) -> None:
    # A two-byte font with words separated only by TJ offsets, as in TeX output: a text
    # extractor that ignores the offsets runs the words together.
    words = ["This", "document", "can", "be", "used", "according", "to", "the", "terms."]
    content = "BT /F2 10 Tf 72 700 Td [" + "-317".join(f"{{{w}}}" for w in words) + "] TJ ET"
    data = build_pdf([content], unicode_font="".join(words))
    text = extract(write(tmp_path, "tex.pdf", data), APPLICATION_PDF).text()
    assert text == "This document can be used according to the terms."


def test_pdf_layout_line_breaks_inside_a_paragraph_are_undone(tmp_path: Path) -> None:
    # PDFium takes a hyphen at a line end for a hyphenation point; the word is joined again.
    lines = [
        "Canon keeps one complete version of every document visible to search at",
        "any time. A build becomes live only when every chunk has been written and",
        "verified, so that a reader never sees half of a new revision and half of an",
        "old one. The switch is a single conditional update of the document row.",
        "Short last line.",
        "The next paragraph starts here and wraps onto a second line because it is",
        "long enough to need one, and it ends with a hyphen-",
        "ated word.",
    ]
    data = build_pdf([text_page(lines)])
    blocks = extract(write(tmp_path, "prose.pdf", data), APPLICATION_PDF).blocks
    assert [block.text for block in blocks] == [
        "Canon keeps one complete version of every document visible to search at any time. "
        "A build becomes live only when every chunk has been written and verified, so that a "
        "reader never sees half of a new revision and half of an old one. The switch is a "
        "single conditional update of the document row.\nShort last line.",
        "The next paragraph starts here and wraps onto a second line because it is long "
        "enough to need one, and it ends with a hyphenated word.",
    ]


def test_pdf_running_headers_footers_and_page_numbers_are_dropped(tmp_path: Path) -> None:
    topics = ["leases", "builds", "chunks", "search", "uploads", "retention"]
    pages = [
        text_page(
            [
                f"Canon Operations Guide - Chapter {1 + page // 3}",
                f"This page explains {topic}.",
                f"Operators read about {topic} here.",
                f"Nothing else is said about {topic}.",
                "Confidential - do not distribute",
                f"{page + 1}",
            ]
        )
        for page, topic in enumerate(topics)
    ]
    text = extract(write(tmp_path, "guide.pdf", build_pdf(pages)), APPLICATION_PDF).text()
    assert "Canon Operations Guide" not in text and "Confidential" not in text
    assert not re.search(r"^\d+$", text, re.MULTILINE)
    for topic in topics:
        assert f"This page explains {topic}." in text


def test_pdf_table_of_contents_dot_leaders_are_dropped(tmp_path: Path) -> None:
    toc = text_page(
        [
            "Contents",
            "1 Introduction .................................... 3",
            "2 Installation . . . . . . . . . . . . . . . . . . . . 7",
            "Appendix A ........................................ xii",
        ]
    )
    body = text_page(["1 Introduction", "Canon manages knowledge bases for retrieval."])
    text = extract(write(tmp_path, "toc.pdf", build_pdf([toc, body])), APPLICATION_PDF).text()
    assert text == "Contents\n\n1 Introduction\nCanon manages knowledge bases for retrieval."


def test_pdf_cjk_line_breaks_and_spaces_inside_words_are_removed(tmp_path: Path) -> None:
    content = (
        "BT /F2 12 Tf 72 700 Td {知识} Tj 40 0 Td {库管理} Tj ET "
        "BT /F2 12 Tf 72 684 Td {系统支持上传文档。} Tj ET "
        "BT /F2 12 Tf 72 668 Td {每次检索} Tj ET"
    )
    data = build_pdf([content], unicode_font="知识库管理系统支持上传文档。每次检索")
    text = extract(write(tmp_path, "zh.pdf", data), APPLICATION_PDF).text()
    assert text == "知识库管理系统支持上传文档。\n每次检索"


def test_pdf_title_and_headings_come_from_metadata_and_bookmarks(tmp_path: Path) -> None:
    pages = [
        text_page(["Canon Manual", "An introduction for operators."]),
        text_page(["1 Installation", "Install the package.", "1.1 Requirements",
                   "PostgreSQL with pgvector."]),
    ]  # fmt: skip
    data = with_metadata_and_outline(
        build_pdf(pages),
        title="The Canon Manual",
        outline=(("Installation", 1, 0), ("Requirements", 1, 1)),
    )
    extracted = extract(write(tmp_path, "manual.pdf", data), APPLICATION_PDF)
    assert extracted.title == "The Canon Manual"
    assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
        (PARAGRAPH, 0, "Canon Manual\nAn introduction for operators."),
        (HEADING, 1, "Installation"),
        (PARAGRAPH, 0, "Install the package."),
        (HEADING, 2, "Requirements"),
        (PARAGRAPH, 0, "PostgreSQL with pgvector."),
    ]


@pytest.mark.parametrize("metadata_title", ["", "Microsoft Word - guide.docx", "a.dvi"])
def test_pdf_title_falls_back_to_a_short_first_line(tmp_path: Path, metadata_title: str) -> None:
    data = with_metadata_and_outline(
        build_pdf([text_page(["Canon Manual", "An introduction."])]), title=metadata_title
    )
    assert extract(write(tmp_path, "m.pdf", data), APPLICATION_PDF).title == "Canon Manual"
