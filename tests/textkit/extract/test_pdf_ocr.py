"""Scanned PDF pages (no text layer) read by OCR: page locations right, a mixed PDF keeps its
text-layer pages, pages with nothing on them are not sent to OCR, a scan without text and a
scan past the page limit are refused readably, and progress names the PDF's page OCR reads and
how many of its pages have no text layer."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from tests.textkit.extract.files import write
from tests.textkit.extract.ocr_fixtures import page, scanned_pdf
from tests.textkit.extract.pdf_fixtures import make_pdf
from textkit.extract import PAGE, Location, ParseError, extract, ocr, progress

PDF = "application/pdf"


def joined(*pdfs: bytes) -> bytes:
    writer = PdfWriter()
    for data in pdfs:
        for pdf_page in PdfReader(io.BytesIO(data)).pages:
            writer.add_page(pdf_page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_scanned_pdf_is_read_page_by_page(tmp_path: Path) -> None:
    data = scanned_pdf(
        [
            page([["The warranty covers the compressor", "for five years from delivery."]]),
            page([["Claims go to the service desk", "with the serial number."]]),
        ]
    )
    labels: list[str] = []
    with progress.reporting(labels.append):
        extracted = extract(write(tmp_path, "scan.pdf", data), PDF)
    # The recognition model sometimes drops a space between English words ("withthe").
    assert [(b.location, "".join(b.text.split())) for b in extracted.blocks] == [
        (Location(PAGE, 1, 1), "Thewarrantycoversthecompressorforfiveyearsfromdelivery."),
        (Location(PAGE, 2, 2), "Claimsgototheservicedeskwiththeserialnumber."),
    ]
    assert labels == [
        "OCR of page 1/2 (1 of 2 with no text layer)",
        "OCR of page 2/2 (2 of 2 with no text layer)",
    ]


def test_a_mixed_pdf_keeps_its_text_layer_pages(tmp_path: Path) -> None:
    data = joined(
        make_pdf([["Chapter one is typed text."]]),
        scanned_pdf([page([["Chapter two was scanned from paper."]])]),
        make_pdf([["Chapter three is typed again."]]),
    )
    labels: list[str] = []
    with progress.reporting(labels.append):
        blocks = extract(write(tmp_path, "mixed.pdf", data), PDF).blocks
    assert [(b.location, "".join(b.text.split())) for b in blocks] == [
        (Location(PAGE, 1, 1), "Chapteroneistypedtext."),
        (Location(PAGE, 2, 2), "Chaptertwowasscannedfrompaper."),
        (Location(PAGE, 3, 3), "Chapterthreeistypedagain."),
    ]
    # the page OCR reads is the PDF's second, its only one without text (not "OCR page 1/1")
    assert labels == ["OCR of page 2/3 (1 of 1 with no text layer)"]


def test_a_scanned_chinese_page(tmp_path: Path) -> None:
    data = scanned_pdf([page([["合同自双方签字之日起生效。"]], size=36)])
    assert "签字之日起生效" in extract(write(tmp_path, "合同.pdf", data), PDF).text()


def test_blank_pages_of_a_text_pdf_cost_no_ocr(tmp_path: Path) -> None:
    labels: list[str] = []
    with progress.reporting(labels.append):
        text = extract(write(tmp_path, "gaps.pdf", make_pdf([["Typed."], [], ["More."]])), PDF)
    assert [b.location for b in text.blocks] == [Location(PAGE, 1, 1), Location(PAGE, 3, 3)]
    assert labels == []


def test_a_scan_without_any_text_is_refused(tmp_path: Path) -> None:
    data = scanned_pdf([page([], page_size=(600, 800))])
    with pytest.raises(ParseError, match="no text layer, and OCR found no text on them"):
        extract(write(tmp_path, "white.pdf", data), PDF)


def test_more_scanned_pages_than_the_limit_are_refused_before_ocr(tmp_path: Path) -> None:
    blank = page([], page_size=(300, 300))
    labels: list[str] = []
    with (
        ocr.configured(ocr.OcrOptions(max_pages=2)),
        progress.reporting(labels.append),
        pytest.raises(ParseError, match=r"3 pages that need OCR .* limit is 2 pages"),
    ):
        extract(write(tmp_path, "long.pdf", scanned_pdf([blank] * 3)), PDF)
    assert labels == []


def test_the_time_limit_fails_the_document(tmp_path: Path) -> None:
    data = scanned_pdf([page([["One."]]), page([["Two."]])])
    limited = ocr.configured(ocr.OcrOptions(max_seconds=0))
    with limited, pytest.raises(ParseError, match="OCR took longer than the limit of 0 seconds"):
        extract(write(tmp_path, "slow.pdf", data), PDF)
