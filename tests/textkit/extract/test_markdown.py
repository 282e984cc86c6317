"""Markdown: markup stripped as it renders (soft line breaks joined, lists and hard breaks kept),
linear on pathological input, headings and code blocks as blocks, the title from the first
heading."""

from __future__ import annotations

import time
from pathlib import Path

from tests.textkit.extract.files import parse_file, write
from textkit.extract import CODE, HEADING, PARAGRAPH, TEXT_MARKDOWN, extract


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


def test_yaml_front_matter_is_metadata_never_text_nor_title(tmp_path: Path) -> None:
    # Given a note whose front matter has no title (its last field once became the title)
    markdown = (
        "---\nauthor: Ann Example\ntags: [herons, wading]\nyear: soon\n---\n\n"
        "Herons stand still in shallow water.\n\n## Feeding\n\nThey strike fast.\n"
    )
    # When it is read
    extracted = extract(write(tmp_path, "herons.md", markdown), TEXT_MARKDOWN)
    # Then the fields are neither text nor the title: the first heading is the title
    assert extracted.title == "Feeding"
    assert [(b.kind, b.text) for b in extracted.blocks] == [
        (PARAGRAPH, "Herons stand still in shallow water."),
        (HEADING, "Feeding"),
        (PARAGRAPH, "They strike fast."),
    ]


def test_front_matter_title_is_the_title(tmp_path: Path) -> None:
    yaml_note = "---\r\ntitle: Herons of the marsh\r\nyear: soon\r\n...\r\n# Herons\r\nText.\r\n"
    toml_note = '+++\ntitle = "Egrets at dawn"\ndate = 2024-03-01\n+++\n# Egrets\n\nText.\n'
    for name, markdown, title in [
        ("herons.md", yaml_note, "Herons of the marsh"),
        ("egrets.md", toml_note, "Egrets at dawn"),
    ]:
        extracted = extract(write(tmp_path, name, markdown), TEXT_MARKDOWN)
        assert extracted.title == title
        assert extracted.text() == f"{title.split()[0]}\n\nText."


def test_front_matter_that_does_not_read_is_still_not_text(tmp_path: Path) -> None:
    # a colon in an unquoted value: not valid YAML, but plainly fields
    markdown = "---\ntitle: Herons: a guide\nyear: soon\n---\nText.\n"
    extracted = extract(write(tmp_path, "broken.md", markdown), TEXT_MARKDOWN)
    assert (extracted.title, extracted.text()) == ("", "Text.")


def test_a_rule_and_a_heading_at_the_start_are_not_front_matter(tmp_path: Path) -> None:
    markdown = "---\nPart one\n---\n\nText.\n"
    extracted = extract(write(tmp_path, "rule.md", markdown), TEXT_MARKDOWN)
    assert (extracted.title, extracted.text()) == ("Part one", "Part one\n\nText.")
