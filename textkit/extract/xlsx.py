"""Excel (.xlsx): every visible sheet that has text, its name a heading and its rows in groups
that name their columns (`rows`), each located at the sheet's own row numbers. Values are the
ones Excel last calculated and shows: formulas by their cached result, numbers and dates in the
cell's number format (`numformat`). The title is the core properties' title.

Hidden sheets are left out: an author hides lookup tables and workings, not the content, and
what was hidden from readers should not surface in search. Charts and images carry no text here.
The archive is checked before openpyxl sees it (zip bombs, encryption, DTDs), and a workbook of
more than `rows.MAX_ROWS` rows or `rows.MAX_CELLS` cells is refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from xml.etree.ElementTree import ParseError as XmlParseError

from lxml import etree

from textkit.extract import archive, numformat, rows
from textkit.extract.base import (
    OLE_MAGIC,
    ZIP_MAGIC,
    Block,
    Extracted,
    ParseError,
    UnsupportedMediaType,
)
from textkit.reasons import reason
from textkit.words import gettext_noop

MEDIA_TYPES = ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",)
EXTENSIONS = {".xlsx": MEDIA_TYPES[0]}
LABEL = gettext_noop("Excel (.xlsx)")

OLD_OR_PROTECTED = reason(
    "xlsx.old_or_protected",
    gettext_noop(
        "The file is an old-style Excel (.xls) workbook or a password-protected one; save it as "
        "an unprotected .xlsx and upload that."
    ),
)
NAMED_NOT_XLSX = reason(
    "xlsx.named_not_xlsx",
    gettext_noop("The file is named like an Excel (.xlsx) workbook, but its content is not one."),
)
NOT_XLSX = reason("xlsx.not_xlsx", gettext_noop("The file is not an Excel (.xlsx) workbook."))
OTHER_OFFICE = reason(
    "xlsx.other_office",
    gettext_noop("The file is an Office document, but not an Excel (.xlsx) workbook."),
)
_DAMAGED = reason("xlsx.damaged", gettext_noop("The Excel workbook is damaged and cannot be read."))


def check_head(head: bytes, media_type: str) -> None:
    if head.startswith(ZIP_MAGIC):
        return
    if head.startswith(OLE_MAGIC):
        raise UnsupportedMediaType(OLD_OR_PROTECTED())
    raise UnsupportedMediaType(NAMED_NOT_XLSX())


def extract(path: Path, *, max_chars: int) -> Extracted:
    archive.check_office_archive(
        path, what=gettext_noop("Excel workbook"), label=gettext_noop("Excel (.xlsx) workbook")
    )
    with path.open("rb") as file:
        return _read(file)


def _read(file: IO[bytes]) -> Extracted:
    # openpyxl (with numpy) is imported when a workbook is read, not with the registry.
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    # A file object, not the path: openpyxl refuses a path whose name does not end in .xlsx,
    # and stored files have no extension.
    try:
        workbook = openpyxl.load_workbook(file, read_only=True, data_only=True)
    except InvalidFileException as exc:
        raise ParseError(NOT_XLSX()) from exc
    except OSError as exc:
        # openpyxl's word for an archive without a workbook part (a Word document, say).
        raise ParseError(OTHER_OFFICE()) from exc
    except (*archive.ZIP_DAMAGE_ERRORS, KeyError, TypeError, etree.LxmlError, XmlParseError) as exc:
        raise ParseError(_DAMAGED()) from exc
    try:
        title = (workbook.properties.title or "").strip()
        budget = rows.RowBudget(gettext_noop("workbook"))
        blocks: list[Block] = []
        for sheet in workbook.worksheets:
            if sheet.sheet_state != "visible":
                continue
            blocks.extend(rows.sheet_blocks(_sheet_rows(sheet, budget), sheet=sheet.title))
    except (
        *archive.ZIP_DAMAGE_ERRORS,
        KeyError,
        TypeError,
        AttributeError,
        etree.LxmlError,
        XmlParseError,
    ) as exc:
        raise ParseError(_DAMAGED()) from exc
    finally:
        workbook.close()
    return Extracted(title=title, blocks=blocks)


def _sheet_rows(sheet: Any, budget: rows.RowBudget) -> Iterator[rows.Row]:
    """(row number, displayed cell texts) of the sheet's rows that hold a value. The declared
    dimensions are ignored: a sheet claiming A1:XFD1048576 would be padded to that size."""
    sheet.reset_dimensions()
    for number, cells in enumerate(sheet.iter_rows(), start=1):
        if not cells:
            continue
        texts = [rows.cell_text(_display(cell)) for cell in cells]
        if any(texts):
            budget.spend(rows=1, cells=len(cells))
            yield number, texts
        else:
            budget.spend(rows=0, cells=len(cells))


def _display(cell: Any) -> str:
    value = cell.value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return numformat.display(value, getattr(cell, "number_format", None))
