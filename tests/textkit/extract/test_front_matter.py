"""Front matter: YAML (`---`) or TOML (`+++`) fields at the start of a Markdown file, read when
they are a bounded mapping, always JSON-able; the body is the text after them. A block that does
not read is still not text when it looks like fields; one that looks like prose stays text."""

from __future__ import annotations

import json

from textkit.extract.front_matter import (
    MAX_CHARS,
    FrontMatter,
    front_matter,
    split_front_matter,
)


def test_a_mapping_is_read_with_dates_as_iso_strings() -> None:
    data = (
        b"---\ntitle: Herons\ntags: [birds, wading]\npublished: 2024-03-01\n"
        b"updated: 2024-03-02T10:30:00Z\ndraft: false\n---\n# Herons\n"
    )

    meta = front_matter(data)

    assert meta == {
        "title": "Herons",
        "tags": ["birds", "wading"],
        "published": "2024-03-01",
        "updated": "2024-03-02T10:30:00+00:00",
        "draft": False,
    }
    json.dumps(meta, allow_nan=False)


def test_toml_between_plus_lines_is_read() -> None:
    data = (
        b'+++\ntitle = "Egrets"\ntags = ["birds"]\ndate = 2024-03-01\n'
        b"[params]\nweight = 3\n+++\n# Egrets\n"
    )

    assert front_matter(data) == {
        "title": "Egrets",
        "tags": ["birds"],
        "date": "2024-03-01",
        "params": {"weight": 3},
    }


def test_the_body_is_the_text_after_the_block() -> None:
    matter = split_front_matter("---\ntitle: Herons\nyear: soon\n---\n# Herons\nText.\n")

    assert matter.body == "# Herons\nText.\n"
    assert matter.title == "Herons"
    assert split_front_matter("---\nyear: soon\n---\nText.").title == ""  # only `title` is one
    assert split_front_matter("---\ntitle: 1984\n---\n").title == "1984"
    assert split_front_matter("---\ntitle: [a, b]\n---\n").title == ""


def test_crlf_a_bom_and_the_dots_closing_line_are_accepted() -> None:
    assert front_matter(b"\xef\xbb\xbf---\r\ntitle: Egrets\r\n...\r\nbody") == {"title": "Egrets"}


def test_bytes_are_decoded_as_the_markdown_extractor_decodes_them() -> None:
    # UTF-16 with its BOM, and a Windows code page: the same fields the extractor's title shows
    utf16 = "\ufeff---\ntitle: Hérons\n---\nTexte.\n".encode("utf-16-le")
    assert front_matter(utf16) == {"title": "Hérons"}
    cp1252 = "---\ntitle: Café au lait, déjà noté\n---\nLe café est prêt.\n".encode("cp1252")
    assert front_matter(cp1252) == {"title": "Café au lait, déjà noté"}


def test_odd_keys_and_values_become_json() -> None:
    meta = front_matter(b"---\n1: one\n2024-01-01: day\nratio: .nan\nn: !!set {a, b}\n---\n")

    assert meta == {"1": "one", "2024-01-01": "day", "ratio": None, "n": ["a", "b"]}
    json.dumps(meta, allow_nan=False)


def test_no_front_matter_is_empty() -> None:
    assert front_matter(b"# Title\n\n---\ntitle: no\n---\n") == {}  # not at the start
    assert front_matter(b"---\ntitle: never closed\n") == {}
    assert front_matter(b"") == {}
    assert front_matter(b"---\n---\nbody") == {}
    assert split_front_matter("---\n---\nbody").body == "body"


def test_yaml_that_is_not_a_mapping_stays_text() -> None:
    for text in ["---\n- a\n- b\n---\n", "---\njust text\n---\n", "+++\nplus signs\n+++\n"]:
        assert split_front_matter(text) == FrontMatter(body=text)


def test_fields_that_do_not_read_are_dropped_from_the_text_with_no_fields() -> None:
    for text in [
        "---\ntitle: [unclosed\n---\nBody.",
        "---\ntitle: Herons: a guide\n---\nBody.",
        '+++\ntitle = "unclosed\n+++\nBody.',
    ]:
        matter = split_front_matter(text)
        assert (matter.fields, matter.body) == ({}, "Body.")


def test_unsafe_tags_are_not_constructed() -> None:
    data = b"---\nx: !!python/object/apply:os.system ['echo hi']\n---\nBody."

    assert front_matter(data) == {}
    assert split_front_matter(data.decode()).body == "Body."


def test_front_matter_over_the_bound_is_ignored() -> None:
    small = b"---\nbody: " + b"a" * (MAX_CHARS - 100) + b"\n---\n"
    large = b"---\nbody: " + b"a" * (MAX_CHARS + 10) + b"\n---\n"

    assert front_matter(small)["body"] == "a" * (MAX_CHARS - 100)
    assert front_matter(large) == {}


def test_an_alias_bomb_is_refused_not_expanded() -> None:
    # ten levels of five aliases each: tens of millions of nodes if expanded
    lines = ["---", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 5)}]" for i in range(1, 10)]
    data = ("\n".join(lines) + "\n---\nBody.").encode()

    assert front_matter(data) == {}
    assert split_front_matter(data.decode()).body == "Body."


def test_deep_nesting_is_refused() -> None:
    assert front_matter(b"---\nx: " + b"[" * 200 + b"]" * 200 + b"\n---\n") == {}
