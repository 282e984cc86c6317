"""Checks for formats that are ZIP archives of XML parts (Office Open XML, OpenDocument, EPUB),
made before any library inflates or parses them: zip bombs (too many entries, too many bytes
inflated, a ratio no real document has), encrypted archives, names that climb out of the
archive, and XML parts with a DTD (entity bombs, external entities) are refused with a sentence
naming the kind of file.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO
from xml.parsers import expat

from textkit.extract.base import ParseError
from textkit.reasons import reason
from textkit.words import gettext_noop

# Zip-bomb limits, checked against the archive directory before anything is inflated. zipfile
# never inflates an entry past its declared size, so the declared sizes can be trusted.
MAX_ENTRIES = 2000
MAX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_COMPRESSION_RATIO = 100
# Entries smaller than this cannot do harm, so their compression ratio is not judged.
_RATIO_CHECK_MIN_BYTES = 1024 * 1024

# `what` names the file ("Word document"), `label` its format ("Word (.docx) document"): words
# marked where the formats write them.
NOT_THE_FORMAT = reason(
    "archive.not_the_format",
    gettext_noop("The file is a ZIP archive, but not a %(label)s."),
    words=("label",),
)
ENCRYPTED = reason(
    "archive.encrypted",
    gettext_noop("The %(what)s is encrypted; upload an unencrypted copy."),
    words=("what",),
)
PART_CLIMBS_OUT = reason(
    "archive.part_climbs_out",
    gettext_noop(
        'The %(what)s holds a part named "%(name)s" that points outside the file; it may be '
        "malicious."
    ),
    words=("what",),
)
NOT_VALID = reason(
    "archive.not_valid", gettext_noop("The file is not a valid %(label)s."), words=("label",)
)
TOO_MANY_PARTS = reason(
    "archive.too_many_parts",
    gettext_noop(
        "The %(what)s has %(parts)s parts, more than the limit of %(limit)s; it may be a zip bomb."
    ),
    words=("what",),
)
EXPANDS_TOO_MUCH = reason(
    "archive.expands_too_much",
    gettext_noop(
        "The %(what)s expands to %(mb)s MB, more than the limit of %(limit)s MB; it may be a "
        "zip bomb."
    ),
    words=("what",),
)
COMPRESSED_TOO_MUCH = reason(
    "archive.compressed_too_much",
    gettext_noop(
        'The %(what)s part "%(name)s" is compressed more than %(ratio)s:1; it may be a zip bomb.'
    ),
    words=("what",),
)
PART_DECLARES_DTD = reason(
    "archive.part_declares_dtd",
    gettext_noop(
        'The %(what)s part "%(name)s" declares a DTD or entities, which is not allowed; it may '
        "be malicious."
    ),
    words=("what",),
)
PART_NOT_XML = reason(
    "archive.part_not_xml",
    gettext_noop('The %(what)s part "%(name)s" is not well-formed XML.'),
    words=("what",),
)

# What zipfile raises for a damaged archive: bad headers or CRC, truncated or corrupt deflate
# data, unsupported compression methods, nonsense offsets.
ZIP_DAMAGE_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError)


def check_office_archive(
    path: Path,
    *,
    what: str,
    label: str,
    required: str = "[Content_Types].xml",
    allow_bare_doctype: bool = False,
) -> None:
    """Refuse what cannot be a harmless `label` ("Word (.docx) document"): a damaged archive,
    one without the `required` entry, a zip bomb, an encrypted one, an entry whose name climbs
    out of the archive, and XML parts with a DTD. `what` names the file in messages ("Word
    document"; both marked with `gettext_noop`). Reads every XML part's prologue, inflating at
    most the declared sizes. `allow_bare_doctype` lets a DOCTYPE without an internal subset
    through (every EPUB chapter starts with `<!DOCTYPE html>`); see `check_xml_part`."""
    try:
        with zipfile.ZipFile(path) as opened:
            entries = [info for info in opened.infolist() if not info.is_dir()]
            _check_sizes(entries, what)
            if required not in {info.filename for info in entries}:
                raise ParseError(NOT_THE_FORMAT(label=label))
            if any(info.flag_bits & 0x1 for info in entries):
                raise ParseError(ENCRYPTED(what=what))
            for info in entries:
                if _climbs_out(info.filename):
                    raise ParseError(PART_CLIMBS_OUT(what=what, name=info.filename))
                with opened.open(info) as part:
                    check_xml_part(
                        info.filename, part, what=what, allow_bare_doctype=allow_bare_doctype
                    )
    except ZIP_DAMAGE_ERRORS as exc:
        raise ParseError(NOT_VALID(label=label)) from exc


def _climbs_out(name: str) -> bool:
    path = PurePosixPath(name.replace("\\", "/"))
    return path.is_absolute() or ".." in path.parts or ":" in (path.parts[0] if path.parts else "")


def _check_sizes(entries: list[zipfile.ZipInfo], what: str) -> None:
    if len(entries) > MAX_ENTRIES:
        raise ParseError(TOO_MANY_PARTS(what=what, parts=len(entries), limit=MAX_ENTRIES))
    total = sum(info.file_size for info in entries)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ParseError(
            EXPANDS_TOO_MUCH(
                what=what,
                mb=round(total / 1024 / 1024),
                limit=round(MAX_UNCOMPRESSED_BYTES / 1024 / 1024),
            )
        )
    for info in entries:
        if (
            info.file_size >= _RATIO_CHECK_MIN_BYTES
            and info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1)
        ):
            raise ParseError(
                COMPRESSED_TOO_MUCH(what=what, name=info.filename, ratio=MAX_COMPRESSION_RATIO)
            )


class _DoctypeFound(Exception):
    pass


class _RootElementReached(Exception):
    pass


def check_xml_part(
    name: str, part: IO[bytes], *, what: str, allow_bare_doctype: bool = False
) -> None:
    """Refuse an XML part with a document type declaration: that is where entity bombs (billion
    laughs) and external entities (XXE) live. Parsing stops at the root element, since a DOCTYPE
    can only come before it. Parts that are not XML (images) are skipped.

    With `allow_bare_doctype`, a DOCTYPE without an internal subset (`<!DOCTYPE html>`, or one
    naming XHTML's public DTD) passes: it declares no entities, and no parser here fetches an
    external DTD."""
    chunk = part.read(64 * 1024)
    if not chunk.lstrip(b"\xef\xbb\xbf\xfe\xff\x00 \t\r\n").startswith(b"<"):
        return
    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = (
        _raise_if_internal_subset if allow_bare_doctype else _raise_doctype_found
    )
    parser.StartElementHandler = _raise_root_element_reached
    try:
        while chunk:
            parser.Parse(chunk, False)
            chunk = part.read(64 * 1024)
        parser.Parse(b"", True)
    except _RootElementReached:
        return
    except _DoctypeFound:
        raise ParseError(PART_DECLARES_DTD(what=what, name=name)) from None
    except expat.ExpatError as exc:
        raise ParseError(PART_NOT_XML(what=what, name=name)) from exc
    raise ParseError(PART_NOT_XML(what=what, name=name))


def _raise_doctype_found(*_args: object) -> None:
    raise _DoctypeFound


def _raise_if_internal_subset(
    _name: str, _system_id: str | None, _public_id: str | None, has_internal_subset: int
) -> None:
    if has_internal_subset:
        raise _DoctypeFound


def _raise_root_element_reached(*_args: object) -> None:
    raise _RootElementReached
