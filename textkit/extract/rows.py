"""Rows of a sheet (XLSX, ODS) or a CSV file as blocks the chunker keeps whole: a sheet's name
as a heading, its leading title rows as paragraphs, then its rows in groups, each a table block
that starts with the header row so that every chunk says what its columns are.

A table block has one line per row, its cells separated by tabs (as Word tables are), and the
location of the rows it holds: the sheet's own row numbers, the header's repetition aside.
A group stops growing at about `GROUP_CHARS` characters, so that at the default chunk size of
800 characters a group is one chunk.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from textkit.extract.base import HEADING, PARAGRAPH, ROW, TABLE, Block, Location, ParseError

# Per file, whatever its sheets: a spreadsheet past these is a database export, not a document.
MAX_ROWS = 200_000
MAX_CELLS = 4_000_000

GROUP_CHARS = 700
# Single-cell rows above the header ("Sales by region, 2026") are titles, not data.
_MAX_TITLE_ROWS = 3

Row = tuple[int, list[str]]


class RowBudget:
    """The rows and cells a file may hold, spent as its sheets are read; `what` names the file
    in the refusal ("workbook")."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.rows = 0
        self.cells = 0

    def spend(self, *, rows: int, cells: int) -> None:
        self.rows += rows
        self.cells += cells
        if self.rows > MAX_ROWS:
            raise ParseError(
                f"The {self.what} has more than the limit of {MAX_ROWS:,} rows; "
                "split it into smaller files."
            )
        if self.cells > MAX_CELLS:
            raise ParseError(
                f"The {self.what} has more than the limit of {MAX_CELLS:,} cells; "
                "split it into smaller files."
            )


def cell_text(value: str) -> str:
    """A cell's text on one line: line breaks and tabs would split the row."""
    return " ".join(value.split())


def sheet_blocks(rows: Iterable[Row], *, sheet: str = "", heading: bool = True) -> Iterator[Block]:
    """The blocks of one sheet from its (row number, cell texts) pairs in order; rows without
    text are skipped, and a sheet without any gives no blocks (not even its heading). The
    first row of two or more cells (or the first row, when none has two) is the header."""
    pending: list[Row] = []
    header: Row | None = None
    room = GROUP_CHARS
    group: list[Row] = []
    size = 0  # of the group's lines
    for number, cells in rows:
        while cells and not cells[-1]:
            cells = cells[:-1]
        if not cells:
            continue
        if header is None:
            if not pending and heading:
                yield Block(HEADING, sheet, level=1)
            pending.append((number, cells))
            if len(cells) < 2 and len(pending) <= _MAX_TITLE_ROWS:
                continue
            titles, header, group = _split_header(pending)
            yield from (_title_block(row, sheet) for row in titles)
            room = GROUP_CHARS - len(_line(header))
            size = sum(len(_line(row)) + 1 for row in group)
            continue
        line = len(_line((number, cells))) + 1
        if group and size + line > room:
            yield _table_block(header, group, sheet)
            group, size = [], 0
        group.append((number, cells))
        size += line
    if header is None and pending:
        _, header, group = _split_header(pending)
    if header is not None:
        yield _table_block(header, group, sheet)


def _split_header(pending: list[Row]) -> tuple[list[Row], Row, list[Row]]:
    """(title rows, header, rows below it) of a sheet's first rows: the last row is the header
    when it has two cells or more; otherwise the sheet has one column and its first row is the
    header."""
    if len(pending[-1][1]) >= 2:
        return pending[:-1], pending[-1], []
    return [], pending[0], pending[1:]


def _line(row: Row) -> str:
    return "\t".join(row[1])


def _title_block(row: Row, sheet: str) -> Block:
    return Block(PARAGRAPH, _line(row), location=Location(ROW, row[0], row[0], sheet))


def _table_block(header: Row, group: list[Row], sheet: str) -> Block:
    """The header and the group's rows; located at the group's rows (the header's, when the
    sheet has nothing below its header)."""
    first, last = (group[0][0], group[-1][0]) if group else (header[0], header[0])
    text = "\n".join(_line(row) for row in [header, *group])
    return Block(TABLE, text, location=Location(ROW, first, last, sheet))
