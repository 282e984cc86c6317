"""OpenDocument (.odt, .ods, .odp), written with odfpy: a text document's headings, lists and
tables; a spreadsheet's visible sheets in located row groups, repeated empty rows counted and
never spelled out; a presentation's slides in reading order with their notes. A file of another
kind, a damaged one, a zip bomb, a DTD or a climbing part name is refused with a reason."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from odf import dc
from odf.draw import Frame, Page, TextBox
from odf.namespaces import PRESENTATIONNS
from odf.opendocument import (
    OpenDocumentPresentation,
    OpenDocumentSpreadsheet,
    OpenDocumentText,
)
from odf.presentation import Notes
from odf.style import MasterPage, PageLayout, PageLayoutProperties, Style, TableProperties
from odf.table import Table, TableCell, TableColumn, TableRow
from odf.text import H, List, ListItem, P

from tests.textkit.extract.files import write
from tests.textkit.extract.test_docx import rewrite_zip
from textkit.extract import (
    HEADING,
    PARAGRAPH,
    ROW,
    SLIDE,
    TABLE,
    Location,
    ParseError,
    UnsupportedMediaType,
    detect_media_type,
    extract,
    rows,
)

ODT = "application/vnd.oasis.opendocument.text"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
ODP = "application/vnd.oasis.opendocument.presentation"


def _table(name: str, cells: list[tuple[str, ...]], **attributes: object) -> Table:
    table = Table(name=name, **attributes)
    table.addElement(TableColumn(numbercolumnsrepeated=max(len(row) for row in cells)))
    for values in cells:
        row = TableRow()
        for value in values:
            cell = TableCell(valuetype="string")
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    return table


def make_odt(path: Path, *, title: str = "") -> Path:
    document = OpenDocumentText()
    if title:
        document.meta.addElement(dc.Title(text=title))
    document.text.addElement(H(outlinelevel=1, text="Handbook"))
    document.text.addElement(P(text="Every region reports monthly."))
    document.text.addElement(H(outlinelevel=2, text="Regions"))
    items = List()
    for text in ("North", "南方"):
        item = ListItem()
        item.addElement(P(text=text))
        items.addElement(item)
    document.text.addElement(items)
    document.text.addElement(_table("T", [("Region", "Growth"), ("North", "12%")]))
    document.save(str(path))
    return path


def make_ods(path: Path, *, data_rows: int = 2) -> Path:
    """Sheet "Sales" (a header, data rows, an empty row, a last row, then the million empty
    rows LibreOffice writes), a hidden sheet and an empty one."""
    document = OpenDocumentSpreadsheet()
    hidden = Style(name="hiddensheet", family="table")
    hidden.addElement(TableProperties(display="false"))
    document.automaticstyles.addElement(hidden)
    data = [(f"Region {i}", f"{1234.5 + i:,.2f}") for i in range(data_rows)]
    sales = _table("Sales", [("Region", "Amount"), *data])
    sales.addElement(TableRow())
    last = _table("x", [("华东", "42")]).getElementsByType(TableRow)[0]
    sales.addElement(last)
    sales.addElement(TableRow(numberrowsrepeated=1_048_000))
    document.spreadsheet.addElement(sales)
    document.spreadsheet.addElement(_table("Workings", [("secret", "1")], stylename=hidden))
    document.spreadsheet.addElement(Table(name="Empty"))
    document.save(str(path))
    return path


def _frame(text: str, *, x: str, y: str, role: str = "") -> Frame:
    frame = Frame(x=x, y=y, width="10cm", height="2cm")
    if role:
        frame.setAttrNS(PRESENTATIONNS, "class", role)
    box = TextBox()
    box.addElement(P(text=text))
    frame.addElement(box)
    return frame


def make_odp(path: Path) -> Path:
    document = OpenDocumentPresentation()
    layout = PageLayout(name="layout")
    layout.addElement(PageLayoutProperties(pagewidth="28cm", pageheight="21cm"))
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="master", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    first = Page(masterpagename=master)
    first.addElement(_frame("lower left", x="2cm", y="12cm"))
    first.addElement(_frame("Roadmap", x="2cm", y="1cm", role="title"))
    first.addElement(_frame("upper", x="2cm", y="5cm"))
    notes = Notes()
    notes.addElement(_frame("Mention the budget.", x="1cm", y="1cm", role="notes"))
    first.addElement(notes)
    document.presentation.addElement(first)
    second = Page(masterpagename=master)
    second.addElement(_frame("知识库管理系统将在下个季度上线。", x="2cm", y="3cm"))
    document.presentation.addElement(second)
    document.save(str(path))
    return path


class TestOdt:
    def test_headings_lists_and_tables(self, tmp_path: Path) -> None:
        path = make_odt(tmp_path / "handbook.odt")
        assert detect_media_type("handbook.odt", path.read_bytes()[:4096]) == ODT

        extracted = extract(path, ODT)

        assert extracted.title == "Handbook"
        assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
            (HEADING, 1, "Handbook"),
            (PARAGRAPH, 0, "Every region reports monthly."),
            (HEADING, 2, "Regions"),
            (PARAGRAPH, 0, "North"),
            (PARAGRAPH, 0, "南方"),
            (TABLE, 0, "Region\tGrowth\nNorth\t12%"),
        ]

    def test_the_meta_title_wins(self, tmp_path: Path) -> None:
        assert extract(make_odt(tmp_path / "h.odt", title="Staff Handbook"), ODT).title == (
            "Staff Handbook"
        )

    def test_a_spreadsheet_named_odt_is_refused(self, tmp_path: Path) -> None:
        path = make_ods(tmp_path / "sheet.ods").rename(tmp_path / "sheet.odt")
        with pytest.raises(ParseError, match=r"OpenDocument spreadsheet, not an OpenDocument text"):
            extract(path, ODT)


class TestOds:
    def test_visible_sheets_in_located_row_groups(self, tmp_path: Path) -> None:
        path = make_ods(tmp_path / "sales.ods")
        assert detect_media_type("sales.ods", path.read_bytes()[:4096]) == ODS

        extracted = extract(path, ODS)

        assert [(b.kind, b.text, b.location) for b in extracted.blocks] == [
            (HEADING, "Sales", None),
            (
                TABLE,
                "Region\tAmount\nRegion 0\t1,234.50\nRegion 1\t1,235.50\n华东\t42",
                Location(ROW, 2, 5, "Sales"),
            ),
        ]

    def test_every_group_repeats_the_header(self, tmp_path: Path) -> None:
        groups = extract(make_ods(tmp_path / "big.ods", data_rows=400), ODS).blocks[1:]
        assert len(groups) > 5
        assert all(g.kind == TABLE and g.text.startswith("Region\tAmount\n") for g in groups)

    def test_too_many_rows_is_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(rows, "MAX_ROWS", 100)
        with pytest.raises(ParseError, match="spreadsheet has more than the limit of 100 rows"):
            extract(make_ods(tmp_path / "big.ods", data_rows=200), ODS)

    def test_repeated_cells_count_against_the_cell_limit(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(rows, "MAX_CELLS", 1000)
        source = make_ods(tmp_path / "s.ods")
        with zipfile.ZipFile(source) as opened:
            content = opened.read("content.xml")
        wide = content.replace(
            b'<table:table-cell office:value-type="string">',
            b'<table:table-cell table:number-columns-repeated="5000" office:value-type="string">',
            1,
        )
        path = rewrite_zip(source, tmp_path / "wide.ods", {"content.xml": wide})
        with pytest.raises(ParseError, match="more than the limit of 1,000 cells"):
            extract(path, ODS)


class TestOdp:
    def test_slides_in_reading_order_with_notes(self, tmp_path: Path) -> None:
        path = make_odp(tmp_path / "roadmap.odp")
        assert detect_media_type("roadmap.odp", path.read_bytes()[:4096]) == ODP

        extracted = extract(path, ODP)

        one, two = Location(SLIDE, 1, 1), Location(SLIDE, 2, 2)
        assert extracted.title == "Roadmap"
        assert [(b.kind, b.text, b.location) for b in extracted.blocks] == [
            (HEADING, "Slide 1: Roadmap", one),
            (PARAGRAPH, "upper", one),
            (PARAGRAPH, "lower left", one),
            (HEADING, "Notes", one),
            (PARAGRAPH, "Mention the budget.", one),
            (HEADING, "Slide 2", two),
            (PARAGRAPH, "知识库管理系统将在下个季度上线。", two),
        ]


class TestOdfArchives:
    @pytest.mark.parametrize(("name", "media_type"), [("a.odt", ODT), ("a.ods", ODS)])
    def test_old_binary_office_files_are_refused(self, name: str, media_type: str) -> None:
        with pytest.raises(UnsupportedMediaType, match="old-style binary Office file"):
            detect_media_type(name, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(100))

    def test_truncated_file_is_refused(self, tmp_path: Path) -> None:
        data = make_odt(tmp_path / "whole.odt").read_bytes()
        path = write(tmp_path, "cut.odt", data[: len(data) // 2])
        with pytest.raises(
            ParseError, match=r"not a valid file in OpenDocument text \(\.odt\) format"
        ):
            extract(path, ODT)

    def test_garbage_is_refused(self, tmp_path: Path) -> None:
        path = write(tmp_path, "noise.ods", os.urandom(3000))
        with pytest.raises(ParseError, match="not a valid file in OpenDocument spreadsheet"):
            extract(path, ODS)

    def test_zip_without_content_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "other.odp"
        with zipfile.ZipFile(path, "w") as opened:
            opened.writestr("notes.txt", "hello")
        with pytest.raises(
            ParseError,
            match=r"ZIP archive, but not a file in OpenDocument presentation \(\.odp\) format",
        ):
            extract(path, ODP)

    def test_zip_bomb_is_refused(self, tmp_path: Path) -> None:
        zeros = {"Pictures/zeros.bin": bytes(20 * 1024 * 1024)}
        path = rewrite_zip(make_ods(tmp_path / "s.ods"), tmp_path / "bomb.ods", zeros)
        with pytest.raises(ParseError, match="it may be a zip bomb"):
            extract(path, ODS)

    def test_entity_bomb_in_content_is_refused(self, tmp_path: Path) -> None:
        source = make_odt(tmp_path / "h.odt")
        with zipfile.ZipFile(source) as opened:
            content = opened.read("content.xml")
        declaration, _, rest = content.partition(b"?>")
        lol = b'<!DOCTYPE l [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        path = rewrite_zip(
            source, tmp_path / "lol.odt", {"content.xml": declaration + b"?>" + lol + rest}
        )
        with pytest.raises(ParseError, match=r'part "content\.xml" declares a DTD'):
            extract(path, ODT)

    def test_path_traversal_entry_is_refused(self, tmp_path: Path) -> None:
        evil = {"/etc/passwd": b"root"}
        path = rewrite_zip(make_odp(tmp_path / "r.odp"), tmp_path / "evil.odp", evil)
        with pytest.raises(ParseError, match="points outside the file"):
            extract(path, ODP)

    def test_broken_content_is_refused(self, tmp_path: Path) -> None:
        source = make_odt(tmp_path / "h.odt")
        with zipfile.ZipFile(source) as opened:
            content = opened.read("content.xml")
        broken = content[: len(content) // 2]
        path = rewrite_zip(source, tmp_path / "broken.odt", {"content.xml": broken})
        with pytest.raises(ParseError, match="damaged and cannot be read"):
            extract(path, ODT)


def make_structured_odt(path: Path) -> Path:
    """A text document with a page header and footer, a footnote, a frame anchored in a
    paragraph and another on the page, a shape with text, and a table nested in a cell."""
    from odf.draw import CustomShape
    from odf.style import Footer, Header
    from odf.text import Note, NoteBody, NoteCitation

    document = OpenDocumentText()
    layout = PageLayout(name="page")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="Standard", pagelayoutname=layout)
    header, footer = Header(), Footer()
    header.addElement(P(text="Example Corp: internal"))
    footer.addElement(P(text="Printed copies are not controlled"))
    master.addElement(header)
    master.addElement(footer)
    document.masterstyles.addElement(master)

    on_page = Frame(anchortype="page", x="2cm", y="2cm", width="5cm", height="2cm")
    on_page_box = TextBox()
    on_page_box.addElement(P(text="Draft for review"))
    on_page.addElement(on_page_box)
    document.text.addElement(on_page)
    document.text.addElement(H(outlinelevel=1, text="Survey"))
    survey = P(text="The survey covered every region.")
    note = Note(id="ftn1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="Households, not people."))
    note.addElement(body)
    survey.addElement(note)
    document.text.addElement(survey)
    results = P(text="Results follow.")
    boxed = Frame(anchortype="paragraph", width="5cm", height="2cm")
    box = TextBox()
    box.addElement(P(text="Response rate: 64%"))
    boxed.addElement(box)
    results.addElement(boxed)
    document.text.addElement(results)
    shaped = P(text="See the chart.")
    shape = CustomShape(anchortype="paragraph", width="3cm", height="1cm")
    shape.addElement(P(text="Rising"))
    shaped.addElement(shape)
    document.text.addElement(shaped)

    table = _table("Parts", [("Part", "Sizes"), ("Bolt", "")])
    sizes = table.getElementsByType(TableRow)[1].getElementsByType(TableCell)[1]
    for paragraph in sizes.getElementsByType(P):
        sizes.removeChild(paragraph)
    sizes.addElement(P(text="Metric:"))
    sizes.addElement(_table("Nested", [("M4", "4 mm"), ("M6", "6 mm")]))
    document.text.addElement(table)
    document.save(str(path))
    return path


class TestOdtStructure:
    def test_frames_notes_shapes_and_nested_tables(self, tmp_path: Path) -> None:
        """Issue 37: text in frames was dropped, footnotes were not indexed, and a nested table's
        rows became rows of the outer table."""
        extracted = extract(make_structured_odt(tmp_path / "survey.odt"), ODT)

        assert [(b.kind, b.text) for b in extracted.blocks] == [
            (PARAGRAPH, "Draft for review"),
            (HEADING, "Survey"),
            (PARAGRAPH, "The survey covered every region.[1]"),
            (PARAGRAPH, "[1] Households, not people."),
            (PARAGRAPH, "Results follow."),
            (PARAGRAPH, "Response rate: 64%"),
            (PARAGRAPH, "See the chart."),
            (PARAGRAPH, "Rising"),
            (TABLE, "Part\tSizes\nBolt\tMetric: M4, 4 mm; M6, 6 mm"),
        ]

    def test_headers_and_footers_are_a_choice_off_by_default(self, tmp_path: Path) -> None:
        from textkit.extract import options

        path = make_structured_odt(tmp_path / "survey.odt")
        assert "Example Corp" not in extract(path, ODT).text()

        with options.configured(options.ExtractOptions(headers_footers=True)):
            blocks = extract(path, ODT).blocks

        assert blocks[0].text == "Example Corp: internal"
        assert blocks[-1].text == "Printed copies are not controlled"
        assert [b.text for b in blocks[1:-1]] == [b.text for b in extract(path, ODT).blocks]


class TestOdpWithoutText:
    def _deck(self, path: Path, *texts: str) -> Path:
        document = OpenDocumentPresentation()
        layout = PageLayout(name="layout")
        document.automaticstyles.addElement(layout)
        master = MasterPage(name="master", pagelayoutname=layout)
        document.masterstyles.addElement(master)
        for text in texts:
            page = Page(masterpagename=master)
            page.addElement(_frame(text, x="2cm", y="2cm"))
            document.presentation.addElement(page)
        document.save(str(path))
        return path

    def test_a_slide_without_text_gives_no_block(self, tmp_path: Path) -> None:
        path = self._deck(tmp_path / "deck.odp", "", "Hi")
        assert [(b.kind, b.text) for b in extract(path, ODP).blocks] == [
            (HEADING, "Slide 2"),
            (PARAGRAPH, "Hi"),
        ]

    def test_a_deck_without_text_is_refused_with_the_reason(self, tmp_path: Path) -> None:
        path = self._deck(tmp_path / "empty.odp", "", " ")
        with pytest.raises(ParseError, match="The presentation has no text"):
            extract(path, ODP)
