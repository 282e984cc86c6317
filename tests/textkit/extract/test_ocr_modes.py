"""What OCR reads, as the knowledge base (and the server) choose (`ocr.OcrOptions.mode`): off —
a PDF's pages without a text layer are skipped and named, a PDF with no text layer at all and
an image fail saying OCR is off, and the engine is never loaded; pages without text only (the
default) — pictures on text pages are not read; always — they are, each picture once."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PIL import Image
from pypdf import PdfReader, PdfWriter, Transformation

from tests.textkit.extract.files import write
from tests.textkit.extract.ocr_fixtures import encoded, page, scanned_pdf
from tests.textkit.extract.pdf_fixtures import make_pdf
from textkit.extract import PAGE, Location, ParseError, extract, ocr, progress

PDF = "application/pdf"
ROOT = Path(__file__).resolve().parents[3]
OFF = ocr.OcrOptions(mode=ocr.OFF, off_reason="OCR is off for this knowledge base")
ALWAYS = ocr.OcrOptions(mode=ocr.ALWAYS)


def joined(*pdfs: bytes) -> bytes:
    writer = PdfWriter()
    for data in pdfs:
        for pdf_page in PdfReader(io.BytesIO(data)).pages:
            writer.add_page(pdf_page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def with_picture(text_pdf: bytes, picture: Image.Image, *, pages: int = 1) -> bytes:
    """`text_pdf` with `picture` placed at the foot of each of its first `pages` pages (the
    same picture object: a logo, say)."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf)))
    stamp = PdfReader(io.BytesIO(scanned_pdf([picture]))).pages[0]
    width = float(stamp.mediabox.width)
    for pdf_page in writer.pages[:pages]:
        # 450 points wide, 72 points above the page's foot
        pdf_page.merge_transformed_page(
            stamp, Transformation().scale(450 / width).translate(72, 72)
        )
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def squeezed(text: str) -> str:
    return "".join(text.split())


def mixed_pdf() -> bytes:
    return joined(
        make_pdf([["Chapter one is typed text."]]),
        scanned_pdf([page([["Chapter two was scanned from paper."]])]),
        make_pdf([["Chapter three is typed again."]]),
        scanned_pdf([page([["Chapter four was scanned too."]])]),
    )


# --- off ------------------------------------------------------------------------------------


def test_off_a_mixed_pdf_keeps_its_text_pages_and_names_the_pages_skipped(
    tmp_path: Path,
) -> None:
    labels: list[str] = []
    with ocr.configured(OFF), progress.reporting(labels.append):
        extracted = extract(write(tmp_path, "mixed.pdf", mixed_pdf()), PDF)
    assert [(b.location, b.text) for b in extracted.blocks] == [
        (Location(PAGE, 1, 1), "Chapter one is typed text."),
        (Location(PAGE, 3, 3), "Chapter three is typed again."),
    ]
    assert extracted.notes == [
        "Pages 2 and 4 have no text layer and were not read: OCR is off for this knowledge base."
    ]
    assert labels == []  # no OCR ran


def test_off_a_pdf_without_any_text_layer_fails_saying_ocr_is_off(tmp_path: Path) -> None:
    data = scanned_pdf([page([["Only a scan."]])])
    with ocr.configured(OFF), pytest.raises(ParseError) as failed:
        extract(write(tmp_path, "scan.pdf", data), PDF)
    assert str(failed.value) == (
        "The PDF has no text layer, and OCR is off for this knowledge base, so nothing in it "
        "could be read. Turn OCR on, or upload the PDF with a text layer."
    )


def test_off_an_image_fails_saying_ocr_is_off(tmp_path: Path) -> None:
    data = encoded(page([["A photo of a notice."]]), "PNG")
    with ocr.configured(OFF), pytest.raises(ParseError, match="OCR is off for this knowledge base"):
        extract(write(tmp_path, "notice.png", data), "image/png")


def test_the_stored_form_keeps_the_notes(tmp_path: Path) -> None:
    with ocr.configured(OFF):
        extracted = extract(write(tmp_path, "mixed.pdf", mixed_pdf()), PDF)
    again = type(extracted).from_json(extracted.to_json())
    assert again.notes == extracted.notes and again.blocks == extracted.blocks


def test_off_never_loads_the_engine(tmp_path: Path) -> None:
    """In a fresh process: a mixed PDF and an image with OCR off import no OCR engine."""
    pdf = write(tmp_path, "mixed.pdf", mixed_pdf())
    png = write(tmp_path, "notice.png", encoded(page([["A notice."]], page_size=(400, 200)), "PNG"))
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from textkit.extract import ParseError, extract, ocr

        with ocr.configured(ocr.OcrOptions(mode=ocr.OFF)):
            print(len(extract(Path({str(pdf)!r}), "application/pdf").blocks))
            try:
                extract(Path({str(png)!r}), "image/png")
            except ParseError as exc:
                print(exc)
        print(ocr._ENGINE is None, "onnxruntime" in sys.modules, "rapidocr" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "2"
    assert lines[1].startswith("OCR is off, and an image's text can only be read by OCR.")
    assert lines[2] == "True False False"


# --- pages without text only (the default) and always ---------------------------------------

PICTURE = page([["Figure 3: the valve opens at forty bar."]], size=34, page_size=(1240, 200))


def test_by_default_pictures_on_pages_with_text_are_not_read(tmp_path: Path) -> None:
    data = with_picture(make_pdf([["Typed text about the valve."]]), PICTURE)
    labels: list[str] = []
    with progress.reporting(labels.append):
        blocks = extract(write(tmp_path, "figure.pdf", data), PDF).blocks
    assert [b.text for b in blocks] == ["Typed text about the valve."]
    assert labels == []


def test_always_reads_the_pictures_on_pages_with_text_after_their_text(tmp_path: Path) -> None:
    data = joined(
        with_picture(make_pdf([["Typed text about the valve."]]), PICTURE),
        scanned_pdf([page([["A scanned page follows."]])]),
    )
    labels: list[str] = []
    with ocr.configured(ALWAYS), progress.reporting(labels.append):
        blocks = extract(write(tmp_path, "figure.pdf", data), PDF).blocks
    assert [(b.location, squeezed(b.text)) for b in blocks] == [
        (Location(PAGE, 1, 1), "Typedtextaboutthevalve."),
        (Location(PAGE, 1, 1), "Figure3:thevalveopensatfortybar."),
        (Location(PAGE, 2, 2), "Ascannedpagefollows."),
    ]
    assert labels == [
        "OCR of the pictures on page 1/2",
        "OCR of page 2/2 (1 of 1 with no text layer)",
    ]


def test_always_reads_a_picture_repeated_on_every_page_once(tmp_path: Path) -> None:
    data = with_picture(make_pdf([["Page one."], ["Page two."], ["Page three."]]), PICTURE, pages=3)
    with ocr.configured(ALWAYS):
        blocks = extract(write(tmp_path, "logo.pdf", data), PDF).blocks
    assert [(b.location, squeezed(b.text)) for b in blocks] == [
        (Location(PAGE, 1, 1), "Pageone."),
        (Location(PAGE, 1, 1), "Figure3:thevalveopensatfortybar."),
        (Location(PAGE, 2, 2), "Pagetwo."),
        (Location(PAGE, 3, 3), "Pagethree."),
    ]


def test_always_counts_pages_with_pictures_against_the_page_limit(tmp_path: Path) -> None:
    data = with_picture(make_pdf([["One."], ["Two."]]), PICTURE, pages=2)
    limited = ocr.OcrOptions(mode=ocr.ALWAYS, max_pages=1)
    with (
        ocr.configured(limited),
        pytest.raises(ParseError, match=r"2 pages that need OCR \(pages without a text layer, and"),
    ):
        extract(write(tmp_path, "two.pdf", data), PDF)
