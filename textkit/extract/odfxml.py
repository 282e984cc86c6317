"""What the three OpenDocument formats (`odt`, `ods`, `odp`) share: the archive check, meta.xml's
title, content.xml read as a stream of lxml events (no entities, no network), and the text of
paragraphs and tables.

In a text: frames (text boxes) and shapes with text are read as the blocks they hold, after the
paragraph they are anchored in (or where they stand, when anchored to the page); a footnote or
endnote leaves its citation in the text ("[1]") and follows its paragraph (or table) as a
paragraph starting with it; a table nested in a cell stays in that cell (`rows.row_lines`).
Page headers and footers (styles.xml's master pages) are read only when asked for.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from lxml import etree

from textkit.extract import archive, notes, rows
from textkit.extract.base import (
    HEADING,
    OLE_MAGIC,
    PARAGRAPH,
    TABLE,
    ZIP_MAGIC,
    Block,
    ParseError,
    UnsupportedMediaType,
)
from textkit.reasons import reason
from textkit.words import gettext_noop

NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "loext": "urn:org:documentfoundation:names:experimental:office:xmlns:loext:1.0",
    "svg": "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
}

# What each kind of document is called, by the tag of its body.
_KIND_NAMES = {
    "text": gettext_noop("text document"),
    "spreadsheet": gettext_noop("spreadsheet"),
    "presentation": gettext_noop("presentation"),
}
# Each kind as the archive's checks name it ("not a %(label)s"): "a OpenDocument" jars.
_ARCHIVE_LABELS = {
    "text": gettext_noop("file in OpenDocument text (.odt) format"),
    "spreadsheet": gettext_noop("file in OpenDocument spreadsheet (.ods) format"),
    "presentation": gettext_noop("file in OpenDocument presentation (.odp) format"),
}

# `label`: the format's LABEL ("OpenDocument text (.odt)"); `kind`: one of _KIND_NAMES'.
OLD_BINARY = reason(
    "odf.old_binary",
    gettext_noop(
        "The file is an old-style binary Office file, not an %(label)s file; save it in "
        "OpenDocument format and upload that."
    ),
    words=("label",),
)
NAMED_NOT_ODF = reason(
    "odf.named_not_odf",
    gettext_noop("The file is named like an %(label)s file, but its content is not one."),
    words=("label",),
)
DAMAGED = reason(
    "odf.damaged", gettext_noop("The OpenDocument file is damaged and cannot be read.")
)
OTHER_KIND = reason(
    "odf.other_kind",
    gettext_noop("The file is an OpenDocument %(kind)s, not an %(label)s file."),
    words=("kind", "label"),
)
NOT_ODF = reason(
    "odf.not_odf", gettext_noop("The file is not an %(label)s file."), words=("label",)
)

Events = Iterator[tuple[str, Any]]


def q(name: str) -> str:
    """The Clark name lxml uses for "text:p"."""
    prefix, local = name.split(":")
    return f"{{{NS[prefix]}}}{local}"


def check_head(head: bytes, label: str) -> None:
    if head.startswith(ZIP_MAGIC):
        return
    if head.startswith(OLE_MAGIC):
        raise UnsupportedMediaType(OLD_BINARY(label=label))
    raise UnsupportedMediaType(NAMED_NOT_ODF(label=label))


def read(
    path: Path,
    *,
    kind: str,
    label: str,
    blocks: Callable[[Events], Iterator[Block]],
    headers_footers: bool = False,
) -> tuple[str, list[Block]]:
    """meta.xml's title ("" without one) and the blocks `blocks` makes of content.xml's
    ("start", "end") events, after the archive checks; `kind` ("text") is the body the file
    must have. `label` names the format in messages ("OpenDocument text (.odt)"). With
    `headers_footers`, the master pages' headers come before those blocks and their footers
    after them."""
    archive.check_office_archive(
        path,
        what=gettext_noop("OpenDocument file"),
        label=_ARCHIVE_LABELS[kind],
        required="content.xml",
    )
    try:
        with zipfile.ZipFile(path) as opened:
            title = _meta_title(opened)
            with opened.open("content.xml") as content:
                found = list(blocks(_of_kind(_events(content, ("start", "end")), kind, label)))
            if headers_footers:
                headers, footers = _page_headers_footers(opened)
                found = headers + found + footers
    except (*archive.ZIP_DAMAGE_ERRORS, KeyError, etree.LxmlError) as exc:
        raise ParseError(DAMAGED()) from exc
    return title, found


_HEADERS = frozenset(
    q(name) for name in ("style:header", "style:header-left", "style:header-first")
) | {q("loext:header-first")}
_FOOTERS = frozenset(
    q(name) for name in ("style:footer", "style:footer-left", "style:footer-first")
) | {q("loext:footer-first")}


def _page_headers_footers(opened: zipfile.ZipFile) -> tuple[list[Block], list[Block]]:
    """The blocks of the master pages' headers and of their footers, each different text once
    (left, right and first pages often repeat one)."""
    headers: list[Block] = []
    footers: list[Block] = []
    if "styles.xml" not in opened.namelist():
        return headers, footers
    seen: set[str] = set()
    with opened.open("styles.xml") as styles:
        for _, element in _events(styles, ("end",)):
            if element.tag != q("style:master-page"):
                continue
            for child in element.iterchildren():
                if child.tag not in _HEADERS and child.tag not in _FOOTERS:
                    continue
                if child.get(q("style:display")) == "false":
                    continue
                found = list(text_blocks(child))
                text = "\n".join(block.text for block in found)
                if text.strip() and text not in seen:
                    seen.add(text)
                    (headers if child.tag in _HEADERS else footers).extend(found)
            let_go(element)
    return headers, footers


def _events(part: IO[bytes], events: tuple[str, ...]) -> Events:
    return iter(
        etree.iterparse(
            part, events=events, resolve_entities=False, no_network=True, load_dtd=False
        )
    )


def _of_kind(events: Events, kind: str, label: str) -> Events:
    """The events, refusing a body of another kind (a spreadsheet named .odt) or none."""
    bodies = {q(f"office:{name}"): name for name in _KIND_NAMES}
    seen = False
    for event, element in events:
        if event == "start" and element.tag in bodies:
            if bodies[element.tag] != kind:
                raise ParseError(OTHER_KIND(kind=_KIND_NAMES[bodies[element.tag]], label=label))
            seen = True
        yield event, element
    if not seen:
        raise ParseError(NOT_ODF(label=label))


def _meta_title(opened: zipfile.ZipFile) -> str:
    if "meta.xml" not in opened.namelist():
        return ""
    with opened.open("meta.xml") as meta:
        for _, element in _events(meta, ("end",)):
            if element.tag == q("dc:title"):
                return " ".join((element.text or "").split())
    return ""


def let_go(element: Any) -> None:
    """Free a streamed element and the siblings read before it."""
    element.clear(keep_tail=True)
    parent = element.getparent()
    while parent is not None and element.getprevious() is not None:
        del parent[0]


# Drawings: frames (text boxes, images, objects), shapes that can hold text, their groups, and
# a link around one.
_DRAWINGS = frozenset(
    q(f"draw:{name}")
    for name in (
        "frame",
        "g",
        "a",
        "custom-shape",
        "rect",
        "ellipse",
        "circle",
        "polygon",
        "regular-polygon",
        "polyline",
        "path",
        "line",
        "connector",
        "caption",
        "measure",
    )
)
_NOTE = q("text:note")
_SKIPPED = frozenset(
    q(name)
    for name in (
        "text:table-of-content",
        "text:alphabetical-index",
        "text:illustration-index",
        "text:tracked-changes",
        "text:sequence-decls",
        "text:variable-decls",
        "office:forms",
        "office:annotation",
        "office:annotation-end",
    )
)
_CONTAINERS = frozenset(
    q(name) for name in ("text:section", "text:list", "text:list-item", "text:list-header")
)
_TABLE_ROW_GROUPS = frozenset(
    q(name) for name in ("table:table-header-rows", "table:table-rows", "table:table-row-group")
)


def text_blocks(container: Any) -> Iterator[Block]:
    """Headings at their outline level, paragraphs (list items too) and tables under
    `container`, in order, each followed by the drawings and notes it holds; tables of contents
    and indexes are left out."""
    for child in container.iterchildren():
        if child.tag in (q("text:h"), q("text:p")):
            attached = _Attached()
            text = _inline(child, attached)
            if child.tag == q("text:h"):
                level = min(max(int(child.get(q("text:outline-level")) or 1), 1), 6)
                yield Block(HEADING, " ".join(text.split()), level=level)
            else:
                yield Block(PARAGRAPH, text)
            for drawing in attached.drawings:
                yield from drawing_blocks(drawing)
            yield from _note_blocks(attached.notes)
        elif child.tag == q("table:table"):
            yield Block(TABLE, table_text(child))
            yield from _note_blocks(child.iter(_NOTE))
        elif child.tag in _CONTAINERS:
            yield from text_blocks(child)
        elif child.tag in _DRAWINGS:
            yield from drawing_blocks(child)


def drawing_blocks(drawing: Any) -> Iterator[Block]:
    """The blocks in a frame's text box, in a shape, or in the drawings of a group or link;
    nothing for an image or an embedded object."""
    if drawing.tag == q("draw:frame"):
        for box in drawing.iterchildren(q("draw:text-box")):
            yield from text_blocks(box)
    elif drawing.tag in (q("draw:g"), q("draw:a")):
        for member in drawing.iterchildren():
            if member.tag in _DRAWINGS:
                yield from drawing_blocks(member)
    else:
        yield from text_blocks(drawing)


class _Attached:
    """What a paragraph holds that is read after it: drawings and notes, in order."""

    def __init__(self) -> None:
        self.drawings: list[Any] = []
        self.notes: list[Any] = []


def inline_text(element: Any) -> str:
    """A paragraph's text: spans and links kept, <text:s/> as spaces, tabs and line breaks as
    themselves, a note as its citation ("[1]"); comments and drawings left out."""
    return _inline(element, _Attached())


def _inline(element: Any, attached: _Attached) -> str:
    parts = [element.text or ""]
    for child in element.iterchildren():
        tag = child.tag
        if tag == q("text:s"):
            parts.append(" " * int(child.get(q("text:c")) or 1))
        elif tag == q("text:tab"):
            parts.append("\t")
        elif tag == q("text:line-break"):
            parts.append("\n")
        elif tag == _NOTE:
            citation = _citation(child)
            parts.append(f"[{citation}]" if citation else "")
            attached.notes.append(child)
        elif tag in _DRAWINGS:
            attached.drawings.append(child)
        elif tag not in _SKIPPED:
            parts.append(_inline(child, attached))
        parts.append(child.tail or "")
    return "".join(parts)


def _citation(note: Any) -> str:
    citation = note.find(q("text:note-citation"))
    if citation is None:
        return ""
    return " ".join((citation.get(q("text:label")) or "".join(citation.itertext())).split())


def _note_blocks(cited: Iterable[Any]) -> Iterator[Block]:
    """Each note as a paragraph: its citation in brackets, then its paragraphs a line each."""
    for note in cited:
        body = note.find(q("text:note-body"))
        if body is None:
            continue
        block = notes.note_block(_citation(note), (block.text for block in text_blocks(body)))
        if block is not None:
            yield block


def table_text(table: Any) -> str:
    """A line per row (header rows included), cells separated by tabs; a table nested in a cell
    stays in that cell (`rows.row_lines`)."""
    lines = (
        line
        for row in _table_rows(table)
        for line in rows.row_lines(
            [list(_cell_pieces(cell)) for cell in row.iterchildren(q("table:table-cell"))]
        )
    )
    return "\n".join(lines)


def _table_rows(table: Any) -> Iterator[Any]:
    """The table's own rows (in header and row groups too), not those of tables in its cells."""
    for child in table.iterchildren():
        if child.tag == q("table:table-row"):
            yield child
        elif child.tag in _TABLE_ROW_GROUPS:
            yield from _table_rows(child)


def cell_text(cell: Any) -> str:
    """A cell's paragraphs, lists, text boxes and nested tables on one line (its comments left
    out)."""
    return rows.cell_line(_cell_pieces(cell))


def _cell_pieces(container: Any) -> Iterator[rows.CellPiece]:
    for child in container.iterchildren():
        if child.tag in (q("text:p"), q("text:h")):
            attached = _Attached()
            yield _inline(child, attached)
            for drawing in attached.drawings:
                yield from (block.text for block in drawing_blocks(drawing))
        elif child.tag == q("table:table"):
            yield [
                [cell_text(cell) for cell in row.iterchildren(q("table:table-cell"))]
                for row in _table_rows(child)
            ]
        elif child.tag in _CONTAINERS:
            yield from _cell_pieces(child)
