"""Extraction quality: one fixture per problem (boilerplate, glued words, layout line breaks,
CJK spacing, running headers, tables of contents), titles per format, and the stored form."""

import io
import re
import time
from pathlib import Path

import docx
import pytest
from pypdf import PdfReader, PdfWriter

from tests.pdf_fixtures import pdf_from_objects
from textkit import extract as extractors
from textkit.extract import (
    APPLICATION_DOCX,
    APPLICATION_PDF,
    CODE,
    HEADING,
    PARAGRAPH,
    TABLE,
    TEXT_HTML,
    TEXT_MARKDOWN,
    TEXT_PLAIN,
    Block,
    Extracted,
    cleanup,
    extract,
)
from textkit.extract.html import page_title

# --- fixture builders -------------------------------------------------------------------------


def build_pdf(pages: list[str], *, unicode_font: str = "") -> bytes:
    """A PDF whose pages have the given content streams. /F1 is Helvetica; with `unicode_font`
    (the characters it must cover) /F2 is a Type0 font whose two-byte codes map to Unicode
    through a ToUnicode CMap, the way TeX and CJK PDFs encode text: write its strings as {...}."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    fonts = b"/F1 3 0 R"
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
    next_id = 7
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


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def kinds(extracted: Extracted) -> list[tuple[str, str]]:
    return [(block.kind, block.text) for block in extracted.blocks]


# --- HTML: main content -----------------------------------------------------------------------

SPHINX_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8">
<title>os — Miscellaneous operating system interfaces &#8212; Python 3.13 documentation</title>
</head><body>
<div class="mobile-nav"><a href="../index.html">Python</a> <button>Menu</button></div>
<div class="related" role="navigation" aria-label="related navigation">
  <h3>Navigation</h3>
  <ul><li><a href="genindex.html">index</a></li><li><a href="io.html">next</a> |</li>
  <li><a href="index.html">The Python Standard Library</a> &#187;</li></ul>
</div>
<nav class="breadcrumbs"><a href="/">Home</a> › <a href="/library">Library</a></nav>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main">
  <section id="module-os">
  <h1><code>os</code> — Miscellaneous operating system interfaces<a class="headerlink"
      href="#module-os" title="Link to this heading">¶</a></h1>
  <p>This module provides a portable way of using operating system dependent functionality.</p>
  <section id="files-and-directories">
  <h2>Files and Directories<a class="headerlink" href="#files">¶</a></h2>
  <p>On some Unix platforms, many of these functions support one or more of these features.</p>
  <div class="highlight-python3"><div class="highlight"><pre>
<span class="kn">import</span> os
for entry in os.scandir(path):
    print(entry.name)
</pre></div></div>
  <table class="docutils"><thead><tr><th>Mode</th><th>Meaning</th></tr></thead>
  <tbody><tr><td>r</td><td>open for reading</td></tr></tbody></table>
  <ul><li>specifying a file descriptor</li><li>not following symlinks</li></ul>
  <h3>Linux extended attributes</h3>
  <p>These functions are all available on Linux only.</p>
  </section></section>
</div></div></div>
<div class="sphinxsidebar" role="navigation" aria-label="main navigation">
  <h3>Table of Contents</h3><ul><li><a href="#">os — Miscellaneous</a></li></ul>
  <div role="note"><h3>This Page</h3><ul><li><a href="#">Report a Bug</a></li></ul></div>
  <div id="searchbox" style="display: none" role="search"><h3>Quick search</h3></div>
</div></div>
<div class="related" role="navigation"><ul><li><a href="io.html">next</a></li></ul></div>
<div class="footer">&copy; Copyright 2001-2026, Python Software Foundation.
  Last updated on Dec 01, 2026.</div>
</body></html>"""


def test_html_keeps_the_main_content_with_headings_code_tables_and_lists(
    tmp_path: Path,
) -> None:
    extracted = extract(write(tmp_path, "os.html", SPHINX_PAGE), TEXT_HTML)
    assert extracted.title == "os — Miscellaneous operating system interfaces"
    assert kinds(extracted) == [
        (HEADING, "os — Miscellaneous operating system interfaces"),
        (PARAGRAPH, "This module provides a portable way of using operating system dependent "
         "functionality."),
        (HEADING, "Files and Directories"),
        (PARAGRAPH, "On some Unix platforms, many of these functions support one or more of "
         "these features."),
        (CODE, "import os\nfor entry in os.scandir(path):\n    print(entry.name)"),
        (TABLE, "Mode\tMeaning\nr\topen for reading"),
        (PARAGRAPH, "specifying a file descriptor\nnot following symlinks"),
        (HEADING, "Linux extended attributes"),
        (PARAGRAPH, "These functions are all available on Linux only."),
    ]  # fmt: skip
    assert [block.level for block in extracted.blocks if block.kind == HEADING] == [1, 2, 3]
    text = extracted.text()
    for boilerplate in (
        "Navigation", "next", "Menu", "Home", "Table of Contents", "This Page",
        "Report a Bug", "Quick search", "Copyright", "¶", "The Python Standard Library",
    ):  # fmt: skip
        assert boilerplate not in text


def test_html_drops_docbook_link_bars_and_page_furniture_without_a_main_element(
    tmp_path: Path,
) -> None:
    html = """<html><head><title>Chapter 3. Configuration</title></head><body>
<div class="navheader"><table width="100%"><tr><th colspan="3">Chapter 3. Configuration</th></tr>
<tr><td><a accesskey="p" href="ch02.html">Prev</a> </td><td> </td>
<td><a accesskey="n" href="ch04.html">Next</a></td></tr></table><hr></div>
<header class="site-header"><a href="/">Site name</a></header>
<div class="chapter"><h2 class="title">Chapter 3. Configuration</h2>
<p>The configuration file lives in <code>/etc/canon.conf</code>.</p>
<p><a href="ch02.html">Prev</a> <a href="index.html">Up</a> <a href="/">Home</a>
<a href="ch04.html">Next</a></p>
<p hidden>Hidden text.</p><div aria-hidden="true">Decoration</div></div>
<div class="navfooter"><hr><table><tr><td><a href="ch02.html">Prev</a></td>
<td><a href="index.html">Up</a></td><td><a href="ch04.html">Next</a></td></tr>
<tr><td>Chapter 2. Installation</td><td><a href="index.html">Home</a></td>
<td>Chapter 4. Operation</td></tr></table></div>
<footer>Generated by DocBook</footer>
</body></html>"""
    extracted = extract(write(tmp_path, "ch03.html", html), TEXT_HTML)
    assert kinds(extracted) == [
        (HEADING, "Chapter 3. Configuration"),
        (PARAGRAPH, "The configuration file lives in /etc/canon.conf."),
    ]
    assert extracted.title == "Chapter 3. Configuration"


def test_html_header_inside_the_article_is_content(tmp_path: Path) -> None:
    html = """<body><header><nav><a href="/">Blog</a></nav></header>
<article><header><h1>Release notes</h1><p class="byline">By the team</p></header>
<p>Version 2 is out.</p><aside class="footnote"><p>[1] Footnote one.</p></aside>
<footer>Share this post</footer></article>
<aside><h2>Popular posts</h2></aside></body>"""
    extracted = extract(write(tmp_path, "post.html", html), TEXT_HTML)
    assert kinds(extracted) == [
        (HEADING, "Release notes"),
        (PARAGRAPH, "By the team"),
        (PARAGRAPH, "Version 2 is out."),
        (PARAGRAPH, "[1] Footnote one."),
    ]
    assert extracted.title == "Release notes"


@pytest.mark.parametrize(
    ("title", "h1", "expected"),
    [
        ("os — Misc — Python 3.13.1 documentation", "os — Misc", "os — Misc"),
        ("QuerySet API | Django documentation | Django", "QuerySet API", "QuerySet API"),
        ("URL dispatcher | Django", "", "URL dispatcher"),
        ("Installing — Canon 2.1 documentation", "Welcome", "Installing"),
        ("Tips - Canon Docs", "", "Tips"),
        ("Rock - Paper - Scissors", "", "Rock - Paper - Scissors"),
        ("", "First heading", "First heading"),
    ],
)  # fmt: skip
def test_page_title_drops_the_site_name(title: str, h1: str, expected: str) -> None:
    assert page_title(title, h1) == expected


def test_html_cjk_spaces_and_wraps_are_removed_but_korean_spaces_stay(tmp_path: Path) -> None:
    html = "<p>知识库 管理\n系统。\n下一句</p><p>한국어 문장 입니다</p>"
    extracted = extract(write(tmp_path, "zh.html", html), TEXT_HTML)
    assert kinds(extracted) == [
        (PARAGRAPH, "知识库管理系统。下一句"),
        (PARAGRAPH, "한국어 문장 입니다"),
    ]


def test_html_main_content_is_fast_on_a_large_page(tmp_path: Path) -> None:
    sections = "".join(
        f"<h2>Section {i}</h2><p>{'Some words about the topic. ' * 20}</p><pre>code {i}</pre>"
        for i in range(2000)
    )
    html = f"<nav>{'<a>link</a>' * 5000}</nav><main>{sections}</main>"
    started = time.perf_counter()
    extracted = extract(write(tmp_path, "big.html", html), TEXT_HTML)
    assert time.perf_counter() - started < 5
    assert sum(block.kind == HEADING for block in extracted.blocks) == 2000


# --- PDF --------------------------------------------------------------------------------------


def test_pdf_words_set_apart_by_kerning_are_not_glued(tmp_path: Path) -> None:
    # A two-byte font with words separated only by TJ offsets, as in TeX output: a text
    # extractor that ignores the offsets runs the words together.
    words = ["This", "document", "can", "be", "used", "according", "to", "the", "terms."]
    content = "BT /F2 10 Tf 72 700 Td [" + "-317".join(f"{{{w}}}" for w in words) + "] TJ ET"
    data = build_pdf([content], unicode_font="".join(words))
    text = extract(write(tmp_path, "tex.pdf", data), APPLICATION_PDF).text()
    assert text == "This document can be used according to the terms."


def test_pdf_layout_line_breaks_inside_a_paragraph_are_undone(tmp_path: Path) -> None:
    # PDFium takes a hyphen at a line end for a hyphenation point; the word is joined again.
    lines = [
        "Canon keeps one complete version of every document visible to search at",
        "any time. A build becomes live only when every chunk has been written and",
        "verified, so that a reader never sees half of a new revision and half of an",
        "old one. The switch is a single conditional update of the document row.",
        "Short last line.",
        "The next paragraph starts here and wraps onto a second line because it is",
        "long enough to need one, and it ends with a hyphen-",
        "ated word.",
    ]
    data = build_pdf([text_page(lines)])
    blocks = extract(write(tmp_path, "prose.pdf", data), APPLICATION_PDF).blocks
    assert [block.text for block in blocks] == [
        "Canon keeps one complete version of every document visible to search at any time. "
        "A build becomes live only when every chunk has been written and verified, so that a "
        "reader never sees half of a new revision and half of an old one. The switch is a "
        "single conditional update of the document row.\nShort last line.",
        "The next paragraph starts here and wraps onto a second line because it is long "
        "enough to need one, and it ends with a hyphenated word.",
    ]


def test_pdf_running_headers_footers_and_page_numbers_are_dropped(tmp_path: Path) -> None:
    topics = ["leases", "builds", "chunks", "search", "uploads", "retention"]
    pages = [
        text_page(
            [
                f"Canon Operations Guide - Chapter {1 + page // 3}",
                f"This page explains {topic}.",
                f"Operators read about {topic} here.",
                f"Nothing else is said about {topic}.",
                "Confidential - do not distribute",
                f"{page + 1}",
            ]
        )
        for page, topic in enumerate(topics)
    ]
    text = extract(write(tmp_path, "guide.pdf", build_pdf(pages)), APPLICATION_PDF).text()
    assert "Canon Operations Guide" not in text and "Confidential" not in text
    assert not re.search(r"^\d+$", text, re.MULTILINE)
    for topic in topics:
        assert f"This page explains {topic}." in text


def test_pdf_table_of_contents_dot_leaders_are_dropped(tmp_path: Path) -> None:
    toc = text_page(
        [
            "Contents",
            "1 Introduction .................................... 3",
            "2 Installation . . . . . . . . . . . . . . . . . . . . 7",
            "Appendix A ........................................ xii",
        ]
    )
    body = text_page(["1 Introduction", "Canon manages knowledge bases for retrieval."])
    text = extract(write(tmp_path, "toc.pdf", build_pdf([toc, body])), APPLICATION_PDF).text()
    assert text == "Contents\n\n1 Introduction\nCanon manages knowledge bases for retrieval."


def test_pdf_cjk_line_breaks_and_spaces_inside_words_are_removed(tmp_path: Path) -> None:
    content = (
        "BT /F2 12 Tf 72 700 Td {知识} Tj 40 0 Td {库管理} Tj ET "
        "BT /F2 12 Tf 72 684 Td {系统支持上传文档。} Tj ET "
        "BT /F2 12 Tf 72 668 Td {每次检索} Tj ET"
    )
    data = build_pdf([content], unicode_font="知识库管理系统支持上传文档。每次检索")
    text = extract(write(tmp_path, "zh.pdf", data), APPLICATION_PDF).text()
    assert text == "知识库管理系统支持上传文档。\n每次检索"


def test_pdf_title_and_headings_come_from_metadata_and_bookmarks(tmp_path: Path) -> None:
    pages = [
        text_page(["Canon Manual", "An introduction for operators."]),
        text_page(["1 Installation", "Install the package.", "1.1 Requirements",
                   "PostgreSQL with pgvector."]),
    ]  # fmt: skip
    data = with_metadata_and_outline(
        build_pdf(pages),
        title="The Canon Manual",
        outline=(("Installation", 1, 0), ("Requirements", 1, 1)),
    )
    extracted = extract(write(tmp_path, "manual.pdf", data), APPLICATION_PDF)
    assert extracted.title == "The Canon Manual"
    assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
        (PARAGRAPH, 0, "Canon Manual\nAn introduction for operators."),
        (HEADING, 1, "Installation"),
        (PARAGRAPH, 0, "Install the package."),
        (HEADING, 2, "Requirements"),
        (PARAGRAPH, 0, "PostgreSQL with pgvector."),
    ]


@pytest.mark.parametrize("metadata_title", ["", "Microsoft Word - guide.docx", "a.dvi"])
def test_pdf_title_falls_back_to_a_short_first_line(tmp_path: Path, metadata_title: str) -> None:
    data = with_metadata_and_outline(
        build_pdf([text_page(["Canon Manual", "An introduction."])]), title=metadata_title
    )
    assert extract(write(tmp_path, "m.pdf", data), APPLICATION_PDF).title == "Canon Manual"


# --- DOCX, Markdown, plain text ---------------------------------------------------------------


def make_docx(path: Path, *, core_title: str = "") -> Path:
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


@pytest.mark.parametrize(
    ("core_title", "expected"), [("Q3 Report 2026", "Q3 Report 2026"), ("", "Quarterly Report")]
)
def test_docx_title_and_headings(tmp_path: Path, core_title: str, expected: str) -> None:
    extracted = extract(make_docx(tmp_path / "r.docx", core_title=core_title), APPLICATION_DOCX)
    assert extracted.title == expected
    assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
        (HEADING, 1, "Quarterly Report"),
        (PARAGRAPH, 0, "Revenue grew in every region."),
        (HEADING, 2, "Outlook"),
        (PARAGRAPH, 0, "知识库管理系统将在下个季度上线。"),
    ]


def test_markdown_title_headings_and_code(tmp_path: Path) -> None:
    markdown = (
        "Intro line.\n\n# Canon *guide*\n\nText.\n\nSetup\n-----\n\n```\n# not a heading\n```\n"
    )
    extracted = extract(write(tmp_path, "g.md", markdown), TEXT_MARKDOWN)
    assert extracted.title == "Canon guide"
    assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
        (PARAGRAPH, 0, "Intro line."),
        (HEADING, 1, "Canon guide"),
        (PARAGRAPH, 0, "Text."),
        (HEADING, 2, "Setup"),
        (CODE, 0, "# not a heading"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Release notes\n\nVersion 2 is out.", "Release notes"),
        ("A single line only", ""),
        ("x" * 200 + "\nmore", ""),
    ],
)
def test_plain_text_title_is_a_short_first_line(tmp_path: Path, text: str, expected: str) -> None:
    assert extract(write(tmp_path, "n.txt", text), TEXT_PLAIN).title == expected


def test_titles_are_one_line_of_at_most_500_characters(tmp_path: Path) -> None:
    html = f"<title>{'Long   title ' * 100}</title><p>Body.</p>"
    title = extract(write(tmp_path, "t.html", html), TEXT_HTML).title
    assert len(title) == 500 and "  " not in title


# --- cleanup and the stored form --------------------------------------------------------------


def test_join_unspaced_keeps_sentence_breaks_and_korean_spaces() -> None:
    assert cleanup.join_unspaced("中文 字符\n换行") == "中文字符换行"
    assert cleanup.join_unspaced("结束。\n下一句") == "结束。\n下一句"
    assert cleanup.join_unspaced("第一段\n\n第二段") == "第一段\n\n第二段"
    assert cleanup.join_unspaced("한국어 문장") == "한국어 문장"
    assert cleanup.join_unspaced("Canon 支持 PDF") == "Canon 支持 PDF"
    table = "名称\t数量\n苹 果\t三"
    assert cleanup.join_unspaced(table, lines_are_rows=True) == "名称\t数量\n苹果\t三"


def test_dot_leader_removal_is_linear_on_hostile_input() -> None:
    started = time.perf_counter()
    assert cleanup.drop_dot_leaders("x" + "." * 2_000_000 + "y") == "x" + "." * 2_000_000 + "y"
    assert cleanup.drop_dot_leaders(". " * 1_000_000 + "z").endswith("z")
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize("line", ["7", "- 12 -", "Page 3", "page 4 of 20", "xiv", "3 / 92"])
def test_page_numbers_are_recognised(line: str) -> None:
    assert cleanup.is_page_number(line)


@pytest.mark.parametrize("line", ["7 dwarfs", "Version 3.2", "Chapter 1"])
def test_other_short_lines_are_not_page_numbers(line: str) -> None:
    assert not cleanup.is_page_number(line)


def test_extracted_round_trips_through_json() -> None:
    extracted = Extracted(
        title="Guide — 指南",
        blocks=[Block(HEADING, "Intro", level=1), Block(CODE, "  x = 1"), Block(TABLE, "a\tb")],
    )
    assert Extracted.from_json(extracted.to_json()) == extracted
    with pytest.raises(ValueError):
        Extracted.from_json(b'{"title": "not ours"}')


def test_every_supported_media_type_has_an_extractor() -> None:
    assert set(extractors.EXTRACTORS) == extractors.SUPPORTED_MEDIA_TYPES


def test_markdown_soft_line_breaks_join_but_lists_and_hard_breaks_stay() -> None:
    from textkit.extract.markdown import markdown_blocks

    blocks = markdown_blocks(
        "# Policy\n\nEvery employee earns 25 days\nof paid leave.\n\n"
        "- one\n- two\n\nLine  \nbreak\n"
    )
    texts = [b.text.strip() for b in blocks]
    assert "Every employee earns 25 days of paid leave." in texts
    assert "one\ntwo" in texts
    assert "Line  \nbreak" in texts
