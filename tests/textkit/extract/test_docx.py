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
    TABLE,
    ParseError,
    archive,
    detect_media_type,
    extract,
    options,
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


# --- tables in tables, text boxes, notes, headers and footers (issue 37) -----------------------

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
MC_NS = "http://schemas.openxmlformats.org/markup-compatibility/2006"


def _text_box_run(text: str) -> str:
    """A run holding a text box as Word 2010 and later write it: the shape in mc:Choice and the
    same text again in the VML mc:Fallback for older readers."""
    content = f"<w:txbxContent><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:txbxContent>"
    return (
        f'<w:r xmlns:w="{W_NS}" xmlns:mc="{MC_NS}"'
        ' xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"'
        ' xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"'
        ' xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"'
        ' xmlns:v="urn:schemas-microsoft-com:vml">'
        '<mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wp:anchor>'
        '<a:graphic><a:graphicData uri="http://schemas.microsoft.com/office/word/2010/'
        f'wordprocessingShape"><wps:wsp><wps:txbx>{content}</wps:txbx></wps:wsp>'
        "</a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice>"
        f"<mc:Fallback><w:pict><v:shape><v:textbox>{content}</v:textbox></v:shape></w:pict>"
        "</mc:Fallback></mc:AlternateContent></w:r>"
    )


def _note_reference_run(kind: str, note_id: int) -> str:
    return f'<w:r xmlns:w="{W_NS}"><w:{kind}Reference w:id="{note_id}"/></w:r>'


def _notes_part(kind: str, notes: dict[int, list[str]]) -> bytes:
    """word/footnotes.xml or word/endnotes.xml: Word's two separators, then the notes, each
    paragraph starting with the note's own mark as Word writes it."""
    separators = "".join(
        f'<w:{kind} w:type="{type_}" w:id="{number}"><w:p><w:r><w:separator/></w:r></w:p>'
        f"</w:{kind}>"
        for number, type_ in ((-1, "separator"), (0, "continuationSeparator"))
    )
    written = "".join(
        f'<w:{kind} w:id="{note_id}">'
        + "".join(
            f'<w:p><w:r><w:{kind}Ref/></w:r><w:r><w:t xml:space="preserve"> {text}</w:t></w:r>'
            "</w:p>"
            for text in paragraphs
        )
        + f"</w:{kind}>"
        for note_id, paragraphs in notes.items()
    )
    return f'<w:{kind}s xmlns:w="{W_NS}">{separators}{written}</w:{kind}s>'.encode()


def make_structured_docx(path: Path) -> Path:
    """A report with a page header and footer, a footnote and an endnote, a text box, and a
    table with a table nested in one of its cells."""
    from docx.opc.constants import CONTENT_TYPE, RELATIONSHIP_TYPE
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part
    from docx.oxml import parse_xml

    document = docx.Document()
    section = document.sections[0]
    section.header.paragraphs[0].text = "Example Corp: internal"
    section.footer.paragraphs[0].text = "Printed copies are not controlled"
    document.add_heading("Survey", level=1)
    survey = document.add_paragraph("The survey covered every region.")
    survey._p.append(parse_xml(_note_reference_run("footnote", 1)))
    anchor = document.add_paragraph("Results follow.")
    anchor._p.append(parse_xml(_text_box_run("Response rate: 64%")))
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Part"
    table.cell(0, 1).text = "Sizes"
    table.cell(1, 0).text = "Bolt"
    sizes = table.cell(1, 1)
    sizes.text = "Metric:"
    nested = sizes.add_table(rows=2, cols=2)
    for r, cells in enumerate([("M4", "4 mm"), ("M6", "6 mm")]):
        for c, text in enumerate(cells):
            nested.cell(r, c).text = text
    closing = document.add_paragraph("Methods are described at the end.")
    closing._p.append(parse_xml(_note_reference_run("endnote", 1)))
    package = document.part.package
    for kind, content_type, relationship, notes in (
        (
            "footnote",
            CONTENT_TYPE.WML_FOOTNOTES,
            RELATIONSHIP_TYPE.FOOTNOTES,
            {1: ["Households, not people.", "Counted in 2026."]},
        ),
        (
            "endnote",
            CONTENT_TYPE.WML_ENDNOTES,
            RELATIONSHIP_TYPE.ENDNOTES,
            {1: ["Interviews by telephone."]},
        ),
    ):
        part = Part(PackURI(f"/word/{kind}s.xml"), content_type, _notes_part(kind, notes), package)
        document.part.relate_to(part, relationship)
    document.save(str(path))
    return path


class TestDocxStructure:
    def test_notes_text_boxes_and_nested_tables(self, tmp_path: Path) -> None:
        """Issue 37: footnotes and endnotes were not indexed, a text box came out twice (inside
        its anchoring paragraph), and a nested table split the outer row."""
        extracted = extract(make_structured_docx(tmp_path / "survey.docx"), APPLICATION_DOCX)

        assert [(b.kind, b.text) for b in extracted.blocks] == [
            (HEADING, "Survey"),
            (PARAGRAPH, "The survey covered every region.[1]"),
            (PARAGRAPH, "[1] Households, not people.\nCounted in 2026."),
            (PARAGRAPH, "Results follow."),
            (PARAGRAPH, "Response rate: 64%"),
            (TABLE, "Part\tSizes\nBolt\tMetric: M4, 4 mm; M6, 6 mm"),
            (PARAGRAPH, "Methods are described at the end.[i]"),
            (PARAGRAPH, "[i] Interviews by telephone."),
        ]

    def test_headers_and_footers_are_a_choice_off_by_default(self, tmp_path: Path) -> None:
        path = make_structured_docx(tmp_path / "survey.docx")
        assert "Example Corp" not in parse_file(path, APPLICATION_DOCX)

        with options.configured(options.ExtractOptions(headers_footers=True)):
            blocks = extract(path, APPLICATION_DOCX).blocks

        assert (blocks[0].kind, blocks[0].text) == (PARAGRAPH, "Example Corp: internal")
        assert (blocks[-1].kind, blocks[-1].text) == (
            PARAGRAPH,
            "Printed copies are not controlled",
        )
        assert [b.text for b in blocks[1:-1]] == [
            b.text for b in extract(path, APPLICATION_DOCX).blocks
        ]

    def test_a_header_shared_by_sections_is_read_once(self, tmp_path: Path) -> None:
        document = docx.Document()
        document.sections[0].header.paragraphs[0].text = "Example Corp"
        document.add_paragraph("First section.")
        document.add_section()
        document.add_paragraph("Second section.")
        first = document.sections[0]
        first.different_first_page_header_footer = True
        first.first_page_header.paragraphs[0].text = "Example Corp"
        path = tmp_path / "sections.docx"
        document.save(str(path))

        with options.configured(options.ExtractOptions(headers_footers=True)):
            text = parse_file(path, APPLICATION_DOCX)

        assert text == "Example Corp\n\nFirst section.\n\nSecond section."

    def test_a_layout_table_gives_its_nested_table_rows_of_their_own(self, tmp_path: Path) -> None:
        """A one-column table framing the real tables (a form's layout): its rows have no
        columns to keep, so the nested tables' rows stand as rows."""
        document = docx.Document()
        frame = document.add_table(rows=1, cols=2).cell(0, 0)
        frame.text = "Permit"
        form = frame.add_table(rows=2, cols=2)
        for r, cells in enumerate([("Task", "Lay down tubulars"), ("Location", "Rig floor")]):
            for c, text in enumerate(cells):
                form.cell(r, c).text = text
        path = tmp_path / "form.docx"
        document.save(str(path))

        assert parse_file(path, APPLICATION_DOCX) == (
            "Permit\nTask\tLay down tubulars\nLocation\tRig floor"
        )

    def test_a_note_referred_to_again_is_read_once(self, tmp_path: Path) -> None:
        from docx.opc.constants import CONTENT_TYPE, RELATIONSHIP_TYPE
        from docx.opc.packuri import PackURI
        from docx.opc.part import Part
        from docx.oxml import parse_xml

        document = docx.Document()
        paragraph = document.add_paragraph("Twice")
        for _ in range(3):
            paragraph._p.append(parse_xml(_note_reference_run("footnote", 7)))
        notes = _notes_part("footnote", {7: ["Said once."]})
        part = Part(
            PackURI("/word/footnotes.xml"),
            CONTENT_TYPE.WML_FOOTNOTES,
            notes,
            document.part.package,
        )
        document.part.relate_to(part, RELATIONSHIP_TYPE.FOOTNOTES)
        path = tmp_path / "again.docx"
        document.save(str(path))

        assert parse_file(path, APPLICATION_DOCX) == "Twice[1][1][1]\n\n[1] Said once."
