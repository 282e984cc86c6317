"""Word (.docx): paragraphs, headings (by paragraph style) and tables in document order. The
title is the core properties' title, else the first Title or Heading paragraph.

The archive is checked before python-docx sees it: zip bombs, encrypted archives, and XML parts
with a DTD (entity bombs, external entities) are refused.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any
from xml.parsers import expat

import docx
from docx.opc.exceptions import PackageNotFoundError
from docx.oxml.ns import qn
from lxml import etree

from textkit.extract.base import HEADING, PARAGRAPH, TABLE, Block, Extracted, ParseError

MEDIA_TYPES = ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",)

# Zip-bomb limits, checked against the archive directory before anything is inflated. zipfile
# never inflates an entry past its declared size, so the declared sizes can be trusted.
MAX_DOCX_ENTRIES = 2000
MAX_DOCX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_DOCX_COMPRESSION_RATIO = 100
# Entries smaller than this cannot do harm, so their compression ratio is not judged.
_RATIO_CHECK_MIN_BYTES = 1024 * 1024

# What zipfile raises for a damaged archive: bad headers or CRC, truncated or corrupt deflate
# data, unsupported compression methods, nonsense offsets.
_ZIP_DAMAGE_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError)

# Built-in style names (python-docx reports them in English whatever the user's language).
_HEADING_STYLE_RE = re.compile(r"heading ([1-6])", re.IGNORECASE)


def extract(path: Path, *, max_chars: int) -> Extracted:
    _check_docx_archive(path)
    try:
        document = docx.Document(str(path))
        headings = _heading_levels(document)
        title = (document.core_properties.title or "").strip()
    except PackageNotFoundError as exc:
        raise ParseError("The file is not a Word (.docx) document.") from exc
    except ValueError as exc:
        if "not a Word file" in str(exc):
            raise ParseError(
                "The file is an Office document, but not a Word (.docx) document."
            ) from exc
        raise ParseError("The Word document is damaged and cannot be read.") from exc
    except (*_ZIP_DAMAGE_ERRORS, KeyError, etree.LxmlError, RuntimeError, AttributeError) as exc:
        raise ParseError("The Word document is damaged and cannot be read.") from exc
    blocks = list(_docx_blocks(document.element.body, headings))
    if not title:
        title = next((block.text for block in blocks if block.kind == HEADING), "")
    return Extracted(title=title, blocks=blocks)


def _heading_levels(document: Any) -> dict[str, int]:
    """Heading level by paragraph style id: "Title" is 1, "Heading N" is N."""
    levels: dict[str, int] = {}
    for style in document.styles:
        name = (getattr(style, "name", "") or "").strip()
        if name.lower() == "title":
            levels[style.style_id] = 1
        elif match := _HEADING_STYLE_RE.fullmatch(name):
            levels[style.style_id] = int(match.group(1))
    return levels


def _check_docx_archive(path: Path) -> None:
    """Refuse zip bombs, encrypted archives and XML with a DTD before python-docx sees the file."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = [info for info in archive.infolist() if not info.is_dir()]
            _check_docx_sizes(entries)
            if "[Content_Types].xml" not in {info.filename for info in entries}:
                raise ParseError("The file is a ZIP archive, but not a Word (.docx) document.")
            if any(info.flag_bits & 0x1 for info in entries):
                raise ParseError("The Word document is encrypted; upload an unencrypted copy.")
            for info in entries:
                with archive.open(info) as part:
                    _check_xml_part(info.filename, part)
    except _ZIP_DAMAGE_ERRORS as exc:
        raise ParseError("The file is not a valid Word (.docx) document.") from exc


def _check_docx_sizes(entries: list[zipfile.ZipInfo]) -> None:
    if len(entries) > MAX_DOCX_ENTRIES:
        raise ParseError(
            f"The Word document has {len(entries):,} parts, more than the limit of "
            f"{MAX_DOCX_ENTRIES:,}; it may be a zip bomb."
        )
    total = sum(info.file_size for info in entries)
    if total > MAX_DOCX_UNCOMPRESSED_BYTES:
        raise ParseError(
            f"The Word document expands to {total / 1024 / 1024:,.0f} MB, more than the limit "
            f"of {MAX_DOCX_UNCOMPRESSED_BYTES / 1024 / 1024:,.0f} MB; it may be a zip bomb."
        )
    for info in entries:
        if (
            info.file_size >= _RATIO_CHECK_MIN_BYTES
            and info.file_size > MAX_DOCX_COMPRESSION_RATIO * max(info.compress_size, 1)
        ):
            raise ParseError(
                f'The Word document part "{info.filename}" is compressed more than '
                f"{MAX_DOCX_COMPRESSION_RATIO}:1; it may be a zip bomb."
            )


class _DoctypeFound(Exception):
    pass


class _RootElementReached(Exception):
    pass


def _check_xml_part(name: str, part: IO[bytes]) -> None:
    """Refuse an XML part with a document type declaration: that is where entity bombs (billion
    laughs) and external entities (XXE) live. Parsing stops at the root element, since a DOCTYPE
    can only come before it. Parts that are not XML (images) are skipped."""
    chunk = part.read(64 * 1024)
    if not chunk.lstrip(b"\xef\xbb\xbf\xfe\xff\x00 \t\r\n").startswith(b"<"):
        return
    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = _raise_doctype_found
    parser.StartElementHandler = _raise_root_element_reached
    try:
        while chunk:
            parser.Parse(chunk, False)
            chunk = part.read(64 * 1024)
        parser.Parse(b"", True)
    except _RootElementReached:
        return
    except _DoctypeFound:
        raise ParseError(
            f'The Word document part "{name}" declares a DTD or entities, which is not allowed; '
            "it may be malicious."
        ) from None
    except expat.ExpatError as exc:
        raise ParseError(f'The Word document part "{name}" is not well-formed XML.') from exc
    raise ParseError(f'The Word document part "{name}" is not well-formed XML.')


def _raise_doctype_found(*_args: object) -> None:
    raise _DoctypeFound


def _raise_root_element_reached(*_args: object) -> None:
    raise _RootElementReached


_W_P = qn("w:p")
_W_PPR = qn("w:pPr")
_W_PSTYLE = qn("w:pStyle")
_W_VAL = qn("w:val")
_W_TBL = qn("w:tbl")
_W_TR = qn("w:tr")
_W_TC = qn("w:tc")
_W_SDT = qn("w:sdt")
_W_SDT_CONTENT = qn("w:sdtContent")
_W_CUSTOM_XML = qn("w:customXml")
_W_T = qn("w:t")
_W_TAB = qn("w:tab")
_W_BR = qn("w:br")
_W_CR = qn("w:cr")
_DOCX_RUN_TEXT: dict[str, Callable[[Any], str]] = {
    _W_T: lambda element: element.text or "",
    _W_TAB: lambda _element: "\t",
    _W_BR: lambda _element: "\n",
    _W_CR: lambda _element: "\n",
}


def _docx_blocks(container: Any, headings: dict[str, int]) -> Iterator[Block]:
    """Yield the non-empty paragraphs, headings and tables under `container` in document order;
    a table is one block with a line per row and cells separated by tabs."""
    for child in container.iterchildren():
        if child.tag == _W_P:
            text = _docx_paragraph_text(child)
            if text.strip():
                level = headings.get(_paragraph_style(child), 0)
                if level:
                    yield Block(HEADING, " ".join(text.split()), level=level)
                else:
                    yield Block(PARAGRAPH, text)
        elif child.tag == _W_TBL:
            rows = (
                "\t".join(
                    " ".join(block.text for block in _docx_blocks(cell, {}))
                    for cell in row.iterchildren(_W_TC)
                )
                for row in child.iterchildren(_W_TR)
            )
            table = "\n".join(row for row in rows if row.strip())
            if table:
                yield Block(TABLE, table)
        elif child.tag == _W_SDT:
            for content in child.iterchildren(_W_SDT_CONTENT):
                yield from _docx_blocks(content, headings)
        elif child.tag == _W_CUSTOM_XML:
            yield from _docx_blocks(child, headings)


def _paragraph_style(paragraph: Any) -> str:
    properties = paragraph.find(_W_PPR)
    if properties is None:
        return ""
    style = properties.find(_W_PSTYLE)
    return "" if style is None else str(style.get(_W_VAL, ""))


def _docx_paragraph_text(paragraph: Any) -> str:
    # Every w:t under the paragraph, so text in hyperlinks, tracked insertions, fields and
    # content controls is kept; deleted text is w:delText and is left out.
    return "".join(
        _DOCX_RUN_TEXT[element.tag](element) for element in paragraph.iter(*_DOCX_RUN_TEXT)
    )
