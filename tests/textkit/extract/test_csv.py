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


def _words(text: str) -> int:
    return len(text.replace(",", " ").split())


class TestWideCsv:
    """Issue 37: a wide header, repeated in groups of a row or two, was most of the text (1.8
    times the file's words), and a header wider than a chunk was cut apart from its rows."""

    NAMES = [
        "Customer id",
        "First name",
        "Last name",
        "Street address",
        "City",
        "Postal code",
        "Country",
        "Phone number",
        "Email address",
        "Account manager",
        "Contract start",
        "Contract end",
        "Monthly fee",
        "Currency",
        "Payment method",
        "Discount rate",
        "Support tier",
        "Renewal status",
        "Region",
        "Industry",
        "Employees",
        "Annual revenue",
        "Last contact",
        "Notes",
    ]

    def test_groups_name_only_the_columns_their_rows_fill(self, tmp_path: Path) -> None:
        # An export: every third column is never filled.
        lines = [",".join(self.NAMES)] + [
            ",".join(f"r{row}c{c}" if c % 3 != 2 else "" for c in range(24)) for row in range(300)
        ]
        text = "\n".join(lines)
        path = write(tmp_path, "export.csv", text)

        blocks = extract(path, CSV).blocks

        filled = "\t".join(name for c, name in enumerate(self.NAMES) if c % 3 != 2)
        assert all(b.kind == TABLE and b.text.startswith(filled + "\n") for b in blocks)
        assert _words(extract(path, CSV).text()) / _words(text) < 1.5  # 1.83 before

    def test_a_header_wider_than_half_a_group_gives_records(self, tmp_path: Path) -> None:
        from textkit.chunker import chunk_blocks

        names = [f"Measurement {n} result" for n in range(40)]
        rows_ = [
            [f"r{row}c{c}" if (row + c) % 4 == 0 else "" for c in range(40)] for row in range(60)
        ]
        path = write(
            tmp_path, "wide.csv", "\n".join([",".join(names), *(",".join(r) for r in rows_)])
        )

        blocks = extract(path, CSV).blocks

        assert blocks[0].text.split("\n")[:2] == [
            "\t".join(f"Measurement {c} result: r0c{c}" for c in range(0, 40, 4)),
            "\t".join(f"Measurement {c} result: r1c{c}" for c in range(3, 40, 4)),
        ]
        assert blocks[0].location is not None and blocks[0].location.first == 2
        chunks = chunk_blocks(blocks, size=800, overlap=100)
        # Every value in every chunk is next to its column's name.
        assert all(
            ": " in pair
            for chunk in chunks
            for line in chunk.text.split("\n")
            for pair in line.split("\t")
        )
