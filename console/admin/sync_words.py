"""The admin's words for why a sync run failed, stopped or waits, for its per-item problems and
for its deletion note: a run keeps them in English (the API's and the logs' words) and, for a
declared reason, its code and values beside them (`SyncRun.error_reason`, `error_params`; a
problem's `code`, `params` and `file`; `deletion_note_reasons`), which the admin words in the
person's language, with what the source's kind said inside them (its own reason, a value of the
run's). A run from before, or a reason nobody declared (an unexpected error's own words), shows
its English as stored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext, pgettext

# Declare the reasons of runs (`sources.sync`, `sources.services.runs`), of items, and (through
# `sources.sync`'s registry of kinds) every kind's.
import sources.services.runs
import sources.sync  # noqa: F401
from kb.failures import reason_words
from sources.deletion_notes import note_english
from sources.models import SyncRun


def run_error_words(run: SyncRun) -> str:
    """Why `run` failed, stopped or waits, in the active language ("" when it says nothing)."""
    return reason_words(run.error_reason, run.error_params, fallback=run.error)


def problem_words(problem: Mapping[str, Any]) -> str:
    """Why the run failed or skipped an item (one of `SyncRun.problems`), in the active
    language, after the file's name where the English names it first."""
    english = str(problem.get("reason", ""))
    code = problem.get("code")
    if not code:
        return english
    why = reason_words(str(code), problem.get("params"), fallback=english)
    file_name = problem.get("file")
    if not file_name or why == english:
        return why
    return gettext("%(file)s: %(why)s") % {"file": file_name, "why": why}


def deletion_note_words(run: SyncRun) -> str:
    """Why `run` deleted nothing or why its deletions wait, and a person's answer, in the active
    language ("" when it says nothing): each sentence worded again. Its English as stored when
    its reasons do not say that English: a run from before (none), a sentence added by a process
    that kept none, or a code no longer declared (as `reason_words` falls back)."""
    note, records = run.deletion_note, run.deletion_note_reasons
    try:
        if not records or note_english(records) != note:
            return note
    except (AttributeError, KeyError, TypeError, ValueError):  # not a list of reasons as kept
        return note
    sentences = [reason_words(r["code"], r.get("params"), fallback="") for r in records]
    if not all(sentences):  # a value that does not fit its words: the whole note in English
        return note
    words = sentences[0]
    for sentence in sentences[1:]:
        words = pgettext("one sentence after another", "%(first)s %(then)s") % {
            "first": words,
            "then": sentence,
        }
    return words
