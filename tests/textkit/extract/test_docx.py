"""Word (.docx): paragraphs, headings and tables in order, the title from the core properties or
the first heading; anything that is not a Word document, a damaged one, a zip bomb or a part
that declares a DTD (billion laughs, external entities) is refused with a reason."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import docx
import pytest

from tests.textkit.extract.files import parse_file, write
from textkit.extract import (
    APPLICATION_DOCX,
    HEADING,
    PARAGRAPH,
    ParseError,
    archive,
    detect_media_type,
    extract,
)


def make_docx(path: Path) -> Path:
    """A report with headings, a paragraph, a table and Chinese text: what parsing reads."""
    document = docx.Document()
    document.add_heading("Quarterly Report", level=1)
    document.add_paragraph("Revenue grew in every region this quarter.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Region"
    table.cell(0, 1).text = "Growth"
    table.cell(1, 0).text = "North"
    table.cell(1, 1).text = "12%"
    document.add_heading("Outlook", level=2)
    document.add_paragraph("知识库管理系统将在下个季度上线。")
    document.save(str(path))
    return path


def make_titled_docx(path: Path, *, core_title: str = "") -> Path:
    """A report with an optional core title, a dot leader and a space inside Chinese words: what
    extraction cleans up."""
    document = docx.Document()
    if core_title:
        document.core_properties.title = core_title
    document.add_heading("Quarterly Report", level=1)
    document.add_paragraph("Revenue grew in every region.")
    document.add_heading("Outlook", level=2)
    document.add_paragraph("Contents ........ 4")
    document.add_paragraph("知识库 管理系统将在下个季度上线。")
    document.save(str(path))
    return path


def rewrite_zip(source: Path, target: Path, replace: dict[str, bytes]) -> Path:
    """Copy a zip, replacing (or adding) the named entries."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename not in replace:
                dst.writestr(info, src.read(info.filename))
        for name, data in replace.items():
            dst.writestr(name, data)
    return target


class TestDocx:
    def test_extracts_paragraphs_headings_and_table_in_order(self, tmp_path: Path) -> None:
        path = make_docx(tmp_path / "report.docx")
        assert detect_media_type("report.docx", path.read_bytes()[:4096]) == APPLICATION_DOCX
        assert parse_file(path, APPLICATION_DOCX) == (
            "Quarterly Report\n\n"
            "Revenue grew in every region this quarter.\n\n"
            "Region\tGrowth\nNorth\t12%\n\n"
            "Outlook\n\n"
            "知识库管理系统将在下个季度上线。"
        )

    def test_not_a_zip_is_refused(self, tmp_path: Path) -> None:
        path = write(tmp_path, "fake.docx", os.urandom(3000))
        with pytest.raises(ParseError, match=r"not a valid Word \(\.docx\) document"):
            parse_file(path, APPLICATION_DOCX)

    def test_truncated_docx_is_refused(self, tmp_path: Path) -> None:
        data = make_docx(tmp_path / "whole.docx").read_bytes()
        path = write(tmp_path, "cut.docx", data[: len(data) // 2])
        with pytest.raises(ParseError, match="not a valid Word"):
            parse_file(path, APPLICATION_DOCX)

    def test_zip_that_is_not_a_word_document_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "archive.docx"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "hello")
        with pytest.raises(ParseError, match=r"ZIP archive, but not a Word \(\.docx\) document"):
            parse_file(path, APPLICATION_DOCX)

    def test_other_office_document_is_refused(self, tmp_path: Path) -> None:
        source = make_docx(tmp_path / "report.docx")
        with zipfile.ZipFile(source) as archive:
            types = archive.read("[Content_Types].xml").replace(
                b"wordprocessingml.document.main+xml", b"spreadsheetml.sheet.main+xml"
            )
        path = rewrite_zip(source, tmp_path / "sheet.docx", {"[Content_Types].xml": types})
        with pytest.raises(ParseError, match=r"not a Word \(\.docx\) document"):
            parse_file(path, APPLICATION_DOCX)

    def test_too_many_entries_is_a_zip_bomb(self, tmp_path: Path) -> None:
        extra = {f"word/media/part{i}.bin": b"x" for i in range(archive.MAX_ENTRIES)}
        path = rewrite_zip(make_docx(tmp_path / "r.docx"), tmp_path / "many.docx", extra)
        with pytest.raises(ParseError, match="more than the limit of 2,000; it may be a zip bomb"):
            parse_file(path, APPLICATION_DOCX)

    def test_high_compression_ratio_is_a_zip_bomb(self, tmp_path: Path) -> None:
        zeros = {"word/media/zeros.bin": bytes(20 * 1024 * 1024)}
        path = rewrite_zip(make_docx(tmp_path / "r.docx"), tmp_path / "ratio.docx", zeros)
        assert path.stat().st_size < 200 * 1024
        with pytest.raises(ParseError, match="compressed more than 100:1; it may be a zip bomb"):
            parse_file(path, APPLICATION_DOCX)

    def test_large_total_size_is_a_zip_bomb(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(archive, "MAX_UNCOMPRESSED_BYTES", 1024 * 1024)
        noise = {"word/media/noise.bin": os.urandom(2 * 1024 * 1024)}
        path = rewrite_zip(make_docx(tmp_path / "r.docx"), tmp_path / "big.docx", noise)
        with pytest.raises(ParseError, match="more than the limit of 1 MB; it may be a zip bomb"):
            parse_file(path, APPLICATION_DOCX)

    def test_billion_laughs_is_refused(self, tmp_path: Path) -> None:
        source = make_docx(tmp_path / "r.docx")
        with zipfile.ZipFile(source) as archive:
            xml = archive.read("word/document.xml")
        declaration, _, rest = xml.partition(b"?>")
        doctype = (
            b'<!DOCTYPE lolz [<!ENTITY lol "lol">'
            + b"".join(
                b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
                for i in range(1, 10)
            )
            + b"]>"
        )
        bomb = declaration + b"?>" + doctype + rest.replace(b"Revenue grew", b"&lol9; grew")
        path = rewrite_zip(source, tmp_path / "lol.docx", {"word/document.xml": bomb})
        with pytest.raises(ParseError, match=r'part "word/document\.xml" declares a DTD'):
            parse_file(path, APPLICATION_DOCX)

    def test_external_entity_in_any_part_is_refused(self, tmp_path: Path) -> None:
        source = make_docx(tmp_path / "r.docx")
        with zipfile.ZipFile(source) as archive:
            styles = archive.read("word/styles.xml")
        declaration, _, rest = styles.partition(b"?>")
        xxe = declaration + b'?><!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>' + rest
        path = rewrite_zip(source, tmp_path / "xxe.docx", {"word/styles.xml": xxe})
        with pytest.raises(ParseError, match=r'part "word/styles\.xml" declares a DTD'):
            parse_file(path, APPLICATION_DOCX)

    def test_utf16_part_with_doctype_is_refused(self, tmp_path: Path) -> None:
        source = make_docx(tmp_path / "r.docx")
        xml = '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE x [<!ENTITY a "b">]><x>&a;</x>'
        path = rewrite_zip(source, tmp_path / "u16.docx", {"word/extra.xml": xml.encode("utf-16")})
        with pytest.raises(ParseError, match="declares a DTD"):
            parse_file(path, APPLICATION_DOCX)

    def test_xml_part_broken_before_its_root_is_refused(self, tmp_path: Path) -> None:
        source = make_docx(tmp_path / "r.docx")
        broken = {"word/document.xml": b"<?xml version='1.0'?><!-- never closed"}
        path = rewrite_zip(source, tmp_path / "broken.docx", broken)
        with pytest.raises(ParseError, match=r'"word/document\.xml" is not well-formed XML'):
            parse_file(path, APPLICATION_DOCX)

    def test_xml_part_broken_after_its_root_is_refused(self, tmp_path: Path) -> None:
        source = make_docx(tmp_path / "r.docx")
        broken = {"word/document.xml": b"<?xml version='1.0'?><w:document><oops"}
        path = rewrite_zip(source, tmp_path / "broken.docx", broken)
        with pytest.raises(ParseError, match="The Word document is damaged and cannot be read"):
            parse_file(path, APPLICATION_DOCX)

    def test_docx_without_text_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "blank.docx"
        docx.Document().save(str(path))
        with pytest.raises(ParseError, match="contains no text"):
            parse_file(path, APPLICATION_DOCX)


@pytest.mark.parametrize(
    ("core_title", "expected"), [("Q3 Report 2026", "Q3 Report 2026"), ("", "Quarterly Report")]
)
def test_docx_title_and_headings(tmp_path: Path, core_title: str, expected: str) -> None:
    extracted = extract(
        make_titled_docx(tmp_path / "r.docx", core_title=core_title), APPLICATION_DOCX
    )
    assert extracted.title == expected
    assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
        (HEADING, 1, "Quarterly Report"),
        (PARAGRAPH, 0, "Revenue grew in every region."),
        (HEADING, 2, "Outlook"),
        (PARAGRAPH, 0, "知识库管理系统将在下个季度上线。"),
    ]
