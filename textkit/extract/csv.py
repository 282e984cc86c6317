"""CSV and TSV: the rows in groups that name their columns (`rows`), each located at its row
numbers as a spreadsheet would show them (the header is row 1). The encoding is detected
(`encoding.decode`) and the delimiter guessed from the start of the file: comma, semicolon,
tab or vertical bar. A file of more than `rows.MAX_ROWS` rows or `rows.MAX_CELLS` cells is
refused. A CSV file has no title.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from textkit.extract import rows
from textkit.extract.base import ZIP_MAGIC, Extracted, ParseError, UnsupportedMediaType
from textkit.extract.encoding import decode, refuse_binary
from textkit.reasons import reason
from textkit.words import gettext_noop

MEDIA_TYPES = ("text/csv", "text/tab-separated-values")
EXTENSIONS = {".csv": "text/csv", ".tsv": "text/tab-separated-values"}
LABEL = gettext_noop("CSV (.csv, .tsv)")

ZIP_NAMED_CSV = reason(
    "csv.zip_named_csv",
    gettext_noop(
        "The file is named like a CSV file, but it is a ZIP archive (an Excel .xlsx workbook, "
        "perhaps); upload it under its own name."
    ),
)
# `detail`: Python's csv module's own words (English, as the logs have them).
UNREADABLE = reason("csv.unreadable", gettext_noop("The CSV file cannot be read: %(detail)s."))

_DELIMITERS = ",;\t|"
# Enough lines for the delimiter guess; csv.Sniffer is slow on more.
_SNIFF_CHARS = 16 * 1024


def check_head(head: bytes, media_type: str) -> None:
    if head.startswith(ZIP_MAGIC):
        raise UnsupportedMediaType(ZIP_NAMED_CSV())
    refuse_binary(head, gettext_noop("a CSV file"))


def extract(path: Path, *, max_chars: int) -> Extracted:
    text = decode(path.read_bytes())
    budget = rows.RowBudget(gettext_noop("CSV file"))
    try:
        blocks = list(rows.sheet_blocks(_records(text, budget), heading=False))
    except csv.Error as exc:
        raise ParseError(UNREADABLE(detail=str(exc))) from exc
    return Extracted(title="", blocks=blocks)


def _records(text: str, budget: rows.RowBudget) -> Iterator[rows.Row]:
    """(row number, cells) of every record; a record spanning lines (a quoted line break) is one
    row, and a blank line is an empty row, as a spreadsheet opens the file."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text))
    for number, record in enumerate(reader, start=1):
        budget.spend(rows=1, cells=len(record))
        yield number, [rows.cell_text(cell) for cell in record]


def _delimiter(text: str) -> str:
    """What csv.Sniffer finds in the first lines, else the candidate the first line has most of
    (a comma when it has none)."""
    sample = text[:_SNIFF_CHARS]
    if len(sample) < len(text) and "\n" in sample:
        sample = sample[: sample.rindex("\n")]
    try:
        return csv.Sniffer().sniff(sample, delimiters=_DELIMITERS).delimiter
    except csv.Error:
        first = sample.split("\n", 1)[0]
        return max(_DELIMITERS, key=first.count) if any(map(first.count, _DELIMITERS)) else ","
