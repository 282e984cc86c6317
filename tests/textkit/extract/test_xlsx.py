"""Excel (.xlsx): one heading per visible sheet, rows in groups that repeat the header and know
their sheet and row range, values as Excel shows them; old .xls files, damaged workbooks, zip
bombs, DTDs and oversized workbooks are refused with a reason."""

from __future__ import annotations

import datetime
import itertools
import os
import zipfile
from pathlib import Path

import openpyxl
import pytest

from tests.textkit.extract.files import write
from tests.textkit.extract.test_docx import make_docx, rewrite_zip
from textkit.extract import (
    HEADING,
    ROW,
    TABLE,
    Location,
    ParseError,
    UnsupportedMediaType,
    archive,
    detect_media_type,
    extract,
    rows,
)

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def make_xlsx(path: Path, *, sales_rows: int = 3, title: str = "") -> Path:
    """A workbook: a "Sales" sheet with a title row, a header, dates, money and percentages; a
    hidden sheet; an empty sheet; a Chinese sheet."""
    workbook = openpyxl.Workbook()
    if title:
        workbook.properties.title = title
    sales = workbook.active
    sales.title = "Sales"
    sales.append(["Sales by region"])
    sales.append(["Region", "Date", "Amount", "Share"])
    for i in range(sales_rows):
        sales.append([f"Region {i}", datetime.date(2026, 3, 1 + i % 28), 1234.5 + i, 0.125])
    for row in sales.iter_rows(min_row=3):
        row[1].number_format = "yyyy-mm-dd"
        row[2].number_format = "#,##0.00"
        row[3].number_format = "0.0%"
    secret = workbook.create_sheet("Workings")
    secret.append(["hidden", "formula"])
    secret.sheet_state = "hidden"
    workbook.create_sheet("Empty")
    chinese = workbook.create_sheet("销售")
    chinese.append(["地区", "金额"])
    chinese.append(["华东", 42])
    workbook.save(path)
    return path


class TestXlsx:
    def test_sheets_become_headings_and_row_groups_with_values_as_shown(
        self, tmp_path: Path
    ) -> None:
        path = make_xlsx(tmp_path / "sales.xlsx", title="Sales 2026")
        assert detect_media_type("sales.xlsx", path.read_bytes()[:4096]) == XLSX

        extracted = extract(path, XLSX)

        assert extracted.title == "Sales 2026"
        assert [(b.kind, b.text, b.location) for b in extracted.blocks] == [
            (HEADING, "Sales", None),
            ("paragraph", "Sales by region", Location(ROW, 1, 1, "Sales")),
            (
                TABLE,
                "Region\tDate\tAmount\tShare\n"
                "Region 0\t2026-03-01\t1,234.50\t12.5%\n"
                "Region 1\t2026-03-02\t1,235.50\t12.5%\n"
                "Region 2\t2026-03-03\t1,236.50\t12.5%",
                Location(ROW, 3, 5, "Sales"),
            ),
            (HEADING, "销售", None),
            (TABLE, "地区\t金额\n华东\t42", Location(ROW, 2, 2, "销售")),
        ]

    def test_every_group_repeats_the_header_and_the_groups_cover_every_row(
        self, tmp_path: Path
    ) -> None:
        path = make_xlsx(tmp_path / "big.xlsx", sales_rows=500)

        tables = [
            b for b in extract(path, XLSX).blocks if b.location and b.location.part == "Sales"
        ]
        groups = [b for b in tables if b.kind == TABLE]

        assert len(groups) > 10
        for group in groups:
            assert group.text.startswith("Region\tDate\tAmount\tShare\n")
            assert len(group.text) <= rows.GROUP_CHARS
        covered = [(g.location.first, g.location.last) for g in groups if g.location]
        assert covered[0][0] == 3 and covered[-1][1] == 502
        assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(covered))

    def test_a_stored_file_without_an_extension_is_read(self, tmp_path: Path) -> None:
        path = make_xlsx(tmp_path / "s.xlsx").rename(tmp_path / "0f3a9c")
        assert "Region 0" in extract(path, XLSX).text()

    def test_a_word_document_named_xlsx_is_refused(self, tmp_path: Path) -> None:
        path = make_docx(tmp_path / "report.docx").rename(tmp_path / "report.xlsx")
        with pytest.raises(ParseError, match=r"Office document, but not an Excel \(\.xlsx\)"):
            extract(path, XLSX)

    def test_formulas_read_as_their_cached_value(self, tmp_path: Path) -> None:
        # openpyxl writes no cached values; a formula without one reads as empty, never as
        # its source.
        workbook = openpyxl.Workbook()
        workbook.active.append(["Item", "Total"])
        workbook.active.append(["a", "=1+1"])
        path = tmp_path / "f.xlsx"
        workbook.save(path)
        assert "=1+1" not in extract(path, XLSX).text()

    def test_too_many_rows_is_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(rows, "MAX_ROWS", 100)
        path = make_xlsx(tmp_path / "big.xlsx", sales_rows=200)
        with pytest.raises(ParseError, match="more than the limit of 100 rows"):
            extract(path, XLSX)

    def test_old_xls_is_refused_with_advice(self, tmp_path: Path) -> None:
        ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500)
        with pytest.raises(UnsupportedMediaType, match=r"old-style Excel \(\.xls\)"):
            detect_media_type("budget.xlsx", ole)
        with pytest.raises(UnsupportedMediaType, match=r'"\.xls" are not supported.*Excel'):
            detect_media_type("budget.xls", ole)

    def test_truncated_workbook_is_refused(self, tmp_path: Path) -> None:
        data = make_xlsx(tmp_path / "whole.xlsx").read_bytes()
        path = write(tmp_path, "cut.xlsx", data[: len(data) // 2])
        with pytest.raises(ParseError, match=r"not a valid Excel \(\.xlsx\) workbook"):
            extract(path, XLSX)

    def test_garbage_is_refused(self, tmp_path: Path) -> None:
        path = write(tmp_path, "noise.xlsx", os.urandom(3000))
        with pytest.raises(ParseError, match="not a valid Excel"):
            extract(path, XLSX)

    def test_zip_bomb_is_refused(self, tmp_path: Path) -> None:
        zeros = {"xl/media/zeros.bin": bytes(20 * 1024 * 1024)}
        path = rewrite_zip(make_xlsx(tmp_path / "s.xlsx"), tmp_path / "bomb.xlsx", zeros)
        with pytest.raises(ParseError, match=r"Excel workbook part .* it may be a zip bomb"):
            extract(path, XLSX)

    def test_dtd_in_a_sheet_is_refused(self, tmp_path: Path) -> None:
        source = make_xlsx(tmp_path / "s.xlsx")
        with zipfile.ZipFile(source) as opened:
            sheet = opened.read("xl/worksheets/sheet1.xml")
        root = sheet.index(b"<worksheet")
        xxe = (
            sheet[:root] + b'<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>' + sheet[root:]
        )
        path = rewrite_zip(source, tmp_path / "xxe.xlsx", {"xl/worksheets/sheet1.xml": xxe})
        with pytest.raises(ParseError, match=r'part "xl/worksheets/sheet1\.xml" declares a DTD'):
            extract(path, XLSX)

    def test_path_traversal_entry_is_refused(self, tmp_path: Path) -> None:
        evil = {"../../etc/cron.d/evil": b"* * * * * root true"}
        path = rewrite_zip(make_xlsx(tmp_path / "s.xlsx"), tmp_path / "evil.xlsx", evil)
        with pytest.raises(ParseError, match="points outside the file"):
            extract(path, XLSX)

    def test_a_sheet_claiming_the_largest_dimension_is_not_padded(self, tmp_path: Path) -> None:
        source = make_xlsx(tmp_path / "s.xlsx")
        with zipfile.ZipFile(source) as opened:
            sheet = opened.read("xl/worksheets/sheet1.xml")
        start = sheet.index(b"<dimension ref=")
        end = sheet.index(b"/>", start) + 2
        huge = sheet[:start] + b'<dimension ref="A1:XFD1048576"/>' + sheet[end:]
        path = rewrite_zip(source, tmp_path / "wide.xlsx", {"xl/worksheets/sheet1.xml": huge})
        assert "Region 0\t2026-03-01" in extract(path, XLSX).text()

    def test_too_many_parts_is_refused(self, tmp_path: Path) -> None:
        extra = {f"xl/media/p{i}.bin": b"x" for i in range(archive.MAX_ENTRIES)}
        path = rewrite_zip(make_xlsx(tmp_path / "s.xlsx"), tmp_path / "many.xlsx", extra)
        with pytest.raises(ParseError, match="more than the limit of 2,000"):
            extract(path, XLSX)
