"""Word (.docx): paragraphs, headings (by paragraph style) and tables in document order. The
title is the core properties' title, else the first Title or Heading paragraph.

The archive is checked before python-docx sees it: zip bombs, encrypted archives, and XML parts
with a DTD (entity bombs, external entities) are refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docx
from docx.opc.exceptions import PackageNotFoundError
from docx.oxml.ns import qn
from lxml import etree

from textkit.extract import archive
from textkit.extract.base import (
    HEADING,
    OLE_MAGIC,
    PARAGRAPH,
    TABLE,
    ZIP_MAGIC,
    Block,
    Extracted,
    ParseError,
    UnsupportedMediaType,
)

MEDIA_TYPES = ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",)
EXTENSIONS = {".docx": MEDIA_TYPES[0]}
LABEL = "Word (.docx)"


def check_head(head: bytes, media_type: str) -> None:
    if head.startswith(ZIP_MAGIC):
        return
    if head.startswith(OLE_MAGIC):
        raise UnsupportedMediaType(
            "The file is an old-style Word (.doc) file or a password-protected document; "
            "save it as an unprotected .docx and upload that."
        )
    raise UnsupportedMediaType(
        "The file is named like a Word (.docx) document, but its content is not one."
    )


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
    except (
        *archive.ZIP_DAMAGE_ERRORS,
        KeyError,
        etree.LxmlError,
        RuntimeError,
        AttributeError,
    ) as exc:
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
    archive.check_office_archive(path, what="Word document", label="Word (.docx) document")


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
