"""OpenDocument spreadsheet (.ods), read as an Excel workbook is (`xlsx`): every visible sheet
that has text, its name a heading and its rows in groups that name their columns (`rows`),
located at the sheet's own row numbers. Cells give the text they show (OpenDocument stores
it), so numbers and dates read as displayed. Runs of repeated empty rows and cells (a sheet
formatted to its last row) are counted, never spelled out. The title is meta.xml's. The
archive is checked first (zip bombs, encryption, DTDs), and a workbook of more than
`rows.MAX_ROWS` rows or `rows.MAX_CELLS` cells is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from textkit.extract import odfxml, rows
from textkit.extract.base import Block, Extracted
from textkit.extract.odfxml import q
from textkit.words import gettext_noop

MEDIA_TYPES = ("application/vnd.oasis.opendocument.spreadsheet",)
EXTENSIONS = {".ods": MEDIA_TYPES[0]}
LABEL = gettext_noop("OpenDocument spreadsheet (.ods)")

_TABLE = q("table:table")


def check_head(head: bytes, media_type: str) -> None:
    odfxml.check_head(head, LABEL)


def extract(path: Path, *, max_chars: int) -> Extracted:
    title, blocks = odfxml.read(path, kind="spreadsheet", label=LABEL, blocks=_blocks)
    return Extracted(title=title, blocks=blocks)


def _blocks(events: odfxml.Events) -> Iterator[Block]:
    """Sheet by sheet; each row is let go once read. Tables inside a sheet's cells (depth > 1)
    are not rows of the sheet."""
    budget = rows.RowBudget(gettext_noop("spreadsheet"))
    hidden_styles: set[str] = set()
    depth = 0
    name, hidden, number, sheet_rows = "", False, 0, list[rows.Row]()
    for event, element in events:
        if event == "start":
            if element.tag == _TABLE:
                depth += 1
                if depth == 1:
                    name = element.get(q("table:name"), "")
                    hidden = element.get(q("table:style-name")) in hidden_styles
                    number, sheet_rows = 0, []
        elif element.tag == q("style:style") and _hides_table(element):
            hidden_styles.add(element.get(q("style:name"), ""))
        elif element.tag == q("table:table-row") and depth == 1:
            number, shown = _row(element, number, budget)
            sheet_rows.extend(shown)
            odfxml.let_go(element)
        elif element.tag == _TABLE:
            depth -= 1
            if depth == 0 and not hidden:
                yield from rows.sheet_blocks(sheet_rows, sheet=name)


def _hides_table(style: Any) -> bool:
    properties = style.find(q("style:table-properties"))
    return properties is not None and properties.get(q("table:display")) == "false"


def _row(row: Any, before: int, budget: rows.RowBudget) -> tuple[int, list[rows.Row]]:
    """The number of the last row this row element covers (`before` is the one above it), and
    the rows it stands for, as often as it is repeated, when it shows text."""
    repeat = int(row.get(q("table:number-rows-repeated")) or 1)
    cells: list[str] = []
    gap = 0
    for cell in row.iterchildren(q("table:table-cell"), q("table:covered-table-cell")):
        columns = int(cell.get(q("table:number-columns-repeated")) or 1)
        text = odfxml.cell_text(cell)
        if not text:
            gap += columns
            continue
        budget.spend(rows=0, cells=(gap + columns) * repeat)
        cells.extend([""] * gap + [text] * columns)
        gap = 0
    if not cells:
        return before + repeat, []
    budget.spend(rows=repeat, cells=0)
    return before + repeat, [(before + step, cells) for step in range(1, repeat + 1)]
