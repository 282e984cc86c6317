"""Writing small Outlook messages (.msg) for tests. extract-msg only reads, and no package on the
registries writes them, so this writes the two layers by hand:

- a Compound File (MS-CFB, version 3: 512-byte sectors): streams under 4,096 bytes in the
  mini stream (64-byte sectors), larger ones in sectors of their own, one FAT, no DIFAT; each
  storage's children chained as right siblings in MS-CFB's name order (a valid, if unbalanced,
  binary tree: readers do not check the red-black colours);
- the message (MS-OXMSG): `__properties_version1.0` streams of fixed-size properties, a
  `__substg1.0_<tag>` stream per string (UTF-16-LE) or binary property, a storage per
  recipient and per attachment, an empty named-property map.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field

_SECTOR = 512
_MINI_SECTOR = 64
_MINI_CUTOFF = 4096
_FREE, _END, _FATSECT, _NOSTREAM = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF
_STORAGE, _STREAM, _ROOT = 1, 2, 5


@dataclass
class _Node:
    name: str
    data: bytes | None = None  # None for a storage
    children: list[_Node] = field(default_factory=list)
    index: int = 0
    start: int = _END
    right_sibling: int = _NOSTREAM


def _child(storage: _Node, path: str) -> _Node:
    node = storage
    for name in path.split("/")[:-1]:
        found = next((c for c in node.children if c.name == name and c.data is None), None)
        if found is None:
            found = _Node(name)
            node.children.append(found)
        node = found
    return node


def compound_file(streams: dict[str, bytes]) -> bytes:
    """A compound file holding `streams` ({"storage/stream": data}); storages are implied."""
    root = _Node("Root Entry")
    for path, data in streams.items():
        _child(root, path).children.append(_Node(path.split("/")[-1], data))
    nodes: list[_Node] = []

    def number(node: _Node) -> None:
        node.index = len(nodes)
        nodes.append(node)
        for kid in node.children:
            number(kid)

    number(root)
    small = [n for n in nodes if n.data is not None and 0 < len(n.data) < _MINI_CUTOFF]
    large = [n for n in nodes if n.data is not None and len(n.data) >= _MINI_CUTOFF]
    mini_stream, mini_fat = b"", []
    for node in small:
        assert node.data is not None
        node.start = len(mini_stream) // _MINI_SECTOR
        count = -(-len(node.data) // _MINI_SECTOR)
        mini_fat += [node.start + i + 1 for i in range(count - 1)] + [_END]
        mini_stream += node.data.ljust(count * _MINI_SECTOR, b"\0")

    def sectors(size: int) -> int:
        return -(-size // _SECTOR)

    dir_count = sectors(len(nodes) * 128)
    minifat_count = sectors(len(mini_fat) * 4)
    ministream_count = sectors(len(mini_stream))
    large_counts = [sectors(len(n.data or b"")) for n in large]
    body = dir_count + minifat_count + ministream_count + sum(large_counts)
    fat_count = 1
    while fat_count * 128 < fat_count + body:
        fat_count += 1
    assert fat_count <= 109
    fat: list[int] = [_FATSECT] * fat_count

    def chain(count: int) -> int:
        if count == 0:
            return _END
        first = len(fat)
        fat.extend([*range(first + 1, first + count), _END])
        return first

    dir_start = chain(dir_count)
    minifat_start = chain(minifat_count)
    root.start = chain(ministream_count)
    for node, count in zip(large, large_counts, strict=True):
        node.start = chain(count)
    fat += [_FREE] * (fat_count * 128 - len(fat))

    entries = b"".join(_entry(node, mini_stream_size=len(mini_stream)) for node in nodes)
    header = struct.pack(
        "<8s16sHHHHH6sIIIIIIIII",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",
        bytes(16),
        0x3E,
        3,
        0xFFFE,
        9,
        6,
        bytes(6),
        0,
        fat_count,
        dir_start,
        0,
        _MINI_CUTOFF,
        minifat_start if minifat_count else _END,
        minifat_count,
        _END,
        0,
    )
    difat = list(range(fat_count)) + [_FREE] * (109 - fat_count)
    header += struct.pack("<109I", *difat)

    def padded(data: bytes, count: int) -> bytes:
        return data.ljust(count * _SECTOR, b"\0")

    out = [header, struct.pack(f"<{len(fat)}I", *fat)]
    out.append(padded(entries, dir_count))
    out.append(padded(struct.pack(f"<{len(mini_fat)}I", *mini_fat), minifat_count))
    out.append(padded(mini_stream, ministream_count))
    for node, count in zip(large, large_counts, strict=True):
        out.append(padded(node.data or b"", count))
    return b"".join(out)


def _sort_key(node: _Node) -> tuple[int, str]:
    return (len(node.name), node.name.upper())


def _entry(node: _Node, *, mini_stream_size: int) -> bytes:
    name = node.name.encode("utf-16-le") + b"\0\0"
    kind = _ROOT if node.name == "Root Entry" else _STORAGE if node.data is None else _STREAM
    kids = sorted(node.children, key=_sort_key)
    child = kids[0].index if kids else _NOSTREAM
    for left, right in itertools.pairwise(kids):
        left.right_sibling = right.index
    size = mini_stream_size if kind == _ROOT else len(node.data or b"")
    return struct.pack(
        "<64sHBBIII16sIQQIQ",
        name,
        len(name),
        kind,
        1,
        _NOSTREAM,
        node.right_sibling,
        child,
        bytes(16),
        0,
        0,
        0,
        node.start if (size or kind == _ROOT) else _END,
        size,
    )


# MS-OXMSG

PT_LONG, PT_SYSTIME, PT_UNICODE, PT_BINARY = 0x0003, 0x0040, 0x001F, 0x0102


def _properties(header: bytes, props: dict[int, tuple[int, bytes | int]]) -> tuple[bytes, dict]:
    """The properties stream and the substg streams for `props` ({id: (type, value)})."""
    stream, substg = header, {}
    for prop_id, (prop_type, value) in props.items():
        tag = (prop_id << 16) | prop_type
        if prop_type in (PT_UNICODE, PT_BINARY):
            assert isinstance(value, bytes)
            size = len(value) + (2 if prop_type == PT_UNICODE else 0)
            stream += struct.pack("<IIII", tag, 6, size, 0)
            substg[f"__substg1.0_{tag:08X}"] = value
        else:
            assert isinstance(value, int)
            stream += struct.pack("<IIQ", tag, 6, value)
    return stream, substg


def _text(value: str) -> tuple[int, bytes]:
    return PT_UNICODE, value.encode("utf-16-le")


def _message_streams(
    *,
    subject: str,
    sender: tuple[str, str],
    to: list[tuple[str, str]],
    cc: list[tuple[str, str]],
    body: str,
    html: bytes,
    headers: str,
    attachments: list[tuple[str, bytes | dict[str, bytes]]],
    embedded: bool,
) -> dict[str, bytes]:
    recipients = [(name, email, 1) for name, email in to] + [(n, e, 2) for n, e in cc]
    props: dict[int, tuple[int, bytes | int]] = {
        0x001A: _text("IPM.Note"),
        0x0037: _text(subject),
        0x0C1A: _text(sender[0]),
        0x0C1F: _text(sender[1]),
        0x0E04: _text("; ".join(name for name, _ in to)),
        0x0E03: _text("; ".join(name for name, _ in cc)),
        0x0039: (PT_SYSTIME, 133_000_000_000_000_000),  # 2022-06-15 as a FILETIME
        0x340D: (PT_LONG, 0x00040000),  # store supports Unicode
    }
    if body:
        props[0x1000] = _text(body)
    if html:
        props[0x1013] = (PT_BINARY, html)
    if headers:
        props[0x007D] = _text(headers)
    count_header = struct.pack(
        "<IIII", len(recipients), len(attachments), len(recipients), len(attachments)
    )
    header = bytes(8) + count_header + (b"" if embedded else bytes(8))
    stream, substg = _properties(header, props)
    streams = {"__properties_version1.0": stream, **substg}
    for index, (name, email, kind) in enumerate(recipients):
        storage = f"__recip_version1.0_#{index:08X}"
        rstream, rsub = _properties(
            bytes(8),
            {
                0x0C15: (PT_LONG, kind),
                0x3001: _text(name),
                0x3003: _text(email),
                0x39FE: _text(email),
                0x3002: _text("SMTP"),
            },
        )
        streams[f"{storage}/__properties_version1.0"] = rstream
        streams.update({f"{storage}/{key}": value for key, value in rsub.items()})
    for index, (name, content) in enumerate(attachments):
        storage = f"__attach_version1.0_#{index:08X}"
        attach: dict[int, tuple[int, bytes | int]] = {
            0x3707: _text(name),
            0x3704: _text(name[:12]),
            0x3001: _text(name),
        }
        if isinstance(content, dict):
            attach[0x3705] = (PT_LONG, 5)  # an embedded message
            for key, value in content.items():
                streams[f"{storage}/__substg1.0_3701000D/{key}"] = value
        else:
            attach[0x3705] = (PT_LONG, 1)  # by value
            attach[0x3701] = (PT_BINARY, content)
        astream, asub = _properties(bytes(8), attach)
        streams[f"{storage}/__properties_version1.0"] = astream
        streams.update({f"{storage}/{key}": value for key, value in asub.items()})
    return streams


def outlook_message(
    *,
    subject: str,
    sender: tuple[str, str] = ("Alice Example", "alice@example.com"),
    to: list[tuple[str, str]] | None = None,
    cc: list[tuple[str, str]] | None = None,
    body: str = "",
    html: bytes = b"",
    headers: str = "",
    attachments: list[tuple[str, bytes | dict[str, bytes]]] | None = None,
) -> bytes:
    """An Outlook message file. An attachment's content is bytes, or the streams of an embedded
    message (`embedded_message`)."""
    streams = _message_streams(
        subject=subject,
        sender=sender,
        to=to if to is not None else [("Bob Example", "bob@example.com")],
        cc=cc or [],
        body=body,
        html=html,
        headers=headers,
        attachments=attachments or [],
        embedded=False,
    )
    for name in ("00020102", "00030102", "00040102"):
        streams[f"__nameid_version1.0/__substg1.0_{name}"] = b""
    return compound_file(streams)


def embedded_message(
    *, subject: str, body: str, attachment_names: tuple[str, ...] = ()
) -> dict[str, bytes]:
    """The streams of a message attached to another."""
    return _message_streams(
        subject=subject,
        sender=("Carol Example", "carol@example.com"),
        to=[("Alice Example", "alice@example.com")],
        cc=[],
        body=body,
        html=b"",
        headers="",
        attachments=[(name, b"data") for name in attachment_names],
        embedded=True,
    )
