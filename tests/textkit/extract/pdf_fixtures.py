"""Writing small PDFs by hand for extraction tests: a PDF file of numbered objects, pages of
Helvetica lines (`make_pdf`, `text_page` + `build_pdf`, with a Type0 font for TeX and CJK text),
encryption, metadata and bookmarks."""

from __future__ import annotations

import io
import re

from pypdf import PdfReader, PdfWriter


def pdf_from_objects(objects: dict[int, bytes]) -> bytes:
    """A PDF file of the numbered objects (1 is the catalog), with its xref table and trailer."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    size = max(objects) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets.get(number, 0)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


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


def build_pdf(pages: list[str], *, unicode_font: str = "") -> bytes:
    """A PDF whose pages have the given content streams. /F1 is Helvetica, /F3 Courier; with
    `unicode_font` (the characters it must cover) /F2 is a Type0 font whose two-byte codes map
    to Unicode through a ToUnicode CMap, the way TeX and CJK PDFs encode text: write its
    strings as {...}."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    objects[7] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>"
    fonts = b"/F1 3 0 R /F3 7 0 R"
    codes: dict[str, str] = {}
    if unicode_font:
        chars = sorted(set(unicode_font))
        codes = {char: f"{index + 1:04X}" for index, char in enumerate(chars)}
        mapping = "\n".join(f"<{code}> <{ord(char):04X}>" for char, code in codes.items())
        cmap = (
            "/CIDInit /ProcSet findresource begin 12 dict begin begincmap "
            "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def "
            "/CMapName /Adobe-Identity-UCS def /CMapType 2 def "
            "1 begincodespacerange <0000> <FFFF> endcodespacerange "
            f"{len(codes)} beginbfchar\n{mapping}\nendbfchar endcmap "
            "CMapName currentdict /CMap defineresource pop end end"
        ).encode()
        objects[4] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(cmap), cmap)
        objects[5] = (
            b"<< /Type /Font /Subtype /Type0 /BaseFont /STSong-Light /Encoding /Identity-H "
            b"/DescendantFonts [6 0 R] /ToUnicode 4 0 R >>"
        )
        objects[6] = (
            b"<< /Type /Font /Subtype /CIDFontType0 /BaseFont /STSong-Light "
            b"/CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> "
            b"/DW 1000 >>"
        )
        fonts += b" /F2 5 0 R"
    next_id = 8
    page_ids = []
    for content in pages:
        content = re.sub(
            r"\{([^}]*)\}",
            lambda m: "<" + "".join(codes[str(c)] for c in m.group(1)) + ">",
            content,
        )
        stream = content.encode("latin-1")
        objects[next_id] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
        objects[next_id + 1] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << %s >> >> /Contents %d 0 R >>" % (fonts, next_id)
        )
        page_ids.append(next_id + 1)
        next_id += 2
    kids = b" ".join(b"%d 0 R" % page_id for page_id in page_ids)
    objects[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_ids))
    return pdf_from_objects(objects)


def text_page(lines: list[str], *, top: int = 740, size: int = 10) -> str:
    """A content stream writing each line of Helvetica text below the previous one."""
    operators = ["BT", f"/F1 {size} Tf", f"{size + 4} TL", f"72 {top} Td"]
    for line in lines:
        escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        operators.append(f"({escaped}) Tj T*")
    operators.append("ET")
    return "\n".join(operators)


def with_metadata_and_outline(
    data: bytes, *, title: str = "", outline: tuple[tuple[str, int, int], ...] = ()
) -> bytes:
    """Add a metadata title and bookmarks (title, page index, nesting level 0 or 1)."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    if title:
        writer.add_metadata({"/Title": title})
    parent = None
    for name, page, level in outline:
        item = writer.add_outline_item(
            title=name, page_number=page, parent=parent if level else None
        )
        if level == 0:
            parent = item
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
