"""Turning uploaded files into normalised plain text.

`detect_media_type` decides what a file is from its name and first bytes; `parse_file` extracts
its text. Every problem with the file itself raises `ParseError` whose message is a sentence a
content manager can act on; such errors are terminal (retrying cannot help). Reading the file can
still raise `OSError`, which is not the document's fault.
"""

from __future__ import annotations

import codecs
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any
from xml.parsers import expat

import charset_normalizer
import docx
from bs4.dammit import EncodingDetector
from docx.opc.exceptions import PackageNotFoundError
from docx.oxml.ns import qn
from lxml import etree
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, LimitReachedError, PyPdfError

from ingestion.text import normalize_text

TEXT_PLAIN = "text/plain"
TEXT_MARKDOWN = "text/markdown"
TEXT_HTML = "text/html"
APPLICATION_PDF = "application/pdf"
APPLICATION_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
SUPPORTED_MEDIA_TYPES = frozenset(
    {TEXT_PLAIN, TEXT_MARKDOWN, TEXT_HTML, APPLICATION_PDF, APPLICATION_DOCX}
)

# How many leading bytes `detect_media_type` wants to see.
SNIFF_BYTES = 4096

DEFAULT_MAX_CHARS = 20_000_000

# Zip-bomb limits for DOCX, checked against the archive directory before anything is inflated.
# zipfile never inflates an entry past its declared size, so the declared sizes can be trusted.
MAX_DOCX_ENTRIES = 2000
MAX_DOCX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_DOCX_COMPRESSION_RATIO = 100
# Entries smaller than this cannot do harm, so their compression ratio is not judged.
_RATIO_CHECK_MIN_BYTES = 1024 * 1024

_EXTENSIONS = {
    ".txt": TEXT_PLAIN,
    ".text": TEXT_PLAIN,
    ".md": TEXT_MARKDOWN,
    ".markdown": TEXT_MARKDOWN,
    ".htm": TEXT_HTML,
    ".html": TEXT_HTML,
    ".pdf": APPLICATION_PDF,
    ".docx": APPLICATION_DOCX,
}
_TEXT_MEDIA_TYPES = frozenset({TEXT_PLAIN, TEXT_MARKDOWN, TEXT_HTML})
_TEXT_KIND_LABELS = {TEXT_PLAIN: "plain", TEXT_MARKDOWN: "Markdown", TEXT_HTML: "HTML"}
_SUPPORTED_KINDS = "a PDF, Word (.docx), HTML, Markdown or plain-text file"

_PDF_MAGIC = b"%PDF-"
_ZIP_MAGIC = b"PK\x03\x04"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# UTF-32 marks first: the UTF-32-LE mark begins with the UTF-16-LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Enough for charset detection; the detected encoding is then applied to the whole file.
_DETECTION_SAMPLE_BYTES = 1024 * 1024


class ParseError(Exception):
    """The file cannot be turned into text; the message says why, for a content manager."""


class UnsupportedMediaType(ParseError):
    """The file is not of a supported type, or its content does not match its name."""


def detect_media_type(filename: str, head: bytes) -> str:
    """Return the media type of a file from its extension, checked against its first bytes.

    `head` should hold the first `SNIFF_BYTES` bytes (fewer only if the file is shorter).
    Raises UnsupportedMediaType for unknown extensions or content that contradicts the name, and
    ParseError for an empty file.
    """
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if not suffix:
        raise UnsupportedMediaType(
            f"The file name has no extension, so its type is unknown; upload {_SUPPORTED_KINDS}."
        )
    media_type = _EXTENSIONS.get(suffix)
    if media_type is None:
        raise UnsupportedMediaType(
            f'Files ending in "{suffix}" are not supported; upload {_SUPPORTED_KINDS}.'
        )
    if not head:
        raise ParseError("The file is empty.")
    if media_type == APPLICATION_PDF and not head.startswith(_PDF_MAGIC):
        raise UnsupportedMediaType("The file is named like a PDF, but its content is not a PDF.")
    if media_type == APPLICATION_DOCX and not head.startswith(_ZIP_MAGIC):
        if head.startswith(_OLE_MAGIC):
            raise UnsupportedMediaType(
                "The file is an old-style Word (.doc) file or a password-protected document; "
                "save it as an unprotected .docx and upload that."
            )
        raise UnsupportedMediaType(
            "The file is named like a Word (.docx) document, but its content is not one."
        )
    if media_type in _TEXT_MEDIA_TYPES and _looks_binary(head):
        raise UnsupportedMediaType(
            f"The file is named like {_TEXT_KIND_LABELS[media_type]} text, "
            "but it contains binary data."
        )
    return media_type


def _looks_binary(head: bytes) -> bool:
    if any(head.startswith(bom) for bom, _ in _BOMS):
        return False
    return b"\x00" in head or head.startswith((_PDF_MAGIC, _ZIP_MAGIC, _OLE_MAGIC))


def parse_file(path: Path, media_type: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Return the normalised text of the file at `path` (see `ingestion.text.normalize_text`).

    Raises ParseError when the file is empty, unreadable as `media_type`, has no text, or yields
    more than `max_chars` characters; UnsupportedMediaType for an unsupported `media_type`.
    """
    parser = _PARSERS.get(media_type)
    if parser is None:
        raise UnsupportedMediaType(f'Documents of type "{media_type}" are not supported.')
    if path.stat().st_size == 0:
        raise ParseError("The file is empty.")
    text = normalize_text(parser(path, max_chars))
    if len(text) > max_chars:
        raise _too_long(max_chars)
    if not text:
        raise ParseError("The document contains no text.")
    return text


def _too_long(max_chars: int) -> ParseError:
    return ParseError(f"The document is longer than the limit of {max_chars:,} characters.")


# --- Plain text -------------------------------------------------------------------------------


def _parse_plain(path: Path, max_chars: int) -> str:
    return _decode(path.read_bytes())


def _decode(data: bytes, declared_encoding: str | None = None) -> str:
    """Decode bytes of unknown encoding: BOM, then UTF-8, then the declared encoding, then a
    detected one; anything left undecodable becomes U+FFFD."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if declared_encoding:
        try:
            return data.decode(declared_encoding)
        except (LookupError, UnicodeDecodeError):
            pass
    lenient = data.decode("utf-8", errors="replace")
    # Every valid multi-byte character shortens the text relative to the bytes. Many of them
    # per bad byte means UTF-8 with a few damaged bytes (a truncated last character, say), which
    # the detector would misread as a single-byte code page.
    if len(data) - len(lenient) >= 10 * lenient.count("\ufffd"):
        return lenient
    detected = _detect_encoding(data)
    if detected is None:
        return lenient
    try:
        return data.decode(detected)
    except UnicodeDecodeError:
        return data.decode(detected, errors="replace")


def _detect_encoding(data: bytes) -> str | None:
    sample = data[:_DETECTION_SAMPLE_BYTES]
    if len(sample) < len(data):
        # Cut at a line end so that the sample does not end inside a multi-byte character.
        line_end = sample.rfind(b"\n")
        if line_end > 0:
            sample = sample[: line_end + 1]
    matches = charset_normalizer.from_bytes(sample)
    best = matches.best()
    if best is None:
        return None
    # The detector often ranks a Central European code page first for Western European text;
    # cp1252 is far more common, so it wins a tie.
    for match in matches:
        if match.encoding == "cp1252" and match.chaos <= best.chaos:
            return "cp1252"
    return str(best.encoding)


# --- Markdown ---------------------------------------------------------------------------------

_MD_FENCE_RE = re.compile(r" {0,3}(`{3,}|~{3,})")
_MD_HEADING_RE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+([^\n]*))?$", re.MULTILINE)
_MD_RULE_RE = re.compile(r"^ {0,3}(?:=++|(?:[-*_][ \t]*+){3,}+)[ \t]*$", re.MULTILINE)
_MD_BLOCKQUOTE_RE = re.compile(r"^(?: {0,3}>[ \t]?)++", re.MULTILINE)
_MD_BULLET_RE = re.compile(r"^[ \t]*+[-*+][ \t]+", re.MULTILINE)
_MD_REFERENCE_DEFINITION_RE = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*\S[^\n]*$", re.MULTILINE)
_MD_TABLE_DIVIDER_RE = re.compile(r"^[ \t]*+(?=[^\n]*-)(?=[^\n]*\|)[ \t:|-]++$", re.MULTILINE)
_MD_TABLE_ROW_RE = re.compile(r"^[ \t]*\|([^\n]*)$", re.MULTILINE)
# Bracketed text may not contain brackets, so every attempt stops at the next bracket: linear.
# A leading lookahead on the first character lets the engine skip quickly to candidates.
_MD_IMAGE_RE = re.compile(r"!\[([^\[\]\n]*)\]\([^()\n]*\)")
_MD_LINK_RE = re.compile(r"\[([^\[\]\n]*)\]\([^()\n]*\)")
_MD_REFERENCE_LINK_RE = re.compile(r"\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")
_MD_AUTOLINK_RE = re.compile(r"<((?:https?|ftp|mailto):[^<>\s]+)>")
_MD_HTML_TAG_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>\n]*)?/?>")
_MD_CODE_SPAN_RE = re.compile(r"(?=`)(?<!`)(`++)([^`\n]+?)\1(?!`)")
_MD_STAR_EMPHASIS_RE = re.compile(
    r"(?=\*)(?<![\w*\\])(\*{1,3})(?=[^\s*])([^*\n]+?)(?<=[^\s*\\])\1(?![\w*])"
)
_MD_UNDERSCORE_EMPHASIS_RE = re.compile(
    r"(?=_)(?<![\w\\])(_{1,3})(?=[^\s_])([^_\n]+?)(?<=[^\s_\\])\1(?!\w)"
)
_MD_STRIKETHROUGH_RE = re.compile(r"~~(?=\S)([^~\n]+?)(?<=\S)~~")
_MD_ESCAPE_RE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|~<>])")


def _parse_markdown(path: Path, max_chars: int) -> str:
    return _markdown_to_text(_decode(path.read_bytes()))


def _markdown_to_text(markdown: str) -> str:
    """Strip Markdown markup, keeping the words: fenced code stays verbatim."""
    blocks: list[str] = []
    prose: list[str] = []
    fence: str | None = None
    for line in markdown.replace("\r\n", "\n").split("\n"):
        opening = _MD_FENCE_RE.match(line)
        if fence is None and opening:
            blocks.append(_markdown_prose_to_text("\n".join(prose)))
            prose = []
            fence = opening.group(1)
        elif fence is not None:
            if _closes_fence(line, fence):
                fence = None
            else:
                blocks.append(line)
        else:
            prose.append(line)
    blocks.append(_markdown_prose_to_text("\n".join(prose)))
    return "\n".join(blocks)


def _closes_fence(line: str, fence: str) -> bool:
    marker = line.strip()
    return len(marker) >= len(fence) and marker == fence[0] * len(marker)


def _markdown_prose_to_text(text: str) -> str:
    text = _remove_html_comments(text)
    text = _MD_HEADING_RE.sub(_markdown_heading, text)
    text = _MD_RULE_RE.sub("", text)
    text = _MD_BLOCKQUOTE_RE.sub("", text)
    text = _MD_BULLET_RE.sub("", text)
    text = _MD_REFERENCE_DEFINITION_RE.sub("", text)
    text = _MD_TABLE_DIVIDER_RE.sub("", text)
    text = _MD_TABLE_ROW_RE.sub(_markdown_table_row, text)
    text = _MD_IMAGE_RE.sub(r"\1", text)
    text = _MD_LINK_RE.sub(r"\1", text)
    text = _MD_REFERENCE_LINK_RE.sub(r"\1", text)
    text = _MD_AUTOLINK_RE.sub(r"\1", text)
    text = _MD_HTML_TAG_RE.sub("", text)
    text = _MD_CODE_SPAN_RE.sub(r"\2", text)
    # Twice, so that emphasis nested inside emphasis of the same kind is removed too.
    for _ in range(2):
        text = _MD_STAR_EMPHASIS_RE.sub(r"\2", text)
        text = _MD_UNDERSCORE_EMPHASIS_RE.sub(r"\2", text)
    text = _MD_STRIKETHROUGH_RE.sub(r"\1", text)
    return _MD_ESCAPE_RE.sub(r"\1", text)


def _remove_html_comments(text: str) -> str:
    pieces: list[str] = []
    position = 0
    while (start := text.find("<!--", position)) != -1:
        end = text.find("-->", start + 4)
        if end == -1:
            break
        pieces.append(text[position:start])
        position = end + 3
    pieces.append(text[position:])
    return "".join(pieces)


def _markdown_heading(match: re.Match[str]) -> str:
    title = (match.group(1) or "").rstrip()
    without_closing = title.rstrip("#")
    if without_closing != title and (not without_closing or without_closing[-1] in " \t"):
        title = without_closing.rstrip()
    return title


def _markdown_table_row(match: re.Match[str]) -> str:
    row = match.group(1).rstrip()
    if row.endswith("|"):
        row = row[:-1]
    return "\t".join(cell.strip() for cell in row.split("|"))


# --- HTML -------------------------------------------------------------------------------------

_HTML_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template"})
_HTML_PARAGRAPH_TAGS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "details",
        "dl",
        "fieldset",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hgroup",
        "hr",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "ul",
    }
)
_HTML_LINE_TAGS = frozenset(
    {
        "caption",
        "dd",
        "div",
        "dt",
        "figcaption",
        "legend",
        "li",
        "option",
        "summary",
        "tbody",
        "tfoot",
        "thead",
        "tr",
    }
)
_HTML_CELL_TAGS = frozenset({"td", "th"})
_HTML_SPACE_RE = re.compile(r"[ \t\n\r\f]+")


def _parse_html(path: Path, max_chars: int) -> str:
    data = path.read_bytes()
    declared = EncodingDetector.find_declared_encoding(data, is_html=True)
    markup = _decode(data, declared).replace("\x00", "")
    if not markup.strip():
        return ""
    # A streaming parser target rather than a tree: no depth limit, and no per-node objects.
    # huge_tree lifts libxml2's 10 MB limit on a single text node. The markup is already
    # decoded, so the explicit encoding overrides any <meta charset>.
    target = _HtmlTextTarget()
    parser = etree.HTMLParser(target=target, encoding="utf-8", huge_tree=True, no_network=True)
    parser.feed(markup.encode("utf-8"))
    parser.close()
    return target.text()


class _HtmlTextWriter:
    """Accumulates text with HTML whitespace rules: runs of whitespace collapse outside <pre>,
    and the separator owed between blocks, rows and cells is written only before more text."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.pending = ""

    def text(self, value: str, *, preformatted: bool) -> None:
        if not preformatted:
            value = _HTML_SPACE_RE.sub(" ", value)
            if self.pending or not self.pieces:
                value = value.lstrip(" ")
        if not value:
            return
        if self.pending and self.pieces:
            self.pieces[-1] = self.pieces[-1].rstrip(" ")
            self.pieces.append(self.pending)
        self.pending = ""
        self.pieces.append(value)

    def block_break(self, value: str) -> None:
        """Owe at least `value` (one or two newlines); adjacent block edges do not add up."""
        if len(value) > len(self.pending.strip("\t")):
            self.pending = value

    def line_break(self) -> None:
        """Owe one more newline: consecutive <br> do add up."""
        self.pending = self.pending.strip("\t") + "\n"

    def cell_break(self) -> None:
        if not self.pending:
            self.pending = "\t"

    def result(self) -> str:
        return "".join(self.pieces)


class _HtmlTextTarget:
    """lxml parser target that writes the visible text and remembers the <title>.

    libxml2 closes implied and unclosed elements itself, so start and end events balance.
    """

    def __init__(self) -> None:
        self.writer = _HtmlTextWriter()
        self.title: list[str] = []
        self.skipped_depth = 0
        self.title_depth = 0
        self.preformatted_depth = 0

    def start(self, tag: str, attrib: object) -> None:
        if self.skipped_depth or tag in _HTML_SKIPPED_TAGS:
            self.skipped_depth += 1
        elif tag == "title":
            self.title_depth += 1
        elif tag == "br":
            self.writer.line_break()
        else:
            if tag == "pre":
                self.preformatted_depth += 1
            if block_break := _html_break(tag):
                self.writer.block_break(block_break)

    def end(self, tag: str) -> None:
        if self.skipped_depth:
            self.skipped_depth -= 1
        elif tag == "title":
            self.title_depth -= 1
        elif tag in _HTML_CELL_TAGS:
            self.writer.cell_break()
        else:
            if tag == "pre":
                self.preformatted_depth -= 1
            if block_break := _html_break(tag):
                self.writer.block_break(block_break)

    def data(self, value: str) -> None:
        if self.skipped_depth:
            return
        if self.title_depth:
            self.title.append(value)
        else:
            self.writer.text(value, preformatted=self.preformatted_depth > 0)

    def close(self) -> None:
        pass

    def text(self) -> str:
        """The body text, or the title when the body has none."""
        body = self.writer.result()
        return body if body.strip() else "".join(self.title)


def _html_break(tag: str) -> str:
    if tag in _HTML_PARAGRAPH_TAGS:
        return "\n\n"
    if tag in _HTML_LINE_TAGS:
        return "\n"
    return ""


# --- PDF --------------------------------------------------------------------------------------


def _parse_pdf(path: Path, max_chars: int) -> str:
    pages: list[str] = []
    length = 0
    try:
        reader = PdfReader(path, strict=False)
        if reader.is_encrypted and _pdf_needs_password(reader):
            raise ParseError("The PDF is encrypted; upload an unencrypted copy.")
        for page in reader.pages:
            page_text = normalize_text(page.extract_text())
            if page_text:
                pages.append(page_text)
                length += len(page_text) + 2
                if length > max_chars + 2:
                    raise _too_long(max_chars)
    except LimitReachedError as exc:
        raise ParseError(
            "The PDF contains more data than can be decompressed safely; it may be malicious."
        ) from exc
    except (
        PyPdfError,
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        AttributeError,
        AssertionError,
        RecursionError,
        OverflowError,
        ZeroDivisionError,
        UnicodeError,
    ) as exc:
        raise ParseError("The PDF is damaged or truncated and cannot be read.") from exc
    if not pages:
        raise ParseError("The PDF has no extractable text; it may be a scanned image.")
    return "\n\n".join(pages)


def _pdf_needs_password(reader: PdfReader) -> bool:
    """Whether the PDF stays locked with the empty user password (which many "protected" PDFs
    use only to restrict printing or copying)."""
    try:
        return reader.decrypt("") == PasswordType.NOT_DECRYPTED
    except (DependencyError, NotImplementedError):
        # AES needs the optional cryptography package, and certificate-based (non-standard)
        # security handlers are not supported: either way the file cannot be opened.
        return True


# --- DOCX -------------------------------------------------------------------------------------


def _parse_docx(path: Path, max_chars: int) -> str:
    _check_docx_archive(path)
    try:
        document = docx.Document(str(path))
    except PackageNotFoundError as exc:
        raise ParseError("The file is not a Word (.docx) document.") from exc
    except ValueError as exc:
        if "not a Word file" in str(exc):
            raise ParseError(
                "The file is an Office document, but not a Word (.docx) document."
            ) from exc
        raise ParseError("The Word document is damaged and cannot be read.") from exc
    except (*_ZIP_DAMAGE_ERRORS, KeyError, etree.LxmlError, RuntimeError, AttributeError) as exc:
        raise ParseError("The Word document is damaged and cannot be read.") from exc
    return "\n\n".join(_docx_blocks(document.element.body))


# What zipfile raises for a damaged archive: bad headers or CRC, truncated or corrupt deflate
# data, unsupported compression methods, nonsense offsets.
_ZIP_DAMAGE_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError)


def _check_docx_archive(path: Path) -> None:
    """Refuse zip bombs, encrypted archives and XML with a DTD before python-docx sees the file."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = [info for info in archive.infolist() if not info.is_dir()]
            _check_docx_sizes(entries)
            if "[Content_Types].xml" not in {info.filename for info in entries}:
                raise ParseError("The file is a ZIP archive, but not a Word (.docx) document.")
            if any(info.flag_bits & 0x1 for info in entries):
                raise ParseError("The Word document is encrypted; upload an unencrypted copy.")
            for info in entries:
                with archive.open(info) as part:
                    _check_xml_part(info.filename, part)
    except _ZIP_DAMAGE_ERRORS as exc:
        raise ParseError("The file is not a valid Word (.docx) document.") from exc


def _check_docx_sizes(entries: list[zipfile.ZipInfo]) -> None:
    if len(entries) > MAX_DOCX_ENTRIES:
        raise ParseError(
            f"The Word document has {len(entries):,} parts, more than the limit of "
            f"{MAX_DOCX_ENTRIES:,}; it may be a zip bomb."
        )
    total = sum(info.file_size for info in entries)
    if total > MAX_DOCX_UNCOMPRESSED_BYTES:
        raise ParseError(
            f"The Word document expands to {total / 1024 / 1024:,.0f} MB, more than the limit "
            f"of {MAX_DOCX_UNCOMPRESSED_BYTES / 1024 / 1024:,.0f} MB; it may be a zip bomb."
        )
    for info in entries:
        if (
            info.file_size >= _RATIO_CHECK_MIN_BYTES
            and info.file_size > MAX_DOCX_COMPRESSION_RATIO * max(info.compress_size, 1)
        ):
            raise ParseError(
                f'The Word document part "{info.filename}" is compressed more than '
                f"{MAX_DOCX_COMPRESSION_RATIO}:1; it may be a zip bomb."
            )


class _DoctypeFound(Exception):
    pass


class _RootElementReached(Exception):
    pass


def _check_xml_part(name: str, part: IO[bytes]) -> None:
    """Refuse an XML part with a document type declaration: that is where entity bombs (billion
    laughs) and external entities (XXE) live. Parsing stops at the root element, since a DOCTYPE
    can only come before it. Parts that are not XML (images) are skipped."""
    chunk = part.read(64 * 1024)
    if not chunk.lstrip(b"\xef\xbb\xbf\xfe\xff\x00 \t\r\n").startswith(b"<"):
        return
    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = _raise_doctype_found
    parser.StartElementHandler = _raise_root_element_reached
    try:
        while chunk:
            parser.Parse(chunk, False)
            chunk = part.read(64 * 1024)
        parser.Parse(b"", True)
    except _RootElementReached:
        return
    except _DoctypeFound:
        raise ParseError(
            f'The Word document part "{name}" declares a DTD or entities, which is not allowed; '
            "it may be malicious."
        ) from None
    except expat.ExpatError as exc:
        raise ParseError(f'The Word document part "{name}" is not well-formed XML.') from exc
    raise ParseError(f'The Word document part "{name}" is not well-formed XML.')


def _raise_doctype_found(*_args: object) -> None:
    raise _DoctypeFound


def _raise_root_element_reached(*_args: object) -> None:
    raise _RootElementReached


_W_P = qn("w:p")
_W_TBL = qn("w:tbl")
_W_TR = qn("w:tr")
_W_TC = qn("w:tc")
_W_SDT = qn("w:sdt")
_W_SDT_CONTENT = qn("w:sdtContent")
_W_CUSTOM_XML = qn("w:customXml")
_W_T = qn("w:t")
_W_TAB = qn("w:tab")
_W_BR = qn("w:br")
_W_CR = qn("w:cr")
_DOCX_RUN_TEXT: dict[str, Callable[[Any], str]] = {
    _W_T: lambda element: element.text or "",
    _W_TAB: lambda _element: "\t",
    _W_BR: lambda _element: "\n",
    _W_CR: lambda _element: "\n",
}


def _docx_blocks(container: Any) -> Iterator[str]:
    """Yield the non-empty paragraphs and tables under `container` in document order; a table
    is one block with a line per row and cells separated by tabs."""
    for child in container.iterchildren():
        if child.tag == _W_P:
            text = _docx_paragraph_text(child)
            if text.strip():
                yield text
        elif child.tag == _W_TBL:
            rows = (
                "\t".join(" ".join(_docx_blocks(cell)) for cell in row.iterchildren(_W_TC))
                for row in child.iterchildren(_W_TR)
            )
            table = "\n".join(row for row in rows if row.strip())
            if table:
                yield table
        elif child.tag == _W_SDT:
            for content in child.iterchildren(_W_SDT_CONTENT):
                yield from _docx_blocks(content)
        elif child.tag == _W_CUSTOM_XML:
            yield from _docx_blocks(child)


def _docx_paragraph_text(paragraph: Any) -> str:
    # Every w:t under the paragraph, so text in hyperlinks, tracked insertions, fields and
    # content controls is kept; deleted text is w:delText and is left out.
    return "".join(
        _DOCX_RUN_TEXT[element.tag](element) for element in paragraph.iter(*_DOCX_RUN_TEXT)
    )


_PARSERS: dict[str, Callable[[Path, int], str]] = {
    TEXT_PLAIN: _parse_plain,
    TEXT_MARKDOWN: _parse_markdown,
    TEXT_HTML: _parse_html,
    APPLICATION_PDF: _parse_pdf,
    APPLICATION_DOCX: _parse_docx,
}
