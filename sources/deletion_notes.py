"""Why a sync run deleted nothing or why its deletions wait, and a person's answer to them: a
run's deletion note. The run keeps it in English (`SyncRun.deletion_note`, the API's words) and,
beside it, the declared reasons its sentences are, in order (`SyncRun.deletion_note_reasons`,
each {"code": ..., "params": {...}}), which the admin words in the person's language
(`console.admin.sync_words.deletion_note_words`). The worker sets the note (`sources.sync`), a
person's answer adds a sentence (`services.runs`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.utils.translation import gettext_noop

from kb.failures import reason_record
from sources.models import SyncRun
from textkit.reasons import Reason, english, reason

# Nothing was deleted. `items`: how many items of the last run were not seen; `detail`: why the
# listing was incomplete, the kind's own reason (worded again) or its English.
STOPPED = reason(
    "sync.note.stopped",
    gettext_noop("Nothing was deleted: the run stopped before it finished."),
)
NOT_FINISHED = reason(
    "sync.note.not_finished", gettext_noop("Nothing was deleted: the run did not finish.")
)
INCOMPLETE = reason(
    "sync.note.incomplete",
    gettext_noop(
        "Nothing was deleted (%(items)s items not seen): the listing was incomplete: %(detail)s"
    ),
)
# Deletions wait for a person (`services.runs.sync_deletions_confirm`, `sync_deletions_keep`);
# `share` and `threshold` are percentages, `run` a run's id.
HELD_EMPTY = reason(
    "sync.note.held_empty",
    gettext_noop(
        "Deletions wait for confirmation: the listing was empty where the last run saw "
        "%(items)s items."
    ),
)
HELD_OVER_THRESHOLD = reason(
    "sync.note.held_over_threshold",
    gettext_noop(
        "Deletions wait for confirmation: %(gone)s of %(live)s documents (%(share)s %%) would be "
        "deleted, over the source's threshold of %(threshold)s %%."
    ),
)
SUPERSEDED = reason(
    "sync.note.superseded",
    gettext_noop("Superseded by sync run %(run)s, which holds its deletions."),
)
# A person's answer, after the note of why the deletions waited.
CONFIRMED = reason("sync.note.confirmed", gettext_noop("Confirmed: %(deleted)s deleted."))
KEPT = reason(
    "sync.note.kept",
    gettext_noop("Kept: a person chose not to delete these %(kept)s documents."),
)


def note_fields(why: Reason | None) -> dict[str, Any]:
    """The SyncRun fields of a note that is `why` alone (None: no note)."""
    if why is None:
        return {"deletion_note": "", "deletion_note_reasons": []}
    return {"deletion_note": why.english(), "deletion_note_reasons": [_record(why)]}


def note_set(run: SyncRun, why: Reason | None) -> None:
    """Set `run`'s note to `why` alone (None: no note); the caller saves."""
    for name, value in note_fields(why).items():
        setattr(run, name, value)


def note_add(run: SyncRun, why: Reason) -> None:
    """Add `why`'s sentence after `run`'s note; the caller saves."""
    run.deletion_note += f" {why.english()}"
    run.deletion_note_reasons = [*(run.deletion_note_reasons or []), _record(why)]


def note_english(records: Iterable[Mapping[str, Any]]) -> str:
    """The English of a note's reasons as a run keeps them (KeyError for a code no longer
    declared): what the run's `deletion_note` says when they are its sentences."""
    return " ".join(english(str(record["code"]), record.get("params") or {}) for record in records)


def _record(why: Reason) -> dict[str, Any]:
    code, params = reason_record(why)
    return {"code": code, "params": params}
