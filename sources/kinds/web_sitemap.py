"""Sitemaps (sitemaps.org 0.9): a `<urlset>` of pages or a `<sitemapindex>` of further
sitemaps, plain or gzip-compressed. Parsed without entities, DTDs or network access."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.translation import gettext_noop
from lxml import etree

from textkit.reasons import ReasonedError, reason

# The protocol's own bound on one sitemap, compressed or not.
SITEMAP_MAX_BYTES = 50 * 1024 * 1024


# What is wrong with a sitemap (`detail`: the parser's or zlib's own words).
NOT_XML = reason("website.sitemap_not_xml", gettext_noop("not valid XML (%(detail)s)"))
NOT_A_SITEMAP = reason(
    "website.not_a_sitemap",
    gettext_noop("a <%(root)s> document, not a <urlset> or <sitemapindex>"),
)
NOT_GZIP = reason("website.sitemap_not_gzip", gettext_noop("not valid gzip (%(detail)s)"))
INFLATES_TOO_MUCH = reason(
    "website.sitemap_inflates", gettext_noop("over %(limit)s bytes uncompressed")
)


class SitemapInvalid(ReasonedError, ValueError):
    """A sitemap that cannot be read; the message (a declared reason) says why."""


@dataclass(frozen=True)
class Entry:
    loc: str
    lastmod: datetime | None = None


@dataclass(frozen=True)
class Sitemap:
    """`is_index`: the entries are sitemaps, not pages."""

    is_index: bool
    entries: tuple[Entry, ...]


def sitemap_parse(data: bytes) -> Sitemap:
    """The sitemap's entries in document order. Raises SitemapInvalid naming what is wrong."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzipped(data)
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        root = etree.fromstring(data, parser=parser)
    except etree.XMLSyntaxError as exc:
        raise SitemapInvalid(NOT_XML(detail=str(exc))) from None
    kind = etree.QName(root).localname
    if kind not in ("urlset", "sitemapindex"):
        raise SitemapInvalid(NOT_A_SITEMAP(root=kind))
    entries = []
    for child in root:
        if not isinstance(child.tag, str):
            continue  # comments, processing instructions
        loc = lastmod = None
        for field in child:
            if not isinstance(field.tag, str):
                continue
            name = etree.QName(field).localname
            if name == "loc":
                loc = (field.text or "").strip()
            elif name == "lastmod":
                lastmod = _date(field.text or "")
        if loc:
            entries.append(Entry(loc, lastmod))
    return Sitemap(kind == "sitemapindex", tuple(entries))


def _gunzipped(data: bytes) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, SITEMAP_MAX_BYTES + 1)
    except zlib.error as exc:
        raise SitemapInvalid(NOT_GZIP(detail=str(exc))) from None
    if len(out) > SITEMAP_MAX_BYTES:
        raise SitemapInvalid(INFLATES_TOO_MUCH(limit=SITEMAP_MAX_BYTES))
    return out


def _date(text: str) -> datetime | None:
    """W3C datetime (what sitemaps use) as far as fromisoformat reads it; None otherwise. A
    date or time without a zone (`2025-03-01`) is taken as UTC, as the W3C profile allows."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
