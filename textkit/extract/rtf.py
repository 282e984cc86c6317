"""Rich Text Format (.rtf): paragraphs, tables as rows of tab-separated cells, and footnotes
and endnotes after the paragraph citing them, through striprtf. The title is the document's
`{\\info{\\title ...}}`, else a short first line.

striprtf reports no styles, so RTF gives no headings. It decodes `\\uN` escapes and `\\'hh`
bytes in the code page of the document (`\\ansicpg`) or of the font (`\\fcharset`), so Chinese
written by Word or WordPad survives; raw 8-bit text is read in the `\\ansicpg` code page.

striprtf is regular expressions and a loop in Python, linear in the input except for two
patterns; the input is shaped so that neither can take quadratic time:
- long runs of hex digits (pictures and embedded objects, often most of the file) are removed
  first: they are never text, and striprtf would walk them a character at a time;
- a line break goes before every group, so that its hyperlink pattern (`.*` to the end of the
  line, tried at every field) sees short lines; RTF ignores line breaks between tokens;
- the font table, which striprtf searches with a pattern of two lazy `.*?` (seconds for 30 KB
  of crafted table), is replaced by one rebuilt from each font's number and character set:
  the only parts of it striprtf uses.
The file size and the number of groups are bounded too (striprtf keeps a stack entry per open
group).

striprtf flattens tables and drops notes: `rtf_structure` marks them in the markup first and
reads them back from striprtf's text.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from striprtf import striprtf

from textkit.extract import rtf_structure
from textkit.extract.base import (
    PARAGRAPH,
    Extracted,
    ParseError,
    UnsupportedMediaType,
)
from textkit.extract.plain import first_line_title
from textkit.reasons import reason
from textkit.words import gettext_noop

MEDIA_TYPES = ("application/rtf",)
EXTENSIONS = {".rtf": MEDIA_TYPES[0]}
LABEL = gettext_noop("Rich Text (.rtf)")

MAX_RTF_BYTES = 200 * 1024 * 1024
MAX_GROUPS = 2_000_000
MAX_FONTS = 10_000

NOT_RTF_NAMED = reason(
    "rtf.named_not_rtf",
    gettext_noop("The file is named like a Rich Text (.rtf) document, but its content is not one."),
)
TOO_LARGE = reason(
    "rtf.too_large",
    gettext_noop("The Rich Text document is larger than the limit of %(limit)s MB."),
)
NOT_RTF = reason("rtf.not_rtf", gettext_noop("The file is not a valid Rich Text (.rtf) document."))
DAMAGED = reason(
    "rtf.damaged", gettext_noop("The Rich Text document is damaged and cannot be read.")
)
TOO_MANY_GROUPS = reason(
    "rtf.too_many_groups",
    gettext_noop("The Rich Text document has more than %(limit)s groups; it may be malicious."),
)

# A character class, not a repeated group: sre runs it in C, 100 MB/s.
_HEX_RUN_RE = re.compile(r"[0-9a-fA-F\r\n]{256,}")
# An unescaped "{": one after "\\" is a literal brace, one after "\\\\" opens a group, but a
# line break missed there costs nothing.
_GROUP_START_RE = re.compile(r"(?<!\\)\{")
_CODE_PAGE_RE = re.compile(rb"\\ansicpg(\d{1,5})")
_FONT_NUMBER_RE = re.compile(r"\\f(\d{1,9})")
_FONT_CHARSET_RE = re.compile(r"\\fcharset(\d{1,3})")
_TITLE_GROUP_RE = re.compile(r"\{\\title\b ?")
_MAX_TITLE_MARKUP = 4096


def check_head(head: bytes, media_type: str) -> None:
    if not head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{\\rtf"):
        raise UnsupportedMediaType(NOT_RTF_NAMED())


def extract(path: Path, *, max_chars: int) -> Extracted:
    if path.stat().st_size > MAX_RTF_BYTES:
        raise ParseError(TOO_LARGE(limit=round(MAX_RTF_BYTES / 1024 / 1024)))
    return extract_data(path.read_bytes())


def extract_data(data: bytes) -> Extracted:
    """The title and blocks of RTF bytes: what `extract` does with a file's content, for formats
    that hold RTF inside (an Outlook message's RTF body)."""
    if len(data) > MAX_RTF_BYTES:
        raise ParseError(TOO_LARGE(limit=round(MAX_RTF_BYTES / 1024 / 1024)))
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{\\rtf"):
        raise ParseError(NOT_RTF())
    markup = _prepare(data)
    code_page = _code_page(data)
    try:
        text = striprtf.rtf_to_text(markup, encoding=code_page, errors="replace")
        title = _info_title(markup, code_page)
    except (ValueError, IndexError, LookupError) as exc:
        raise ParseError(DAMAGED()) from exc
    blocks = rtf_structure.blocks(text)
    if not title and blocks and blocks[0].kind == PARAGRAPH:
        title = first_line_title("\n".join(block.text for block in blocks))
    return Extracted(title=title, blocks=blocks)


def _code_page(data: bytes) -> str:
    match = _CODE_PAGE_RE.search(data[:4096])
    if match:
        encoding = f"cp{int(match.group(1))}"
        try:
            codecs.lookup(encoding)
        except LookupError:
            return "cp1252"
        return encoding
    return "cp1252"


def _prepare(data: bytes) -> str:
    """The markup striprtf can walk in linear time (see the module docstring)."""
    markup = data.decode(_code_page(data), errors="replace")
    markup = _HEX_RUN_RE.sub("", markup)
    if markup.count("{") > MAX_GROUPS:
        raise ParseError(TOO_MANY_GROUPS(limit=MAX_GROUPS))
    font_table = striprtf.font_table_group(markup)
    if font_table:
        markup = markup.replace(font_table, _plain_font_table(font_table), 1)
    markup = rtf_structure.marked(markup)
    return _GROUP_START_RE.sub("\n{", markup)


def _plain_font_table(font_table: str) -> str:
    """The font table with each font's number and character set only; linear to build, and
    linear for striprtf to search."""
    fonts = []
    for entry in font_table.split(";")[:MAX_FONTS]:
        number = _FONT_NUMBER_RE.search(entry)
        charset = _FONT_CHARSET_RE.search(entry)
        if number and charset:
            fonts.append(f"{{\\f{number.group(1)}\\fcharset{charset.group(1)} font;}}")
    return "{\\fonttbl" + "".join(fonts) + "}"


def _info_title(markup: str, code_page: str) -> str:
    """The text of the `{\\title ...}` group, decoded as striprtf decodes the body."""
    match = _TITLE_GROUP_RE.search(markup)
    if match is None:
        return ""
    end = markup.find("}", match.end(), match.end() + _MAX_TITLE_MARKUP)
    if end < 0:
        return ""
    group = markup[match.end() : end]
    title = striprtf.rtf_to_text("{\\rtf1 " + group + "}", encoding=code_page, errors="replace")
    return " ".join(title.split())
