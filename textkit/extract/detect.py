"""What a file is, from its name and first bytes."""

from __future__ import annotations

from pathlib import PurePosixPath

from textkit.extract import registry
from textkit.extract.base import FILE_EMPTY, ParseError, UnsupportedMediaType

# How many leading bytes `detect_media_type` wants to see.
SNIFF_BYTES = 4096


def detect_media_type(filename: str, head: bytes) -> str:
    """Return the media type of a file from its extension, checked against its first bytes by
    the format's own `check_head`.

    `head` should hold the first `SNIFF_BYTES` bytes (fewer only if the file is shorter).
    Raises UnsupportedMediaType for unknown extensions or content that contradicts the name, and
    ParseError for an empty file.
    """
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if not suffix:
        raise UnsupportedMediaType(
            "The file name has no extension, so its type is unknown; "
            f"upload one of these kinds: {registry.accepted_kinds()}."
        )
    media_type = registry.EXTENSIONS.get(suffix)
    if media_type is None:
        raise UnsupportedMediaType(
            f'Files ending in "{suffix}" are not supported; '
            f"upload one of these kinds: {registry.accepted_kinds()}."
        )
    if not head:
        raise ParseError(FILE_EMPTY())
    check = registry.HEAD_CHECKS.get(media_type)
    if check is not None:
        check(head, media_type)
    return media_type
