"""PDF: the text layer through PDFium (pypdfium2), rebuilt into paragraphs.

Measured with `python -m bench.pdf_extract` on nine Debian manuals (English, Japanese, Chinese;
40 pages each): pypdfium2 5.15.2 read 611 pages/s, pypdf 7.1.1 43 and pdfminer.six 24.
Glued words (Latin words of 18 letters or more, per mille) were as low with pypdfium2 as with
pdfminer (0-27 ‰; the rest are real identifiers), while pypdf ran words together on some files
(118 ‰ on auto-multiple-choice, 185 ‰ on the LinuxCNC manual against 0 ‰). PDFium marks a
hyphenation point at a line end with U+0002, which joins the word again here.

Then, page by page: running headers and footers and page numbers are dropped
(`cleanup.drop_page_furniture`), table-of-contents lines are dropped, layout line breaks inside
a paragraph are undone, and the PDF's outline (bookmarks) supplies the headings, placed at the
line of the page that carries the bookmark's title (or at the top of its page). The title is
the metadata title, else a short first line, else the first bookmark on the first pages.

A page without a text layer (a scan) is rendered and read by OCR (`ocr`): its paragraphs come
from the OCR's layout, and it goes through the same header, footer and bookmark steps as the
others. A mixed PDF keeps its text-layer pages as they are; a page with nothing on it at all (no
page objects) is not sent to OCR. With OCR off, such pages are skipped and named in the
extraction's notes (a PDF with no text anywhere then fails, saying so); with OCR set to
`ALWAYS`, the pictures placed on pages that have a text layer are read too, each picture once
(a logo on every page is read where it first stands), their paragraphs after the page's text.

PDFium is not thread-safe, so one lock serialises its use in a process; a page is rendered under
it and read by OCR outside it.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pypdfium2
import pypdfium2.raw as pdfium_c

from textkit.extract import cleanup, ocr, progress
from textkit.extract.base import (
    HEADING,
    PAGE,
    PARAGRAPH,
    PDF_MAGIC,
    Block,
    Extracted,
    Location,
    ParseError,
    UnsupportedMediaType,
    merged_location,
    too_long,
)
from textkit.extract.pdf_tables import Table, find_tables, line_key, table_blocks
from textkit.extract.plain import MAX_TITLE_LINE
from textkit.reasons import reason
from textkit.words import gettext_noop

if TYPE_CHECKING:
    from PIL.Image import Image

MEDIA_TYPES = ("application/pdf",)
EXTENSIONS = {".pdf": "application/pdf"}
LABEL = gettext_noop("PDF")

NOT_A_PDF = reason(
    "pdf.not_pdf", gettext_noop("The file is named like a PDF, but its content is not a PDF.")
)
ENCRYPTED = reason(
    "pdf.encrypted", gettext_noop("The PDF is encrypted; upload an unencrypted copy.")
)
DAMAGED = reason("pdf.damaged", gettext_noop("The PDF is damaged or truncated and cannot be read."))
# `off`: why OCR is off (`ocr.OcrOptions.off_reason`, words marked where they are written).
NO_TEXT_LAYER_OCR_OFF = reason(
    "pdf.no_text_layer_ocr_off",
    gettext_noop(
        "The PDF has no text layer, and %(off)s, so nothing in it could be read. Turn OCR on, "
        "or upload the PDF with a text layer."
    ),
    words=("off",),
)
NO_TEXT_FOUND_BY_OCR = reason(
    "pdf.no_text_found_by_ocr",
    gettext_noop(
        "The PDF has no text: its pages have no text layer, and OCR found no text on them."
    ),
)
EMPTY_PAGES = reason("pdf.empty_pages", gettext_noop("The PDF has no text: its pages are empty."))
PAGE_DAMAGED = reason(
    "pdf.page_damaged",
    gettext_noop("Page %(page)s of the PDF is damaged and cannot be rendered for OCR."),
)
PICTURE_TOO_LARGE = reason(
    "pdf.picture_too_large",
    gettext_noop(
        "A picture on page %(page)s is %(width)s by %(height)s pixels; the limit for OCR is "
        "%(limit)s pixels."
    ),
)


def check_head(head: bytes, media_type: str) -> None:
    if not head.startswith(PDF_MAGIC):
        raise UnsupportedMediaType(NOT_A_PDF())


_PDFIUM_LOCK = threading.Lock()
_SOFT_HYPHEN_BREAK_RE = re.compile("\x02[ \t]*\n")
# Titles that name the file or the program, not the document.
_JUNK_TITLE_RE = re.compile(
    r"untitled|.*\.(?:dvi|tex|pdf|docx?|odt|indd|ps|eps|qxd|txt)|microsoft word - .*",
    re.IGNORECASE,
)
_SPACES_RE = re.compile(r"\s+")
# What may stand before a heading's title on its line, spaces removed and case folded:
# "4.5", "Chapter 3", "A.2", "第3章".
_SECTION_NUMBER_RE = re.compile(
    r"(?:chapter|section|part|appendix|第)?(?:[a-z]\.)?[\divxlc.\-:]{0,12}[章节部分]?"
)
# A bookmark on one of the first pages can be the document's title.
_TITLE_BOOKMARK_PAGES = 2

Outline = dict[int, list[tuple[int, str]]]


def extract(path: Path, *, max_chars: int) -> Extracted:
    with _PDFIUM_LOCK:
        try:
            document = pypdfium2.PdfDocument(path)
        except pypdfium2.PdfiumError as exc:
            if getattr(exc, "err_code", None) in (
                pdfium_c.FPDF_ERR_PASSWORD,
                pdfium_c.FPDF_ERR_SECURITY,
            ):
                raise ParseError(ENCRYPTED()) from exc
            raise ParseError(DAMAGED()) from exc
        try:
            metadata_title = _metadata_title(document)
            outline = _outline(document)
            pages, tables = _pages_text(document, max_chars)
        except BaseException as exc:
            document.close()
            if isinstance(exc, pypdfium2.PdfiumError):
                raise ParseError(DAMAGED()) from exc
            raise
    try:
        read = _ocr_pages(document, pages)
    finally:
        with _PDFIUM_LOCK:
            document.close()
    scanned = read.scanned
    pages = [scanned.get(index, lines) for index, lines in enumerate(pages)]
    if not any(line.strip() for lines in pages for line in lines) and not read.pictures:
        if read.skipped:
            raise ParseError(NO_TEXT_LAYER_OCR_OFF(off=_lower_first(read.off_reason)))
        if scanned:
            raise ParseError(NO_TEXT_FOUND_BY_OCR())
        raise ParseError(EMPTY_PAGES())
    blocks = _blocks(pages, outline, set(scanned), tables, read.pictures)
    notes = [_skipped_note(read.skipped, read.off_reason)] if read.skipped else []
    return Extracted(title=_title(metadata_title, outline, blocks), blocks=blocks, notes=notes)


def _lower_first(text: str) -> str:
    """A sentence's start put inside another sentence ("OCR" stays as it is)."""
    return text if text[:2].isupper() else text[:1].lower() + text[1:]


def _skipped_note(skipped: list[int], reason: str) -> str:
    """ "Pages 2 and 5 have no text layer and were not read: OCR is off for this knowledge
    base." (at most 20 pages named)."""
    numbers = [str(index + 1) for index in skipped]
    if len(numbers) == 1:
        return f"Page {numbers[0]} has no text layer and was not read: {_lower_first(reason)}."
    if len(numbers) > 20:
        listed = ", ".join(numbers[:20]) + f" and {len(numbers) - 20} more"
    else:
        listed = ", ".join(numbers[:-1]) + " and " + numbers[-1]
    return f"Pages {listed} have no text layer and were not read: {_lower_first(reason)}."


def _pages_text(
    document: pypdfium2.PdfDocument, max_chars: int
) -> tuple[list[list[str]], dict[int, list[Table]]]:
    """Each page's text lines, and the tables found on the pages that have some."""
    pages: list[list[str]] = []
    tables: dict[int, list[Table]] = {}
    length = 0
    for index in range(len(document)):
        page = document[index]
        try:
            textpage = page.get_textpage()
            try:
                text = textpage.get_text_bounded()
                found = find_tables(textpage) if text.strip() else []
                if found:
                    tables[index] = found
            finally:
                textpage.close()
        finally:
            page.close()
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        text = _SOFT_HYPHEN_BREAK_RE.sub("", text).replace("\x02", "")
        length += len(text) + 2
        if length > max_chars + 2:
            raise too_long(max_chars)
        pages.append(text.split("\n"))
    return pages, tables


@dataclass
class _OcrRead:
    """What OCR read, by page index: the paragraphs of pages without a text layer (`scanned`),
    those of the pictures on pages with one (`pictures`, OCR set to always), and the pages
    without a text layer left unread because OCR is off (`skipped`, and why)."""

    scanned: dict[int, list[str]] = field(default_factory=dict)
    pictures: dict[int, list[str]] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)
    off_reason: str = ""


# A picture smaller than this (pixels) is a rule, a bullet or an icon: never text worth OCR.
_PICTURE_MIN_WIDTH = 64
_PICTURE_MIN_HEIGHT = 24


def _ocr_pages(document: pypdfium2.PdfDocument, pages: list[list[str]]) -> _OcrRead:
    """OCR of the pages without a text layer and, when OCR is always on, of the pictures on the
    pages with one; every page read counts once against the page limit."""
    options = ocr.current_options()
    scanned = []
    with _PDFIUM_LOCK:
        for index, lines in enumerate(pages):
            if not any(line.strip() for line in lines) and _has_objects(document, index):
                scanned.append(index)
        with_pictures = (
            {i for i in range(len(pages)) if i not in scanned and _has_pictures(document, i)}
            if options.mode == ocr.ALWAYS
            else set()
        )
    if not options.on:
        return _OcrRead(skipped=scanned, off_reason=options.off_reason)
    read = _OcrRead()
    if not scanned and not with_pictures:
        return read
    session = ocr.DocumentOcr(len(scanned) + len(with_pictures))
    seen: set[str] = set()
    for index in sorted([*scanned, *with_pictures]):
        if index in with_pictures:
            with _PDFIUM_LOCK:
                pictures = _pictures(document, index, seen)
            progress.report(f"OCR of the pictures on page {index + 1}/{len(pages)}")
            with progress.reporting(_unsaid):
                texts = [p.text for found in session.pictures(pictures) for p in found]
            if texts:
                read.pictures[index] = texts
            continue
        with _PDFIUM_LOCK:
            try:
                image = _render(document, index)
            except pypdfium2.PdfiumError as exc:
                raise ParseError(PAGE_DAMAGED(page=index + 1)) from exc
        # Said of the PDF's own pages: the engine's "OCR page 1/1" read as if the whole file
        # were a scan while one page without text (a cover) of a text PDF was read.
        progress.report(
            f"OCR of page {index + 1}/{len(pages)} "
            f"({scanned.index(index) + 1} of {len(scanned)} with no text layer)"
        )
        with progress.reporting(_unsaid):
            read.scanned[index] = [paragraph.text for paragraph in session.page(image)]
        del image
    return read


def _picture_objects(page: pypdfium2.PdfPage) -> list[pypdfium2.PdfImage]:
    """The page's pictures large enough to hold text (pixels of the picture itself)."""
    found = []
    for picture in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE]):
        if isinstance(picture, pypdfium2.PdfImage):
            width, height = picture.get_px_size()
            if width >= _PICTURE_MIN_WIDTH and height >= _PICTURE_MIN_HEIGHT:
                found.append(picture)
    return found


def _has_pictures(document: pypdfium2.PdfDocument, index: int) -> bool:
    page = document[index]
    try:
        return bool(_picture_objects(page))
    finally:
        page.close()


def _pictures(document: pypdfium2.PdfDocument, index: int, seen: set[str]) -> list[Image]:
    """The pictures on page `index` not read already (`seen`: their streams' hashes), drawn as
    placed on the page (turned, masked), at most `ocr.MAX_SIDE` pixels on their longer side.
    Call with `_PDFIUM_LOCK` held."""
    from PIL import Image as PILImage

    page = document[index]
    found = []
    try:
        for picture in _picture_objects(page):
            width, height = picture.get_px_size()
            ocr.check_pixels(width, height, too_large=PICTURE_TOO_LARGE, page=index + 1)
            digest = hashlib.sha256(bytes(picture.get_data())).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            try:
                bitmap = picture.get_bitmap(render=True)
            except pypdfium2.PdfiumError:
                continue  # a picture PDFium cannot draw is skipped, as a viewer would
            try:
                image = bitmap.to_pil().convert("L")
            finally:
                bitmap.close()
            if max(image.size) > ocr.MAX_SIDE:
                image.thumbnail((ocr.MAX_SIDE, ocr.MAX_SIDE), PILImage.Resampling.LANCZOS)
            found.append(image)
    finally:
        page.close()
    return found


def _unsaid(label: str) -> None:
    """Progress the PDF has already said in its own words."""


def _has_objects(document: pypdfium2.PdfDocument, index: int) -> bool:
    page = document[index]
    try:
        return bool(pdfium_c.FPDFPage_CountObjects(page.raw) > 0)
    finally:
        page.close()


def _render(document: pypdfium2.PdfDocument, index: int) -> Image:
    """The page in grey, its longer side at most `ocr.MAX_SIDE` pixels (and at most 300 dpi)."""
    page = document[index]
    try:
        width, height = page.get_size()
        scale = min(ocr.MAX_SIDE / max(width, height, 1.0), 300 / 72)
        bitmap = page.render(scale=scale, grayscale=True)
        try:
            return bitmap.to_pil().copy()
        finally:
            bitmap.close()
    finally:
        page.close()


def _metadata_title(document: pypdfium2.PdfDocument) -> str:
    title = _SPACES_RE.sub(" ", document.get_metadata_value("Title") or "").strip()
    return "" if _JUNK_TITLE_RE.fullmatch(title) else title


def _outline(document: pypdfium2.PdfDocument) -> Outline:
    """Bookmarks by page index: (heading level, title) in outline order."""
    outline: Outline = {}
    for bookmark in document.get_toc(max_depth=6):
        title = _SPACES_RE.sub(" ", bookmark.get_title() or "").strip()
        dest = bookmark.get_dest()
        index = dest.get_index() if dest is not None else None
        if title and index is not None and index >= 0:
            outline.setdefault(index, []).append((min(bookmark.level + 1, 6), title))
    return outline


def _blocks(
    pages: list[list[str]],
    outline: Outline,
    scanned: set[int],
    tables: dict[int, list[Table]],
    pictures: dict[int, list[str]],
) -> list[Block]:
    """Every block knows its page (1-based); a paragraph that runs on from one page to the next
    is one block of both pages. The lines of a `scanned` page are already paragraphs (OCR). A
    table's rows, where they are consecutive lines of the page, become table blocks. The
    paragraphs OCR read in a page's `pictures` follow its text."""
    blocks: list[Block] = []
    for index, lines in enumerate(cleanup.drop_page_furniture(pages)):
        page = Location(PAGE, index + 1, index + 1)
        lines = cleanup.drop_dot_leaders("\n".join(lines)).split("\n")
        segments = _split_at_headings(lines, outline.get(index, []))
        unplaced = list(tables.get(index, []))
        first = True
        for segment in segments:
            if isinstance(segment, Block):
                blocks.append(Block(HEADING, segment.text, level=segment.level, location=page))
                first = False
                continue
            for piece in _with_tables(segment, unplaced):
                if isinstance(piece, Table):
                    blocks.extend(table_blocks(piece, page))
                    first = False
                    continue
                if index in scanned:
                    paragraphs = [line.strip() for line in piece if line.strip()]
                else:
                    paragraphs = cleanup.join_layout_lines(piece)
                first_location: Location | None = page
                if first and paragraphs and _continues(blocks, paragraphs[0]):
                    last = blocks.pop()
                    paragraphs[0] = cleanup.join_lines(last.text, paragraphs[0])
                    first_location = merged_location([last.location, page])
                first = first and not paragraphs
                blocks.extend(
                    Block(PARAGRAPH, paragraph, location=first_location if i == 0 else page)
                    for i, paragraph in enumerate(paragraphs)
                )
        blocks.extend(Block(PARAGRAPH, text, location=page) for text in pictures.get(index, []))
    return blocks


def _with_tables(lines: list[str], tables: list[Table]) -> list[list[str] | Table]:
    """The lines, with the rows of each table that stands among them (its rows consecutive
    lines; a row may take as many lines as it has cells) replaced by the table. A table found
    here is taken off `tables`."""
    if not tables:
        return [lines]
    keys = [line_key(line) for line in lines]
    pieces: list[list[str] | Table] = []
    start = 0
    for table in list(tables):
        span = _rows_span(keys, start, table)
        if span is None:
            continue
        begin, end = span
        pieces.append(lines[start:begin])
        pieces.append(table)
        tables.remove(table)
        start = end
    pieces.append(lines[start:])
    return [piece for piece in pieces if piece]


def _rows_span(keys: list[str], start: int, table: Table) -> tuple[int, int] | None:
    """Where the table's rows stand in `keys` from `start` on: (first line, line after)."""
    rows = table.line_keys()
    for begin in range(start, len(keys)):
        if not keys[begin] or not rows[0].startswith(keys[begin]):
            continue
        at = begin
        for number, row in enumerate(rows):
            taken = ""
            for width in range(1, table.lines_per_row(number) + 1):
                if at + width > len(keys):
                    break
                taken += keys[at + width - 1]
                if taken == row:
                    at += width
                    break
                if not row.startswith(taken):
                    break
            else:
                break
            if taken != row:
                break
        else:
            return begin, at
    return None


def _split_at_headings(
    lines: list[str], headings: list[tuple[int, str]]
) -> list[Block | list[str]]:
    """The page's lines, cut where its bookmarks' titles stand; a title that is not found on the
    page is placed at its top."""
    segments: list[Block | list[str]] = []
    unplaced: list[Block] = []
    start = 0
    for level, title in headings:
        heading = Block(HEADING, title, level=level)
        found = _find_title_line(lines, start, title)
        if found is None:
            unplaced.append(heading)
            continue
        segments.append(lines[start:found])
        segments.append(heading)
        start = found + 1
    segments.append(lines[start:])
    return [*unplaced, *(segment for segment in segments if segment)]


def _find_title_line(lines: list[str], start: int, title: str) -> int | None:
    wanted = _SPACES_RE.sub("", title).casefold()
    for index in range(start, len(lines)):
        line = _SPACES_RE.sub("", lines[index]).casefold()
        # The line may carry the section's number before the title ("4.5 Axis Range").
        if line.endswith(wanted) and _SECTION_NUMBER_RE.fullmatch(line[: len(line) - len(wanted)]):
            return index
    return None


def _continues(blocks: list[Block], first: str) -> bool:
    """Whether the page's first paragraph continues the previous page's last one."""
    if not blocks or blocks[-1].kind != PARAGRAPH:
        return False
    last = blocks[-1].text.rstrip()
    return bool(last) and last[-1] not in ".!?:;。！？：；" and first[:1].islower()


def _title(metadata_title: str, outline: Outline, blocks: list[Block]) -> str:
    if metadata_title:
        return metadata_title
    first_line = blocks[0].text.split("\n", 1)[0].strip() if blocks else ""
    if first_line and len(first_line) <= MAX_TITLE_LINE:
        return first_line
    for page in range(_TITLE_BOOKMARK_PAGES):
        if outline.get(page):
            return outline[page][0][1]
    return ""
