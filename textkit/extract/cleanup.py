"""Cleaning extracted text of layout: the decisions that turn a page's lines back into prose.

`clean_prose` applies to the prose blocks of every format; the page functions are for formats
that come in pages (PDF). Everything here is linear in the length of its input.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter

# Scripts written without spaces between words (Han, kana) and their punctuation and full-width
# forms. Hangul is left out on purpose: Korean puts spaces between words.
_UNSPACED = (
    "\u2e80-\u2fdf"
    "\u3000-\u303f"
    "\u3040-\u309f"
    "\u30a0-\u30ff"
    "\u31f0-\u31ff"
    "\u3400-\u4dbf"
    "\u4e00-\u9fff"
    "\uf900-\ufaff"
    "\ufe30-\ufe4f"
    "\uff00-\uffef"
    "\U00020000-\U0003134f"
)
# Ends of sentences after which a line break is meant, not layout.
_SENTENCE_ENDS = ".!?:;。！？：；…"
_UNSPACED_BREAK_END = "。！？：；…"
# Spaces between two unspaced characters, or a single line break when the line before does not
# end a sentence: both are layout (or an extractor's guess), never the author's. Tabs stay:
# they separate table cells.
_UNSPACED_GAP_RE = re.compile(
    f"(?<=[{_UNSPACED}])(?: ++(?:\\n *+)?|(?<![{_UNSPACED_BREAK_END}])\\n *+)(?=[{_UNSPACED}])"
)
_UNSPACED_SPACES_RE = re.compile(f"(?<=[{_UNSPACED}]) ++(?=[{_UNSPACED}])")
# A table-of-contents line ends in a run of leader dots and a page number.
_TRAILING_PAGE_RE = re.compile(r"[ \t]*(?:\d{1,5}|[ivxlcdm]{1,8})$", re.IGNORECASE)
_LEADERS = " \t.·…"
_MIN_LEADERS = 4
_PAGE_NUMBER_RE = re.compile(
    r"(?:page[ \t]+)?[-\u2013—]?[ \t]*(?:\d{1,5}|[ivxlcdm]{1,8})[ \t]*[-\u2013—]?"
    r"(?:[ \t]*(?:/|of)[ \t]*\d{1,5})?",
    re.IGNORECASE,
)
_UNSPACED_CHAR_RE = re.compile(f"[{_UNSPACED}]")
_DIGITS_RE = re.compile(r"\d+")
_BULLET_RE = re.compile(r"[•◦▪‣●○■□\u2013—*-][ \t]|\(?\d{1,3}[.)][ \t]|[a-z][.)][ \t]")

# How many lines at the top and at the bottom of a page can be running headers or footers.
_MARGIN_LINES = 2


def clean_prose(text: str, *, lines_are_rows: bool = False) -> str:
    """Drop table-of-contents lines and the layout spaces between CJK characters (and line
    breaks, unless the lines are a table's rows)."""
    return join_unspaced(drop_dot_leaders(text), lines_are_rows=lines_are_rows)


def join_unspaced(text: str, *, lines_are_rows: bool = False) -> str:
    """Remove spaces, and line breaks that do not follow the end of a sentence (unless the lines
    are a table's rows), between two characters of a script written without spaces (Chinese,
    Japanese)."""
    if lines_are_rows:
        return _UNSPACED_SPACES_RE.sub("", text)
    return _UNSPACED_GAP_RE.sub("", text)


def drop_dot_leaders(text: str) -> str:
    """Remove lines like "Introduction ........ 3" (a table of contents)."""
    if "...." not in text and ". . . ." not in text and "····" not in text and "…" not in text:
        return text
    return "\n".join(line for line in text.split("\n") if not _is_dot_leader_line(line))


def _is_dot_leader_line(line: str) -> bool:
    line = line.rstrip()
    number = _TRAILING_PAGE_RE.search(line[-20:])
    if number is None:
        return False
    before = line[: len(line) - (number.end() - number.start())]
    title = before.rstrip(_LEADERS)
    leaders = before[len(title) :]
    return bool(title.strip()) and sum(leaders.count(c) for c in ".·…") >= _MIN_LEADERS


def is_page_number(line: str) -> bool:
    return _PAGE_NUMBER_RE.fullmatch(line.strip()) is not None


def drop_page_furniture(pages: list[list[str]]) -> list[list[str]]:
    """Remove running headers and footers — lines in a page's top or bottom margin that repeat
    (digits aside) on several pages — and lone page numbers there.

    A line counts as repeated when it is on at least 3 pages and on a twentieth of them, so a
    chapter's running head in a long book is caught, and a sentence that merely recurs is not.
    """
    threshold = max(3, len(pages) // 20)
    seen: Counter[str] = Counter()
    for lines in pages:
        seen.update({_furniture_key(line) for line in _margins(lines)})
    repeated = (
        {key for key, count in seen.items() if count >= threshold} if len(pages) > 2 else set()
    )
    cleaned: list[list[str]] = []
    for lines in pages:
        content = [line for line in lines if line.strip()]
        top, bottom = 0, len(content)
        while top < min(_MARGIN_LINES, bottom) and _is_furniture(content[top], repeated):
            top += 1
        while bottom > max(top, len(content) - _MARGIN_LINES) and _is_furniture(
            content[bottom - 1], repeated
        ):
            bottom -= 1
        cleaned.append(content[top:bottom])
    return cleaned


def _margins(lines: list[str]) -> list[str]:
    content = [line for line in lines if line.strip()]
    if len(content) <= 2 * _MARGIN_LINES:
        return content
    return content[:_MARGIN_LINES] + content[-_MARGIN_LINES:]


def _furniture_key(line: str) -> str:
    return _DIGITS_RE.sub("#", " ".join(line.split()).lower())


def _is_furniture(line: str, repeated: set[str]) -> bool:
    return is_page_number(line) or _furniture_key(line) in repeated


def display_width(line: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def join_layout_lines(lines: list[str]) -> list[str]:
    """Turn a page's lines back into paragraphs; returns the paragraphs, each with the line
    breaks that are meant (after a sentence, before a list item) kept as "\\n".

    A line continues into the next one unless it ends a sentence or is short, or the next line
    starts a list item. A paragraph ends after a short line that ends a sentence. Below five
    lines a page says nothing about its line width, so its line breaks are all kept.
    """
    content = [line.strip() for line in lines if line.strip()]
    if not content:
        return []
    widths = sorted(display_width(line) for line in content)
    # The width of a full line: the 80th percentile, so that a few long lines do not count.
    full = widths[(len(widths) * 4) // 5] if len(content) >= 5 else 0
    paragraphs: list[str] = []
    current = content[0]
    for previous, line in itertools.pairwise(content):
        short = full > 0 and display_width(previous) < full * 0.75
        ends_sentence = previous[-1] in _SENTENCE_ENDS
        if _BULLET_RE.match(line):
            current += "\n" + line
        elif short and ends_sentence:
            paragraphs.append(current)
            current = line
        elif short or ends_sentence or not full:
            current += "\n" + line
        else:
            current = join_lines(current, line)
    paragraphs.append(current)
    return paragraphs


def join_lines(before: str, after: str) -> str:
    """Join two lines of one paragraph: no space between CJK characters or after a hyphen that
    ends a word ("well-" + "known"), one space otherwise."""
    if not before:
        return after
    if _UNSPACED_CHAR_RE.match(before[-1]) and _UNSPACED_CHAR_RE.match(after[:1]):
        return before + after
    if before.endswith("-") and before[-2:-1].isalpha() and after[:1].islower():
        return before + after
    return before + " " + after
