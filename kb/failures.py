"""Why a build failed or was set aside, why a task's attempt failed, and why an upload was
refused, in the reader's language.

A build keeps why in English (`Build.error`: the API's and the logs' words, which stay English)
and, when the reason was a declared one (`textkit.reasons`: every format's, OCR's, the embedding
providers', and the pipeline's and kb's own below), its code and values (`Build.error_code`,
`Build.error_params`). A page words it again from those, in the active language
(`build_error_words`); a build that failed before codes were kept, or for a reason nobody
declared (an unexpected crash's own words), shows its English as stored. A task keeps its
last error the same way (`IngestionTask.last_error_reason`, `last_error_params`:
`task_error_words`); an upload refusal carries its reason (`kb.uploads.UploadRejected`), worded
by the admin's upload pages (`console.admin.upload_words`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.formats import number_format
from django.utils.translation import gettext, gettext_noop

import embeddings.base  # noqa: F401 (declares the embedding providers' reasons)
import textkit.extract  # noqa: F401 (declares every format's and OCR's reasons)
from kb.models import Build
from textkit.reasons import DECLARED, Reason, ReasonedError, reason
from work.models import IngestionTask

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

# Uploads refused (`kb.uploads.upload_accept`) besides the extractors' reasons for a file's type.
UPLOAD_TOO_LARGE = reason(
    "upload.too_large", gettext_noop("%(name)s is larger than the limit of %(limit)s MB.")
)
UPLOAD_EMPTY = reason("upload.empty", gettext_noop("%(name)s is empty."))
UPLOAD_STORE_UNAVAILABLE = reason(
    "upload.store_unavailable",
    gettext_noop(
        "The file store is unavailable, so the file was not saved and nothing changed. "
        "Try again in a minute."
    ),
)
# Request bodies refused before a byte is read (`kb.uploads.RequestBodyLimitMiddleware`).
REQUEST_TOO_LARGE = reason(
    "upload.request_too_large",
    gettext_noop(
        "The request body is larger than Canon reads (%(limit)s bytes: %(files)s files of "
        "%(mb)s MB)."
    ),
)
LENGTH_REQUIRED = reason(
    "upload.length_required",
    gettext_noop("Send the request body with a Content-Length (chunked bodies are not read)."),
)

ERROR_MAX_CHARS = 4000


def failure_fields(reason: Reason | None, *, message: str = "") -> dict[str, Any]:
    """The Build fields that record why it failed: the English sentence (bounded) and, for a
    declared reason, its code and values; `message` alone for a reason nobody declared."""
    code, values = reason_record(reason)
    english = reason.english() if reason is not None else message
    return {"error": english[:ERROR_MAX_CHARS], "error_code": code, "error_params": values}


def reason_record(
    reason: Reason | None, *, max_chars: int = ERROR_MAX_CHARS
) -> tuple[str, dict[str, Any]]:
    """A reason's code and values as a row keeps them (texts bounded to `max_chars`, a reason
    given as a value kept as {"code": ..., "params": {...}}); ("", {}) for none."""
    if reason is None:
        return "", {}
    return reason.code, _values_record(reason.values, max_chars)


def _values_record(values: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, Reason):
            value = {"code": value.code, "params": _values_record(value.values, max_chars)}
        elif isinstance(value, str):
            value = value[:max_chars]
        record[name] = value
    return record


def build_error_words(build: Build) -> str:
    """Why `build` failed or was set aside, in the active language ("" when it says nothing)."""
    return reason_words(build.error_code, build.error_params, fallback=build.error)


def task_error_words(task: IngestionTask) -> str:
    """Why a task's last attempt failed, in the active language: its own declared reason
    (`IngestionTask.last_error_reason`); for a task that kept none but whose build failed with
    the same English for a declared reason (closed before tasks kept theirs), the build's; else
    the task's English as stored (an unexpected error's own words)."""
    if task.last_error_reason:
        return reason_words(
            task.last_error_reason, task.last_error_params, fallback=task.last_error
        )
    build = task.build if task.build_id else None
    if build is not None and build.error_code and build.error == task.last_error[:ERROR_MAX_CHARS]:
        return build_error_words(build)
    return task.last_error


def error_words(error: ReasonedError) -> str:
    """Why `error` was raised, in the active language: its declared reason worded again, or
    its English when it carries none."""
    if error.reason is None:
        return str(error)
    return reason_words(error.reason.code, error.reason.values, fallback=str(error))


def reason_words(code: str, values: Mapping[str, Any] | None, *, fallback: str) -> str:
    """A stored reason in the active language: its declared words translated, the values that
    are words translated too, numbers as the language writes them, a reason inside it worded
    the same way. `fallback` (the English as stored) when the code, or the code of a reason
    inside it, is unknown (none, or no longer declared) or its values do not fit."""
    if not code:
        return fallback
    try:
        return _words(code, values)
    except (KeyError, TypeError, ValueError):
        return fallback


def _words(code: str, values: Mapping[str, Any] | None) -> str:
    """A declared reason in the active language; KeyError when `code` is not declared."""
    declared = DECLARED[code]
    return gettext(declared.english) % {
        name: _value_words(value, word=name in declared.words)
        for name, value in (values or {}).items()
    }


def _value_words(value: Any, *, word: bool) -> Any:
    if isinstance(value, Reason):  # a reason inside a reason: worded too, or none of it is
        return _words(value.code, value.values)
    if isinstance(value, Mapping):  # the same, as a row keeps it
        return _words(str(value["code"]), value.get("params"))
    if isinstance(value, int) and not isinstance(value, bool):
        return number_format(value, force_grouping=True)
    if isinstance(value, list | tuple):  # a list of words: "PDF、Word (.docx)或纯文本"
        items = [str(_value_words(item, word=word)) for item in value]
        if len(items) < 2:
            return "".join(items)
        return gettext("%(kinds)s or %(last)s") % {
            "kinds": gettext(", ").join(items[:-1]),
            "last": items[-1],
        }
    if word and isinstance(value, str):
        return gettext(value)
    return value
