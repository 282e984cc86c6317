"""EPUB e-books: the chapters in reading order, each through the HTML extractor, titled by the
book's `dc:title`.

The reading order is the package's spine: META-INF/container.xml names the package document
(OPF), whose spine lists manifest items, whose hrefs name the chapters' XHTML inside the archive.
The EPUB 3 navigation document is left out (it repeats the headings as a table of contents), and
so are spine items that are not (X)HTML. Each document is read once, however many times the spine
names it: some generators give every section of the table of contents its own manifest item
("chapter.xhtml#s2"), which would otherwise read the chapter again per section (Debian's
live-manual: 2.1 M characters for a book of 166,000). The NCX and the navigation document never
choose what is read. `<aside>` (footnotes, notes, sidebars) is the book's text. Headings keep
their levels; a chapter without one gets none. EPUB has no pages, so blocks have no location.

The archive is checked before anything is read (`archive.check_office_archive`): zip bombs,
encryption, names that climb out of the archive, XML parts declaring entities. A DOCTYPE without
an internal subset is allowed, since every EPUB chapter starts with `<!DOCTYPE html>`. An href
that climbs out of the archive, a missing chapter and chapters encrypted by DRM are refused.

Plain zipfile and defusedxml rather than ebooklib: ebooklib reads the whole book into memory,
parses every part with lxml itself and adds nothing Canon needs beyond the spine walk here.
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit
from xml.etree.ElementTree import Element
from xml.etree.ElementTree import ParseError as XmlParseError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from textkit.extract import archive, html
from textkit.extract.base import (
    PARAGRAPH,
    ZIP_MAGIC,
    Block,
    Extracted,
    ParseError,
    UnsupportedMediaType,
    too_long,
)
from textkit.reasons import reason
from textkit.words import gettext_noop

MEDIA_TYPES = ("application/epub+zip",)
EXTENSIONS = {".epub": MEDIA_TYPES[0]}
LABEL = gettext_noop("EPUB e-book")

_WHAT = gettext_noop("e-book")
_ARCHIVE_LABEL = gettext_noop("book in EPUB format")
_CONTAINER = "META-INF/container.xml"
_ENCRYPTION = "META-INF/encryption.xml"
# More chapters than an archive may hold parts (archive.MAX_ENTRIES) cannot be read anyway;
# this bounds the spine walk of a package that lists one part many times.
MAX_CHAPTERS = 2000

NAMED_NOT_EPUB = reason(
    "epub.named_not_epub",
    gettext_noop("The file is named like an EPUB e-book, but its content is not one."),
)
DAMAGED = reason("epub.damaged", gettext_noop("The e-book is damaged and cannot be read."))
NO_PACKAGE = reason(
    "epub.no_package",
    gettext_noop("The e-book's META-INF/container.xml names no package document."),
)
PART_MISSING = reason(
    "epub.part_missing", gettext_noop('The e-book is damaged: its part "%(name)s" is missing.')
)
PART_NOT_XML = reason(
    "epub.part_not_xml", gettext_noop('The e-book part "%(name)s" is not well-formed XML.')
)
TOO_MANY_CHAPTERS = reason(
    "epub.too_many_chapters",
    gettext_noop("The e-book has %(chapters)s chapters, more than the limit of %(limit)s."),
)
CHAPTER_OUTSIDE = reason(
    "epub.chapter_outside",
    gettext_noop('The e-book names a chapter outside the file ("%(href)s").'),
)
CHAPTER_CLIMBS_OUT = reason(
    "epub.chapter_climbs_out",
    gettext_noop(
        'The e-book names a chapter "%(href)s" that points outside the file; it may be malicious.'
    ),
)
DRM = reason(
    "epub.drm",
    gettext_noop(
        "The e-book is protected by DRM, so its text cannot be read; upload a copy without DRM."
    ),
)
CHAPTER_MISSING = reason(
    "epub.chapter_missing",
    gettext_noop('The e-book is damaged: its chapter "%(name)s" is missing.'),
)
_CHAPTER_MEDIA_TYPES = frozenset({"application/xhtml+xml", "text/html"})
_NS = {
    "container": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
    "enc": "http://www.w3.org/2001/04/xmlenc#",
}


def check_head(head: bytes, media_type: str) -> None:
    if not head.startswith(ZIP_MAGIC):
        raise UnsupportedMediaType(NAMED_NOT_EPUB())


def extract(path: Path, *, max_chars: int) -> Extracted:
    archive.check_office_archive(
        path, what=_WHAT, label=_ARCHIVE_LABEL, required=_CONTAINER, allow_bare_doctype=True
    )
    try:
        with zipfile.ZipFile(path) as book:
            package_path = _package_path(book)
            package = _parse_xml(book, package_path)
            title = _book_title(package)
            chapters = _spine_paths(package, posixpath.dirname(package_path))
            _refuse_drm(book, set(chapters))
            blocks: list[Block] = []
            length = 0
            for chapter in chapters:
                for block in _chapter_blocks(book, chapter):
                    length += len(block.text) + 2
                    if length > max_chars + 2:
                        raise too_long(max_chars)
                    blocks.append(block)
    except archive.ZIP_DAMAGE_ERRORS as exc:
        raise ParseError(DAMAGED()) from exc
    return Extracted(title=title, blocks=blocks)


def _package_path(book: zipfile.ZipFile) -> str:
    container = _parse_xml(book, _CONTAINER)
    rootfile = container.find("container:rootfiles/container:rootfile", _NS)
    full_path = "" if rootfile is None else rootfile.get("full-path", "")
    if not full_path:
        raise ParseError(NO_PACKAGE())
    return _inside_archive(full_path, "")


def _parse_xml(book: zipfile.ZipFile, name: str) -> Element:
    try:
        data = book.read(name)
    except KeyError:
        raise ParseError(PART_MISSING(name=name)) from None
    try:
        element: Element = SafeET.fromstring(data)
    except (XmlParseError, DefusedXmlException) as exc:
        raise ParseError(PART_NOT_XML(name=name)) from exc
    return element


def _book_title(package: Element) -> str:
    for title in package.iterfind("opf:metadata/dc:title", _NS):
        text = " ".join("".join(title.itertext()).split())
        if text:
            return text
    return ""


def _spine_paths(package: Element, base: str) -> list[str]:
    """The archive paths of the spine's (X)HTML chapters in reading order, each once however
    many manifest items or spine entries name it (with or without a #fragment)."""
    manifest: dict[str, tuple[str, str, str]] = {}
    for item in package.iterfind("opf:manifest/opf:item", _NS):
        manifest[item.get("id", "")] = (
            item.get("href", ""),
            item.get("media-type", ""),
            item.get("properties", ""),
        )
    itemrefs = package.findall("opf:spine/opf:itemref", _NS)
    if len(itemrefs) > MAX_CHAPTERS:
        raise ParseError(TOO_MANY_CHAPTERS(chapters=len(itemrefs), limit=MAX_CHAPTERS))
    # A dict keeps the spine's order and each document where the spine first names it.
    paths: dict[str, None] = {}
    for itemref in itemrefs:
        href, media_type, properties = manifest.get(itemref.get("idref", ""), ("", "", ""))
        if not href or media_type not in _CHAPTER_MEDIA_TYPES or "nav" in properties.split():
            continue
        paths[_inside_archive(href, base)] = None
    return list(paths)


def _inside_archive(href: str, base: str) -> str:
    """The archive path `href` names relative to the folder `base`; refused when it is a URL or
    climbs out of the archive."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        raise ParseError(CHAPTER_OUTSIDE(href=href))
    relative = unquote(parts.path).replace("\\", "/")
    if relative.startswith("/"):
        raise ParseError(CHAPTER_OUTSIDE(href=href))
    resolved = posixpath.normpath(posixpath.join(base, relative))
    if resolved == ".." or resolved.startswith("../"):
        raise ParseError(CHAPTER_CLIMBS_OUT(href=href))
    return resolved


def _refuse_drm(book: zipfile.ZipFile, chapters: set[str]) -> None:
    # Font obfuscation lists fonts in encryption.xml too; only an encrypted chapter is DRM.
    if _ENCRYPTION not in book.namelist():
        return
    encryption = _parse_xml(book, _ENCRYPTION)
    for reference in encryption.iterfind(".//enc:CipherReference", _NS):
        uri = reference.get("URI", "")
        if posixpath.normpath(unquote(uri)) in chapters:
            raise ParseError(DRM())


def _chapter_blocks(book: zipfile.ZipFile, name: str) -> list[Block]:
    try:
        data = book.read(name)
    except KeyError:
        raise ParseError(CHAPTER_MISSING(name=name)) from None
    # An <aside> of a book is its footnotes, notes and sidebars, never a site's furniture.
    chapter = html.extract_markup(data, asides_are_text=True)
    # A chapter that is only a picture (a cover) yields just its <title>, which often repeats
    # the book's title; that is not text of the book.
    if chapter.blocks == [Block(PARAGRAPH, chapter.title)]:
        return []
    return chapter.blocks
