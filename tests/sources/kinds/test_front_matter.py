"""The front matter of a Markdown file: read when it is a bounded YAML mapping, {} otherwise,
always JSON-able."""

from __future__ import annotations

import json

from sources.kinds.front_matter import MAX_BYTES, front_matter


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


def test_crlf_a_bom_and_the_dots_closing_line_are_accepted() -> None:
    assert front_matter(b"\xef\xbb\xbf---\r\ntitle: Egrets\r\n...\r\nbody") == {"title": "Egrets"}


def test_odd_keys_and_values_become_json() -> None:
    meta = front_matter(b"---\n1: one\n2024-01-01: day\nratio: .nan\nn: !!set {a, b}\n---\n")

    assert meta == {"1": "one", "2024-01-01": "day", "ratio": None, "n": ["a", "b"]}
    json.dumps(meta, allow_nan=False)


def test_no_front_matter_is_empty() -> None:
    assert front_matter(b"# Title\n\n---\ntitle: no\n---\n") == {}  # not at the start
    assert front_matter(b"---\ntitle: never closed\n") == {}
    assert front_matter(b"") == {}
    assert front_matter(b"---\n---\nbody") == {}


def test_yaml_that_is_not_a_mapping_or_not_yaml_is_empty() -> None:
    assert front_matter(b"---\n- a\n- b\n---\n") == {}
    assert front_matter(b"---\njust text\n---\n") == {}
    assert front_matter(b"---\ntitle: [unclosed\n---\n") == {}
    assert front_matter(b"---\ntitle: \xff\xfe\n---\n") == {}  # not UTF-8


def test_unsafe_tags_are_not_constructed() -> None:
    data = b"---\nx: !!python/object/apply:os.system ['echo hi']\n---\n"

    assert front_matter(data) == {}


def test_front_matter_over_the_bound_is_ignored() -> None:
    small = b"---\nbody: " + b"a" * (MAX_BYTES - 100) + b"\n---\n"
    large = b"---\nbody: " + b"a" * (MAX_BYTES + 10) + b"\n---\n"

    assert front_matter(small)["body"] == "a" * (MAX_BYTES - 100)
    assert front_matter(large) == {}


def test_an_alias_bomb_is_refused_not_expanded() -> None:
    # ten levels of five aliases each: tens of millions of nodes if expanded
    lines = ["---", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 5)}]" for i in range(1, 10)]
    data = ("\n".join(lines) + "\n---\n").encode()

    assert front_matter(data) == {}


def test_deep_nesting_is_refused() -> None:
    assert front_matter(b"---\nx: " + b"[" * 200 + b"]" * 200 + b"\n---\n") == {}
