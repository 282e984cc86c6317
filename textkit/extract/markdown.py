"""Markdown: headings (ATX and setext) become heading blocks, fenced code stays verbatim, and
the rest is stripped of markup, keeping the words. YAML or TOML front matter is metadata, never
text (`front_matter`): its `title` field is the title, else the first heading is.

Every pattern here is linear: bracketed text may not contain brackets, so an attempt stops at
the next bracket, and runs are matched possessively.
"""

from __future__ import annotations

import re
from pathlib import Path

from textkit.extract.base import CODE, HEADING, Block, Extracted
from textkit.extract.encoding import decode, refuse_binary
from textkit.extract.front_matter import split_front_matter
from textkit.extract.plain import paragraph_blocks
from textkit.words import gettext_noop

MEDIA_TYPES = ("text/markdown",)
EXTENSIONS = {".md": "text/markdown", ".markdown": "text/markdown"}
LABEL = gettext_noop("Markdown")


def check_head(head: bytes, media_type: str) -> None:
    refuse_binary(head, gettext_noop("Markdown text"))


_MD_FENCE_RE = re.compile(r" {0,3}(`{3,}|~{3,})")
_MD_ATX_HEADING_RE = re.compile(r" {0,3}(#{1,6})(?:[ \t]+([^\n]*))?")
_MD_SETEXT_RE = re.compile(r" {0,3}(=+|-+)[ \t]*")
_MD_HEADING_RE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+([^\n]*))?$", re.MULTILINE)
_MD_RULE_RE = re.compile(r"^ {0,3}(?:=++|(?:[-*_][ \t]*+){3,}+)[ \t]*$", re.MULTILINE)
_MD_BLOCKQUOTE_RE = re.compile(r"^(?: {0,3}>[ \t]?)++", re.MULTILINE)
_MD_BULLET_RE = re.compile(r"^[ \t]*+[-*+][ \t]+", re.MULTILINE)
_MD_REFERENCE_DEFINITION_RE = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*\S[^\n]*$", re.MULTILINE)
_MD_TABLE_DIVIDER_RE = re.compile(r"^[ \t]*+(?=[^\n]*-)(?=[^\n]*\|)[ \t:|-]++$", re.MULTILINE)
_MD_TABLE_ROW_RE = re.compile(r"^[ \t]*\|([^\n]*)$", re.MULTILINE)
# A leading lookahead on the first character lets the engine skip quickly to candidates.
_MD_IMAGE_RE = re.compile(r"!\[([^\[\]\n]*)\]\([^()\n]*\)")
_MD_LINK_RE = re.compile(r"\[([^\[\]\n]*)\]\([^()\n]*\)")
_MD_REFERENCE_LINK_RE = re.compile(r"\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")
_MD_AUTOLINK_RE = re.compile(r"<((?:https?|ftp|mailto):[^<>\s]+)>")
_MD_HTML_TAG_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>\n]*)?/?>")
_MD_CODE_SPAN_RE = re.compile(r"(?=`)(?<!`)(`++)([^`\n]+?)\1(?!`)")
_MD_STAR_EMPHASIS_RE = re.compile(
    r"(?=\*)(?<![\w*\\])(\*{1,3})(?=[^\s*])([^*\n]+?)(?<=[^\s*\\])\1(?![\w*])"
)
_MD_UNDERSCORE_EMPHASIS_RE = re.compile(
    r"(?=_)(?<![\w\\])(_{1,3})(?=[^\s_])([^_\n]+?)(?<=[^\s_\\])\1(?!\w)"
)
_MD_STRIKETHROUGH_RE = re.compile(r"~~(?=\S)([^~\n]+?)(?<=\S)~~")
_MD_ESCAPE_RE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|~<>])")


def extract(path: Path, *, max_chars: int) -> Extracted:
    matter = split_front_matter(decode(path.read_bytes()))
    blocks = markdown_blocks(matter.body)
    title = matter.title or next((block.text for block in blocks if block.kind == HEADING), "")
    return Extracted(title=title, blocks=blocks)


def markdown_blocks(markdown: str) -> list[Block]:
    """The blocks of a Markdown document in order: fenced code verbatim, headings, and the
    prose between them stripped of markup."""
    blocks: list[Block] = []
    prose: list[str] = []
    code: list[str] = []
    fence: str | None = None
    for line in markdown.replace("\r\n", "\n").split("\n"):
        opening = _MD_FENCE_RE.match(line)
        if fence is None and opening:
            blocks.extend(_prose_blocks(prose))
            prose = []
            fence = opening.group(1)
        elif fence is not None:
            if _closes_fence(line, fence):
                fence = None
                blocks.append(Block(CODE, "\n".join(code)))
                code = []
            else:
                code.append(line)
        else:
            prose.append(line)
    if code:
        blocks.append(Block(CODE, "\n".join(code)))
    blocks.extend(_prose_blocks(prose))
    return [block for block in blocks if block.text.strip()]


def _closes_fence(line: str, fence: str) -> bool:
    marker = line.strip()
    return len(marker) >= len(fence) and marker == fence[0] * len(marker)


def _prose_blocks(lines: list[str]) -> list[Block]:
    """Split prose at its headings: an ATX heading line, or a paragraph's last line underlined
    with = or - (setext)."""
    lines = _remove_html_comments("\n".join(lines)).split("\n")
    blocks: list[Block] = []
    paragraph: list[str] = []
    for line in lines:
        atx = _MD_ATX_HEADING_RE.fullmatch(line)
        underline = _MD_SETEXT_RE.fullmatch(line)
        if atx:
            blocks.extend(_text_blocks(paragraph))
            paragraph = []
            blocks.append(_heading(len(atx.group(1)), _atx_title(atx.group(2) or "")))
        elif underline and paragraph and paragraph[-1].strip() and not _is_special(paragraph[-1]):
            title = paragraph.pop()
            blocks.extend(_text_blocks(paragraph))
            paragraph = []
            blocks.append(_heading(1 if underline.group(1)[0] == "=" else 2, title.strip()))
        else:
            paragraph.append(line)
    blocks.extend(_text_blocks(paragraph))
    return blocks


def _is_special(line: str) -> bool:
    """Lines a setext underline cannot turn into a heading: list items, quotes, table rows."""
    stripped = line.lstrip()
    return stripped.startswith(("-", "*", "+", ">", "|")) or _MD_RULE_RE.fullmatch(line) is not None


def _heading(level: int, title: str) -> Block:
    return Block(HEADING, _markdown_prose_to_text(title).strip(), level=level)


def _text_blocks(lines: list[str]) -> list[Block]:
    if not lines:
        return []
    return paragraph_blocks(_markdown_prose_to_text("\n".join(_join_soft_breaks(lines))))


# A line that starts a block of its own inside a paragraph: a list item, a quote, a table row.
_MD_BLOCK_START_RE = re.compile(r"[ \t]*(?:[-*+][ \t]|\d{1,9}[.)][ \t]|>|\|)")


def _join_soft_breaks(lines: list[str]) -> list[str]:
    """A paragraph's wrapped lines joined with spaces, as Markdown renders them: a line break
    stays only before a list item, quote or table row, after a hard break (two spaces or a
    backslash at the end of the line), and at blank lines."""
    joined: list[str] = []
    for line in lines:
        previous = joined[-1] if joined else ""
        if (
            previous.strip()
            and line.strip()
            and not _MD_BLOCK_START_RE.match(line)
            and not _MD_BLOCK_START_RE.match(previous)
            and not previous.endswith(("  ", "\\"))
        ):
            joined[-1] = previous.rstrip() + " " + line.strip()
        else:
            joined.append(line)
    return joined


def _atx_title(title: str) -> str:
    title = title.rstrip()
    without_closing = title.rstrip("#")
    if without_closing != title and (not without_closing or without_closing[-1] in " \t"):
        title = without_closing.rstrip()
    return title


def _markdown_prose_to_text(text: str) -> str:
    text = _MD_HEADING_RE.sub(_markdown_heading, text)
    text = _MD_RULE_RE.sub("", text)
    text = _MD_BLOCKQUOTE_RE.sub("", text)
    text = _MD_BULLET_RE.sub("", text)
    text = _MD_REFERENCE_DEFINITION_RE.sub("", text)
    text = _MD_TABLE_DIVIDER_RE.sub("", text)
    text = _MD_TABLE_ROW_RE.sub(_markdown_table_row, text)
    text = _MD_IMAGE_RE.sub(r"\1", text)
    text = _MD_LINK_RE.sub(r"\1", text)
    text = _MD_REFERENCE_LINK_RE.sub(r"\1", text)
    text = _MD_AUTOLINK_RE.sub(r"\1", text)
    text = _MD_HTML_TAG_RE.sub("", text)
    text = _MD_CODE_SPAN_RE.sub(r"\2", text)
    # Twice, so that emphasis nested inside emphasis of the same kind is removed too.
    for _ in range(2):
        text = _MD_STAR_EMPHASIS_RE.sub(r"\2", text)
        text = _MD_UNDERSCORE_EMPHASIS_RE.sub(r"\2", text)
    text = _MD_STRIKETHROUGH_RE.sub(r"\1", text)
    return _MD_ESCAPE_RE.sub(r"\1", text)


def _remove_html_comments(text: str) -> str:
    pieces: list[str] = []
    position = 0
    while (start := text.find("<!--", position)) != -1:
        end = text.find("-->", start + 4)
        if end == -1:
            break
        pieces.append(text[position:start])
        position = end + 3
    pieces.append(text[position:])
    return "".join(pieces)


def _markdown_heading(match: re.Match[str]) -> str:
    return _atx_title(match.group(1) or "")


def _markdown_table_row(match: re.Match[str]) -> str:
    row = match.group(1).rstrip()
    if row.endswith("|"):
        row = row[:-1]
    return "\t".join(cell.strip() for cell in row.split("|"))
