"""Decoding bytes of unknown encoding (plain text, Markdown, HTML)."""

from __future__ import annotations

import codecs

import charset_normalizer

from textkit.extract.base import MAGIC_NUMBERS, UnsupportedMediaType
from textkit.reasons import reason
from textkit.words import gettext_noop

# `label`: what the file is named as ("plain text"), words marked where they are written.
BINARY = reason(
    "file.binary",
    gettext_noop("The file is named like %(label)s, but it contains binary data."),
    words=("label",),
)

# UTF-32 marks first: the UTF-32-LE mark begins with the UTF-16-LE one.
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Enough for charset detection; the detected encoding is then applied to the whole file.
_DETECTION_SAMPLE_BYTES = 1024 * 1024


def decode(data: bytes, declared_encoding: str | None = None) -> str:
    """Decode bytes of unknown encoding: BOM, then UTF-8, then the declared encoding, then a
    detected one; anything left undecodable becomes U+FFFD."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if declared_encoding:
        try:
            return data.decode(declared_encoding)
        except (LookupError, UnicodeDecodeError):
            pass
    lenient = data.decode("utf-8", errors="replace")
    # Every valid multi-byte character shortens the text relative to the bytes. Many of them
    # per bad byte means UTF-8 with a few damaged bytes (a truncated last character, say), which
    # the detector would misread as a single-byte code page.
    if len(data) - len(lenient) >= 10 * lenient.count("\ufffd"):
        return lenient
    detected = _detect_encoding(data)
    if detected is None:
        return lenient
    try:
        return data.decode(detected)
    except UnicodeDecodeError:
        return data.decode(detected, errors="replace")


def _detect_encoding(data: bytes) -> str | None:
    sample = data[:_DETECTION_SAMPLE_BYTES]
    if len(sample) < len(data):
        # Cut at a line end so that the sample does not end inside a multi-byte character.
        line_end = sample.rfind(b"\n")
        if line_end > 0:
            sample = sample[: line_end + 1]
    matches = charset_normalizer.from_bytes(sample)
    best = matches.best()
    if best is None:
        return None
    # The detector often ranks a Central European code page first for Western European text;
    # cp1252 is far more common, so it wins a tie.
    for match in matches:
        if match.encoding == "cp1252" and match.chaos <= best.chaos:
            return "cp1252"
    return str(best.encoding)


def refuse_binary(head: bytes, label: str) -> None:
    """Raise UnsupportedMediaType when a file named as text (`label`: "plain text", marked with
    `gettext_noop`) starts like binary data: a NUL byte outside a UTF-16/32 file, or another
    format's magic number."""
    if any(head.startswith(bom) for bom, _ in BOMS):
        return
    if b"\x00" in head or head.startswith(MAGIC_NUMBERS):
        raise UnsupportedMediaType(BINARY(label=label))
