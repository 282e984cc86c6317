"""HTML: block structure kept and scripts dropped, declared encodings honoured, deep nesting
without recursion; the main content kept without the page's furniture (navigation, link bars,
sidebars, footers), CJK wraps removed, the title without the site's name; fast on a large page."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.textkit.extract.files import parse_file, write
from textkit.extract import (
    CODE,
    HEADING,
    PARAGRAPH,
    TABLE,
    TEXT_HTML,
    Extracted,
    ParseError,
    extract,
)
from textkit.extract.html import extract_markup, page_title


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


def kinds(extracted: Extracted) -> list[tuple[str, str]]:
    return [(block.kind, block.text) for block in extracted.blocks]


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


@pytest.mark.parametrize(
    "page",
    [
        '<html><body class="no-sidebar"><h1>Caching</h1><p>Entries expire after an hour.</p>',
        '<html><body><div class="content has-sidebar"><h1>Caching</h1>'
        "<p>Entries expire after an hour.</p></div>",
        '<html class="sidebar-open"><body><h1>Caching</h1><p>Entries expire after an hour.</p>',
    ],
)
def test_a_class_that_names_the_pages_layout_is_not_furniture(page: str) -> None:
    """Apache's manual marks its pages `<body class="no-sidebar">`: the whole page was taken
    for a sidebar and only the title was kept (16 pages of B8's second corpus)."""
    extracted = extract_markup(page.encode())
    assert "Entries expire after an hour." in extracted.text()
