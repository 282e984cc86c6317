"""Rows of a sheet (XLSX, ODS) or a CSV file as blocks the chunker keeps whole: a sheet's name
as a heading, its leading title rows as paragraphs, then its rows in groups, each a table block
that says what its columns are, so that every chunk does: a header line of the columns the
group fills above its rows, or, for a wide or sparse sheet, every row as "column: value" pairs
(`sheet_blocks` says which).

A table block has one line per row, its cells separated by tabs (as Word tables are), and the
location of the rows it holds: the sheet's own row numbers, the header's repetition aside.
A group stops growing at about `GROUP_CHARS` characters, so that at the default chunk size of
800 characters a group is one chunk.

Word-processing tables (DOCX, ODT, RTF) are written here too (`row_lines`): a cell's
paragraphs on its row's line, and a table nested in a cell inside that cell.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from textkit.extract.base import HEADING, PARAGRAPH, ROW, TABLE, Block, Location, ParseError
from textkit.reasons import reason
from textkit.words import gettext_noop

# Per file, whatever its sheets: a spreadsheet past these is a database export, not a document.
MAX_ROWS = 200_000
MAX_CELLS = 4_000_000

# `what`: the kind of file ("workbook"), words marked where they are written.
TOO_MANY_ROWS = reason(
    "rows.too_many_rows",
    gettext_noop(
        "The %(what)s has more than the limit of %(limit)s rows; split it into smaller files."
    ),
    words=("what",),
)
TOO_MANY_CELLS = reason(
    "rows.too_many_cells",
    gettext_noop(
        "The %(what)s has more than the limit of %(limit)s cells; split it into smaller files."
    ),
    words=("what",),
)

GROUP_CHARS = 700
# Single-cell rows above the header ("Sales by region, 2026") are titles, not data.
_MAX_TITLE_ROWS = 3

Row = tuple[int, list[str]]


class RowBudget:
    """The rows and cells a file may hold, spent as its sheets are read; `what` names the file
    in the refusal ("workbook", marked with `gettext_noop`)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.rows = 0
        self.cells = 0

    def spend(self, *, rows: int, cells: int) -> None:
        self.rows += rows
        self.cells += cells
        if self.rows > MAX_ROWS:
            raise ParseError(TOO_MANY_ROWS(what=self.what, limit=MAX_ROWS))
        if self.cells > MAX_CELLS:
            raise ParseError(TOO_MANY_CELLS(what=self.what, limit=MAX_CELLS))


def cell_text(value: str) -> str:
    """A cell's text on one line: line breaks and tabs would split the row."""
    return " ".join(value.split())


# What a word-processing table's cell holds, in order: paragraphs, and tables nested in it (each
# as its rows of cell texts).
CellPiece = str | list[list[str]]


def nested_table_text(table_rows: Iterable[Iterable[str]]) -> str:
    """A table inside a table's cell, on that cell's one line: its rows separated by "; ", the
    cells of a row by ", " (empty ones left out), so that the outer row stays one row and its
    cells stay in their columns."""
    lines = (", ".join(cell for cell in map(cell_text, cells) if cell) for cells in table_rows)
    return "; ".join(line for line in lines if line)


def row_lines(cells: list[list[CellPiece]]) -> list[str]:
    """The lines of one row of a word-processing table: one line, its cells separated by tabs
    (each cell's paragraphs and nested tables on it, `nested_table_text`). A row whose only cell
    with text holds a nested table is a layout table's frame around the real one, and has no
    columns to keep: its paragraphs and the nested table's rows get a line each."""
    texts = [cell_line(pieces) for pieces in cells]
    filled = [pieces for pieces, text in zip(cells, texts, strict=True) if text]
    if len(filled) == 1 and any(not isinstance(piece, str) for piece in filled[0]):
        lines: list[str] = []
        for piece in filled[0]:
            if isinstance(piece, str):
                lines.append(cell_text(piece))
            else:
                lines.extend("\t".join(cell_text(cell) for cell in row) for row in piece)
        return [line for line in lines if line.strip()]
    line = "\t".join(texts)
    return [line] if line.strip() else []


def cell_line(pieces: Iterable[CellPiece]) -> str:
    """A word-processing table cell's text on one line, nested tables included."""
    return cell_text(
        " ".join(piece if isinstance(piece, str) else nested_table_text(piece) for piece in pieces)
    )


def sheet_blocks(rows: Iterable[Row], *, sheet: str = "", heading: bool = True) -> Iterator[Block]:
    """The blocks of one sheet from its (row number, cell texts) pairs in order; rows without
    text are skipped, and a sheet without any gives no blocks (not even its heading). The
    first row of two or more cells (or the first row, when none has two) is the header.

    The rows below the header are written in one of two forms, whichever is shorter on the
    first `SAMPLE_ROWS` of them:
    - tables: groups of rows under a header line, both holding only the columns the group's
      rows fill (an export's columns left empty cost nothing);
    - records: each row as "column: value" for the cells it fills (`_record`), in groups
      without a header line. Always so when a group's header would take more than half of it:
      it would hold a row or two, the header as long as they are (issue 37: a wide export read
      1.8 times its words), and a chunker cutting such a group would part rows from their
      header.
    Either way every chunk says what its columns are."""
    rows = iter(rows)
    pending: list[Row] = []
    for number, cells in rows:
        cells = _trimmed(cells)
        if not cells:
            continue
        if not pending and heading:
            yield Block(HEADING, sheet, level=1)
        pending.append((number, cells))
        if len(cells) >= 2 or len(pending) > _MAX_TITLE_ROWS:
            break
    if not pending:
        return
    titles, header, below = _split_header(pending)
    yield from (_title_block(row, sheet) for row in titles)
    body = itertools.chain(below, ((n, c) for n, c in ((n, _trimmed(c)) for n, c in rows) if c))
    sample = list(itertools.islice(body, SAMPLE_ROWS))
    if not sample:
        yield Block(TABLE, _line(header), location=Location(ROW, header[0], header[0], sheet))
        return
    if _records_are_shorter(header, sample):
        yield from _record_groups(header, itertools.chain(sample, body), sheet)
    else:
        yield from _table_groups(header, itertools.chain(sample, body), sheet)


# The rows that decide a sheet's form (see `sheet_blocks`).
SAMPLE_ROWS = 50


def _trimmed(cells: list[str]) -> list[str]:
    """The cells up to the last one with text."""
    end = len(cells)
    while end and not cells[end - 1]:
        end -= 1
    return cells if end == len(cells) else cells[:end]


def _records_are_shorter(header: Row, sample: list[Row]) -> bool:
    tables = list(_table_groups(header, sample, ""))
    if any(len(block.text.partition("\n")[0]) > GROUP_CHARS // 2 for block in tables):
        return True
    records = sum(len(_record(header, cells)) + 1 for _, cells in sample)
    return records < sum(len(block.text) + 1 for block in tables)


def _table_groups(header: Row, body: Iterable[Row], sheet: str) -> Iterator[Block]:
    """Groups of about `GROUP_CHARS` characters under a header of the columns they fill."""
    names = header[1]
    group: list[Row] = []
    used: set[int] = set()
    values = 0  # characters of the group's cells
    for row in body:
        filled = {column for column, cell in enumerate(row[1]) if cell}
        grown = used | filled
        named = sum(len(names[column]) for column in grown if column < len(names))
        # The header line and every row line: their cells, a tab between two, a line break.
        size = named + values + sum(map(len, row[1])) + (len(group) + 2) * len(grown)
        if group and size > GROUP_CHARS:
            yield _table_block(header, group, used, sheet)
            group, values, grown = [], 0, filled
        group.append(row)
        used = grown
        values += sum(map(len, row[1]))
    if group:
        yield _table_block(header, group, used, sheet)


def _table_block(header: Row, group: list[Row], used: set[int], sheet: str) -> Block:
    """The header and the group's rows, in the columns the group fills; located at the group's
    rows."""
    columns = sorted(used)

    def line(cells: list[str]) -> str:
        return "\t".join(_trimmed([cells[c] if c < len(cells) else "" for c in columns]))

    text = "\n".join([line(header[1]), *(line(cells) for _, cells in group)])
    return Block(TABLE, text, location=Location(ROW, group[0][0], group[-1][0], sheet))


def _record_groups(header: Row, body: Iterable[Row], sheet: str) -> Iterator[Block]:
    """Groups of about `GROUP_CHARS` characters of rows written as records."""
    group: list[Row] = []
    lines: list[str] = []
    size = 0
    for row in body:
        line = _record(header, row[1])
        if group and size + len(line) + 1 > GROUP_CHARS:
            yield _record_block(group, lines, sheet)
            group, lines, size = [], [], 0
        group.append(row)
        lines.append(line)
        size += len(line) + 1
    if group:
        yield _record_block(group, lines, sheet)


def _record_block(group: list[Row], lines: list[str], sheet: str) -> Block:
    text = "\n".join(lines)
    return Block(TABLE, text, location=Location(ROW, group[0][0], group[-1][0], sheet))


def _record(header: Row, cells: list[str]) -> str:
    """A row as its filled cells, each after its column's name ("City: Paris"), tab-separated;
    a cell under no name stands alone."""
    names = header[1]
    return "\t".join(
        f"{names[column]}: {cell}" if column < len(names) and names[column] else cell
        for column, cell in enumerate(cells)
        if cell
    )


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
