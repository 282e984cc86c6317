"""Questions as files and lists: reading a JSONL or CSV file (or the API's JSON list) into rows,
and checking every row, so a person gets one readable report of what is wrong — unknown
document keys, duplicates, empty questions, bad languages — before anything is written.

No database here: which document keys exist is asked of the caller (`known`), so the same check
serves the admin's upload, the API and the services.

A row's fields, by name (the aliases let `bench/quality`'s files be imported as they are):

- `id` (or `external_id`): unique in the set; when missing, one is made from the question's text,
  so importing the same file twice updates the same questions;
- `question` (or `text`, `query`): the query, at most QUESTION_MAX characters;
- `expected_documents` (or `expected`, `answers`, `expected_keys`): the keys of the documents
  that answer it; in a CSV cell, separated by `|`;
- `expected_passage` (or `passage`): optional, the words that answer it;
- `language` (or `lang`): `en` or `zh`; empty (or `auto`) detects it from the text;
- `tag` (or `kind`): optional.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext, ngettext

from evaluation.models import (
    EXTERNAL_ID_MAX,
    KEY_MAX,
    PASSAGE_MAX,
    QUESTION_MAX,
    TAG_MAX,
    Language,
)
from textkit.text import cjk_share

# A question set holds at most this many questions; a file at most this many bytes.
MAX_QUESTIONS = 5000
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_EXPECTED = 50
# Text at least this Chinese is a Chinese question (the learned fusion's threshold).
ZH_SHARE = 0.2
KEY_SEPARATOR = "|"

ALIASES = {
    "id": ("id", "external_id"),
    "question": ("question", "text", "query"),
    "expected_documents": ("expected_documents", "expected", "answers", "expected_keys"),
    "expected_passage": ("expected_passage", "passage"),
    "language": ("language", "lang"),
    "tag": ("tag", "kind"),
}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class QuestionData:
    """One checked question, ready to be written."""

    external_id: str
    text: str
    expected_keys: tuple[str, ...]
    expected_passage: str = ""
    language: str = Language.EN
    tag: str = ""

    def as_json(self) -> dict[str, Any]:
        """The row as files and the API write it (`read_rows` reads it back)."""
        return {
            "id": self.external_id,
            "question": self.text,
            "expected_documents": list(self.expected_keys),
            "expected_passage": self.expected_passage,
            "language": self.language,
            "tag": self.tag,
        }


@dataclass(frozen=True)
class Problem:
    """What is wrong, and where: `where` is "line 3" (a file), "questions[2]" (the API) or ""
    (the whole file)."""

    where: str
    message: str
    external_id: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


@dataclass
class Checked:
    """A checked file or list: its valid rows (where each was) and every problem found."""

    rows: list[tuple[str, QuestionData]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    total: int = 0  # rows read

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def questions(self) -> list[QuestionData]:
        return [row for _, row in self.rows]

    @property
    def invalid(self) -> int:
        """How many rows (or the file itself) have problems."""
        return len({p.where for p in self.problems})

    def summary(self) -> str:
        if self.ok:
            return ngettext(
                "%(n)s question, no problem.", "%(n)s questions, no problem.", self.total
            ) % {"n": self.total}
        problems = (
            gettext("1 of 1 row has problems;")
            if self.total == 1
            else ngettext(
                "%(invalid)s of %(total)s rows has problems;",
                "%(invalid)s of %(total)s rows have problems;",
                self.invalid,
            )
            % {"invalid": self.invalid, "total": self.total}
        )
        valid = ngettext("%(n)s is valid.", "%(n)s are valid.", len(self.rows)) % {
            "n": len(self.rows)
        }
        return f"{problems} {valid}"


Raw = tuple[str, Any]  # (where, the row as read)


class FileUnreadable(ValueError):
    """The file as a whole cannot be read: not UTF-8, not JSONL or CSV, no header."""


def detect_language(text: str) -> str:
    return Language.ZH if cjk_share(text) >= ZH_SHARE else Language.EN


def read_file(data: bytes, name: str) -> list[Raw]:
    """The rows of a JSONL (one JSON object per line; `.json` may also hold one array) or CSV
    file (a header line naming the columns), by its name's extension or, failing that, its
    first character. Raises FileUnreadable with a sentence for the person."""
    if len(data) > MAX_FILE_BYTES:
        raise FileUnreadable(
            gettext("The file is larger than %(n)s MB; split it.")
            % {"n": MAX_FILE_BYTES // (1024 * 1024)}
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileUnreadable(
            gettext("The file is not UTF-8 text (byte %(n)s cannot be read); save it as UTF-8.")
            % {"n": exc.start + 1}
        ) from None
    if "\x00" in text:
        raise FileUnreadable(gettext("The file holds NUL characters: it is not a text file."))
    lowered = name.lower()
    if lowered.endswith(".csv"):
        return _csv_rows(text)
    if lowered.endswith((".jsonl", ".ndjson")):
        return _json_rows(text, array=False)
    if lowered.endswith(".json") or text.lstrip()[:1] in ("{", "["):
        return _json_rows(text, array=text.lstrip().startswith("["))
    raise FileUnreadable(gettext("Give a .jsonl file (one JSON object per line) or a .csv file."))


def _json_rows(text: str, *, array: bool) -> list[Raw]:
    """One JSON object per line, or (`array`) one array of them."""
    if array:
        try:
            items = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise FileUnreadable(
                gettext("The file is not valid JSON: %(error)s.") % {"error": exc}
            ) from None
        if not isinstance(items, list):
            raise FileUnreadable(gettext("A .json file holds one array of questions."))
        return [(gettext("item %(n)s") % {"n": n}, item) for n, item in enumerate(items, start=1)]
    rows: list[Raw] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((_line(number), json.loads(line)))
        except (ValueError, RecursionError) as exc:
            rows.append((_line(number), _NotJson(str(exc))))
    return rows


def _line(number: int) -> str:
    return gettext("line %(n)s") % {"n": number}


@dataclass(frozen=True)
class _NotJson:
    error: str


def _csv_rows(text: str) -> list[Raw]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [name.strip().lower() for name in reader.fieldnames or []]
    except csv.Error as exc:
        raise FileUnreadable(
            gettext("The CSV file cannot be read: %(error)s.") % {"error": exc}
        ) from None
    if not any(name in ALIASES["question"] for name in header):
        raise FileUnreadable(
            gettext(
                "The CSV file's first line must name its columns, one of them question (also: "
                "id, expected_documents, expected_passage, language, tag)."
            )
        )
    reader.fieldnames = header
    rows: list[Raw] = []
    try:
        for row in reader:
            # Cells past the header's columns land under None: not a field of the question.
            values: dict[str, Any] = {name: value or "" for name, value in row.items() if name}
            for alias in ALIASES["expected_documents"]:
                if alias in values:
                    cell = str(values[alias])
                    values[alias] = [k.strip() for k in cell.split(KEY_SEPARATOR) if k.strip()]
            rows.append((_line(reader.line_num), values))
    except csv.Error as exc:
        raise FileUnreadable(
            gettext("The CSV file cannot be read at line %(n)s: %(error)s.")
            % {"n": reader.line_num, "error": exc}
        ) from None
    return rows


def read_rows(items: Sequence[Any], *, prefix: str = "questions") -> list[Raw]:
    """The API's JSON list of questions, each named by its place (`questions[2]`)."""
    return [(f"{prefix}[{n}]", item) for n, item in enumerate(items)]


def _first(row: Mapping[str, Any], names: Iterable[str]) -> str | None:
    return next((name for name in names if name in row), None)


def _value(row: Mapping[str, Any], name: str) -> Any:
    alias = _first(row, ALIASES[name])
    return None if alias is None else row[alias]


def _text(value: Any, what: str, limit: int) -> tuple[str, str | None]:
    """(the cleaned string, or the problem with it)."""
    if value is None:
        return "", None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return "", gettext("%(what)s must be text") % {"what": what}
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "", gettext(
            "%(what)s holds an unpaired surrogate (\\ud800-\\udfff), which is not text"
        ) % {"what": what}
    if "\x00" in text:
        return "", gettext("%(what)s holds a NUL character") % {"what": what}
    text = _CONTROL.sub("", text).strip()
    if len(text) > limit:
        return "", gettext("%(what)s is longer than %(limit)s characters") % {
            "what": what,
            "limit": limit,
        }
    return text, None


def _keys(value: Any) -> tuple[tuple[str, ...], list[str]]:
    """(the keys, deduplicated in order; the problems with them)."""
    if value is None or value == "" or value == []:
        return (), [NO_EXPECTED()]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return (), [gettext("expected_documents must be a list of document keys")]
    keys: list[str] = []
    problems: list[str] = []
    for item in value:
        key, problem = _text(item, gettext("a document key"), KEY_MAX)
        if problem:
            problems.append(problem)
        elif key:
            keys.append(key)
    if not keys and not problems:
        problems.append(NO_EXPECTED())
    if len(set(keys)) > MAX_EXPECTED:
        problems.append(gettext("more than %(n)s expected documents") % {"n": MAX_EXPECTED})
    return tuple(dict.fromkeys(keys)), problems


def NO_EXPECTED() -> str:
    return gettext("no expected document: give the key of at least one document that answers it")


def _language(value: Any, text: str) -> tuple[str, str | None]:
    given, problem = _text(value, gettext("language"), 16)
    if problem:
        return "", problem
    code = given.lower().replace("_", "-")
    if code in ("", "auto"):
        return detect_language(text), None
    base = code.split("-")[0]
    if base in Language.values:
        return base, None
    return "", gettext("language %(given)s is not en or zh (leave it empty to detect it)") % {
        "given": repr(given)
    }


def auto_id(text: str) -> str:
    """The id of a question given without one: from its text, so it is the same next time."""
    return "q-" + hashlib.sha256(same_question(text).encode()).hexdigest()[:10]


def same_question(text: str) -> str:
    """A question's text as duplicates are found: case and spacing do not count."""
    return _SPACE.sub(" ", text).strip().casefold()


def check(
    raw: Sequence[Raw],
    *,
    known: Callable[[set[str]], set[str]],
    limit: int = MAX_QUESTIONS,
) -> Checked:
    """Check every row; `known(keys)` says which of the keys are documents the person may name
    (of this knowledge base, not deleted, readable to them: any other is "unknown", so the
    report never tells a hidden document from a missing one)."""
    checked = Checked(total=len(raw))
    if len(raw) > limit:
        checked.problems.append(
            Problem(
                "",
                gettext("%(n)s questions: a question set holds at most %(limit)s.")
                % {"n": len(raw), "limit": limit},
            )
        )
        return checked
    seen_ids: dict[str, str] = {}
    seen_texts: dict[str, str] = {}
    parsed: list[tuple[str, QuestionData, list[str]]] = []
    for where, row in raw:
        problems: list[str] = []
        if isinstance(row, _NotJson):
            checked.problems.append(
                Problem(where, gettext("not valid JSON: %(error)s") % {"error": row.error})
            )
            continue
        if not isinstance(row, Mapping):
            checked.problems.append(
                Problem(where, gettext("not a question: give an object with fields"))
            )
            continue
        text, problem = _text(_value(row, "question"), gettext("the question"), QUESTION_MAX)
        text = " ".join(text.split())  # a query: its spacing means nothing to search
        if problem:
            problems.append(problem)
        elif not text:
            problems.append(gettext("empty question"))
        external_id, problem = _text(_value(row, "id"), gettext("id"), EXTERNAL_ID_MAX)
        if problem:
            problems.append(problem)
        external_id = external_id or (auto_id(text) if text else "")
        keys, key_problems = _keys(_value(row, "expected_documents"))
        problems += key_problems
        passage, problem = _text(
            _value(row, "expected_passage"), gettext("the expected passage"), PASSAGE_MAX
        )
        if problem:
            problems.append(problem)
        language, problem = _language(_value(row, "language"), text)
        if problem:
            problems.append(problem)
        tag, problem = _text(_value(row, "tag"), gettext("tag"), TAG_MAX)
        if problem:
            problems.append(problem)
        if external_id:
            if external_id in seen_ids:
                problems.append(
                    gettext("duplicate id %(id)s (also at %(where)s)")
                    % {"id": repr(external_id), "where": seen_ids[external_id]}
                )
            else:
                seen_ids[external_id] = where
        if text:
            if same_question(text) in seen_texts:
                problems.append(
                    gettext(
                        "the same question as %(where)s: give it one row with all its expected "
                        "documents"
                    )
                    % {"where": seen_texts[same_question(text)]}
                )
            else:
                seen_texts[same_question(text)] = where
        data = QuestionData(external_id, text, keys, passage, language or Language.EN, tag)
        parsed.append((where, data, problems))
    every_key = {key for _, data, _ in parsed for key in data.expected_keys}
    found = known(every_key) if every_key else set()
    for where, data, problems in parsed:
        unknown = [key for key in data.expected_keys if key not in found]
        if unknown:
            problems.append(
                ngettext(
                    "unknown document key %(keys)s (no document of this knowledge base you may "
                    "read has it)",
                    "unknown document keys %(keys)s (no document of this knowledge base you may "
                    "read has them)",
                    len(unknown),
                )
                % {"keys": ", ".join(repr(k) for k in unknown)}
            )
        if problems:
            checked.problems += [Problem(where, p, data.external_id) for p in problems]
        else:
            checked.rows.append((where, data))
    return checked
