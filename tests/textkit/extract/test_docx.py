import io
import os
import time
import zipfile
from pathlib import Path

import docx
import pytest
from pypdf import PdfReader, PdfWriter

from tests.pdf_fixtures import pdf_from_objects
from textkit.chunker import chunk_text
from textkit.extract import (
    APPLICATION_DOCX,
    APPLICATION_PDF,
    SUPPORTED_MEDIA_TYPES,
    TEXT_HTML,
    TEXT_MARKDOWN,
    TEXT_PLAIN,
    ParseError,
    UnsupportedMediaType,
    detect_media_type,
    extract,
)
from textkit.extract import docx as docx_extractor


def parse_file(path: Path, media_type: str, **limits: int) -> str:
    """The file's text as the chunker reads it: its blocks separated by blank lines."""
    return extract(path, media_type, **limits).text()


# --- fixture builders -------------------------------------------------------------------------


def make_pdf(pages: list[list[str]]) -> bytes:
    """A minimal valid PDF: one Helvetica text line per string; an empty list is a blank page."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    page_ids = []
    for number, lines in enumerate(pages):
        content_id, page_id = 4 + 2 * number, 5 + 2 * number
        operators = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
        for line in lines:
            escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            operators.append(f"({escaped}) Tj T*")
        operators.append("ET")
        stream = "\n".join(operators).encode("latin-1") if lines else b""
        objects[content_id] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
        objects[page_id] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % content_id
        )
        page_ids.append(page_id)
    kids = b" ".join(b"%d 0 R" % page_id for page_id in page_ids)
    objects[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_ids))
    return pdf_from_objects(objects)


def encrypt_pdf(data: bytes, *, user_password: str, owner_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password, owner_password=owner_password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(path: Path) -> Path:
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


def rewrite_zip(source: Path, target: Path, replace: dict[str, bytes]) -> Path:
    """Copy a zip, replacing (or adding) the named entries."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename not in replace:
                dst.writestr(info, src.read(info.filename))
        for name, data in replace.items():
            dst.writestr(name, data)
    return target


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


# --- detect_media_type ------------------------------------------------------------------------


class TestDetectMediaType:
    @pytest.mark.parametrize(
        ("filename", "head", "expected"),
        [
            ("notes.txt", b"hello", TEXT_PLAIN),
            ("NOTES.TEXT", b"hello", TEXT_PLAIN),
            ("readme.md", b"# Title", TEXT_MARKDOWN),
            ("guide.Markdown", b"# Title", TEXT_MARKDOWN),
            ("page.htm", b"<html>", TEXT_HTML),
            ("page.HTML", b"<!doctype html>", TEXT_HTML),
            ("paper.pdf", b"%PDF-1.7\n", APPLICATION_PDF),
            ("C:\\Users\\me\\Report.DOCX", b"PK\x03\x04rest", APPLICATION_DOCX),
            ("utf16.txt", "hi".encode("utf-16"), TEXT_PLAIN),
        ],
    )
    def test_accepts_matching_content(self, filename: str, head: bytes, expected: str) -> None:
        assert detect_media_type(filename, head) == expected
        assert expected in SUPPORTED_MEDIA_TYPES

    def test_rejects_unknown_extension(self) -> None:
        with pytest.raises(UnsupportedMediaType, match=r'"\.exe" are not supported'):
            detect_media_type("setup.exe", b"MZ")

    def test_rejects_missing_extension(self) -> None:
        with pytest.raises(UnsupportedMediaType, match="no extension"):
            detect_media_type("README", b"hello")

    def test_rejects_garbage_named_pdf(self) -> None:
        with pytest.raises(UnsupportedMediaType, match="not a PDF"):
            detect_media_type("paper.pdf", os.urandom(512))

    def test_rejects_non_zip_named_docx(self) -> None:
        with pytest.raises(UnsupportedMediaType, match=r"not one"):
            detect_media_type("report.docx", b"%PDF-1.4 not a zip")

    def test_explains_old_word_files(self) -> None:
        head = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(100)
        with pytest.raises(UnsupportedMediaType, match=r"\.doc"):
            detect_media_type("report.docx", head)

    @pytest.mark.parametrize("filename", ["notes.txt", "readme.md", "page.html"])
    def test_rejects_binary_named_as_text(self, filename: str) -> None:
        with pytest.raises(UnsupportedMediaType, match="binary data"):
            detect_media_type(filename, b"\x7fELF\x02\x01\x01\x00\x00\x00")

    def test_rejects_pdf_named_as_text(self) -> None:
        with pytest.raises(UnsupportedMediaType, match="binary data"):
            detect_media_type("notes.txt", b"%PDF-1.4\n")

    def test_rejects_empty_file(self) -> None:
        with pytest.raises(ParseError, match="empty"):
            detect_media_type("notes.txt", b"")


# --- parse_file: common rules -----------------------------------------------------------------


@pytest.mark.parametrize("media_type", sorted(SUPPORTED_MEDIA_TYPES))
def test_empty_file_is_refused(tmp_path: Path, media_type: str) -> None:
    with pytest.raises(ParseError, match="The file is empty"):
        parse_file(write(tmp_path, "empty", b""), media_type)


def test_unsupported_media_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedMediaType, match="image/png"):
        parse_file(write(tmp_path, "x.png", b"\x89PNG"), "image/png")


def test_text_without_words_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="contains no text"):
        parse_file(write(tmp_path, "blank.txt", b" \n\t\r\n \x00 "), TEXT_PLAIN)


def test_text_longer_than_the_limit_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "long.txt", "x" * 1001)
    with pytest.raises(ParseError, match="longer than the limit of 1,000 characters"):
        parse_file(path, TEXT_PLAIN, max_chars=1000)
    assert parse_file(path, TEXT_PLAIN, max_chars=1001) == "x" * 1001


# --- plain text -------------------------------------------------------------------------------


class TestPlainText:
    def test_utf8_is_normalised(self, tmp_path: Path) -> None:
        path = write(tmp_path, "a.txt", "  Hello\r\nworld  \r\n\r\n\r\n\r\nCafe\u0301 知识库\x00\n")
        assert parse_file(path, TEXT_PLAIN) == "Hello\nworld\n\nCaf\u00e9 知识库"

    def test_utf8_bom_is_dropped(self, tmp_path: Path) -> None:
        path = write(tmp_path, "bom.txt", b"\xef\xbb\xbfHello BOM")
        assert parse_file(path, TEXT_PLAIN) == "Hello BOM"

    def test_utf16_with_bom(self, tmp_path: Path) -> None:
        path = write(tmp_path, "u16.txt", "Unicode 文本 text".encode("utf-16"))
        assert parse_file(path, TEXT_PLAIN) == "Unicode 文本 text"

    def test_gbk_is_detected(self, tmp_path: Path) -> None:
        chinese = "知识库管理系统支持上传文档，每次检索都只看到一个完整的、已发布的版本。"
        path = write(tmp_path, "gbk.txt", (chinese + "\n").encode("gbk") * 3)
        assert parse_file(path, TEXT_PLAIN) == "\n".join([chinese] * 3)

    def test_cp1252_is_detected(self, tmp_path: Path) -> None:
        french = "Le café est très bon, déjà vu. Naïve façade."
        path = write(tmp_path, "fr.txt", french.encode("cp1252"))
        assert parse_file(path, TEXT_PLAIN) == french

    def test_mostly_utf8_keeps_utf8_and_replaces_the_bad_byte(self, tmp_path: Path) -> None:
        body = "Hello 世界。" * 20
        path = write(tmp_path, "bad.txt", body.encode() + b"\xff tail")
        assert parse_file(path, TEXT_PLAIN) == body + "\ufffd tail"

    def test_undecodable_bytes_never_crash(self, tmp_path: Path) -> None:
        path = write(tmp_path, "junk.txt", b"ok " + bytes(range(0x80, 0x100)) * 3 + b" end")
        text = parse_file(path, TEXT_PLAIN)
        assert text.startswith("ok ")
        assert text.endswith(" end")

    def test_ten_megabyte_single_line_parses_and_chunks_quickly(self, tmp_path: Path) -> None:
        line = ("Canon keeps every published version complete. 知识库。 " * 200_000)[:10_000_000]
        path = write(tmp_path, "big.txt", line)
        started = time.perf_counter()
        text = parse_file(path, TEXT_PLAIN)
        parsed = time.perf_counter() - started
        pieces = chunk_text(text, size=800, overlap=100)
        chunked = time.perf_counter() - started - parsed
        assert text == line.strip()
        assert parsed < 3, f"parsing took {parsed:.1f}s"
        assert chunked < 8, f"chunking took {chunked:.1f}s"
        assert all(len(piece.text) <= 800 for piece in pieces)


# --- Markdown ---------------------------------------------------------------------------------


def test_markdown_markup_is_stripped(tmp_path: Path) -> None:
    markdown = """\
---
# Getting *started* #

Setext heading
==============

Read the **install guide** at [our docs](https://example.com/docs "Docs") and
see ![the diagram](img/arch.png). Use `pip install canon` or __call__ it _now_.
Keep snake_case_names, 2*3*4 and ~~old~~ text.

> Quoted **advice**.

- first item
* second item
1. numbered item

| Name | Value |
|------|:-----:|
| size | 800   |

[docs]: https://example.com/docs
<!-- hidden
comment -->
Visit <https://example.com> or [the FAQ][faq].

```python
# a comment in code
print("**not emphasis**")
```
Escaped \\*stars\\* stay.
"""
    text = parse_file(write(tmp_path, "guide.md", markdown), TEXT_MARKDOWN)
    lines = text.split("\n")
    assert lines[0] == "Getting started"
    assert "Setext heading" in lines
    assert "=====" not in text and "---" not in text
    # a wrapped paragraph is one line, as Markdown renders it
    assert (
        "Read the install guide at our docs and see the diagram. Use pip install canon or call "
        "it now. Keep snake_case_names, 2*3*4 and old text."
    ) in lines
    assert "Quoted advice." in lines
    first = lines.index("first item")
    assert lines[first : first + 3] == ["first item", "second item", "1. numbered item"]
    assert "Name\tValue" in lines and "size\t800" in lines
    assert "hidden" not in text and "https://example.com/docs" not in text
    assert "Visit https://example.com or the FAQ." in lines
    assert "# a comment in code" in lines
    assert 'print("**not emphasis**")' in lines
    assert "```" not in text
    assert "Escaped *stars* stay." in lines


def test_markdown_pathological_brackets_are_linear(tmp_path: Path) -> None:
    path = write(tmp_path, "evil.md", "[" * 1_000_000 + "*a " * 300_000 + "`" * 500_000)
    started = time.perf_counter()
    text = parse_file(path, TEXT_MARKDOWN)
    assert time.perf_counter() - started < 5
    assert text.startswith("[[[")


# --- HTML -------------------------------------------------------------------------------------


def test_html_keeps_block_structure_and_drops_scripts(tmp_path: Path) -> None:
    html = """<!DOCTYPE html>
<html><head><title>Page title</title>
<style>body { color: red; }</style>
<script>var secret = "do not index";</script></head>
<body>
  <noscript>Enable JavaScript</noscript>
  <template><p>template text</p></template>
  <h1>Main   heading</h1>
  <p>First
     paragraph with <b>bold</b> and <a href="#">a link</a>.<br>After break.</p>
  <!-- a comment -->
  <ul><li>One</li><li>Two</li></ul>
  <table><tr><th>Name</th><th>Size</th></tr><tr><td>chunk</td><td>800</td></tr></table>
  <pre>  indented
    code</pre>
  <div>知识库<span>管理</span></div>
  <script>alert("late script")</script>
</body></html>"""
    text = parse_file(write(tmp_path, "page.html", html), TEXT_HTML)
    assert text.split("\n") == [
        "Main heading",
        "",
        "First paragraph with bold and a link.",
        "After break.",
        "",
        "One",
        "Two",
        "",
        "Name\tSize",
        "chunk\t800",
        "",
        "  indented",
        "    code",
        "",
        "知识库管理",
    ]
    for absent in ("secret", "color", "JavaScript", "template text", "comment", "late script"):
        assert absent not in text
    assert "Page title" not in text


def test_html_line_breaks_add_up_but_block_edges_do_not(tmp_path: Path) -> None:
    html = "<div><div><p>one<br><br>two</p></div></div><section><h2>three</h2></section>"
    assert parse_file(write(tmp_path, "br.html", html), TEXT_HTML) == "one\n\ntwo\n\nthree"


def test_html_title_is_used_only_when_the_body_is_empty(tmp_path: Path) -> None:
    html = "<html><head><title>Only a title</title></head><body> <script>x()</script></body>"
    assert parse_file(write(tmp_path, "t.html", html), TEXT_HTML) == "Only a title"


def test_html_declared_legacy_encoding_is_honoured(tmp_path: Path) -> None:
    html = '<html><head><meta charset="gbk"></head><body><p>中文内容</p></body></html>'
    path = write(tmp_path, "gbk.html", html.encode("gbk"))
    assert parse_file(path, TEXT_HTML) == "中文内容"


@pytest.mark.parametrize(
    "html", [b"<html><body><script>x()</script><img src=a></body>", b"\x00\x00 \x00"]
)
def test_html_without_text_is_refused(tmp_path: Path, html: bytes) -> None:
    with pytest.raises(ParseError, match="contains no text"):
        parse_file(write(tmp_path, "empty.html", html), TEXT_HTML)


def test_deeply_nested_html_does_not_recurse(tmp_path: Path) -> None:
    path = write(tmp_path, "deep.html", "<div>" * 5000 + "deep text" + "</div>" * 5000)
    assert parse_file(path, TEXT_HTML) == "deep text"


# --- PDF --------------------------------------------------------------------------------------


class TestPdf:
    def test_extracts_text_of_every_page(self, tmp_path: Path) -> None:
        data = make_pdf([["Hello PDF world.", "Second line (with parens)."], ["Page two."]])
        path = write(tmp_path, "doc.pdf", data)
        assert detect_media_type("doc.pdf", data[:4096]) == APPLICATION_PDF
        assert parse_file(path, APPLICATION_PDF) == (
            "Hello PDF world.\nSecond line (with parens).\n\nPage two."
        )

    def test_encrypted_pdf_is_refused(self, tmp_path: Path) -> None:
        data = encrypt_pdf(make_pdf([["Secret text."]]), user_password="u", owner_password="o")
        with pytest.raises(ParseError, match="The PDF is encrypted; upload an unencrypted copy"):
            parse_file(write(tmp_path, "enc.pdf", data), APPLICATION_PDF)

    def test_pdf_protected_only_by_an_owner_password_is_read(self, tmp_path: Path) -> None:
        data = encrypt_pdf(make_pdf([["Readable text."]]), user_password="", owner_password="o")
        assert parse_file(write(tmp_path, "owner.pdf", data), APPLICATION_PDF) == "Readable text."

    @pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
    def test_truncated_pdf_is_refused(self, tmp_path: Path, keep: float) -> None:
        data = make_pdf([["Some text here."], ["More text."]])
        path = write(tmp_path, "cut.pdf", data[: int(len(data) * keep)])
        with pytest.raises(ParseError, match="damaged or truncated"):
            parse_file(path, APPLICATION_PDF)

    @pytest.mark.parametrize("header", [b"%PDF-1.4\n", b""])
    def test_garbage_is_refused(self, tmp_path: Path, header: bytes) -> None:
        path = write(tmp_path, "junk.pdf", header + os.urandom(2000))
        with pytest.raises(ParseError, match="damaged or truncated"):
            parse_file(path, APPLICATION_PDF)

    def test_pdf_without_text_layer_is_refused(self, tmp_path: Path) -> None:
        path = write(tmp_path, "scan.pdf", make_pdf([[], []]))
        with pytest.raises(ParseError, match="no extractable text; it may be a scanned image"):
            parse_file(path, APPLICATION_PDF)

    def test_pdf_longer_than_the_limit_is_refused(self, tmp_path: Path) -> None:
        path = write(tmp_path, "long.pdf", make_pdf([["A" * 60]] * 5))
        with pytest.raises(ParseError, match="longer than the limit of 200 characters"):
            parse_file(path, APPLICATION_PDF, max_chars=200)


# --- DOCX -------------------------------------------------------------------------------------


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
        extra = {f"word/media/part{i}.bin": b"x" for i in range(docx_extractor.MAX_DOCX_ENTRIES)}
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
        monkeypatch.setattr(docx_extractor, "MAX_DOCX_UNCOMPRESSED_BYTES", 1024 * 1024)
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
