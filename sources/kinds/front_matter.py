"""The YAML front matter of a Markdown file: the mapping between a first line `---` and the next
line `---` (or `...`), as the folder and Git kinds report it in an item's metadata."""

from __future__ import annotations

import math
from datetime import date, datetime, time
from typing import Any

import yaml

# Front matter is a few fields; a block larger than this is not read at all.
MAX_BYTES = 64 * 1024
# Bounds on what safe_load may build: YAML aliases can make a small text name a huge tree.
MAX_NODES = 10_000
MAX_DEPTH = 32

_OPENING = ("---",)
_CLOSING = ("---", "...")
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _TooLarge(Exception):
    pass


def front_matter(data: bytes) -> dict[str, Any]:
    """The front matter of `data` as a JSON-able dict (dates as ISO strings, keys as strings);
    {} when there is none, when it is over MAX_BYTES, not valid UTF-8 or YAML, or not a
    mapping. Never raises."""
    block = _block(data)
    if block is None:
        return {}
    try:
        loaded = yaml.load(block, Loader=_LOADER)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError, ValueError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    try:
        value = _jsonable(loaded, budget=[MAX_NODES], depth=0)
    except (_TooLarge, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _block(data: bytes) -> str | None:
    """The text between the delimiters, or None."""
    head = data[: MAX_BYTES + 1024].removeprefix(b"\xef\xbb\xbf")
    first, newline, rest = head.partition(b"\n")
    if not newline or first.rstrip().decode("ascii", "replace") not in _OPENING:
        return None
    offset = 0
    while offset <= MAX_BYTES:
        end = rest.find(b"\n", offset)
        line = rest[offset:] if end < 0 else rest[offset:end]
        if line.rstrip().decode("ascii", "replace") in _CLOSING:
            try:
                return rest[:offset].decode("utf-8")
            except UnicodeDecodeError:
                return None
        if end < 0:
            return None  # no closing line within the bound (or at all)
        offset = end + 1
    return None


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
