"""What a file is, from its name and first bytes."""

from __future__ import annotations

from pathlib import PurePosixPath

from textkit.extract import registry
from textkit.extract.base import FILE_EMPTY, ParseError, UnsupportedMediaType
from textkit.reasons import reason
from textkit.words import gettext_noop

# How many leading bytes `detect_media_type` wants to see.
SNIFF_BYTES = 4096

# `kinds`: the accepted kinds' labels (`registry.accepted_kind_labels`), listed as a sentence.
NO_EXTENSION = reason(
    "file.no_extension",
    gettext_noop(
        "The file name has no extension, so its type is unknown; upload one of these kinds: "
        "%(kinds)s."
    ),
    words=("kinds",),
)
UNSUPPORTED_EXTENSION = reason(
    "file.unsupported_extension",
    gettext_noop(
        'Files ending in "%(suffix)s" are not supported; upload one of these kinds: %(kinds)s.'
    ),
    words=("kinds",),
)


def detect_media_type(filename: str, head: bytes) -> str:
    """Return the media type of a file from its extension, checked against its first bytes by
    the format's own `check_head`.

    `head` should hold the first `SNIFF_BYTES` bytes (fewer only if the file is shorter).
    Raises UnsupportedMediaType for unknown extensions or content that contradicts the name, and
    ParseError for an empty file.
    """
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if not suffix:
        raise UnsupportedMediaType(NO_EXTENSION(kinds=registry.accepted_kind_labels()))
    media_type = registry.EXTENSIONS.get(suffix)
    if media_type is None:
        raise UnsupportedMediaType(
            UNSUPPORTED_EXTENSION(suffix=suffix, kinds=registry.accepted_kind_labels())
        )
    if not head:
        raise ParseError(FILE_EMPTY())
    check = registry.HEAD_CHECKS.get(media_type)
    if check is not None:
        check(head, media_type)
    return media_type
