"""Front matter: the fields at the very start of a Markdown file, YAML between a first line `---`
and the next line `---` (or `...`), or TOML between `+++` lines (Jekyll, Hugo, MkDocs, Obsidian).

It is the file's metadata, never its text: the Markdown extractor leaves the block out of the
body and takes its `title` field (only that field) as the document's title, and sources offer
its fields to their metadata map (`sources.kinds.front_matter`). Both read it here, from text
decoded the same way, so the title a person sees and the fields a source maps agree.

A delimited block is front matter when it reads as a mapping, or, when it does not read, when
its first line looks like a field (`key:` or `key =`): a broken field is still not prose. Its
fields are {} when it does not read, or when it builds too many nodes or nests too deep once
YAML aliases are expanded. A block longer than MAX_CHARS, and one that is neither (`---`, a
line of prose, `---`: a rule and a heading to Markdown), are left in the text.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any

import yaml

from textkit.extract.encoding import decode

# Front matter is a few fields; a block longer than this (in characters) is not front matter.
MAX_CHARS = 64 * 1024
# Bounds on what safe_load may build: YAML aliases can make a small text name a huge tree.
MAX_NODES = 10_000
MAX_DEPTH = 32

_YAML, _TOML = "yaml", "toml"
_CLOSING = {_YAML: ("---", "..."), _TOML: ("+++",)}
_OPENING = {"---": _YAML, "+++": _TOML}
_FIELD_LINE_RE = {
    _YAML: re.compile(r"""\s*(?:[\w.-]+|"[^"\n]*"|'[^'\n]*')\s*:(?:\s|$)"""),
    _TOML: re.compile(r"""\s*(?:[\w.-]+|"[^"\n]*"|'[^'\n]*'|\[[^\]\n]+\])\s*(?:=|$)"""),
}
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Byte-order marks and UTF-16's NULs, skipped to see whether bytes open with a delimiter.
_BOM_BYTES = b"\xef\xbb\xbf\xff\xfe"


class _TooLarge(Exception):
    pass


@dataclass(frozen=True)
class FrontMatter:
    """What a Markdown text holds: `fields` (JSON-able: dates as ISO strings, keys as strings;
    {} when there is no front matter or it does not read) and `body`, the text after the block
    (the whole text when there is none)."""

    body: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        """The `title` field as one line, "" when there is none; never another field."""
        value = self.fields.get("title")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return ""
        return " ".join(str(value).split())


def split_front_matter(text: str) -> FrontMatter:
    """The front matter of decoded Markdown `text` and the body after it. Never raises."""
    start = 1 if text.startswith("\ufeff") else 0
    first, newline, _ = text[start : start + 8].partition("\n")
    kind = _OPENING.get(first.rstrip())
    if kind is None or not newline:
        return FrontMatter(body=text)
    block_start = text.index("\n", start) + 1
    found = _closing(text, block_start, kind)
    if found is None:
        return FrontMatter(body=text)
    block_end, body_start = found
    block = text[block_start:block_end]
    try:
        fields = _fields(block, kind)
    except _NotFields:
        return FrontMatter(body=text)
    return FrontMatter(body=text[body_start:], fields=fields)


def front_matter(data: bytes) -> dict[str, Any]:
    """The fields of the front matter of a Markdown file's bytes, decoded as the Markdown
    extractor decodes them; {} when there is none. Never raises."""
    head = data[:16].replace(b"\x00", b"").lstrip(_BOM_BYTES)
    if not head.startswith((b"---", b"+++")):
        return {}  # not decoded at all: most files have none
    return split_front_matter(decode(data)).fields


def _closing(text: str, offset: int, kind: str) -> tuple[int, int] | None:
    """Where the block's closing line starts and the body after it begins, or None when no
    closing line comes within MAX_CHARS characters."""
    limit = offset + MAX_CHARS
    while offset <= limit:
        end = text.find("\n", offset)
        line = text[offset:] if end < 0 else text[offset:end]
        if line.rstrip() in _CLOSING[kind]:
            return offset, len(text) if end < 0 else end + 1
        if end < 0:
            return None
        offset = end + 1
    return None


class _NotFields(Exception):
    """The delimited block is not front matter: the text keeps it."""


def _fields(block: str, kind: str) -> dict[str, Any]:
    if not block.strip():
        return {}  # `---` `---`: empty front matter, as Jekyll reads it
    looks_like_fields = _FIELD_LINE_RE[kind].match(block.lstrip("\n")) is not None
    read = _read_yaml if kind == _YAML else tomllib.loads
    try:
        loaded = read(block)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, RecursionError, ValueError):
        if looks_like_fields:
            return {}
        raise _NotFields() from None
    if not isinstance(loaded, dict):
        raise _NotFields()
    try:
        value = _jsonable(loaded, budget=[MAX_NODES], depth=0)
    except (_TooLarge, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _read_yaml(block: str) -> Any:
    return yaml.load(block, Loader=_LOADER)  # noqa: S506 - a safe loader


def _jsonable(value: Any, *, budget: list[int], depth: int) -> Any:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise _TooLarge()
    if isinstance(value, dict):
        return {_key(k): _jsonable(v, budget=budget, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [_jsonable(v, budget=budget, depth=depth + 1) for v in items]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # .nan / .inf: JSON (and PostgreSQL's jsonb) have no such numbers
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):  # !!binary: not text a person wrote
        return None
    return str(value)


def _key(key: Any) -> str:
    if isinstance(key, datetime | date | time):
        return key.isoformat()
    if isinstance(key, bool):
        return "true" if key else "false"
    return "" if key is None else str(key)
