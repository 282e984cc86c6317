"""Words the admin's pages share: who did something when no person did (`who`), a file's
kind as the upload pages name it rather than its media type (`format_label`), and the words for
codes the models store (a task's status, a build's state, a History action, a metadata field's
type, a sync run's outcome), each the code itself in English, and why a task failed
(`task_error`)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, gettext_lazy, gettext_noop

from console import words
from console.formats import format_words, location_words
from kb.failures import task_error_words
from textkit.extract import Location

register = template.Library()

# Published because it was built, in a knowledge base that needs no approval.
AUTOMATIC = gettext_noop("Canon, when built")
# What else comes without a person: uploads, deletions and restores through an API key or by a
# source's sync, and a key's answer to the deletions a sync held.
NO_PERSON = gettext_noop("an API key or a sync")
BY_KEY_OR_SYNC = {
    "upload",
    "revision",
    "delete",
    "restore",
    "sync_deletions_confirmed",
    "sync_deletions_kept",
    "deletion confirmed",
    "kept (not deleted)",
}
# Anything else is done by people in the admin; without one it came from a script.
UNRECORDED = gettext_noop("no person recorded")


WHY_AUTOMATIC = gettext_lazy("published as soon as it was built: no approval is needed")
WHY_NO_PERSON = gettext_lazy("no person: a client of the API with a key, or a source's sync")
WHY_UNRECORDED = gettext_lazy("done outside the admin, by a script: no person is recorded")


@register.simple_tag
def who(actor: Any, automatic: bool = False, action: str = "") -> SafeString:
    """The person who did it; else, in the quiet colour, what did: Canon itself for a publish
    (`automatic`, or `action` "publish"), an API key or a sync for what those do (`action`: a
    timeline entry's kind or a History row's action), else that no person was recorded."""
    if actor:
        return format_html("{}", actor)
    if automatic or action == "publish":
        words, why = AUTOMATIC, WHY_AUTOMATIC
    elif action in BY_KEY_OR_SYNC:
        words, why = NO_PERSON, WHY_NO_PERSON
    else:
        words, why = UNRECORDED, WHY_UNRECORDED
    # the constants are English (tests and callers compare them); the page says them translated
    return format_html(
        '<span class="canon-quiet canon-who" title="{}">{}</span>', why, gettext(words)
    )


@register.filter
def format_label(media_type: str) -> str:
    """ "application/pdf" as "PDF", "text/csv" as "CSV (.csv)"; an unknown type as itself."""
    return format_words(media_type or "")


@register.filter
def place(location: Any) -> str:
    """A chunk's stored location (`Location.to_json`) in words: "page 3", "sheet Q3, rows 2-41";
    "" when it has none."""
    if not isinstance(location, dict):
        return ""
    try:
        return location_words(Location.from_json(location))
    except (KeyError, TypeError, ValueError):
        return ""


@register.filter
def task_status(code: str) -> str:
    return words.word(words.TASK_STATUS, code)


@register.filter
def build_state(code: str) -> str:
    return words.word(words.BUILD_STATE, code)


@register.filter
def history_action(code: str) -> str:
    return words.word(words.HISTORY_ACTION, code)


@register.filter
def field_type(code: str) -> str:
    return words.word(words.FIELD_TYPE, code)


@register.filter
def run_count(code: str) -> str:
    return words.word(words.RUN_COUNT, code)


@register.filter
def role_words(role: str) -> str:
    """A role's group name ("Index admins") in the page's language."""
    return words.role_words(role)


@register.filter
def search_mode(code: str) -> str:
    return words.search_mode(code)


@register.filter
def search_modes(codes: Any) -> str:
    return words.search_modes(codes)


@register.filter
def figure_group(group: str) -> str:
    return words.figure_group(group)


@register.filter
def rank_change(code: str) -> str:
    return words.word(words.RANK_CHANGE, code)


@register.filter
def task_error(task: Any) -> str:
    """Why a task's last attempt failed, in the page's language (`kb.failures`); an error
    nobody declared, in English as stored."""
    return task_error_words(task)
