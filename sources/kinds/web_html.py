"""What a crawl reads from an HTML page: the links it follows (`<a href>`, resolved against the
page's address or its `<base href>`; not those marked `rel="nofollow"`), the page's metadata
(title, description, author, keywords, publication dates, language), what its robots meta tags
allow (`<meta name="robots">` or `name="canonsync"`: noindex, nofollow, none) and its
`<link rel="canonical">`. `robots_directives` also reads an X-Robots-Tag header."""

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


# The robots meta names that speak to this crawler: everyone's, and its own (USER_AGENT's name).
_ROBOTS_NAMES = frozenset({"robots", "canonsync"})
# Directives that carry a value after a colon, so the colon names no crawler.
_VALUED = frozenset({"max-snippet", "max-image-preview", "max-video-preview", "unavailable_after"})


@dataclass(frozen=True)
class PageInfo:
    """`links`: normalised http(s) addresses in first-seen order, each once, fragments dropped.
    `robots`: the page's robots directives, lower case ("noindex", "nofollow", ...).
    `canonical`: the normalised address of its `<link rel="canonical">`, if any."""

    links: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    robots: frozenset[str] = frozenset()
    canonical: str | None = None


def robots_directives(value: str) -> frozenset[str]:
    """The directives of a robots meta tag's content or an X-Robots-Tag header, lower case,
    `none` spelled out as noindex and nofollow. Directives after a crawler's name ("otherbot:
    noindex, nofollow") are that crawler's, and count only when it is this one (canonsync)."""
    directives: set[str] = set()
    ours = True
    for part in value.lower().split(","):
        head, colon, rest = part.partition(":")
        if colon:
            if head.strip() in _VALUED:
                continue  # a directive with a value (max-snippet: 50): nothing we act on
            ours, part = head.strip() in _ROBOTS_NAMES, rest
        directive = part.strip()
        if not ours or not directive:
            continue
        if directive == "none":
            directives.update(("noindex", "nofollow"))
        else:
            directives.add(directive)
    return frozenset(directives)


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
    base = _base(root, url)
    return PageInfo(_links(root, base), _metadata(root), _robots(root), _canonical(root, base))


def _base(root: lxml.html.HtmlElement, url: str) -> str:
    for element in root.iter("base"):
        href = element.get("href")
        if href:
            return url_normalise(href, base=url) or url
    return url


def _links(root: lxml.html.HtmlElement, base: str) -> tuple[str, ...]:
    links: dict[str, None] = {}
    for element in root.iter("a"):
        href = element.get("href")
        if not href or "nofollow" in (element.get("rel") or "").lower().split():
            continue
        normal = url_normalise(href, base=base)
        if normal is not None:
            links.setdefault(normal, None)
    return tuple(links)


def _robots(root: lxml.html.HtmlElement) -> frozenset[str]:
    directives: set[str] = set()
    for element in root.iter("meta"):
        if (element.get("name") or "").strip().lower() in _ROBOTS_NAMES:
            directives.update(robots_directives(element.get("content") or ""))
    return frozenset(directives)


def _canonical(root: lxml.html.HtmlElement, base: str) -> str | None:
    for element in root.iter("link"):
        if "canonical" in (element.get("rel") or "").lower().split():
            href = (element.get("href") or "").strip()
            return url_normalise(href, base=base) if href else None
    return None


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
