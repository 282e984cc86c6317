"""E-mail (.eml, .msg): the headers, the body and the attachments Canon can read, as one document
titled by the Subject.

Headers. From, To, Cc, Date and Subject open the text as one short paragraph ("From: …\\nTo: …").
Canon has no per-document metadata fields yet, so the headers go into the text, where search and
a model can read them: "the mail Alice sent in March" finds it.

Body. Every inline text part (text/plain or text/html without a file name), in order: clients
split a message's text around an inline picture, or add a part after a forwarded one. Of the
versions of a multipart/alternative, the plain text when it is substantial (at least half as long
as the richer version's text), else the richer one (the HTML through the HTML extractor): an empty
or stub plain part ("view this in a client that shows HTML") must not hide a 37 KB HTML body. An
Outlook file chooses between its plain and HTML bodies the same way, or reads its RTF body when it
has neither. Quoted replies are kept: they are often the only copy of what is being answered.

Charsets. A part's declared charset is checked, not trusted (`charsets.decode_declared`): UTF-8
labelled GB2312, GBK labelled gb2312 (read as GB18030, its superset) and GBK labelled ISO-8859-1
are read as what they are. A file saved as UTF-16 or UTF-32 (with or without a byte-order mark,
as Windows tools save it) is decoded before it is parsed, not read as raw MIME.

Attachments are part of the document. Each one of a kind Canon reads (its format found from its
name among the registry's, checked against its first bytes) follows the body as a section under
the heading "Attachment: <name>", its own headings one level down, within the same `max_chars`
budget; an attached e-mail is read with its headers and body, but its own attachments are only
named (one level deep). Everything else is named in a last paragraph, "Attachments not
read: …": pictures (Canon could OCR them, but in mail they are mostly logos and signatures),
archives, unknown kinds, files that cannot be read, and those past `MAX_ATTACHMENTS` or the
length budget. A mail and its attachment are one message to the reader, and making attachments
documents of their own needs a source that owns derived documents, which Canon does not have yet.

Attachments go through the file-path extractors from a temporary directory, under names made
here ("3.pdf": a counter and the extension the registry matched), never the attachment's own
file name, which could climb out of the directory; the directory is removed afterwards.

The registry lists this module among the formats, and this module needs the formats to read
attachments, so it cannot import the registry (that would be an import circle, which
lint-imports refuses even inside a function). The registry hands it its list instead, right
after building it (`use_formats(FORMATS)`): one map of formats, and imports that point one way.

EML is read by the standard library (`email`, policy=default); MSG by extract-msg. Both are
bounded: at most `MAX_PARTS` MIME parts, header values longer than `MAX_HEADER_CHARS` are shown
cut rather than parsed (the address parser is superlinear), and nesting deep enough to exhaust
the stack is refused.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

from bs4.dammit import EncodingDetector

from textkit.extract import charsets, encoding, html, plain, rtf
from textkit.extract.base import (
    HEADING,
    OLE_MAGIC,
    PARAGRAPH,
    Block,
    Extracted,
    ParseError,
    UnsupportedMediaType,
)
from textkit.reasons import reason
from textkit.words import gettext_noop

MESSAGE_RFC822 = "message/rfc822"
OUTLOOK_MSG = "application/vnd.ms-outlook"
MEDIA_TYPES = (MESSAGE_RFC822, OUTLOOK_MSG)
EXTENSIONS = {".eml": MESSAGE_RFC822, ".msg": OUTLOOK_MSG}
LABEL = gettext_noop("e-mail (.eml, .msg)")

NAMED_NOT_MSG = reason(
    "mail.named_not_msg",
    gettext_noop("The file is named like an Outlook message (.msg), but its content is not one."),
)
NESTED_TOO_DEEPLY = reason(
    "mail.nested_too_deeply", gettext_noop("The e-mail nests its parts too deeply to be read.")
)
TOO_MANY_PARTS = reason(
    "mail.too_many_parts", gettext_noop("The e-mail has more than %(limit)s parts.")
)
NOT_MSG = reason("mail.not_msg", gettext_noop("The file is not a valid Outlook message (.msg)."))
MSG_DAMAGED = reason(
    "mail.msg_damaged", gettext_noop("The Outlook message is damaged and cannot be read.")
)

MAX_ATTACHMENTS = 50
MAX_PARTS = 1000
MAX_HEADER_CHARS = 8 * 1024
_HEADER_NAMES = ("From", "To", "Cc", "Date", "Subject")
_BODY_TYPES = frozenset({"text/plain", "text/html"})
# A plain version at least this long, against the richer version's text, is the one read.
SUBSTANTIAL_PLAIN = 0.5
# How many leading bytes an attachment's first-byte check wants (detect.SNIFF_BYTES).
_SNIFF_BYTES = 4096

logger = logging.getLogger(__name__)


# Every format Canon reads, set by the registry (see the module docstring).
_formats: tuple[ModuleType, ...] = ()


def use_formats(formats: tuple[ModuleType, ...]) -> None:
    """Read attachments of these formats (the registry's `FORMATS`)."""
    global _formats
    _formats = formats


def check_head(head: bytes, media_type: str) -> None:
    if media_type == OUTLOOK_MSG:
        if not head.startswith(OLE_MAGIC):
            raise UnsupportedMediaType(NAMED_NOT_MSG())
        return
    if _unmarked_utf16(head):
        return  # a mail saved as UTF-16 without a byte-order mark: its NULs are not binary
    encoding.refuse_binary(head, gettext_noop("an e-mail (.eml)"))


@dataclass
class _Attachment:
    name: str
    data: bytes = b""
    # An attached e-mail, already read (its own attachments named only).
    message: _Mail | None = None


@dataclass
class _Mail:
    subject: str
    headers: list[tuple[str, str]]
    body: list[Block]
    attachments: list[_Attachment] = field(default_factory=list)


def extract(path: Path, *, max_chars: int) -> Extracted:
    data = path.read_bytes()
    mail = _read_msg(data, nested=False) if data.startswith(OLE_MAGIC) else _read_eml(data)
    return Extracted(title=mail.subject, blocks=_mail_blocks(mail, max_chars, top=True))


def _mail_blocks(mail: _Mail, max_chars: int, *, top: bool) -> list[Block]:
    """The header paragraph, the body, then the attachments (read when `top`, else named)."""
    header_text = "\n".join(f"{name}: {value}" for name, value in mail.headers if value)
    blocks = ([Block(PARAGRAPH, header_text)] if header_text else []) + mail.body
    used = sum(len(block.text) + 2 for block in blocks)
    not_read: list[str] = []
    if mail.attachments and top:
        with tempfile.TemporaryDirectory(prefix="canon-mail-") as directory:
            for index, attachment in enumerate(mail.attachments):
                if index >= MAX_ATTACHMENTS:
                    not_read.append(f"{attachment.name} (more than {MAX_ATTACHMENTS} attachments)")
                    continue
                section, reason = _attachment_blocks(
                    attachment, Path(directory), index, max_chars - used
                )
                if section is None:
                    not_read.append(f"{attachment.name} ({reason})" if reason else attachment.name)
                    continue
                heading = Block(HEADING, f"Attachment: {attachment.name}", level=1)
                blocks.append(heading)
                blocks.extend(section)
                used += sum(len(block.text) + 2 for block in [heading, *section])
    elif mail.attachments:
        not_read = [attachment.name for attachment in mail.attachments]
    if not_read:
        blocks.append(Block(PARAGRAPH, "Attachments not read: " + "; ".join(not_read) + "."))
    return blocks


def _attachment_blocks(
    attachment: _Attachment, directory: Path, index: int, max_chars: int
) -> tuple[list[Block] | None, str]:
    """The attachment's blocks, headings one level down; or None and why it is not read ("" for
    a kind Canon does not read)."""
    if attachment.message is not None:
        return _nested(_mail_blocks(attachment.message, max_chars, top=False)), ""
    suffix = PurePosixPath(attachment.name.replace("\\", "/")).suffix.lower()
    module = next((m for m in _formats if suffix in m.EXTENSIONS), None)
    if module is None or not suffix:
        return None, ""
    media_type = module.EXTENSIONS[suffix]
    if media_type.startswith("image/"):
        # Pictures in mail are mostly logos, signatures and screenshots; OCR on each would
        # spend the document's time budget on them.
        return None, "picture"
    if not attachment.data:
        return None, "empty"
    try:
        if hasattr(module, "check_head"):
            module.check_head(attachment.data[:_SNIFF_BYTES], media_type)
        if media_type in MEDIA_TYPES:
            # An e-mail attached as a file: read once, its own attachments named only.
            inner = (
                _read_msg(attachment.data, nested=True)
                if attachment.data.startswith(OLE_MAGIC)
                else _read_eml(attachment.data, nested=True)
            )
            blocks = _mail_blocks(inner, max_chars, top=False)
        else:
            path = directory / f"{index}{suffix}"
            path.write_bytes(attachment.data)
            blocks = module.extract(path, max_chars=max_chars).blocks
            path.unlink()
    except ParseError as exc:
        return None, str(exc).rstrip(".")
    if sum(len(block.text) + 2 for block in blocks) > max_chars:
        return None, "longer than what is left of the length limit"
    return _nested(blocks), ""


def _nested(blocks: list[Block]) -> list[Block]:
    """Headings one level down, under the attachment's heading."""
    return [
        Block(block.kind, block.text, level=min(block.level + 1, 6), location=block.location)
        if block.kind == HEADING
        else block
        for block in blocks
    ]


# EML


def _read_eml(data: bytes, *, nested: bool = False) -> _Mail:
    try:
        message = BytesParser(policy=policy.default).parsebytes(_mime_bytes(data))
        assert isinstance(message, EmailMessage)
        return _eml_mail(message, nested=nested)
    except RecursionError:
        raise ParseError(NESTED_TOO_DEEPLY()) from None


def _mime_bytes(data: bytes) -> bytes:
    """The message as MIME is written, in bytes ASCII-compatible: a file saved as UTF-16 or
    UTF-32 decoded and written back as UTF-8 (the parts' 8-bit text with it, which the UTF-8
    check of `charsets` then reads), a UTF-8 byte-order mark dropped."""
    for bom, name in encoding.BOMS:
        if data.startswith(bom):
            return data.decode(name, errors="replace").encode("utf-8")
    unmarked = _unmarked_utf16(data[:_SNIFF_BYTES])
    if unmarked:
        return data.decode(unmarked, errors="replace").encode("utf-8")
    return data


def _unmarked_utf16(head: bytes) -> str | None:
    """ "utf-16-le" or "utf-16-be" when `head` is UTF-16 without a byte-order mark (a message
    starts with ASCII header lines: every other byte NUL), else None."""
    sample = head[:512] if len(head) % 2 == 0 else head[:511]
    if len(sample) < 8:
        return None
    even, odd = sample[0::2], sample[1::2]
    if odd.count(0) == len(odd) and even.count(0) == 0:
        return "utf-16-le"
    if even.count(0) == len(even) and odd.count(0) == 0:
        return "utf-16-be"
    return None


def _eml_mail(message: EmailMessage, *, nested: bool) -> _Mail:
    headers = [(name, _eml_header(message, name)) for name in _HEADER_NAMES]
    leaves = _eml_leaves(message)
    read: list[EmailMessage] = []
    body = _eml_body(message, read)
    read_ids = {id(part) for part in read}
    attachments: list[_Attachment] = []
    for part in leaves:
        if id(part) in read_ids:
            continue
        embedded = part.get_content_type() == MESSAGE_RFC822 and part.is_multipart()
        name = part.get_filename() or ""
        if not name and not embedded and part.get_content_disposition() != "attachment":
            continue  # the alternative not chosen, or an unnamed inline part
        if embedded:
            inner = part.get_payload(0)
            assert isinstance(inner, EmailMessage)
            if nested:
                inner_mail = _Mail(subject="", headers=[], body=[])
            else:
                inner_mail = _eml_mail(inner, nested=True)
            subject = _eml_header(inner, "Subject")
            name = name or f"{subject or 'message'}.eml"
            attachments.append(_Attachment(name, message=inner_mail))
        else:
            payload = part.get_payload(decode=True)
            data = payload if isinstance(payload, bytes) else b""
            attachments.append(_Attachment(name or "unnamed attachment", data))
    subject = next((value for name, value in headers if name == "Subject"), "")
    return _Mail(subject=subject, headers=headers, body=body, attachments=attachments)


def _eml_header(message: EmailMessage, name: str) -> str:
    """The header's value decoded, unfolded; cut, and not parsed, when very long."""
    raw = next((value for key, value in message.raw_items() if key.lower() == name.lower()), None)
    if raw is None:
        return ""
    if len(raw) > MAX_HEADER_CHARS:
        return " ".join(str(raw)[:MAX_HEADER_CHARS].split()) + " …"
    try:
        value = str(message[name])
    except (ValueError, IndexError, TypeError, RecursionError):
        value = str(raw)
    return " ".join(value.split())


def _eml_leaves(message: EmailMessage) -> list[EmailMessage]:
    """The parts that are not multipart containers, in order; an attached message is a leaf."""
    leaves: list[EmailMessage] = []
    pending: list[Any] = [message]
    while pending:
        part = pending.pop()
        if len(leaves) + len(pending) > MAX_PARTS:
            raise ParseError(TOO_MANY_PARTS(limit=MAX_PARTS))
        if part.get_content_maintype() == "multipart" and part.is_multipart():
            pending.extend(reversed(part.get_payload()))
        elif isinstance(part, EmailMessage):
            leaves.append(part)
    return leaves


def _eml_body(part: EmailMessage, read: list[EmailMessage]) -> list[Block]:
    """The body blocks `part` holds (see the module docstring); the text parts read are added
    to `read`, so that they are not attachments too."""
    if part.get_content_maintype() == "multipart" and part.is_multipart():
        children = [child for child in part.get_payload() if isinstance(child, EmailMessage)]
        if part.get_content_subtype() == "alternative":
            return _eml_alternative(children, read)
        return [block for child in children for block in _eml_body(child, read)]
    if part.get_content_type() not in _BODY_TYPES or part.get_filename():
        return []
    if part.get_content_disposition() == "attachment":
        return []
    read.append(part)
    return _eml_text_blocks(part)


def _eml_alternative(versions: list[EmailMessage], read: list[EmailMessage]) -> list[Block]:
    """The plain version when it is substantial, else the richest (the last, RFC 2046) that
    has text."""
    plain_read: list[EmailMessage] = []
    plain_blocks: list[Block] = []
    richest: tuple[list[Block], list[EmailMessage]] | None = None
    for version in versions:
        version_read: list[EmailMessage] = []
        blocks = _eml_body(version, version_read)
        if version.get_content_type() == "text/plain":
            if not plain_read:
                plain_read, plain_blocks = version_read, blocks
        elif _length(blocks):
            richest = (blocks, version_read)
    rich_blocks, rich_read = richest or ([], [])
    chosen = _richer(plain_blocks, rich_blocks)
    read.extend(plain_read if chosen is plain_blocks else rich_read)
    return chosen


def _richer(plain_blocks: list[Block], rich_blocks: list[Block]) -> list[Block]:
    """The plain version when it is substantial against the rich one, else the rich one."""
    if _length(plain_blocks) >= SUBSTANTIAL_PLAIN * _length(rich_blocks):
        return plain_blocks
    return rich_blocks


def _length(blocks: list[Block]) -> int:
    """How much text the blocks hold, whitespace not counted."""
    return sum(len("".join(block.text.split())) for block in blocks)


def _eml_text_blocks(part: EmailMessage) -> list[Block]:
    payload = part.get_payload(decode=True)
    data = payload if isinstance(payload, bytes) else b""
    if part.get_content_subtype() == "html":
        label = part.get_content_charset() or EncodingDetector.find_declared_encoding(
            data, is_html=True
        )
        text = charsets.decode_declared(data, label)
        return html.extract_markup(text.encode("utf-8")).blocks
    text = charsets.decode_declared(data, part.get_content_charset())
    return plain.paragraph_blocks(text.replace("\r\n", "\n"))


# MSG


def _read_msg(data: bytes, *, nested: bool) -> _Mail:
    import extract_msg
    from extract_msg.exceptions import ExMsgBaseException

    try:
        message = extract_msg.openMsg(data, delayAttachments=nested)
    except (ExMsgBaseException, OSError, ValueError, KeyError, IndexError) as exc:
        raise ParseError(NOT_MSG()) from exc
    try:
        return _msg_mail(message, nested=nested)
    except (ExMsgBaseException, OSError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ParseError(MSG_DAMAGED()) from exc
    finally:
        message.close()


def _msg_mail(message: Any, *, nested: bool) -> _Mail:
    """The message's headers, body and attachments; when `nested`, attachments named only."""
    from extract_msg.enums import AttachmentType

    headers = [
        ("From", message.sender or ""),
        ("To", message.to or ""),
        ("Cc", message.cc or ""),
        ("Date", _msg_date(message)),
        ("Subject", message.subject or ""),
    ]
    headers = [(name, " ".join(value.split())[:MAX_HEADER_CHARS]) for name, value in headers]
    attachments: list[_Attachment] = []
    for attachment in message.attachments:
        name = attachment.longFilename or attachment.shortFilename or ""
        if nested:
            attachments.append(_Attachment(name or "unnamed attachment"))
        elif attachment.type == AttachmentType.MSG:
            inner = _msg_mail(attachment.data, nested=True)
            attachments.append(
                _Attachment(name or f"{inner.subject or 'message'}.msg", message=inner)
            )
        elif attachment.type == AttachmentType.DATA and isinstance(attachment.data, bytes):
            attachments.append(_Attachment(name or "unnamed attachment", attachment.data))
        else:
            attachments.append(_Attachment(name or "unnamed attachment"))
    return _Mail(
        subject=headers[-1][1], headers=headers, body=_msg_body(message), attachments=attachments
    )


def _msg_date(message: Any) -> str:
    date = message.date
    return "" if date is None else date.strftime("%a, %d %b %Y %H:%M:%S %z").strip()


def _msg_body(message: Any) -> list[Block]:
    """The plain body when it is substantial against the HTML stream (not extract-msg's HTML
    made from RTF), else the HTML; with neither, the RTF body through the RTF extractor."""
    text = message.body or ""
    plain_blocks = plain.paragraph_blocks(text.replace("\r\n", "\n")) if text.strip() else []
    markup = message.getStream("__substg1.0_10130102")
    html_blocks = html.extract_markup(markup).blocks if markup else []
    if plain_blocks or html_blocks:
        return _richer(plain_blocks, html_blocks)
    rtf_body = message.rtfBody
    if rtf_body:
        return rtf.extract_data(rtf_body).blocks
    return []
