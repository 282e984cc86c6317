"""Why a build failed or was set aside, in the reader's language.

A build keeps why in English (`Build.error`: the API's and the logs' words, which stay English)
and, when the reason was a declared one (`textkit.reasons`: every format's, OCR's, the embedding
providers', and the pipeline's and kb's own below), its code and values (`Build.error_code`,
`Build.error_params`). A page words it again from those, in the active language
(`build_error_words`); a build that failed before codes were kept, or for a reason nobody
declared (an unexpected crash's own words), shows its English as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.formats import number_format
from django.utils.translation import gettext, gettext_noop

import embeddings.base  # noqa: F401 (declares the embedding providers' reasons)
import textkit.extract  # noqa: F401 (declares every format's and OCR's reasons)
from kb.models import Build
from textkit.reasons import DECLARED, Reason, reason

# Builds set aside by a person's action or a newer revision (kb's services).
SUPERSEDED_BY_REVISION = reason(
    "build.superseded_by_revision",
    gettext_noop("revision %(revision)s was uploaded after this one"),
)
DOCUMENT_DELETED = reason(
    "build.document_deleted",
    gettext_noop("the document was deleted before this build finished"),
)
ROLLED_BACK = reason("build.rolled_back", gettext_noop("rolled back to revision %(revision)s"))

# Builds the pipeline failed (`ingestion.pipeline.run`, `ingestion.task_outcomes`, the sweeper).
NOTHING_TO_INDEX = reason(
    "build.nothing_to_index", gettext_noop("The document produced no text to index.")
)
STORED_FILE_MISSING = reason(
    "build.stored_file_missing",
    gettext_noop("stored file missing: %(sha256)s; restore storage from backup"),
)
STORED_FILE_DAMAGED = reason(
    "build.stored_file_damaged",
    gettext_noop(
        "stored file damaged (its bytes do not match its SHA-256): %(sha256)s; restore storage "
        "from backup"
    ),
)
# `problem`: the store's own words ("truncated or replaced (10 bytes, 12 expected)").
STORED_FILE_PROBLEM = reason(
    "build.stored_file_problem",
    gettext_noop("stored file %(problem)s: %(sha256)s; restore storage from backup"),
)
# `problems`: the completeness check's findings (`kb.completeness`), in English.
INCOMPLETE = reason("build.incomplete", gettext_noop("build %(build)s is incomplete: %(problems)s"))
# `detail`: the last attempt's error (an unexpected one's own words, in English).
GAVE_UP = reason("build.gave_up", gettext_noop("gave up after %(attempts)s attempts: %(detail)s"))
WORKER_STOPPED = reason(
    "build.worker_stopped",
    gettext_noop(
        "The worker stopped (crash, kill or timeout) on all %(attempts)s attempts; giving up."
    ),
)

ERROR_MAX_CHARS = 4000


def failure_fields(reason: Reason | None, *, message: str = "") -> dict[str, Any]:
    """The Build fields that record why it failed: the English sentence (bounded) and, for a
    declared reason, its code and values; `message` alone for a reason nobody declared."""
    if reason is None:
        return {"error": message[:ERROR_MAX_CHARS], "error_code": "", "error_params": {}}
    return {
        "error": reason.english()[:ERROR_MAX_CHARS],
        "error_code": reason.code,
        "error_params": {
            name: value[:ERROR_MAX_CHARS] if isinstance(value, str) else value
            for name, value in reason.values.items()
        },
    }


def build_error_words(build: Build) -> str:
    """Why `build` failed or was set aside, in the active language ("" when it says nothing)."""
    return reason_words(build.error_code, build.error_params, fallback=build.error)


def reason_words(code: str, values: Mapping[str, Any] | None, *, fallback: str) -> str:
    """A stored reason in the active language: its declared words translated, the values that
    are words translated too, numbers as the language writes them. `fallback` (the English as
    stored) when the code is unknown (none, or no longer declared) or its values do not fit."""
    declared = DECLARED.get(code) if code else None
    if declared is None:
        return fallback
    try:
        return gettext(declared.english) % {
            name: _value_words(value, word=name in declared.words)
            for name, value in (values or {}).items()
        }
    except (KeyError, TypeError, ValueError):
        return fallback


def _value_words(value: Any, *, word: bool) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return number_format(value, force_grouping=True)
    if word and isinstance(value, str):
        return gettext(value)
    return value
