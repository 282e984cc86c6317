"""Text whose charset a label declares (an e-mail part's `charset=`), decoded without trusting the
label blindly: mail clients label UTF-8 as GB2312, GBK as gb2312 and GBK as ISO-8859-1, and a
decoder that believes them indexes garbage.

The order, first that holds: a byte-order mark; bytes that are valid UTF-8 and not ASCII are
UTF-8 (text in another charset is almost never valid UTF-8); the label, read through the superset
its writers actually use (WHATWG's Encoding Standard reads GB2312 as GBK and ISO-8859-1 as
windows-1252; GB18030 holds GBK), when the bytes decode under it strictly and the text reads
plausibly (charset-normalizer's mess ratio); else the charset charset-normalizer finds; else the
label, with U+FFFD for what it cannot decode.

Where the detector ties (short CJK text: GBK bytes are Korean to it as well), the reading whose
non-ASCII letters keep to one script wins: Chinese read as Korean mixes Hangul and Han, which
neither language writes.
"""

from __future__ import annotations

import codecs
import unicodedata
from collections import Counter

import charset_normalizer
from charset_normalizer.md import mess_ratio

from textkit.extract.encoding import BOMS, decode

# Python's codec name of a label -> the codec its writers really use.
_SUPERSETS = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "big5": "big5hkscs",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "ascii": "cp1252",
    "iso8859-1": "cp1252",
    "iso8859-9": "cp1254",
    "tis-620": "cp874",
}
# Labels mail clients write that Python does not know.
_ALIASES = {
    "x-gbk": "gb18030",
    "gb_2312-80": "gb18030",
    "csgb2312": "gb18030",
    "x-euc-cn": "gb18030",
    "x-sjis": "cp932",
    "ms_kanji": "cp932",
    "windows-31j": "cp932",
    "ks_c_5601": "cp949",
    "x-windows-949": "cp949",
    "windows-874": "cp874",
    "x-mac-roman": "mac_roman",
}
# Above this, decoded text is mojibake rather than language (charset-normalizer's own default).
MAX_MESS = 0.2
# How much of the text the checks read: enough to judge, bounded for a long body.
_SAMPLE_CHARS = 32 * 1024
_SAMPLE_BYTES = 64 * 1024
# Detected charsets whose chaos is this close to the least are a tie.
_TIE = 0.05


def decode_declared(data: bytes, label: str | None) -> str:
    """`data` as text, `label` (a declared charset, or None) checked as the module says."""
    for bom, name in BOMS:
        if data.startswith(bom):
            return data.decode(name, errors="replace")
    codec = _codec(label)
    if data.isascii():
        # 7-bit text is itself in every charset but the 7-bit ones (ISO-2022-JP, UTF-7)
        return _strict(data, codec) or data.decode("ascii")
    utf8 = _strict(data, "utf-8")
    if utf8 is not None:
        return utf8
    declared = _strict(data, codec)
    if declared is not None and mess_ratio(declared[:_SAMPLE_CHARS], 1.0) <= MAX_MESS:
        return declared
    detected = _detected(data)
    if detected is not None:
        return data.decode(detected, errors="replace")
    if codec is not None:
        return data.decode(codec, errors="replace")
    return decode(data)


def _codec(label: str | None) -> str | None:
    """The codec to read a `label` with, or None for no label or one nobody knows."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    if label in _ALIASES:
        return _ALIASES[label]
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return _SUPERSETS.get(name, name)


def _strict(data: bytes, codec: str | None) -> str | None:
    if codec is None:
        return None
    try:
        return data.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def _detected(data: bytes) -> str | None:
    """The charset charset-normalizer reads `data` in with the least chaos; of a tie, the one
    whose reading keeps to one script."""
    sample = data[:_SAMPLE_BYTES]
    if len(sample) < len(data):
        sample = sample[: sample.rfind(b"\n") + 1] or sample  # not inside a character
    matches = list(charset_normalizer.from_bytes(sample))
    if b"\x00" not in sample:
        # CJK bytes pair up as UTF-16 too; UTF-16 without a mark shows itself by its NULs
        matches = [m for m in matches if not m.encoding.startswith(("utf_16", "utf_32"))]
    if not matches:
        return None
    least = min(match.chaos for match in matches)
    tied = [match for match in matches if match.chaos <= least + _TIE]
    best = min(tied, key=lambda match: _mixed_scripts(str(match)))
    return str(best.encoding)


def _mixed_scripts(text: str) -> float:
    """The share of non-ASCII letters outside their main script (Han and Kana count as one:
    Japanese writes both)."""
    scripts = Counter(_script(char) for char in text if not char.isascii() and char.isalpha())
    total = sum(scripts.values())
    return 0.0 if not total else 1 - max(scripts.values()) / total


def _script(char: str) -> str:
    point = ord(char)
    if 0xAC00 <= point <= 0xD7AF or 0x1100 <= point <= 0x11FF or 0x3130 <= point <= 0x318F:
        return "HANGUL"
    if 0x3040 <= point <= 0x30FF or 0x3400 <= point <= 0x9FFF or 0xF900 <= point <= 0xFAFF:
        return "HAN"
    if point >= 0x20000:
        return "HAN"
    return unicodedata.name(char, "OTHER ").split(" ", 1)[0]
