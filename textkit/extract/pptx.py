"""PowerPoint (.pptx): every slide as a heading "Slide N: <its title>" (just "Slide N" when it
has none, so that its text never falls under the slide before), then the text of its shapes in
reading order (top to bottom, then left to right; a group's shapes in their own order), its
tables with their header row, and its speaker notes under a "Notes" heading. Every block is
located at its slide. The title is the core properties' title, else the first slide's title.

Charts, pictures and hidden slides carry no text here. A slide without text gives no block (not
even its heading), and a deck without any is refused with the reason. The archive is checked before
python-pptx sees it (zip bombs, encryption, DTDs).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lxml import etree

from textkit.extract import archive
from textkit.extract.base import (
    HEADING,
    OLE_MAGIC,
    PARAGRAPH,
    SLIDE,
    TABLE,
    ZIP_MAGIC,
    Block,
    Extracted,
    Location,
    ParseError,
    UnsupportedMediaType,
)
from textkit.reasons import reason
from textkit.words import gettext_noop

MEDIA_TYPES = ("application/vnd.openxmlformats-officedocument.presentationml.presentation",)
EXTENSIONS = {".pptx": MEDIA_TYPES[0]}
LABEL = gettext_noop("PowerPoint (.pptx)")

OLD_OR_PROTECTED = reason(
    "pptx.old_or_protected",
    gettext_noop(
        "The file is an old-style PowerPoint (.ppt) presentation or a password-protected one; "
        "save it as an unprotected .pptx and upload that."
    ),
)
NAMED_NOT_PPTX = reason(
    "pptx.named_not_pptx",
    gettext_noop(
        "The file is named like a PowerPoint (.pptx) presentation, but its content is not one."
    ),
)
NOT_PPTX = reason(
    "pptx.not_pptx", gettext_noop("The file is not a PowerPoint (.pptx) presentation.")
)
OTHER_OFFICE = reason(
    "pptx.other_office",
    gettext_noop("The file is an Office document, but not a PowerPoint (.pptx) presentation."),
)
_DAMAGED = reason(
    "pptx.damaged", gettext_noop("The PowerPoint presentation is damaged and cannot be read.")
)
# Said of an OpenDocument presentation too (`odp`).
NO_TEXT = reason(
    "presentation.no_text",
    gettext_noop(
        "The presentation has no text: its slides hold no text, tables or notes (pictures and "
        "charts are not read)."
    ),
)
# What python-pptx writes as the title of a presentation it created without one.
_PLACEHOLDER_TITLES = frozenset({"PowerPoint Presentation"})


def check_head(head: bytes, media_type: str) -> None:
    if head.startswith(ZIP_MAGIC):
        return
    if head.startswith(OLE_MAGIC):
        raise UnsupportedMediaType(OLD_OR_PROTECTED())
    raise UnsupportedMediaType(NAMED_NOT_PPTX())


def extract(path: Path, *, max_chars: int) -> Extracted:
    # python-pptx is imported when a presentation is read, not with the registry: every
    # process that sets Django up imports the registry, few read a presentation.
    import pptx
    from pptx.exc import PackageNotFoundError

    archive.check_office_archive(
        path,
        what=gettext_noop("PowerPoint presentation"),
        label=gettext_noop("PowerPoint (.pptx) presentation"),
    )
    try:
        presentation = pptx.Presentation(str(path))
        title = (presentation.core_properties.title or "").strip()
        slides = [_slide_blocks(number, slide) for number, slide in _visible(presentation)]
    except PackageNotFoundError as exc:
        raise ParseError(NOT_PPTX()) from exc
    except ValueError as exc:
        if "not a PowerPoint file" in str(exc):
            raise ParseError(OTHER_OFFICE()) from exc
        raise ParseError(_DAMAGED()) from exc
    except (*archive.ZIP_DAMAGE_ERRORS, KeyError, etree.LxmlError, AttributeError) as exc:
        raise ParseError(_DAMAGED()) from exc
    blocks = [block for _, slide_blocks in slides for block in slide_blocks]
    if not blocks:
        raise ParseError(NO_TEXT())
    if title in _PLACEHOLDER_TITLES:
        title = ""
    if not title:
        title = next((slide_title for slide_title, _ in slides if slide_title), "")
    return Extracted(title=title, blocks=blocks)


def _visible(presentation: Any) -> Iterator[tuple[int, Any]]:
    """(number, slide) of the slides a show presents; numbers count hidden slides too, as
    PowerPoint's slide sorter does."""
    for number, slide in enumerate(presentation.slides, start=1):
        if slide._element.get("show") not in ("0", "false"):
            yield number, slide


def _slide_blocks(number: int, slide: Any) -> tuple[str, list[Block]]:
    """The slide's title ("" without one) and its blocks: none when it has no text."""
    here = Location(SLIDE, number, number)
    title_shape = slide.shapes.title
    title = _one_line(title_shape.text_frame.text) if title_shape is not None else ""
    blocks: list[Block] = []
    for shape in _reading_order(slide.shapes):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        blocks.extend(_shape_blocks(shape, here))
    if slide.has_notes_slide:
        notes = slide.notes_slide.notes_text_frame
        if notes is not None and notes.text.strip():
            blocks.append(Block(HEADING, "Notes", level=2, location=here))
            blocks.append(Block(PARAGRAPH, _frame_text(notes), location=here))
    if not title and not blocks:
        return title, []
    heading = f"Slide {number}: {title}" if title else f"Slide {number}"
    return title, [Block(HEADING, heading, level=1, location=here), *blocks]


def _reading_order(shapes: Any) -> list[Any]:
    """Top to bottom, then left to right; shapes without a position keep their place last."""
    return sorted(
        shapes,
        key=lambda shape: (
            shape.top is None,
            shape.top or 0,
            shape.left or 0,
        ),
    )


def _shape_blocks(shape: Any, here: Location) -> Iterator[Block]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        for member in _reading_order(shape.shapes):
            yield from _shape_blocks(member, here)
    elif getattr(shape, "has_table", False):
        lines = ("\t".join(_one_line(cell.text) for cell in row.cells) for row in shape.table.rows)
        text = "\n".join(line for line in lines if line.strip())
        if text:
            yield Block(TABLE, text, location=here)
    elif getattr(shape, "has_text_frame", False) and shape.text_frame.text.strip():
        yield Block(PARAGRAPH, _frame_text(shape.text_frame), location=here)


def _frame_text(frame: Any) -> str:
    """A text frame's paragraphs, a line each (bullets are paragraphs)."""
    return "\n".join(paragraph.text for paragraph in frame.paragraphs if paragraph.text.strip())


def _one_line(text: str) -> str:
    return " ".join(text.split())
