"""Words the admin's pages share: who did something when no person did (`who`), and a file's
kind as the upload pages name it rather than its media type (`format_label`)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from textkit.extract import format_label as _format_label

register = template.Library()

# Published because it was built, in a knowledge base that needs no approval.
AUTOMATIC = "Canon, when built"
# What else comes without a person: uploads, deletions and restores through an API key or by a
# source's sync, and a key's answer to the deletions a sync held.
NO_PERSON = "an API key or a sync"
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
UNRECORDED = "no person recorded"


@register.simple_tag
def who(actor: Any, automatic: bool = False, action: str = "") -> SafeString:
    """The person who did it; else, in the quiet colour, what did: Canon itself for a publish
    (`automatic`, or `action` "publish"), an API key or a sync for what those do (`action`: a
    timeline entry's kind or a History row's action), else that no person was recorded."""
    if actor:
        return format_html("{}", actor)
    if automatic or action == "publish":
        words, why = AUTOMATIC, "published as soon as it was built: no approval is needed"
    elif action in BY_KEY_OR_SYNC:
        words, why = NO_PERSON, "no person: a client of the API with a key, or a source's sync"
    else:
        words, why = UNRECORDED, "done outside the admin, by a script: no person is recorded"
    return format_html('<span class="canon-quiet canon-who" title="{}">{}</span>', why, words)


@register.filter
def format_label(media_type: str) -> str:
    """ "application/pdf" as "PDF", "text/csv" as "CSV (.csv)"; an unknown type as itself."""
    return _format_label(media_type or "")
