"""A website source's addresses: one normal spelling per URL, the site a crawl stays on, and the
item path and file name a URL becomes.

A URL is normalised so that two spellings of one page are crawled once: scheme and host in lower
case, the default port dropped, dot segments resolved, the fragment and any user name dropped,
unsafe characters percent-encoded; the query is kept (it may select a different page)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

import httpx

from textkit.extract.registry import EXTENSIONS

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Characters left as they are when percent-encoding (RFC 3986's reserved and unreserved, and '%'
# so that existing escapes survive).
_PATH_SAFE = "/%:@!$&'()*+,;=~"
_QUERY_SAFE = _PATH_SAFE + "?"

# The extension a file name gets for a media type; ".html" rather than the registry's first, ".htm".
_PREFERRED_EXTENSIONS: dict[str, str] = {}
for _suffix, _media_type in EXTENSIONS.items():
    _PREFERRED_EXTENSIONS.setdefault(_media_type, _suffix)
_PREFERRED_EXTENSIONS["text/html"] = ".html"


def url_normalise(url: str, base: str | None = None) -> str | None:
    """`url` (resolved against `base` when relative) in its normal spelling, or None when it is
    not an http(s) address with a host (mailto:, javascript:, a malformed port)."""
    url = url.strip()
    if base is not None:
        try:
            url = urljoin(base, url)
        except ValueError:
            return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    path = quote(_dot_segments_removed(parts.path or "/"), safe=_PATH_SAFE)
    query = quote(parts.query, safe=_QUERY_SAFE)
    normal = urlunsplit((scheme, netloc, path, query, ""))
    try:
        httpx.URL(normal)
    except (httpx.InvalidURL, ValueError):
        return None
    return normal


def _dot_segments_removed(path: str) -> str:
    """RFC 3986 5.2.4 for an absolute path: '/a/./b/../c' -> '/a/c', a trailing '/' kept."""
    out: list[str] = []
    segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        elif segment == ".":
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


@dataclass(frozen=True)
class Site:
    """Scheme, host and port: the one site a crawl reads. http and https of one host are two
    sites (a crawl started on one does not follow links to the other)."""

    scheme: str
    netloc: str

    @classmethod
    def of(cls, normal_url: str) -> Site:
        parts = urlsplit(normal_url)
        return cls(parts.scheme, parts.netloc)

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.netloc}"

    def contains(self, normal_url: str) -> bool:
        parts = urlsplit(normal_url)
        return (parts.scheme, parts.netloc) == (self.scheme, self.netloc)


def url_host(normal_url: str) -> str:
    return urlsplit(normal_url).netloc


def url_item_path(normal_url: str) -> str:
    """The item path of a same-site URL: its path without the leading '/', 'index' for the
    site's root, then '?' and the query when there is one ('docs/install.html',
    'search?q=x'). Percent-escapes are kept, so two URLs never share a path (except '/' and
    '/index', of which the crawl keeps the first it meets)."""
    parts = urlsplit(normal_url)
    path = parts.path.lstrip("/") or "index"
    return f"{path}?{parts.query}" if parts.query else path


def url_file_name(normal_url: str, media_type: str) -> str:
    """A file name for the item: the URL's last segment ('index' for one ending in '/'), given
    the media type's extension unless it already has one meaning that type."""
    segment = unquote(urlsplit(normal_url).path.rsplit("/", 1)[-1]).replace("/", "_")
    name = segment or "index"
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if EXTENSIONS.get(suffix) == media_type:
        return name
    return name + _PREFERRED_EXTENSIONS.get(media_type, "")


def url_media_type_guess(normal_url: str) -> str:
    """The media type the URL's extension means to Canon ('' when none)."""
    name = urlsplit(normal_url).path.rsplit("/", 1)[-1]
    if "." not in name:
        return ""
    return EXTENSIONS.get("." + name.rsplit(".", 1)[-1].lower(), "")
