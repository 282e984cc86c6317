"""What the three OpenDocument formats (`odt`, `ods`, `odp`) share: the archive check, meta.xml's
title, content.xml read as a stream of lxml events (no entities, no network), and the text of
paragraphs and tables.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from lxml import etree

from textkit.extract import archive, rows
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

NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "svg": "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
}

# What each kind of document is called, by the tag of its body.
_KIND_NAMES = {
    "text": "text document",
    "spreadsheet": "spreadsheet",
    "presentation": "presentation",
}

Events = Iterator[tuple[str, Any]]


def q(name: str) -> str:
    """The Clark name lxml uses for "text:p"."""
    prefix, local = name.split(":")
    return f"{{{NS[prefix]}}}{local}"


def check_head(head: bytes, label: str) -> None:
    if head.startswith(ZIP_MAGIC):
        return
    if head.startswith(OLE_MAGIC):
        raise UnsupportedMediaType(
            f"The file is an old-style binary Office file, not an {label} file; "
            "save it in OpenDocument format and upload that."
        )
    raise UnsupportedMediaType(
        f"The file is named like an {label} file, but its content is not one."
    )


def read(
    path: Path, *, kind: str, label: str, blocks: Callable[[Events], Iterator[Block]]
) -> tuple[str, list[Block]]:
    """meta.xml's title ("" without one) and the blocks `blocks` makes of content.xml's
    ("start", "end") events, after the archive checks; `kind` ("text") is the body the file
    must have. `label` names the format in messages ("OpenDocument text (.odt)")."""
    # "a file in ... format": archive's messages say "not a {label}", and "a OpenDocument" jars.
    archive.check_office_archive(
        path, what="OpenDocument file", label=f"file in {label} format", required="content.xml"
    )
    try:
        with zipfile.ZipFile(path) as opened:
            title = _meta_title(opened)
            with opened.open("content.xml") as content:
                found = list(blocks(_of_kind(_events(content, ("start", "end")), kind, label)))
    except (*archive.ZIP_DAMAGE_ERRORS, KeyError, etree.LxmlError) as exc:
        raise ParseError("The OpenDocument file is damaged and cannot be read.") from exc
    return title, found


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
                raise ParseError(
                    f"The file is an OpenDocument {_KIND_NAMES[bodies[element.tag]]}, "
                    f"not an {label} file."
                )
            seen = True
        yield event, element
    if not seen:
        raise ParseError(f"The file is not an {label} file.")


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
        "text:note",
        "draw:frame",
    )
)
_CONTAINERS = frozenset(
    q(name) for name in ("text:section", "text:list", "text:list-item", "text:list-header")
)


def text_blocks(container: Any) -> Iterator[Block]:
    """Headings at their outline level, paragraphs (list items too) and tables under
    `container`, in order; tables of contents and indexes are left out."""
    for child in container.iterchildren():
        if child.tag == q("text:h"):
            level = min(max(int(child.get(q("text:outline-level")) or 1), 1), 6)
            yield Block(HEADING, " ".join(inline_text(child).split()), level=level)
        elif child.tag == q("text:p"):
            yield Block(PARAGRAPH, inline_text(child))
        elif child.tag == q("table:table"):
            yield Block(TABLE, table_text(child))
        elif child.tag in _CONTAINERS:
            yield from text_blocks(child)


def inline_text(element: Any) -> str:
    """A paragraph's text: spans and links kept, <text:s/> as spaces, tabs and line breaks as
    themselves; notes, comments and frames left out."""
    parts = [element.text or ""]
    for child in element.iterchildren():
        if child.tag == q("text:s"):
            parts.append(" " * int(child.get(q("text:c")) or 1))
        elif child.tag == q("text:tab"):
            parts.append("\t")
        elif child.tag == q("text:line-break"):
            parts.append("\n")
        elif child.tag not in _SKIPPED:
            parts.append(inline_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def table_text(table: Any) -> str:
    """A line per row (header rows included), cells separated by tabs."""
    lines = (
        "\t".join(cell_text(cell) for cell in row.iterchildren(q("table:table-cell")))
        for row in table.iter(q("table:table-row"))
    )
    return "\n".join(line for line in lines if line.strip())


def cell_text(cell: Any) -> str:
    """A cell's paragraphs on one line (its comments left out)."""
    return rows.cell_text(" ".join(inline_text(p) for p in cell.iterchildren(q("text:p"))))
