"""What a crawl reads from an HTML page: the links it follows (`<a href>`, resolved against the
page's address or its `<base href>`) and the page's metadata (title, description, author,
keywords, publication dates, language)."""

from __future__ import annotations

from dataclasses import dataclass, field

import lxml.html
from lxml import etree

from sources.kinds.web_urls import url_normalise

# <meta name=...> and <meta property=...> and the metadata key each becomes.
_META_NAMES = {"description": "description", "author": "author", "keywords": "keywords"}
_META_PROPERTIES = {
    "article:published_time": "published",
    "article:modified_time": "modified",
}


@dataclass(frozen=True)
class PageInfo:
    """`links`: normalised http(s) addresses in first-seen order, each once, fragments dropped."""

    links: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)


def html_read(content: bytes, url: str, *, charset: str | None = None) -> PageInfo:
    """The page's links and metadata; an empty PageInfo when lxml finds no document. Without
    a `charset` (or with one lxml does not know), UTF-8 when the bytes are UTF-8, else lxml's
    own guess (a <meta charset>, else Latin-1)."""
    guess = "utf-8" if _is_utf8(content) else None
    for encoding in dict.fromkeys((charset or guess, guess)):
        try:
            parser = lxml.html.HTMLParser(encoding=encoding) if encoding else None
            root = lxml.html.document_fromstring(content, parser=parser)
            break
        except LookupError:
            continue  # a charset lxml does not know
        except (etree.ParserError, ValueError):
            return PageInfo()
    else:
        return PageInfo()
    return PageInfo(_links(root, url), _metadata(root))


def _links(root: lxml.html.HtmlElement, url: str) -> tuple[str, ...]:
    base = url
    for element in root.iter("base"):
        href = element.get("href")
        if href:
            base = url_normalise(href, base=url) or url
            break
    links: dict[str, None] = {}
    for element in root.iter("a"):
        href = element.get("href")
        if not href:
            continue
        normal = url_normalise(href, base=base)
        if normal is not None:
            links.setdefault(normal, None)
    return tuple(links)


def _metadata(root: lxml.html.HtmlElement) -> dict[str, str]:
    metadata: dict[str, str] = {}
    title = root.find("head/title")
    if title is not None:
        text = " ".join(title.text_content().split())
        if text:
            metadata["title"] = text
    for element in root.iter("meta"):
        key = _META_NAMES.get((element.get("name") or "").strip().lower()) or _META_PROPERTIES.get(
            (element.get("property") or "").strip().lower()
        )
        value = " ".join((element.get("content") or "").split())
        if key and value:
            metadata.setdefault(key, value)
    language = (root.get("lang") or "").strip()
    if language:
        metadata["language"] = language
    return metadata


def _is_utf8(content: bytes) -> bool:
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
