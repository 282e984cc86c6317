"""The structure of an RTF document that striprtf flattens: tables and notes.

striprtf writes a table cell's end as "|" and a row's end as a line break, the same line break
as a paragraph's: a cell of two paragraphs split its row, and a "|" typed in the text read as a
cell. So the control words that shape tables (`\\cell`, `\\row`, `\\nestcell`, `\\nestrow`,
and the paragraph's `\\intbl`, `\\itap`, `\\pard` that say whether it stands in a table, and
how deep) are rewritten first as characters no RTF text can hold, and `blocks` reads them
back: a row is one line whatever its cells hold, and a table nested in a cell stays in that
cell (`rows.row_lines`).

striprtf skips footnotes and endnotes with the other destinations (headers, footers, comments),
but notes are the document's own text: each `{\\footnote ...}` group is turned into a plain
group between note marks, and its text follows the paragraph (or table) that refers to it, the
reference written as its mark ("[1]", endnotes "[i]": `notes`). Page headers and footers stay
skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from textkit.extract import notes, rows
from textkit.extract.base import PARAGRAPH, TABLE, Block

# Marks of tables and notes: code points of plane 16, which `\\uN` (at most U+FFFF) and code
# pages never produce. Nesting deeper than `_MAX_LEVEL` reads as that level.
_MAX_LEVEL = 2
(
    _CELL,
    _ROW,
    _NEST_CELL,
    _NEST_ROW,
    _PARAGRAPH_RESET,
    _NOTE_REFERENCE,
    _FOOTNOTE,
    _ENDNOTE,
    _NOTE_END,
) = (chr(0x10FFE0 + n) for n in range(9))
_LEVELS = [chr(0x10FFF0 + level) for level in range(_MAX_LEVEL + 1)]
_MARKS = {
    "cell": _CELL,
    "row": _ROW,
    "nestcell": _NEST_CELL,
    "nestrow": _NEST_ROW,
    "pard": _PARAGRAPH_RESET,
    "intbl": _LEVELS[1],
    "chftn": _NOTE_REFERENCE,
}
# An escaped backslash (so that "\\cell" stays text), a marked control word, or the
# "\*\nesttableprops" that would make striprtf skip the group holding "\nestrow".
_MARKED_WORD_RE = re.compile(
    r"\\\\|\\(cell|row|nestcell|nestrow|pard|intbl|itap|chftn)(?![a-zA-Z])(-?\d{1,10})? ?"
    r"|\\\*\\nesttableprops(?![a-zA-Z]) ?"
)
_NOTE_GROUP_RE = re.compile(r"(?<!\\)\{\\footnote(?![a-zA-Z]) ?")
_ENDNOTE_RE = re.compile(r"\s*\\ftnalt(?![a-zA-Z])")
_BRACE_RE = re.compile(r"\\[\\{}]|[{}]")
_NOTE_MARKS = (_NOTE_REFERENCE, _FOOTNOTE, _ENDNOTE, _NOTE_END)
_TABLE_MARKS = (_CELL, _ROW, _NEST_CELL, _NEST_ROW, _PARAGRAPH_RESET, *_LEVELS)
_MARK_SPLIT_RE = re.compile(f"([\n{''.join(_TABLE_MARKS)}{''.join(_NOTE_MARKS)}])")
_MARKS_READ = frozenset((*_TABLE_MARKS, *_NOTE_MARKS))


def marked(markup: str) -> str:
    """The markup with its tables' and notes' control words as marks (the document's own text
    never holds one), for striprtf to pass through into its text."""
    if "\\footnote" in markup:
        markup = _marked_notes(markup)
    if "\\cell" in markup or "\\chftn" in markup:
        markup = _MARKED_WORD_RE.sub(_word_mark, markup)
    return markup


def _marked_notes(markup: str) -> str:
    """Every `{\\footnote ...}` group (a destination striprtf skips, as it skips headers) as a
    plain group between a note's start and end marks, for `_Reader` to move after the
    paragraph that refers to it. Linear: notes do not overlap."""
    pieces: list[str] = []
    position = 0
    for match in _NOTE_GROUP_RE.finditer(markup):
        if match.start() < position:
            continue  # inside the note before it
        end = _group_end(markup, match.end())
        group = markup[match.end() : end]
        start = _ENDNOTE if _ENDNOTE_RE.match(group) else _FOOTNOTE
        pieces += [markup[position : match.start()], _as_group(start), "{", group, "}"]
        pieces.append(_as_group(_NOTE_END))
        position = end + 1
    pieces.append(markup[position:])
    return "".join(pieces)


def _group_end(markup: str, start: int) -> int:
    """Where the group open at `start` closes (the end of the markup when it never does)."""
    depth = 1
    for brace in _BRACE_RE.finditer(markup, start):
        if brace.group() == "{":
            depth += 1
        elif brace.group() == "}":
            depth -= 1
            if depth == 0:
                return brace.start()
    return len(markup)


def _as_group(mark: str) -> str:
    """A mark in a group of its own: striprtf writes it only where it would write text, and the
    group's end stops striprtf skipping the next characters as the `\\uN` escape's fallback."""
    return f"{{\\u{ord(mark)}}}"


def _word_mark(match: re.Match[str]) -> str:
    """A marked control word as its mark."""
    word = match.group(1)
    if word is None:
        # "\\" stays; "\*\nesttableprops" goes, so that the group's "\nestrow" is read.
        return match.group() if match.group().startswith("\\\\") else ""
    if word == "itap":
        mark = _LEVELS[min(max(int(match.group(2) or 0), 0), _MAX_LEVEL)]
    else:
        mark = _MARKS[word]
    return _as_group(mark)


def blocks(text: str) -> list[Block]:
    """A paragraph per line outside tables; a table's rows, one line each with its cells
    separated by tabs, as one block."""
    reader = _Reader()
    for piece in _MARK_SPLIT_RE.split(text):
        reader.take(piece)
    return reader.finish()


class _Reader:
    """Reads striprtf's text with the marks `marked` put in it.

    A paragraph stands at a nesting level: 0 in the body, 1 in a table's cell, 2 in a cell of a
    table inside a cell (`\\intbl` and `\\itap` set it, `\\pard` resets it). A row's cells are its
    paragraphs and nested tables, written as `rows.row_lines` writes them; a writer that leaves
    `\\intbl` out has its paragraphs read into the row it is in the middle of.

    A note's text is kept apart and follows the paragraph (or the table) it stands in, its mark
    ("[1]", endnotes "[i]") where the paragraph refers to it (`notes`); the marks inside a note
    are the note's own and change nothing outside it.
    """

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.level = 0
        self.line: list[str] = []
        self.cell: list[rows.CellPiece] = []
        self.row: list[list[rows.CellPiece]] = []
        self.rows: list[str] = []
        self.nested_cell: list[str] = []
        self.nested_row: list[str] = []
        self.nested_rows: list[list[str]] = []
        # The note being read (None outside one), its kind, and the notes read in the body
        # paragraph and in the table being read, waiting to follow them.
        self.note: list[str] | None = None
        self.note_kind = notes.FOOTNOTE
        self.waiting: list[Block] = []
        self.waiting_for_table: list[Block] = []
        self.numbers = {notes.FOOTNOTE: 0, notes.ENDNOTE: 0}
        # Where the last reference stands in its line, until its note says its number.
        self.reference: tuple[list[str], int] | None = None
        self.actions: dict[str, Callable[[], None]] = {
            "\n": self._paragraph_end,
            _CELL: self._cell_end,
            _ROW: self._row_end,
            _NEST_CELL: self._nested_cell_end,
            _NEST_ROW: self._nested_row_end,
            _PARAGRAPH_RESET: self._paragraph_reset,
            _NOTE_REFERENCE: self._note_reference,
            _FOOTNOTE: lambda: self._note_start(notes.FOOTNOTE),
            _ENDNOTE: lambda: self._note_start(notes.ENDNOTE),
        }

    def take(self, piece: str) -> None:
        if self.note is not None:
            self._note_take(piece)
            return
        action = self.actions.get(piece)
        if action is not None:
            action()
        elif piece in _LEVELS:
            level = _LEVELS.index(piece)
            self.level = max(self.level, level) if level == 1 else level
        elif piece:
            self.line.append(piece)

    def _nested_cell_end(self) -> None:
        self.nested_cell.append(self._line())
        self.nested_row.append(" ".join(self.nested_cell))
        self.nested_cell = []

    def _nested_row_end(self) -> None:
        self._nested_cell_flush()
        self.nested_rows.append(self.nested_row)
        self.nested_row = []

    def _paragraph_reset(self) -> None:
        self.level = 0

    def _note_reference(self) -> None:
        self.line.append("")
        self.reference = (self.line, len(self.line) - 1)

    def _note_start(self, kind: str) -> None:
        self.note, self.note_kind = [], kind

    def _note_take(self, piece: str) -> None:
        note = self.note if self.note is not None else []
        if piece == _NOTE_END:
            self.numbers[self.note_kind] += 1
            mark = notes.mark(self.note_kind, self.numbers[self.note_kind])
            if self.reference is not None:
                line, index = self.reference
                line[index] = f"[{mark}]"
                self.reference = None
            block = notes.note_block(mark, "".join(note).split("\n"))
            if block is not None:
                in_table = self.level >= 1 or bool(self.row or self.nested_row or self.nested_rows)
                (self.waiting_for_table if in_table else self.waiting).append(block)
            self.note = None
        elif piece == "\n" or piece not in _MARKS_READ:
            note.append(piece)

    def finish(self) -> list[Block]:
        if self.note is not None:  # a file cut short inside a note
            self._note_take(_NOTE_END)
        if any(self.cell) or self.nested_rows or self.nested_row or self.row:
            self._cell_end()
            self._row_end()
        self._table_end()
        self._paragraph_end()
        self._notes_end()
        return self.blocks

    def _line(self) -> str:
        line, self.line = "".join(self.line), []
        return line

    def _paragraph_end(self) -> None:
        line = self._line()
        if self.level >= 2:
            self.nested_cell.append(line)
        elif self.level == 1 or self.row:
            self._nested_table_end()
            self.cell.append(line)
        else:
            self._table_end()
            if line.strip():
                self.blocks.append(Block(PARAGRAPH, line))
            self._notes_end()

    def _cell_end(self) -> None:
        line = self._line()
        self._nested_table_end()
        self.cell.append(line)
        self.row.append(self.cell)
        self.cell = []

    def _row_end(self) -> None:
        self._line()
        self.rows.extend(rows.row_lines(self.row))
        self.row = []

    def _nested_cell_flush(self) -> None:
        """Paragraphs a nested row's end finds after its last cell (none, from Word)."""
        if any(part.strip() for part in self.nested_cell):
            self.nested_row.append(" ".join(self.nested_cell))
        self.nested_cell = []

    def _nested_table_end(self) -> None:
        self._nested_cell_flush()
        if self.nested_row:
            self.nested_rows.append(self.nested_row)
            self.nested_row = []
        if self.nested_rows:
            self.cell.append(self.nested_rows)
            self.nested_rows = []

    def _table_end(self) -> None:
        if self.rows:
            self.blocks.append(Block(TABLE, "\n".join(self.rows)))
            self.rows = []
        self.blocks.extend(self.waiting_for_table)
        self.waiting_for_table = []

    def _notes_end(self) -> None:
        self.blocks.extend(self.waiting)
        self.waiting = []
