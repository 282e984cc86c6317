"""OpenDocument text (.odt): headings at their outline level, paragraphs, list items as
paragraphs, tables with a line per row, text in frames and shapes, and footnotes and endnotes
after the paragraph citing them (`odfxml`); tables of contents, tracked deletions and comments
are left out. Page headers and footers are read when the knowledge base asks for them
(`options.current().headers_footers`): headers first, footers last. The title is meta.xml's,
else the first heading. The archive is checked first (zip bombs, encryption, DTDs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from textkit.extract import odfxml, options
from textkit.extract.base import HEADING, Block, Extracted
from textkit.words import gettext_noop

MEDIA_TYPES = ("application/vnd.oasis.opendocument.text",)
EXTENSIONS = {".odt": MEDIA_TYPES[0]}
LABEL = gettext_noop("OpenDocument text (.odt)")


def check_head(head: bytes, media_type: str) -> None:
    odfxml.check_head(head, LABEL)


def extract(path: Path, *, max_chars: int) -> Extracted:
    title, blocks = odfxml.read(
        path,
        kind="text",
        label=LABEL,
        blocks=_blocks,
        headers_footers=options.current().headers_footers,
    )
    if not title:
        title = next((block.text for block in blocks if block.kind == HEADING), "")
    return Extracted(title=title, blocks=blocks)


def _blocks(events: odfxml.Events) -> Iterator[Block]:
    for event, element in events:
        if event == "end" and element.tag == odfxml.q("office:text"):
            yield from odfxml.text_blocks(element)
