"""What a file is, from its name and first bytes."""

from __future__ import annotations

from pathlib import PurePosixPath

from textkit.extract.base import (
    APPLICATION_DOCX,
    APPLICATION_PDF,
    TEXT_HTML,
    TEXT_MARKDOWN,
    TEXT_PLAIN,
    ParseError,
    UnsupportedMediaType,
)
from textkit.extract.encoding import BOMS

# How many leading bytes `detect_media_type` wants to see.
SNIFF_BYTES = 4096

_EXTENSIONS = {
    ".txt": TEXT_PLAIN,
    ".text": TEXT_PLAIN,
    ".md": TEXT_MARKDOWN,
    ".markdown": TEXT_MARKDOWN,
    ".htm": TEXT_HTML,
    ".html": TEXT_HTML,
    ".pdf": APPLICATION_PDF,
    ".docx": APPLICATION_DOCX,
}
_TEXT_MEDIA_TYPES = frozenset({TEXT_PLAIN, TEXT_MARKDOWN, TEXT_HTML})
_TEXT_KIND_LABELS = {TEXT_PLAIN: "plain", TEXT_MARKDOWN: "Markdown", TEXT_HTML: "HTML"}
_SUPPORTED_KINDS = "a PDF, Word (.docx), HTML, Markdown or plain-text file"

PDF_MAGIC = b"%PDF-"
_ZIP_MAGIC = b"PK\x03\x04"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def detect_media_type(filename: str, head: bytes) -> str:
    """Return the media type of a file from its extension, checked against its first bytes.

    `head` should hold the first `SNIFF_BYTES` bytes (fewer only if the file is shorter).
    Raises UnsupportedMediaType for unknown extensions or content that contradicts the name, and
    ParseError for an empty file.
    """
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if not suffix:
        raise UnsupportedMediaType(
            f"The file name has no extension, so its type is unknown; upload {_SUPPORTED_KINDS}."
        )
    media_type = _EXTENSIONS.get(suffix)
    if media_type is None:
        raise UnsupportedMediaType(
            f'Files ending in "{suffix}" are not supported; upload {_SUPPORTED_KINDS}.'
        )
    if not head:
        raise ParseError("The file is empty.")
    if media_type == APPLICATION_PDF and not head.startswith(PDF_MAGIC):
        raise UnsupportedMediaType("The file is named like a PDF, but its content is not a PDF.")
    if media_type == APPLICATION_DOCX and not head.startswith(_ZIP_MAGIC):
        if head.startswith(_OLE_MAGIC):
            raise UnsupportedMediaType(
                "The file is an old-style Word (.doc) file or a password-protected document; "
                "save it as an unprotected .docx and upload that."
            )
        raise UnsupportedMediaType(
            "The file is named like a Word (.docx) document, but its content is not one."
        )
    if media_type in _TEXT_MEDIA_TYPES and _looks_binary(head):
        raise UnsupportedMediaType(
            f"The file is named like {_TEXT_KIND_LABELS[media_type]} text, "
            "but it contains binary data."
        )
    return media_type


def _looks_binary(head: bytes) -> bool:
    if any(head.startswith(bom) for bom, _ in BOMS):
        return False
    return b"\x00" in head or head.startswith((PDF_MAGIC, _ZIP_MAGIC, _OLE_MAGIC))
