"""Which formats Canon reads. Every format is one module of this package offering:

- `MEDIA_TYPES`: the media types its `extract(path, *, max_chars) -> Extracted` reads;
- `EXTENSIONS`: file-name endings (lower case, with the dot) and the media type each means;
- `LABEL`: how a person names the kind ("Word (.docx)"), for the list of accepted kinds;
- optionally `check_head(head, media_type)`: raise UnsupportedMediaType when the file's first
  bytes contradict its name.
- optionally `LABELS`: one file's kind per media type, for a format of several ("PNG image");
  without it `format_label` names the type by the label and its file-name endings.

A new format is a new module added to `FORMATS`; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from textkit.extract import (
    csv,
    docx,
    epub,
    html,
    image,
    mail,
    markdown,
    odp,
    ods,
    odt,
    pdf,
    plain,
    pptx,
    rtf,
    xlsx,
)
from textkit.extract.base import Extracted

# In the order the list of accepted kinds names them.
FORMATS: tuple[ModuleType, ...] = (
    pdf,
    docx,
    html,
    markdown,
    plain,
    image,
    epub,
    rtf,
    mail,
    pptx,
    xlsx,
    csv,
    odt,
    ods,
    odp,
)
# An e-mail reads its attachments in any of these (mail cannot import this module).
mail.use_formats(FORMATS)

Extractor = Callable[..., Extracted]
HeadCheck = Callable[[bytes, str], None]

EXTRACTORS: dict[str, Extractor] = {
    media_type: module.extract for module in FORMATS for media_type in module.MEDIA_TYPES
}
EXTENSIONS: dict[str, str] = {
    suffix: media_type for module in FORMATS for suffix, media_type in module.EXTENSIONS.items()
}
HEAD_CHECKS: dict[str, HeadCheck] = {
    media_type: module.check_head
    for module in FORMATS
    if hasattr(module, "check_head")
    for media_type in module.MEDIA_TYPES
}
SUPPORTED_MEDIA_TYPES = frozenset(EXTRACTORS)


def accepted_kinds() -> str:
    """ "PDF, Word (.docx), HTML, Markdown or plain text": for messages and upload pages."""
    labels = accepted_kind_labels()
    return ", ".join(labels[:-1]) + " or " + labels[-1]


def accepted_kind_labels() -> tuple[str, ...]:
    """Each format's label, in the order `accepted_kinds` names them (marked for translation:
    a refusal that lists them is worded again in the reader's language)."""
    return tuple(str(module.LABEL) for module in FORMATS)


_FORMAT_OF: dict[str, ModuleType] = {
    media_type: module for module in FORMATS for media_type in module.MEDIA_TYPES
}


def format_label(media_type: str) -> str:
    """How a person names the kind of one file of `media_type`, as the upload pages name the
    formats: "PDF", "Word (.docx)"; for a format of several media types, its `LABELS` entry or
    the label's name with this type's endings ("CSV (.tsv)", "e-mail (.msg)"). A media type no
    format reads is returned as it is."""
    module = _FORMAT_OF.get(media_type)
    if module is None:
        return media_type
    own: dict[str, str] = getattr(module, "LABELS", {})
    if media_type in own:
        return own[media_type]
    if len(module.MEDIA_TYPES) == 1:
        return str(module.LABEL)
    endings = sorted(suffix for suffix, kind in module.EXTENSIONS.items() if kind == media_type)
    name = str(module.LABEL).split(" (", 1)[0]
    return f"{name} ({', '.join(endings)})" if endings else name


def accepted_extensions() -> list[str]:
    """Every accepted file-name ending, sorted (".csv", ".docx", ...): for `accept=`."""
    return sorted(EXTENSIONS)
