"""PowerPoint (.pptx): a heading per slide, its text in reading order, its tables with their
header and its notes, all located at the slide; old .ppt files, damaged decks, zip bombs, DTDs
and climbing part names are refused with a reason."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pptx
import pytest
from pptx.util import Inches

from tests.textkit.extract.files import write
from tests.textkit.extract.test_docx import rewrite_zip
from textkit.extract import (
    HEADING,
    PARAGRAPH,
    SLIDE,
    TABLE,
    Location,
    ParseError,
    UnsupportedMediaType,
    detect_media_type,
    extract,
)

PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
TITLE_AND_CONTENT, TITLE_ONLY, BLANK = 1, 5, 6


def make_pptx(path: Path, *, core_title: str = "", slides: int = 0) -> Path:
    """A deck: a titled slide with bullets, two text boxes placed out of order and notes; a slide
    with a table; an untitled slide in Chinese; then `slides` more plain ones."""
    deck = pptx.Presentation()
    deck.core_properties.title = core_title
    first = deck.slides.add_slide(deck.slide_layouts[TITLE_AND_CONTENT])
    first.shapes.title.text = "Quarterly Review"
    first.placeholders[1].text = "Revenue grew\nCosts fell"
    right = first.shapes.add_textbox(Inches(5), Inches(6), Inches(2), Inches(1))
    right.text_frame.text = "bottom right"
    left = first.shapes.add_textbox(Inches(0.5), Inches(6), Inches(2), Inches(1))
    left.text_frame.text = "bottom left"
    first.notes_slide.notes_text_frame.text = "Thank the regional teams."
    second = deck.slides.add_slide(deck.slide_layouts[TITLE_ONLY])
    second.shapes.title.text = "Growth by region"
    table = second.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(2)).table
    for r, cells in enumerate([("Region", "Growth"), ("North", "12%"), ("South", "8%")]):
        for c, text in enumerate(cells):
            table.cell(r, c).text = text
    third = deck.slides.add_slide(deck.slide_layouts[BLANK])
    box = third.shapes.add_textbox(Inches(1), Inches(1), Inches(6), Inches(1))
    box.text_frame.text = "知识库管理系统将在下个季度上线。"
    for n in range(slides):
        extra = deck.slides.add_slide(deck.slide_layouts[TITLE_AND_CONTENT])
        extra.shapes.title.text = f"Topic {n}"
        extra.placeholders[1].text = f"Point {n}"
    deck.save(str(path))
    return path


class TestPptx:
    def test_slides_become_located_headings_with_text_tables_and_notes(
        self, tmp_path: Path
    ) -> None:
        path = make_pptx(tmp_path / "review.pptx")
        assert detect_media_type("review.pptx", path.read_bytes()[:4096]) == PPTX

        extracted = extract(path, PPTX)

        slide = {n: Location(SLIDE, n, n) for n in (1, 2, 3)}
        assert extracted.title == "Quarterly Review"
        assert [(b.kind, b.level, b.text, b.location) for b in extracted.blocks] == [
            (HEADING, 1, "Slide 1: Quarterly Review", slide[1]),
            (PARAGRAPH, 0, "Revenue grew\nCosts fell", slide[1]),
            (PARAGRAPH, 0, "bottom left", slide[1]),
            (PARAGRAPH, 0, "bottom right", slide[1]),
            (HEADING, 2, "Notes", slide[1]),
            (PARAGRAPH, 0, "Thank the regional teams.", slide[1]),
            (HEADING, 1, "Slide 2: Growth by region", slide[2]),
            (TABLE, 0, "Region\tGrowth\nNorth\t12%\nSouth\t8%", slide[2]),
            (HEADING, 1, "Slide 3", slide[3]),
            (PARAGRAPH, 0, "知识库管理系统将在下个季度上线。", slide[3]),
        ]

    def test_the_core_title_wins(self, tmp_path: Path) -> None:
        path = make_pptx(tmp_path / "r.pptx", core_title="Q3 Review 2026")
        assert extract(path, PPTX).title == "Q3 Review 2026"

    def test_hidden_slides_are_left_out_and_numbers_kept(self, tmp_path: Path) -> None:
        path = make_pptx(tmp_path / "r.pptx")
        deck = pptx.Presentation(str(path))
        deck.slides[1]._element.set("show", "0")
        deck.save(str(path))
        headings = [
            b.text for b in extract(path, PPTX).blocks if b.kind == HEADING and b.level == 1
        ]
        assert headings == ["Slide 1: Quarterly Review", "Slide 3"]

    def test_old_ppt_is_refused_with_advice(self) -> None:
        ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500)
        with pytest.raises(UnsupportedMediaType, match=r"old-style PowerPoint \(\.ppt\)"):
            detect_media_type("deck.pptx", ole)
        with pytest.raises(UnsupportedMediaType, match=r'"\.ppt" are not supported.*PowerPoint'):
            detect_media_type("deck.ppt", ole)

    def test_truncated_deck_is_refused(self, tmp_path: Path) -> None:
        data = make_pptx(tmp_path / "whole.pptx").read_bytes()
        path = write(tmp_path, "cut.pptx", data[: len(data) // 2])
        with pytest.raises(ParseError, match=r"not a valid PowerPoint \(\.pptx\) presentation"):
            extract(path, PPTX)

    def test_garbage_is_refused(self, tmp_path: Path) -> None:
        path = write(tmp_path, "noise.pptx", os.urandom(3000))
        with pytest.raises(ParseError, match="not a valid PowerPoint"):
            extract(path, PPTX)

    def test_a_word_document_named_pptx_is_refused(self, tmp_path: Path) -> None:
        source = make_pptx(tmp_path / "r.pptx")
        with zipfile.ZipFile(source) as opened:
            types = opened.read("[Content_Types].xml").replace(
                b"presentationml.presentation.main+xml", b"wordprocessingml.document.main+xml"
            )
        path = rewrite_zip(source, tmp_path / "doc.pptx", {"[Content_Types].xml": types})
        with pytest.raises(ParseError, match=r"not a PowerPoint \(\.pptx\) presentation"):
            extract(path, PPTX)

    def test_zip_bomb_is_refused(self, tmp_path: Path) -> None:
        zeros = {"ppt/media/zeros.bin": bytes(20 * 1024 * 1024)}
        path = rewrite_zip(make_pptx(tmp_path / "r.pptx"), tmp_path / "bomb.pptx", zeros)
        with pytest.raises(ParseError, match="compressed more than 100:1; it may be a zip bomb"):
            extract(path, PPTX)

    def test_billion_laughs_in_a_slide_is_refused(self, tmp_path: Path) -> None:
        source = make_pptx(tmp_path / "r.pptx")
        with zipfile.ZipFile(source) as opened:
            slide = opened.read("ppt/slides/slide1.xml")
        declaration, _, rest = slide.partition(b"?>")
        lol = b'<!DOCTYPE l [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        path = rewrite_zip(
            source,
            tmp_path / "lol.pptx",
            {"ppt/slides/slide1.xml": declaration + b"?>" + lol + rest},
        )
        with pytest.raises(ParseError, match=r'part "ppt/slides/slide1\.xml" declares a DTD'):
            extract(path, PPTX)

    def test_path_traversal_entry_is_refused(self, tmp_path: Path) -> None:
        evil = {"../evil.xml": b"<x/>"}
        path = rewrite_zip(make_pptx(tmp_path / "r.pptx"), tmp_path / "evil.pptx", evil)
        with pytest.raises(ParseError, match=r'part named "\.\./evil\.xml" that points outside'):
            extract(path, PPTX)


def test_a_slide_without_text_gives_no_block(tmp_path: Path) -> None:
    """Issue 37: an empty slide still read "Slide 1"."""
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[TITLE_AND_CONTENT])  # empty placeholders
    second = deck.slides.add_slide(deck.slide_layouts[BLANK])
    second.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame.text = "Hi"
    path = tmp_path / "deck.pptx"
    deck.save(str(path))

    extracted = extract(path, PPTX)

    assert [(b.kind, b.text) for b in extracted.blocks] == [(HEADING, "Slide 2"), (PARAGRAPH, "Hi")]


def test_a_deck_without_text_is_refused_with_the_reason(tmp_path: Path) -> None:
    """Issue 37: a deck of pictures became a live document reading "Slide 1"."""
    deck = pptx.Presentation()
    for _ in range(2):
        slide = deck.slides.add_slide(deck.slide_layouts[TITLE_AND_CONTENT])
        slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame.text = " "
    path = tmp_path / "pictures.pptx"
    deck.save(str(path))

    with pytest.raises(ParseError, match="The presentation has no text"):
        extract(path, PPTX)
