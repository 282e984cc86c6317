"""Why something could not be done, as a code and its values rather than only a sentence: the
English sentence is for the API and the logs (machines and operators read English), the code
and values are what a page in another language words again (`kb.failures`).

A module declares each of its reasons once, next to the code that gives it:

    ENCRYPTED = reason("pdf.encrypted", gettext_noop("The PDF is encrypted; upload ..."))
    raise ParseError(ENCRYPTED())

The English words carry `%(name)s` placeholders for the values; `words` names the values that
are themselves words for people (a kind of file, "Word document"), marked with `gettext_noop`
where they are written, so a page translates them too. Whole numbers are values, grouped by
thousands in English ("20,000") and as the page's language groups them elsewhere; so is a list
of words (the kinds of file an upload may be), "a, b or c" in English and as the page's
language lists them elsewhere. A value may be another reason (what a source answered, inside
why its sync run failed): its words in English, and worded again in the page's language; a row
keeps it as {"code": ..., "params": {...}} (`kb.failures.reason_record`). A code never changes
meaning once stored: a build keeps it (`kb.models.Build.error_code`) for as long as it is
kept."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Words:
    """One declared reason: its stable `code`, its English words (with `%(name)s` placeholders)
    and which of its values are words to translate."""

    code: str
    english: str
    words: tuple[str, ...] = ()

    def __call__(self, **values: Value) -> Reason:
        return Reason(self.code, values)


@dataclass(frozen=True)
class Reason:
    """A reason given: the code of its declaration and the values of its placeholders."""

    code: str
    values: Mapping[str, Value] = field(default_factory=dict)

    def english(self) -> str:
        """The sentence in English (the API's and the logs' words)."""
        return english(self.code, self.values)

    def __str__(self) -> str:
        return self.english()


# The values a reason may carry: what JSON keeps (a list of words comes back a list), and
# another reason (as a row keeps it, a mapping of its code and values).
Value = str | int | tuple[str, ...] | list[str] | Reason | Mapping[str, Any]

# Every declared reason, by code (filled as the declaring modules are imported).
DECLARED: dict[str, Words] = {}


def reason(code: str, english: str, *, words: tuple[str, ...] = ()) -> Words:
    """Declare a reason. A code is declared once: two meanings under one code would word
    stored reasons wrongly."""
    declared = DECLARED.get(code)
    if declared is not None and declared != Words(code, english, words):
        raise ValueError(f"the reason {code!r} is declared twice")
    DECLARED[code] = Words(code, english, words)
    return DECLARED[code]


def english(code: str, values: Mapping[str, Any]) -> str:
    """The English sentence of a declared reason with `values`."""
    return DECLARED[code].english % {name: english_value(v) for name, v in values.items()}


def english_value(value: Any) -> Any:
    """A number as English writes it in a sentence ("20,000"), a list of words as English lists
    them ("PDF, HTML or plain text"), a reason its sentence (given, or as a row keeps it);
    anything else as it is."""
    if isinstance(value, Reason):
        return value.english()
    if isinstance(value, Mapping):
        return english(str(value["code"]), value.get("params") or {})
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, tuple | list):
        items = [str(item) for item in value]
        return " or ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)
    return value


class ReasonedError(Exception):
    """An error whose message may be a declared `Reason`: `str(error)` is its English sentence
    and `reason` its code and values (None for a plain message)."""

    def __init__(self, message: str | Reason) -> None:
        self.reason = message if isinstance(message, Reason) else None
        super().__init__(str(message))

    @property
    def why(self) -> str | Reason:
        """What an error wrapping this one passes on: its reason, else its English."""
        return self.reason if self.reason is not None else str(self)
