"""Issue 27, item 1: a well-formed page must not fail. A chapter page whose body is its title
and a table of contents (DocBook's and Sphinx's chapter pages) indexes its contents; a page of
nothing but headings indexes its headings; a page with text of its own still drops its table of
contents as navigation.

The pages are modelled on DocBook XSL 1.79 output (Debian's docbook-xsl-doc-html, where 71 of
1,085 pages are such chapter pages and all 71 failed before)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.textkit.extract.files import write
from textkit.chunker import chunk_blocks
from textkit.extract import HEADING, PARAGRAPH, TEXT_HTML, extract

CHAPTER = """<html><head><title>Chapter 7. Backup Tools</title></head><body>
<div class="navheader"><table summary="Navigation header"><tr><th colspan="3">Chapter 7.
Backup Tools</th></tr><tr><td><a accesskey="p" href="ch06.html">Prev</a></td><th>Part II.
Administration</th><td><a accesskey="n" href="ch07s01.html">Next</a></td></tr></table></div>
<div class="chapter"><div class="titlepage"><div><div><h2 class="title">
<a name="backup"></a>Chapter 7. Backup Tools</h2></div></div></div>
<div class="toc"><p><b>Table of Contents</b></p><dl class="toc">
<dt><span class="sect1"><a href="ch07s01.html">7.1. Snapshot schedules</a></span></dt>
<dt><span class="sect1"><a href="ch07s02.html">7.2. Restoring a single mailbox</a></span></dt>
<dd><dl><dt><span class="sect2"><a href="ch07s02.html#x">7.2.1. Point-in-time recovery</a>
</span></dt></dl></dd>
</dl></div></div>
<div class="navfooter"><table summary="Navigation footer"><tr><td><a href="ch06.html">Prev</a>
</td><td><a accesskey="u" href="index.html">Up</a></td><td><a href="ch07s01.html">Next</a></td>
</tr></table></div></body></html>"""


def test_a_chapter_page_of_title_and_contents_indexes_its_contents(tmp_path: Path) -> None:
    extracted = extract(write(tmp_path, "ch07.html", CHAPTER), TEXT_HTML)
    text = extracted.text()
    assert extracted.title == "Chapter 7. Backup Tools"
    for entry in ("7.1. Snapshot schedules", "7.2. Restoring a single mailbox", "7.2.1."):
        assert entry in text
    assert "Prev" not in text and "Next" not in text  # the link bars stay navigation
    pieces = chunk_blocks(extracted.blocks, size=800, overlap=80)
    assert pieces and "Restoring a single mailbox" in pieces[0].text


def test_a_page_with_text_of_its_own_drops_its_table_of_contents(tmp_path: Path) -> None:
    page = CHAPTER.replace(
        "</dl></div></div>",
        "</dl></div><p>Backups run nightly and are kept for thirty days.</p></div>",
    )
    text = extract(write(tmp_path, "ch07.html", page), TEXT_HTML).text()
    assert "Backups run nightly" in text
    assert "Snapshot schedules" not in text


def test_a_page_of_nothing_but_headings_indexes_them(tmp_path: Path) -> None:
    page = "<html><body><main><h1>Part III</h1><h2>Reference</h2></main></body></html>"
    extracted = extract(write(tmp_path, "part3.html", page), TEXT_HTML)
    assert [(b.kind, b.text) for b in extracted.blocks] == [
        (PARAGRAPH, "Part III"),
        (PARAGRAPH, "Reference"),
    ]
    assert all(block.kind != HEADING for block in extracted.blocks)
    assert chunk_blocks(extracted.blocks, size=800, overlap=80)


@pytest.mark.parametrize("toc_class", ["toc", "table-of-contents", "localtoc"])
def test_sphinx_and_other_contents_blocks_count_too(tmp_path: Path, toc_class: str) -> None:
    page = (
        '<html><body><div role="main"><h1>Tutorials</h1>'
        f'<div class="{toc_class}"><ul><li><a href="a.html">Writing your first plugin</a></li>'
        '<li><a href="b.html">Testing plugins</a></li></ul></div></div></body></html>'
    )
    text = extract(write(tmp_path, "tutorials.html", page), TEXT_HTML).text()
    assert "Writing your first plugin" in text and "Testing plugins" in text
