"""File formats and places in a file as the admin's pages name them, in the person's language:
textkit names the formats in English (`textkit.extract.registry`, marked with
`textkit.words.gettext_noop`) and knows no language; this module translates them where a page
shows them."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext, pgettext

from textkit.extract import Location
from textkit.extract import format_label as _format_label
from textkit.extract.base import PAGE, ROW, SLIDE
from textkit.extract.registry import FORMATS


def accepted_kinds_words() -> str:
    """ "PDF, Word (.docx), … or plain text", translated."""
    labels = [gettext(str(module.LABEL)) for module in FORMATS]
    return gettext("%(kinds)s or %(last)s") % {
        "kinds": gettext(", ").join(labels[:-1]),
        "last": labels[-1],
    }


def format_words(media_type: str) -> str:
    """`textkit.extract.format_label`, translated where the catalogue has the label."""
    label = _format_label(media_type or "")
    return gettext(label) if label else label


def location_words(location: Location) -> str:
    """`Location.label` in the person's language: "page 3", "pages 3-4", "sheet Q3, rows 2-41"
    (with an en dash)."""
    same = location.first == location.last
    words: dict[str, Any] = {"n": location.first, "first": location.first, "last": location.last}
    if location.unit == PAGE:
        span = (
            pgettext("place in a file", "page %(n)s")
            if same
            else pgettext("place in a file", "pages %(first)s–%(last)s")  # noqa: RUF001 (an en dash: a range)
        )
    elif location.unit == SLIDE:
        span = (
            pgettext("place in a file", "slide %(n)s")
            if same
            else pgettext("place in a file", "slides %(first)s–%(last)s")  # noqa: RUF001 (an en dash: a range)
        )
    elif location.unit == ROW:
        span = (
            pgettext("place in a file", "row %(n)s")
            if same
            else pgettext("place in a file", "rows %(first)s–%(last)s")  # noqa: RUF001 (an en dash: a range)
        )
    else:
        return location.label()
    text = span % words
    if location.part:
        return pgettext("place in a file", "%(part)s, %(span)s") % {
            "part": location.part,
            "span": text,
        }
    return text
