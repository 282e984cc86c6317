"""Tables in a PDF's text layer, found by where the text stands: lines whose cells line up
in columns. A table's rows are kept together, each group of them with the header row repeated,
as the spreadsheet extractors do (`rows`): a chunk of a table then says what its columns are.

A line is one of PDFium's text lines (two that share a baseline joined: PDFium breaks a line
before text placed far to its right). A space wider than 1.3 times the line's font size splits
it into cells: a word space is a quarter to a half of it, two spaces of a monospaced font 1.2.
Only the characters beside a space and at a cell's ends are measured, so finding tables costs a
fraction of reading the text. A table is three or more consecutive lines, each of two cells or
more, whose cells fall between the column boundaries of its first line (the header; or of its
second, when that has more cells): a boundary is midway between two header cells, so
right-aligned numbers under a left-aligned heading still fall in their column.

What is not a table, though it stands in columns: a table of contents (two columns whose last
one is page numbers, or dot leaders), a list (its bullets or numbers in a column), prose set in
columns (its cells are long).

A cell that wraps: a line whose first column is empty, with one cell or fewer than the other
columns, within a row's distance of the line above, continues the row above (each of its cells
appended to the cell of its column): a long description wrapped onto a second line stays in its
row. A line that fills every other column is a row whose label is left blank. A row label that
wraps is told from a new row only where rows stand clearly further apart than a line's height
(padded cells, as word processors set tables): there a line with fewer cells than columns, one
line below the line above, continues its row whichever columns it fills. In a table whose rows
are a line apart, a wrapped label's second line ends the table.
"""

from __future__ import annotations

import ctypes
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from statistics import median
from typing import Any

import pypdfium2
import pypdfium2.raw as pdfium_c

from textkit.extract.base import TABLE, Block, Location

MIN_ROWS = 3  # the header and two rows
MIN_CELLS = 2
# A space wider than this many times the font size separates cells: a word space is a quarter
# to a half of it, two spaces of a monospaced font 1.2 (code aligned by spaces is not a table).
CELL_GAP = 1.3
# Rows further apart than this many line heights are not one table.
ROW_GAP = 2.5
# Cells this long (median, in characters) are prose set in columns, not a table's cells.
MAX_MEDIAN_CELL = 40
# A wrapped cell's next line stands at most this many font sizes below the line above; a table
# whose rows stand this many times further apart than that has padded rows (_closer_than_rows).
WRAP_GAP = 1.5
ROW_OVER_LINE = 1.5
GROUP_CHARS = 700  # as `rows`: a group and its header fit one chunk at the default size

_DOT_LEADER_RE = re.compile(r"(?:\.\s*){4,}|(?:·\s*){4,}|…{2,}")
_PAGE_NUMBER_RE = re.compile(r"\d{1,4}|[ivxlc]{1,6}", re.IGNORECASE)
# A list's markers: bullets, dashes, "1.", "a)", "(iv)".
_LIST_MARKER_RE = re.compile(r"[^\w\s]{1,2}|\(?(?:\d{1,3}|[a-z]|[ivxlc]{1,5})[.)]", re.IGNORECASE)
_SPACES_RE = re.compile(r"\s+")
_SPACES_RUN_RE = re.compile(r"[ \t\xa0]+")
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class _Cell:
    left: float
    right: float
    text: str


@dataclass(frozen=True)
class _Line:
    cells: tuple[_Cell, ...]  # left to right
    middle: float
    size: float  # the font size of its first character: the line's height


@dataclass(frozen=True)
class Table:
    """A table's rows (the first is its header), each a list of cell texts, one per column;
    and the text of the lines each row stands on, in page order (two or more when a cell
    wraps)."""

    rows: list[list[str]]
    lines: list[list[str]]

    def line_keys(self) -> list[str]:
        """Each row as `pdf` finds it among the page's text lines: its lines' text without
        spaces, in their order."""
        return [line_key("".join(texts)) for texts in self.lines]

    def lines_per_row(self, row: int) -> int:
        """How many of the page's text lines row `row` may take: a line per cell at most, for
        each of its lines (PDFium may break a line before each far-apart cell)."""
        return len(self.rows[row]) * len(self.lines[row])


def line_key(text: str) -> str:
    return _SPACES_RE.sub("", text).casefold()


def find_tables(textpage: pypdfium2.PdfTextPage) -> list[Table]:
    """The tables of one page, top to bottom. The caller holds PDFium's lock."""
    count = textpage.count_chars()
    if count < MIN_ROWS * MIN_CELLS:
        return []
    text = textpage.get_text_range(0, count)
    if len(text) != count:  # a character outside the BMP: string and character indices differ
        return []
    lines = _joined(_lines(textpage.raw, text))
    tables = []
    for candidate in _candidate_tables(lines):
        table = _read(candidate)
        if table is not None:
            tables.append(table)
    return tables


def table_blocks(table: Table, location: Location) -> list[Block]:
    """The table as blocks of at most about GROUP_CHARS characters, each starting with the
    header row; cells separated by tabs, one row a line."""
    header, *rows = ["\t".join(row) for row in table.rows]
    blocks: list[Block] = []
    group: list[str] = []
    size = len(header)
    for row in rows:
        if group and size + len(row) + 1 > GROUP_CHARS:
            blocks.append(Block(TABLE, "\n".join([header, *group]), location=location))
            group, size = [], len(header)
        group.append(row)
        size += len(row) + 1
    blocks.append(Block(TABLE, "\n".join([header, *group]), location=location))
    return blocks


def _lines(raw: Any, text: str) -> Iterator[_Line | None]:
    """The page's text lines in PDFium's order, each split into cells at wide gaps (None for a
    line without text). Boxes are read only beside spaces and at a cell's ends."""
    box = _Boxes(raw)
    start = 0
    for end in [m.start() for m in _LINE_BREAK_RE.finditer(text)] + [len(text)]:
        line = text[start:end]
        first = len(line) - len(line.lstrip())
        last = len(line.rstrip())
        start = end + (2 if text.startswith("\r\n", end) else 1)
        if first >= last:
            yield None
            continue
        at = end - len(line)  # the line's first character index
        size = pdfium_c.FPDFText_GetFontSize(raw, at + first) or box.height(at + first)
        cuts = [first]
        for space in _SPACES_RUN_RE.finditer(line, first, last):
            gap = box.left(at + space.end()) - box.right(at + space.start() - 1)
            if gap > CELL_GAP * size:
                cuts += [space.start(), space.end()]
        cuts.append(last)
        cells = tuple(
            _Cell(box.left(at + a), box.right(at + b - 1), line[a:b])
            for a, b in zip(cuts[::2], cuts[1::2], strict=True)
        )
        yield _Line(cells, box.middle(at + first), size)


def _joined(lines: Iterator[_Line | None]) -> list[_Line]:
    """The lines, with a line that continues the previous one on its baseline, to its right,
    joined to it: PDFium breaks a line before text placed far to the right of it."""
    joined: list[_Line] = []
    for line in lines:
        if line is None:
            continue
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and abs(previous.middle - line.middle) <= min(previous.size, line.size) / 2
            and line.cells[0].left > previous.cells[-1].right
        ):
            last, first = previous.cells[-1], line.cells[0]
            if first.left - last.right > CELL_GAP * previous.size:
                cells = (*previous.cells, *line.cells)
            else:
                merged = _Cell(last.left, first.right, f"{last.text} {first.text}")
                cells = (*previous.cells[:-1], merged, *line.cells[1:])
            joined[-1] = _Line(cells, previous.middle, previous.size)
        else:
            joined.append(line)
    return joined


class _Boxes:
    """Characters' boxes on a text page, through PDFium's C API (one call per character)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.edges = [ctypes.c_double() for _ in range(4)]  # left, right, bottom, top

    def _box(self, index: int) -> tuple[float, float, float, float]:
        pdfium_c.FPDFText_GetCharBox(self.raw, index, *self.edges)
        left, right, bottom, top = (edge.value for edge in self.edges)
        return left, right, bottom, top

    def left(self, index: int) -> float:
        return self._box(index)[0]

    def right(self, index: int) -> float:
        return self._box(index)[1]

    def middle(self, index: int) -> float:
        _, _, bottom, top = self._box(index)
        return (bottom + top) / 2

    def height(self, index: int) -> float:
        _, _, bottom, top = self._box(index)
        return max(top - bottom, 1.0)


def _candidate_tables(lines: list[_Line]) -> list[list[list[_Line]]]:
    """Runs of lines that line up under the columns of their first line, or of their second
    when it has more cells (a header over a column of row labels has none above them); each
    row its line and the lines that continue it (a wrapped cell's)."""
    found: list[list[list[_Line]]] = []
    index = 0
    while index < len(lines):
        header = lines[index]
        if len(header.cells) < MIN_CELLS:
            index += 1
            continue
        bounds = _boundaries(header)
        below = lines[index + 1] if index + 1 < len(lines) else None
        if below is not None and len(below.cells) > len(header.cells):
            wider = _boundaries(below)
            if _fits(header, wider):
                bounds = wider
        table = [[header]]
        taken = 1
        for line in lines[index + 1 :]:
            previous = table[-1][-1]
            gap = abs(previous.middle - line.middle)
            if gap > ROW_GAP * max(previous.size, line.size):
                break
            if not _fits(line, bounds):
                break
            if _continues(line, bounds) or _closer_than_rows(line, gap, bounds, table):
                table[-1].append(line)
            elif len(line.cells) >= MIN_CELLS:
                table.append([line])
            else:
                break
            taken += 1
        if len(table) >= MIN_ROWS:
            found.append(table)
            index += taken
        else:
            index += 1
    return found


def _continues(line: _Line, bounds: list[float]) -> bool:
    """A wrapped cell's line: its first column empty, and one cell, or fewer than all the
    other columns would have (a line filling them is a row that leaves its label blank, as
    "the same as above")."""
    one_or_few = len(line.cells) == 1 or len(line.cells) < len(bounds)
    return one_or_few and _column(line.cells[0].left, bounds) > 0


def _closer_than_rows(
    line: _Line, gap: float, bounds: list[float], table: list[list[_Line]]
) -> bool:
    """A wrapped line of any cell, the row label's included: a line with fewer cells than
    columns, one line's height below the line above, in a table whose rows stand clearly
    further apart than that (their cells padded, as a word processor sets them). Where rows
    are a line apart, a line in the first column alone is not told from a row (or from the text
    after the table) and is not taken for a wrapped label."""
    if len(line.cells) > len(bounds) or len(table) < 2:
        return False
    starts = [row[0].middle for row in table]
    pitch = median(abs(a - b) for a, b in itertools.pairwise(starts))
    return gap <= WRAP_GAP * line.size and gap * ROW_OVER_LINE <= pitch


def _boundaries(header: _Line) -> list[float]:
    """Where one column ends and the next begins: midway between two header cells."""
    return [
        (left.right + right.left) / 2
        for left, right in zip(header.cells, header.cells[1:], strict=False)
    ]


def _column(x: float, bounds: list[float]) -> int:
    return sum(1 for bound in bounds if x > bound)


def _fits(line: _Line, bounds: list[float]) -> bool:
    """Every cell lies within one column, each in a column of its own."""
    columns = []
    for cell in line.cells:
        first, last = _column(cell.left, bounds), _column(cell.right, bounds)
        if first != last:
            return False
        columns.append(first)
    return len(set(columns)) == len(columns)


def _read(table: list[list[_Line]]) -> Table | None:
    """The rows' cell texts, placed in the header's columns (a row's continuation lines
    appended cell by cell); None when they are not a table's (a table of contents, a list,
    prose in columns)."""
    bounds = _boundaries(max((row[0] for row in table[:2]), key=lambda line: len(line.cells)))
    rows = []
    for lines in table:
        row = [""] * (len(bounds) + 1)
        for line in lines:
            for cell in line.cells:
                column = _column(cell.left, bounds)
                text = _SPACES_RE.sub(" ", cell.text).strip()
                row[column] = f"{row[column]} {text}".strip()
        rows.append(row)
    cells = [cell for row in rows for cell in row if cell]
    if median(len(cell) for cell in cells) > MAX_MEDIAN_CELL:
        return None
    if any(_DOT_LEADER_RE.search(cell) for cell in cells):
        return None
    if len(bounds) == 1 and all(_PAGE_NUMBER_RE.fullmatch(row[-1]) for row in rows[1:]):
        return None  # a table of contents: titles and their page numbers
    if all(_LIST_MARKER_RE.fullmatch(row[0]) for row in rows if row[0]):
        return None  # a list: its markers stand in a column of their own
    texts = [[" ".join(cell.text for cell in line.cells) for line in lines] for lines in table]
    return Table(rows, texts)
