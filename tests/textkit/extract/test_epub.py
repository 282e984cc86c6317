"""EPUB: chapters in the spine's order through the HTML extractor, headings with their levels,
the title from the package's dc:title; DRM, hrefs that climb out of the archive, zip bombs,
entity declarations and damaged books are refused with a reason."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from tests.textkit.extract.files import parse_file, write
from textkit.extract import (
    HEADING,
    PARAGRAPH,
    ParseError,
    UnsupportedMediaType,
    archive,
    detect_media_type,
    extract,
)

EPUB = "application/epub+zip"

CONTAINER = b"""<?xml version="1.0" encoding="UTF-8"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles>
    <rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
  </rootfiles>
</container>"""


def chapter(title: str, body: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
        f"<head><title>{title}</title><link rel='stylesheet' href='style.css'/></head>"
        f"<body>{body}</body></html>"
    ).encode()


def package(title: str, items: list[tuple[str, str, str]], spine: list[str]) -> bytes:
    """An OPF: `items` are (id, href, properties) of XHTML chapters, `spine` their ids."""
    manifest = "".join(
        f'<item id="{id_}" href="{href}" media-type="application/xhtml+xml"'
        + (f' properties="{properties}"' if properties else "")
        + "/>"
        for id_, href, properties in items
    )
    itemrefs = "".join(f'<itemref idref="{id_}"/>' for id_ in spine)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<dc:identifier id="id">urn:uuid:1</dc:identifier><dc:title>{title}</dc:title>'
        "<dc:language>en</dc:language></metadata>"
        f'<manifest><item id="css" href="style.css" media-type="text/css"/>{manifest}</manifest>'
        f"<spine>{itemrefs}</spine></package>"
    ).encode()


def write_epub(path: Path, parts: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        for name, data in parts.items():
            book.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
    return path


def book_parts(**overrides: bytes) -> dict[str, bytes]:
    """A book whose spine reads chapter two before chapter one's file name order would, with a
    navigation document, a cover without text and a chapter in Chinese without a heading."""
    items = [
        ("nav", "nav.xhtml", "nav"),
        ("cover", "Text/cover.xhtml", ""),
        ("c1", "Text/b-first.xhtml", ""),
        ("c2", "Text/a-second.xhtml", ""),
        ("c3", "Text/chapter%203.xhtml", ""),
    ]
    parts = {
        "META-INF/container.xml": CONTAINER,
        "OEBPS/content.opf": package(
            "The Knowledge Book", items, ["cover", "nav", "c1", "c2", "c3"]
        ),
        "OEBPS/style.css": b"body { margin: 0 }",
        "OEBPS/nav.xhtml": chapter(
            "Contents", '<nav epub:type="toc"><ol><li><a href="x">Chapter One</a></li></ol></nav>'
        ),
        "OEBPS/Text/cover.xhtml": chapter("The Knowledge Book", '<img src="cover.jpg" alt=""/>'),
        "OEBPS/Text/b-first.xhtml": chapter(
            "The Knowledge Book",
            "<section><h1>Chapter One</h1><p>Indexes make search fast.</p>"
            "<h2>Why it matters</h2><p>Readers&nbsp;wait less.</p></section>",
        ),
        "OEBPS/Text/a-second.xhtml": chapter(
            "The Knowledge Book",
            "<h1>Chapter Two</h1><table><tr><th>Term</th><th>Meaning</th></tr>"
            "<tr><td>chunk</td><td>a passage</td></tr></table>",
        ),
        "OEBPS/Text/chapter 3.xhtml": chapter(
            "The Knowledge Book", "<p>知识库管理系统将在下个季度上线。</p>"
        ),
    }
    parts.update(overrides)
    return parts


def test_chapters_in_spine_order_with_headings_title_and_chinese(tmp_path: Path) -> None:
    path = write_epub(tmp_path / "book.epub", book_parts())
    assert detect_media_type("book.epub", path.read_bytes()[:4096]) == EPUB
    extracted = extract(path, EPUB)
    assert extracted.title == "The Knowledge Book"
    assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
        (HEADING, 1, "Chapter One"),
        (PARAGRAPH, 0, "Indexes make search fast."),
        (HEADING, 2, "Why it matters"),
        (PARAGRAPH, 0, "Readers\xa0wait less."),  # &nbsp; as the HTML extractor keeps it
        (HEADING, 1, "Chapter Two"),
        ("table", 0, "Term\tMeaning\nchunk\ta passage"),
        (PARAGRAPH, 0, "知识库管理系统将在下个季度上线。"),
    ]


def test_epub2_chapter_with_xhtml_doctype_is_read(tmp_path: Path) -> None:
    xhtml11 = (
        b'<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN"'
        b' "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\n'
        b'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>T</title></head>'
        b"<body><h2>Old style</h2><p>Still read.</p></body></html>"
    )
    path = write_epub(tmp_path / "old.epub", book_parts(**{"OEBPS/Text/b-first.xhtml": xhtml11}))
    assert parse_file(path, EPUB).startswith("Old style\n\nStill read.\n\nChapter Two")


def test_entity_declarations_in_a_chapter_are_refused(tmp_path: Path) -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE html [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>'
        b'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>&lol2;</p></body></html>'
    )
    path = write_epub(tmp_path / "lol.epub", book_parts(**{"OEBPS/Text/b-first.xhtml": bomb}))
    with pytest.raises(ParseError, match=r'part "OEBPS/Text/b-first\.xhtml" declares a DTD'):
        parse_file(path, EPUB)


def test_external_entity_in_the_package_is_refused(tmp_path: Path) -> None:
    opf = book_parts()["OEBPS/content.opf"].replace(
        b"?>", b'?><!DOCTYPE p [<!ENTITY x SYSTEM "file:///etc/passwd">]>', 1
    )
    path = write_epub(tmp_path / "xxe.epub", book_parts(**{"OEBPS/content.opf": opf}))
    with pytest.raises(ParseError, match="declares a DTD"):
        parse_file(path, EPUB)


@pytest.mark.parametrize("href", ["../../etc/passwd", "/etc/passwd", "..%2F..%2Fsecret.xhtml"])
def test_spine_href_that_climbs_out_is_refused(tmp_path: Path, href: str) -> None:
    items = [("c1", href, "")]
    opf = package("Escape", items, ["c1"])
    path = write_epub(tmp_path / "escape.epub", book_parts(**{"OEBPS/content.opf": opf}))
    with pytest.raises(ParseError, match="outside the file"):
        parse_file(path, EPUB)


def test_archive_entry_that_climbs_out_is_refused(tmp_path: Path) -> None:
    path = write_epub(tmp_path / "slip.epub", book_parts(**{"../evil.xhtml": b"<p>x</p>"}))
    with pytest.raises(ParseError, match="points outside the file; it may be malicious"):
        parse_file(path, EPUB)


def test_drm_protected_chapters_are_refused(tmp_path: Path) -> None:
    encryption = (
        b'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"'
        b' xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
        b'<enc:CipherData><enc:CipherReference URI="OEBPS/Text/b-first.xhtml"/></enc:CipherData>'
        b"</enc:EncryptedData></encryption>"
    )
    path = write_epub(tmp_path / "drm.epub", book_parts(**{"META-INF/encryption.xml": encryption}))
    with pytest.raises(ParseError, match="protected by DRM"):
        parse_file(path, EPUB)


def test_high_compression_ratio_is_a_zip_bomb(tmp_path: Path) -> None:
    parts = book_parts(**{"OEBPS/zeros.bin": bytes(20 * 1024 * 1024)})
    path = write_epub(tmp_path / "bomb.epub", parts)
    with pytest.raises(ParseError, match="compressed more than 100:1; it may be a zip bomb"):
        parse_file(path, EPUB)


def test_too_many_chapters_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from textkit.extract import epub

    monkeypatch.setattr(epub, "MAX_CHAPTERS", 3)
    with pytest.raises(ParseError, match="more than the limit of 3"):
        parse_file(write_epub(tmp_path / "long.epub", book_parts()), EPUB)


def test_book_longer_than_the_limit_stops_early(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="longer than the limit of 30 characters"):
        parse_file(write_epub(tmp_path / "b.epub", book_parts()), EPUB, max_chars=30)


def test_missing_chapter_is_refused(tmp_path: Path) -> None:
    parts = book_parts()
    del parts["OEBPS/Text/a-second.xhtml"]
    with pytest.raises(ParseError, match=r'chapter "OEBPS/Text/a-second\.xhtml" is missing'):
        parse_file(write_epub(tmp_path / "gap.epub", parts), EPUB)


def test_zip_without_container_is_not_an_epub(tmp_path: Path) -> None:
    path = tmp_path / "notes.epub"
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("notes.txt", "hello")
    with pytest.raises(ParseError, match="ZIP archive, but not a book in EPUB format"):
        parse_file(path, EPUB)


def test_corrupt_epub_is_refused(tmp_path: Path) -> None:
    data = write_epub(tmp_path / "whole.epub", book_parts()).read_bytes()
    with pytest.raises(ParseError, match="not a valid book in EPUB format"):
        parse_file(write(tmp_path, "cut.epub", data[: len(data) // 2]), EPUB)
    with pytest.raises(ParseError, match="not a valid book in EPUB format"):
        parse_file(write(tmp_path, "noise.epub", b"PK\x03\x04" + os.urandom(3000)), EPUB)


def test_broken_package_document_is_refused(tmp_path: Path) -> None:
    parts = book_parts(**{"OEBPS/content.opf": b"<package><manifest></package>"})
    with pytest.raises(ParseError, match=r'"OEBPS/content\.opf" is not well-formed XML'):
        parse_file(write_epub(tmp_path / "broken.epub", parts), EPUB)


def test_file_that_is_not_a_zip_is_refused_by_its_first_bytes() -> None:
    with pytest.raises(UnsupportedMediaType, match="named like an EPUB e-book"):
        detect_media_type("book.epub", b"%PDF-1.7 ...")


def test_archive_limits_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive, "MAX_UNCOMPRESSED_BYTES", 1024 * 1024)
    parts = book_parts(**{"OEBPS/noise.bin": os.urandom(2 * 1024 * 1024)})
    with pytest.raises(ParseError, match="more than the limit of 1 MB; it may be a zip bomb"):
        parse_file(write_epub(tmp_path / "big.epub", parts), EPUB)


def test_each_spine_document_is_read_once_whatever_its_toc_mentions(tmp_path: Path) -> None:
    # Given a book built like Debian's live-manual: the manifest lists a chapter once per section
    # of its table of contents ("b-first.xhtml#s1", ...), and the spine walks every one of them
    items = [
        ("c1", "Text/b-first.xhtml", ""),
        ("c1#s1", "Text/b-first.xhtml#s1", ""),
        ("c1#s2", "Text/b-first.xhtml#s2", ""),
        ("c2", "Text/a-second.xhtml", ""),
        ("c2#t", "Text/a-second.xhtml#t", ""),
    ]
    opf = package("The Knowledge Book", items, ["c1", "c1#s1", "c1#s2", "c2", "c2#t", "c1"])
    path = write_epub(tmp_path / "toc.epub", book_parts(**{"OEBPS/content.opf": opf}))
    # When it is read
    text = parse_file(path, EPUB)
    # Then each document's text is there once, in the order the spine first names it
    assert text.count("Indexes make search fast.") == 1
    assert text.count("chunk\ta passage") == 1
    assert text.index("Chapter One") < text.index("Chapter Two")


def test_aside_notes_are_the_books_text(tmp_path: Path) -> None:
    # Given a chapter with a footnote and a sidebar, both <aside> as EPUB 3 writes them
    body = (
        "<section><h1>Chapter One</h1>"
        '<p>Indexes make search fast.<a epub:type="noteref" href="#n1">1</a></p>'
        '<aside class="sidebar"><h2>Sidebar</h2><p>Postings are rows of the index.</p></aside>'
        '<aside epub:type="footnote" id="n1"><p>Measured on ten million chunks.</p></aside>'
        "</section>"
    )
    parts = book_parts(**{"OEBPS/Text/b-first.xhtml": chapter("The Knowledge Book", body)})
    # When the book is read
    extracted = extract(write_epub(tmp_path / "notes.epub", parts), EPUB)
    # Then the notes are kept where they stand
    texts = [block.text for block in extracted.blocks]
    assert texts[:5] == [
        "Chapter One",
        "Indexes make search fast.1",
        "Sidebar",
        "Postings are rows of the index.",
        "Measured on ten million chunks.",
    ]
