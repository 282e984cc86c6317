"""CSV and TSV: rows in groups that repeat the header, located at the row numbers a spreadsheet
shows (the header is row 1); the delimiter and encoding are guessed; binary files and oversized
files are refused."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.textkit.extract.files import write
from textkit.extract import (
    ROW,
    TABLE,
    Location,
    ParseError,
    UnsupportedMediaType,
    detect_media_type,
    extract,
    rows,
)

CSV = "text/csv"
TSV = "text/tab-separated-values"


class TestCsv:
    def test_rows_keep_their_header_and_numbers(self, tmp_path: Path) -> None:
        text = 'Name,Price,Note\nApple,1.50,"crisp, red"\n"Pear",2,"two\nlines"\n\nKiwi,3,\n'
        path = write(tmp_path, "fruit.csv", text)
        assert detect_media_type("fruit.csv", path.read_bytes()) == CSV

        extracted = extract(path, CSV)

        assert extracted.title == ""
        assert [(b.kind, b.text, b.location) for b in extracted.blocks] == [
            (
                TABLE,
                "Name\tPrice\tNote\nApple\t1.50\tcrisp, red\nPear\t2\ttwo lines\nKiwi\t3",
                # The quoted line break is one row; the blank line is row 4.
                Location(ROW, 2, 5),
            )
        ]

    @pytest.mark.parametrize(
        ("name", "media_type", "text"),
        [
            ("prices.csv", CSV, "名称;价格\n苹果;1,50\n梨;2,00\n"),
            ("prices.tsv", TSV, "名称\t价格\n苹果\t1,50\n梨\t2,00\n"),
            ("prices.csv", CSV, "名称|价格\n苹果|1,50\n梨|2,00\n"),
        ],
    )
    def test_delimiters_are_guessed_and_chinese_survives(
        self, tmp_path: Path, name: str, media_type: str, text: str
    ) -> None:
        path = write(tmp_path, name, text)
        assert detect_media_type(name, path.read_bytes()) == media_type
        assert extract(path, media_type).text() == "名称\t价格\n苹果\t1,50\n梨\t2,00"

    def test_legacy_encodings_are_decoded(self, tmp_path: Path) -> None:
        path = write(tmp_path, "gbk.csv", "城市,人口\n上海,2487万\n北京,2189万\n".encode("gbk"))
        assert "上海\t2487万" in extract(path, CSV).text()

    def test_long_files_are_grouped_with_the_header_in_every_group(self, tmp_path) -> None:
        lines = ["id,city,amount"] + [f"{i},City {i},{i * 10}" for i in range(1, 1001)]
        path = write(tmp_path, "big.csv", "\n".join(lines))

        groups = extract(path, CSV).blocks

        assert len(groups) > 20
        assert all(g.text.startswith("id\tcity\tamount\n") for g in groups)
        locations = [g.location for g in groups if g.location is not None]
        assert locations[0].first == 2 and locations[-1].last == 1001
        assert all(b.first == a.last + 1 for a, b in itertools.pairwise(locations))

    def test_too_many_rows_is_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(rows, "MAX_ROWS", 50)
        path = write(tmp_path, "big.csv", "a,b\n" + "1,2\n" * 100)
        with pytest.raises(ParseError, match="CSV file has more than the limit of 50 rows"):
            extract(path, CSV)

    def test_a_workbook_named_csv_is_refused_with_advice(self) -> None:
        with pytest.raises(UnsupportedMediaType, match=r"ZIP archive \(an Excel \.xlsx"):
            detect_media_type("export.csv", b"PK\x03\x04" + bytes(100))

    def test_binary_named_csv_is_refused(self) -> None:
        with pytest.raises(UnsupportedMediaType, match="named like a CSV file, but it contains"):
            detect_media_type("data.csv", b"\x7fELF\x02\x01\x01\x00\x00")

    def test_a_field_past_the_csv_limit_is_refused(self, tmp_path: Path) -> None:
        path = write(tmp_path, "huge.csv", 'a,b\n"' + "x" * 200_000 + '",1\n')
        with pytest.raises(ParseError, match="The CSV file cannot be read: field larger"):
            extract(path, CSV)
