"""HTML: the page's main content as blocks, with its headings, code, tables and lists.

Boilerplate is dropped while parsing: navigation (`<nav>`, `role=navigation`, Sphinx's
"related" bar and sidebar, DocBook's navheader/navfooter "Prev Up Home Next" tables), page
headers and footers, breadcrumbs, hidden elements, buttons and the "¶" links beside headings.
When the page marks its main content (`<main>`, `role=main`, `<article>`, or an id such as
"content"), only the blocks inside it are kept.

Measured against trafilatura 2.3.1, readability-lxml 0.9 and jusText 3.0.2 on Python 3.11's and
Django 3.2's Sphinx pages: those libraries ran at 3.5-9 pages/s, dropped headings (trafilatura
kept 3 of Django's 16 section headings), ran code blocks into the prose or dropped tables; so
this is a heuristic over lxml's streaming parser, which keeps every heading, code block and
table (see tests/textkit/extract/test_html.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from bs4.dammit import EncodingDetector
from lxml import etree

from textkit.extract.base import CODE, HEADING, PARAGRAPH, TABLE, Block, Extracted
from textkit.extract.encoding import decode, refuse_binary
from textkit.words import gettext_noop

MEDIA_TYPES = ("text/html",)
EXTENSIONS = {".htm": "text/html", ".html": "text/html"}
LABEL = gettext_noop("HTML")


def check_head(head: bytes, media_type: str) -> None:
    refuse_binary(head, gettext_noop("HTML text"))


_SKIPPED_TAGS = frozenset(
    {"script", "style", "noscript", "template", "button", "select", "nav", "footer"}
)
# Page furniture outside the main content, content inside it (Sphinx writes footnotes as
# <aside>, articles put their title in a <header>).
_OUTSIDE_MAIN_TAGS = frozenset({"header", "aside"})
_PARAGRAPH_TAGS = frozenset(
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
        "header",
        "hgroup",
        "hr",
        "main",
        "nav",
        "ol",
        "p",
        "section",
        "ul",
    }
)
_LINE_TAGS = frozenset(
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
_CELL_TAGS = frozenset({"td", "th"})
_HEADING_TAGS = {f"h{level}": level for level in range(1, 7)}
_MAIN_TAGS = frozenset({"main", "article"})
_MAIN_IDS = frozenset(
    {"main", "content", "main-content", "maincontent", "page-content", "yui-main", "primary"}
)
_BOILERPLATE_ROLES = frozenset(
    {
        "navigation",
        "banner",
        "contentinfo",
        "complementary",
        "search",
        "menu",
        "menubar",
        "toolbar",
    }
)
# Class or id tokens of navigation and page furniture.
_BOILERPLATE_TOKEN_RE = re.compile(
    r"nav|navbar|navigation|nav[-_]?(?:header|footer|links|bar|menu)|mobile-nav|global-nav"
    r"|.*sidebar.*|.*breadcrumb.*|related|footer|site-footer|page-footer|hd|ft"
    r"|menu|menu-wrapper|skip-?links?|headerlink|toc|table-of-contents|pagination|prev-next"
    r"|cookie.*|banner|share|social|rst-footer-buttons|wy-nav-side|edit-this-page",
)
# Class tokens that say how a page is laid out ("no-sidebar", "has-sidebar", "with-nav"), not
# what an element is: never furniture, whatever word follows.
_LAYOUT_STATE_RE = re.compile(r"(?:no|has|with|without|hide|show|hidden)[-_].*")
# Elements that hold the whole page: their class names a layout, never page furniture.
_PAGE_TAGS = frozenset({"html", "body"})
# Class or id tokens of a table of contents: set aside while parsing (see `result`).
_CONTENTS_TOKENS = frozenset({"toc", "table-of-contents", "localtoc", "chapter-toc"})
_DISPLAY_NONE_RE = re.compile(r"display\s*:\s*none")
_SPACE_RE = re.compile(r"[ \t\n\r\f]+")
# A line made only of link-bar words ("Prev Up Home Next", "« Previous | Next »").
_LINK_BAR_RE = re.compile(
    r"(?:(?:prev(?:ious)?|next|up|home|top|index|contents|back)\b"
    r"[\s|\u00ab\u00bb\u2039\u203a\u2190\u2191\u2192\u00b7:/-]*)+",
    re.IGNORECASE,
)
# Separators before a site's name in a <title>: "Page — Site", "Page | Site".
_TITLE_SEPARATORS = (" | ", " \u2014 ", " \u2013 ", " - ", " :: ", " \u00b7 ")
_SITE_SUFFIX_RE = re.compile(
    r"documentation|docs|manual|handbook|reference|wiki|\bv?\d+(?:\.\d+)+", re.IGNORECASE
)


def extract(path: Path, *, max_chars: int) -> Extracted:
    return extract_markup(path.read_bytes())


def extract_markup(data: bytes, *, asides_are_text: bool = False) -> Extracted:
    """The title and blocks of HTML or XHTML bytes: what `extract` does with a file's content,
    for formats that hold HTML inside (EPUB chapters, an e-mail's HTML body).
    `asides_are_text` keeps every `<aside>` whatever its class or role (a book's notes and
    sidebars), where a web page's asides outside its main content are furniture."""
    declared = EncodingDetector.find_declared_encoding(data, is_html=True)
    markup = decode(data, declared).replace("\x00", "")
    if not markup.strip():
        return Extracted(title="", blocks=[])
    # A streaming parser target rather than a tree: no depth limit, and no per-node objects.
    # huge_tree lifts libxml2's 10 MB limit on a single text node. The markup is already
    # decoded, so the explicit encoding overrides any <meta charset>.
    target = _HtmlTarget(asides_are_text=asides_are_text)
    parser = etree.HTMLParser(target=target, encoding="utf-8", huge_tree=True, no_network=True)
    parser.feed(markup.encode("utf-8"))
    parser.close()
    return target.result()


class _TextWriter:
    """Accumulates text with HTML whitespace rules: runs of whitespace collapse outside <pre>,
    and the separator owed between blocks, rows and cells is written only before more text."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.pending = ""

    def text(self, value: str, *, preformatted: bool) -> None:
        if not preformatted:
            value = _SPACE_RE.sub(" ", value)
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


class _HtmlTarget:
    """lxml parser target that writes the kept text as blocks and remembers the <title>.

    libxml2 closes implied and unclosed elements itself, so start and end events balance; the
    depth of an open heading, <pre>, <table> or main-content element says where it ends.
    """

    def __init__(self, *, asides_are_text: bool = False) -> None:
        self.asides_are_text = asides_are_text
        self.writer = _TextWriter()
        # Each block, whether it is inside the main content, and whether inside a table of
        # contents (kept aside: it is the content only of a page that has nothing else).
        self.blocks: list[tuple[Block, bool, bool]] = []
        self.contents_at: int | None = None
        self.title: list[str] = []
        self.depth = 0
        self.skipped_depth = 0
        self.title_depth = 0
        self.preformatted_depth = 0
        self.main_at: int | None = None
        # The open structural block: its kind, heading level and depth.
        self.block_at: int | None = None
        self.block_kind = PARAGRAPH
        self.block_level = 0

    def start(self, tag: str, attrib: Mapping[str, str]) -> None:
        self.depth += 1
        if self.skipped_depth:
            self.skipped_depth += 1
            return
        if tag == "title":
            self.title_depth += 1
            return
        if _is_contents(attrib):
            if self.contents_at is None:
                self._flush()
                self.contents_at = self.depth
        elif self._is_boilerplate(tag, attrib):
            self.skipped_depth = 1
            return
        if self.main_at is None and self._is_main(tag, attrib):
            self._flush()
            self.main_at = self.depth
        if tag == "br":
            self.writer.line_break()
            return
        if self.block_at is None:
            kind = (
                HEADING
                if tag in _HEADING_TAGS
                else CODE
                if tag == "pre"
                else TABLE
                if tag == "table"
                else None
            )
            if kind is not None:
                self._flush()
                self.block_at, self.block_kind = self.depth, kind
                self.block_level = _HEADING_TAGS.get(tag, 0)
        if tag == "pre":
            self.preformatted_depth += 1
        if block_break := _html_break(tag):
            self.writer.block_break(block_break)

    def end(self, tag: str) -> None:
        depth = self.depth
        self.depth -= 1
        if self.skipped_depth:
            self.skipped_depth -= 1
            return
        if tag == "title":
            self.title_depth -= 1
            return
        if tag in _CELL_TAGS:
            self.writer.cell_break()
        else:
            if tag == "pre":
                self.preformatted_depth -= 1
            if block_break := _html_break(tag):
                self.writer.block_break(block_break)
        if depth == self.block_at:
            self._flush()
        if depth == self.main_at:
            self._flush()
            self.main_at = None
        if depth == self.contents_at:
            self._flush()
            self.contents_at = None

    def data(self, value: str) -> None:
        if self.skipped_depth:
            return
        if self.title_depth:
            self.title.append(value)
        else:
            self.writer.text(value, preformatted=self.preformatted_depth > 0)

    def close(self) -> None:
        pass

    def _is_main(self, tag: str, attrib: Mapping[str, str]) -> bool:
        return (
            tag in _MAIN_TAGS
            or attrib.get("role", "").lower() == "main"
            or attrib.get("id", "").lower() in _MAIN_IDS
        )

    def _is_boilerplate(self, tag: str, attrib: Mapping[str, str]) -> bool:
        if tag == "aside" and self.asides_are_text:
            return False
        if tag in _SKIPPED_TAGS or (tag in _OUTSIDE_MAIN_TAGS and self.main_at is None):
            return True
        if not attrib:
            return False
        if "hidden" in attrib or attrib.get("aria-hidden", "").lower() == "true":
            return True
        if attrib.get("role", "").lower() in _BOILERPLATE_ROLES:
            return True
        if _DISPLAY_NONE_RE.search(attrib.get("style", "").lower()):
            return True
        if tag in _PAGE_TAGS:
            return False
        tokens = f"{attrib.get('class', '')} {attrib.get('id', '')}".lower().split()
        return any(
            _BOILERPLATE_TOKEN_RE.fullmatch(token) and not _LAYOUT_STATE_RE.fullmatch(token)
            for token in tokens
        )

    def _flush(self) -> None:
        """End the open block (or the run of paragraphs) and start a new writer."""
        text = self.writer.result()
        kind, level = (self.block_kind, self.block_level) if self.block_at else (PARAGRAPH, 0)
        self.writer = _TextWriter()
        self.block_at, self.block_kind, self.block_level = None, PARAGRAPH, 0
        in_main, contents = self.main_at is not None, self.contents_at is not None
        if not text.strip():
            return
        if kind == HEADING:
            heading = Block(HEADING, " ".join(text.split()), level=level)
            self.blocks.append((heading, in_main, contents))
        elif kind in (CODE, TABLE):
            self.blocks.append((Block(kind, text), in_main, contents))
        else:
            for paragraph in re.split(r"\n\s*\n", text):
                kept = "\n".join(
                    line for line in paragraph.split("\n") if not _LINK_BAR_RE.fullmatch(line)
                )
                if kept.strip():
                    self.blocks.append((Block(PARAGRAPH, kept), in_main, contents))

    def result(self) -> Extracted:
        self._flush()
        found = self.blocks
        if any(in_main for _, in_main, _ in found):
            found = [item for item in found if item[1]]
        blocks = [block for block, _, contents in found if not contents]
        if all(block.kind == HEADING for block in blocks):
            # A chapter page whose body is its title and a table of contents: the contents
            # are what it says, so they are its text rather than navigation to drop.
            blocks = [_as_text(block) if contents else block for block, _, contents in found]
        title = " ".join("".join(self.title).split())
        first_h1 = next((b.text for b in blocks if b.kind == HEADING and b.level == 1), "")
        if not blocks and title:
            # A page with a title and nothing else is still a document.
            blocks = [Block(PARAGRAPH, title)]
        return Extracted(title=page_title(title, first_h1), blocks=blocks)


def _is_contents(attrib: Mapping[str, str]) -> bool:
    tokens = f"{attrib.get('class', '')} {attrib.get('id', '')}".lower().split()
    return any(token in _CONTENTS_TOKENS for token in tokens)


def _as_text(block: Block) -> Block:
    """A table of contents' entry as a paragraph: its headings are links, not sections."""
    return Block(PARAGRAPH, block.text) if block.kind == HEADING else block


def _html_break(tag: str) -> str:
    if tag in _PARAGRAPH_TAGS or tag in _HEADING_TAGS or tag in ("pre", "table"):
        return "\n\n"
    if tag in _LINE_TAGS:
        return "\n"
    return ""


def page_title(title: str, first_h1: str) -> str:
    """The page's title without the site's name: the first <h1> when the <title> starts with it
    ("os — Miscellaneous operating system interfaces — Python 3.11 documentation"), else the
    <title> up to a "|", or without a last " — " part that names documentation or a version;
    the first <h1> when there is no <title>."""
    if not title:
        return first_h1
    if first_h1 and title.casefold().startswith(first_h1.casefold()):
        return first_h1
    if " | " in title:
        head = title.split(" | ", 1)[0].strip()
        if head:
            return head
    for separator in _TITLE_SEPARATORS[1:]:
        head, found, tail = title.rpartition(separator)
        if found and head.strip() and _SITE_SUFFIX_RE.search(tail):
            return head.strip()
    return title
