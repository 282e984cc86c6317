"""Word (.docx): paragraphs, headings (by paragraph style) and tables in document order. The
title is the core properties' title, else the first Title or Heading paragraph.

- A table is one block, a line per row and its cells separated by tabs; a cell's paragraphs
  share its line, and a table nested in a cell stays in that cell (`rows.nested_table_text`).
- A text box's paragraphs follow the paragraph it is anchored in, once: Word writes a box twice
  (the shape, and a VML copy in `mc:Fallback` for old readers), and the copy is left out.
- Footnotes and endnotes are the document's own text and always read: the reference becomes a
  mark in the text ("[1]" for footnotes, "[i]" for endnotes, numbered in order as Word numbers
  them by default) and the note, starting with its mark, follows the paragraph (or the table)
  that refers to it, where it is read with what it explains.
- Page headers and footers are read only when the knowledge base asks for them
  (`options.current().headers_footers`): each different one once, headers before the body and
  footers after it, as they stand on a page.

The archive is checked before python-docx sees it: zip bombs, encrypted archives, and XML parts
with a DTD (entity bombs, external entities) are refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docx
from docx.opc.constants import RELATIONSHIP_TYPE
from docx.opc.exceptions import PackageNotFoundError
from docx.oxml import parse_xml
from docx.oxml.ns import qn
from lxml import etree

from textkit.extract import archive, notes, options, rows
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
from textkit.reasons import reason
from textkit.words import gettext_noop

MEDIA_TYPES = ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",)
EXTENSIONS = {".docx": MEDIA_TYPES[0]}
LABEL = gettext_noop("Word (.docx)")

OLD_OR_PROTECTED = reason(
    "docx.old_or_protected",
    gettext_noop(
        "The file is an old-style Word (.doc) file or a password-protected document; save it "
        "as an unprotected .docx and upload that."
    ),
)
NAMED_NOT_DOCX = reason(
    "docx.named_not_docx",
    gettext_noop("The file is named like a Word (.docx) document, but its content is not one."),
)
NOT_DOCX = reason("docx.not_docx", gettext_noop("The file is not a Word (.docx) document."))
OTHER_OFFICE = reason(
    "docx.other_office",
    gettext_noop("The file is an Office document, but not a Word (.docx) document."),
)
DAMAGED = reason("docx.damaged", gettext_noop("The Word document is damaged and cannot be read."))


def check_head(head: bytes, media_type: str) -> None:
    if head.startswith(ZIP_MAGIC):
        return
    if head.startswith(OLE_MAGIC):
        raise UnsupportedMediaType(OLD_OR_PROTECTED())
    raise UnsupportedMediaType(NAMED_NOT_DOCX())


# Built-in style names (python-docx reports them in English whatever the user's language).
_HEADING_STYLE_RE = re.compile(r"heading ([1-6])", re.IGNORECASE)


def extract(path: Path, *, max_chars: int) -> Extracted:
    _check_docx_archive(path)
    try:
        document = docx.Document(str(path))
        title = (document.core_properties.title or "").strip()
        reader = _Reader(_heading_levels(document), _note_elements(document))
        blocks = list(reader.blocks(document.element.body))
        if options.current().headers_footers:
            headers, footers = _page_headers_footers(document, reader)
            blocks = headers + blocks + footers
    except PackageNotFoundError as exc:
        raise ParseError(NOT_DOCX()) from exc
    except ValueError as exc:
        if "not a Word file" in str(exc):
            raise ParseError(OTHER_OFFICE()) from exc
        raise ParseError(DAMAGED()) from exc
    except (
        *archive.ZIP_DAMAGE_ERRORS,
        KeyError,
        etree.LxmlError,
        RuntimeError,
        AttributeError,
    ) as exc:
        raise ParseError(DAMAGED()) from exc
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
    archive.check_office_archive(
        path, what=gettext_noop("Word document"), label=gettext_noop("Word (.docx) document")
    )


_W_P = qn("w:p")
_W_PPR = qn("w:pPr")
_W_PSTYLE = qn("w:pStyle")
_W_VAL = qn("w:val")
_W_ID = qn("w:id")
_W_TBL = qn("w:tbl")
_W_TR = qn("w:tr")
_W_TC = qn("w:tc")
_W_SDT = qn("w:sdt")
_W_SDT_CONTENT = qn("w:sdtContent")
_W_CUSTOM_XML = qn("w:customXml")
_W_TXBX_CONTENT = qn("w:txbxContent")
_W_HEADER_REFERENCE = qn("w:headerReference")
_W_FOOTER_REFERENCE = qn("w:footerReference")
_R_ID = qn("r:id")
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
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
FOOTNOTE, ENDNOTE = notes.FOOTNOTE, notes.ENDNOTE
_NOTE_REFERENCES = {qn("w:footnoteReference"): FOOTNOTE, qn("w:endnoteReference"): ENDNOTE}
_NOTE_RELATIONSHIPS = {
    RELATIONSHIP_TYPE.FOOTNOTES: FOOTNOTE,
    RELATIONSHIP_TYPE.ENDNOTES: ENDNOTE,
}


def _note_elements(document: Any) -> dict[tuple[str, str], Any]:
    """The footnotes' and endnotes' elements by (kind, id), from the parts the document relates
    to (their XML was checked for DTDs with the archive)."""
    found: dict[tuple[str, str], Any] = {}
    for relationship in document.part.rels.values():
        kind = _NOTE_RELATIONSHIPS.get(relationship.reltype)
        if kind is None or relationship.is_external:
            continue
        root = parse_xml(relationship.target_part.blob)
        for note in root.iterchildren(qn(f"w:{kind}")):
            found[(kind, str(note.get(_W_ID)))] = note
    return found


def _page_headers_footers(document: Any, reader: _Reader) -> tuple[list[Block], list[Block]]:
    """The blocks of the page headers and footers the sections refer to, each different text
    once (a first-page header often repeats the default one)."""
    headers: list[Block] = []
    footers: list[Block] = []
    seen: set[str] = set()
    read: set[str] = set()
    parts = document.part.related_parts
    body = document.element.body
    for reference in body.iter(_W_HEADER_REFERENCE, _W_FOOTER_REFERENCE):
        part_id = str(reference.get(_R_ID))
        element = getattr(parts.get(part_id), "element", None)
        if element is None or part_id in read:
            continue
        read.add(part_id)
        blocks = list(reader.blocks(element))
        text = "\n".join(block.text for block in blocks)
        if not text.strip() or text in seen:
            continue
        seen.add(text)
        (headers if reference.tag == _W_HEADER_REFERENCE else footers).extend(blocks)
    return headers, footers


@dataclass
class _Inline:
    """A paragraph's text, and what it holds that is read apart: its text boxes, and the notes
    it refers to as (kind, id, mark)."""

    text: str = ""
    boxes: list[Any] = field(default_factory=list)
    notes: list[tuple[str, str, str]] = field(default_factory=list)


class _Reader:
    """Reads a story (the body, a header, a text box, a note) into blocks, numbering the note
    references in the order it meets them."""

    def __init__(self, headings: dict[str, int], note_elements: dict[tuple[str, str], Any]) -> None:
        self.headings = headings
        self.note_elements = note_elements
        self.numbers = {FOOTNOTE: 0, ENDNOTE: 0}
        # A note's mark by (kind, id): a note referred to again is not read again, so that
        # a crafted file cannot multiply one note's text.
        self.marks: dict[tuple[str, str], str] = {}

    def blocks(self, container: Any) -> Iterator[Block]:
        """The non-empty paragraphs, headings and tables under `container` in document order,
        each followed by its text boxes and notes."""
        for child in container.iterchildren():
            if child.tag == _W_P:
                inline = self._inline(child)
                if inline.text.strip():
                    level = self.headings.get(_paragraph_style(child), 0)
                    if level:
                        yield Block(HEADING, " ".join(inline.text.split()), level=level)
                    else:
                        yield Block(PARAGRAPH, inline.text)
                for box in inline.boxes:
                    yield from self.blocks(box)
                yield from self._note_blocks(inline.notes)
            elif child.tag == _W_TBL:
                referred: list[tuple[str, str, str]] = []
                table = "\n".join(self._table_lines(child, referred))
                if table:
                    yield Block(TABLE, table)
                yield from self._note_blocks(referred)
            elif child.tag in _WRAPPERS:
                yield from self.blocks(_unwrapped(child))

    def _table_lines(self, table: Any, referred: list[tuple[str, str, str]]) -> Iterator[str]:
        for row in _children(table, _W_TR):
            cells = [list(self._cell_pieces(cell, referred)) for cell in _children(row, _W_TC)]
            yield from rows.row_lines(cells)

    def _cell_pieces(
        self, container: Any, referred: list[tuple[str, str, str]]
    ) -> Iterator[rows.CellPiece]:
        """A cell's paragraphs (each followed by its text boxes' paragraphs) and nested tables
        (their rows of cell texts); the notes they refer to go to `referred`, to follow the
        outer table."""
        for child in container.iterchildren():
            if child.tag == _W_P:
                inline = self._inline(child)
                yield inline.text
                referred.extend(inline.notes)
                for box in inline.boxes:
                    yield from self._cell_pieces(box, referred)
            elif child.tag == _W_TBL:
                yield [
                    [
                        rows.cell_line(self._cell_pieces(cell, referred))
                        for cell in _children(row, _W_TC)
                    ]
                    for row in _children(child, _W_TR)
                ]
            elif child.tag in _WRAPPERS:
                yield from self._cell_pieces(_unwrapped(child), referred)

    def _inline(self, paragraph: Any) -> _Inline:
        inline = _Inline()
        parts: list[str] = []
        self._walk(paragraph, parts, inline)
        inline.text = "".join(parts)
        return inline

    def _walk(self, element: Any, parts: list[str], inline: _Inline) -> None:
        # Every w:t under the paragraph, so text in hyperlinks, tracked insertions, fields and
        # content controls is kept; deleted text is w:delText and is left out.
        for child in element.iterchildren():
            tag = child.tag
            if tag in _DOCX_RUN_TEXT:
                parts.append(_DOCX_RUN_TEXT[tag](child))
            elif tag == _W_TXBX_CONTENT:
                inline.boxes.append(child)
            elif tag in _NOTE_REFERENCES:
                key = (_NOTE_REFERENCES[tag], str(child.get(_W_ID)))
                if key in self.marks:
                    parts.append(f"[{self.marks[key]}]")
                elif key in self.note_elements:
                    self.numbers[key[0]] += 1
                    self.marks[key] = notes.mark(key[0], self.numbers[key[0]])
                    parts.append(f"[{self.marks[key]}]")
                    inline.notes.append((*key, self.marks[key]))
            elif tag != _MC_FALLBACK:
                self._walk(child, parts, inline)

    def _note_blocks(self, referred: list[tuple[str, str, str]]) -> Iterator[Block]:
        for kind, note_id, mark in referred:
            note = self.note_elements[(kind, note_id)]
            paragraphs = [block.text for block in self.blocks(note)]
            block = notes.note_block(mark, paragraphs)
            if block is not None:
                yield block


_WRAPPERS = frozenset({_W_SDT, _W_CUSTOM_XML})


def _unwrapped(wrapper: Any) -> Any:
    """What a content control (its w:sdtContent) or custom XML element holds."""
    if wrapper.tag == _W_SDT:
        content = wrapper.find(_W_SDT_CONTENT)
        return wrapper if content is None else content
    return wrapper


def _children(element: Any, tag: str) -> Iterator[Any]:
    """`element`'s children of `tag`, including those inside content controls and custom XML
    (a table's rows, a row's cells)."""
    for child in element.iterchildren():
        if child.tag == tag:
            yield child
        elif child.tag in _WRAPPERS:
            yield from _children(_unwrapped(child), tag)


def _paragraph_style(paragraph: Any) -> str:
    properties = paragraph.find(_W_PPR)
    if properties is None:
        return ""
    style = properties.find(_W_PSTYLE)
    return "" if style is None else str(style.get(_W_VAL, ""))
