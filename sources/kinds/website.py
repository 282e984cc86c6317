"""Website sources: the pages of one site, from a start address or a sitemap.

What is listed:
- **One site**: the start (or sitemap) address's scheme, host and port. Links elsewhere are not
  followed; a page that redirects elsewhere is a Problem ("redirected off the site to <host>").
  Redirects are followed by hand (at most 5), each target checked for the site and robots.txt,
  and the page is listed under the address it ends at (the redirecting address is no item).
- **robots.txt** (`web_robots`) is read once per listing; a URL it disallows is neither fetched
  nor listed, so a page it newly disallows is deleted. Its Crawl-delay for us replaces
  `delay_seconds` when larger (capped at CRAWL_DELAY_CAP). Sitemaps are read whatever it says.
- **A crawl** from `start_url` goes breadth-first through `<a href>` links to `max_depth` (the
  start is depth 0). **With `sitemap_url`** the pages are the sitemap's (index files and gzip
  read, other sites' entries dropped) and no links are followed; a `start_url` given as well is
  listed first. Either way each page is fetched while listing, so items carry their content.
- **Items** are 200 answers whose media type Canon reads (`textkit.extract.registry`; a missing
  or octet-stream type is guessed from the URL's extension). Other types are skipped silently:
  sites link to archives and scripts, and a Problem for each would bury the real ones.
- **Patterns** apply to the item path; a page they exclude is still read for its links (unless
  its links would not be followed or its extension says it is no page) but is not listed.
- **What a page asks of crawlers** (`web_html`): `noindex` (a robots meta tag for all crawlers
  or for `canonsync`, or an X-Robots-Tag header) - the page is not listed, so one listed before
  is deleted, and its links are still followed; `nofollow` - its links are not followed (nor
  any `<a rel="nofollow">`); `none` - both. A page whose `<link rel="canonical">` names another
  address on the site is not listed; that address is visited next instead, in either mode
  (once, like any address, and only if robots.txt and the patterns admit it).

What the site's answers mean:
- 304 to our If-None-Match / If-Modified-Since: the item as last time (`state` kept, content
  None) and the links it had then are followed.
- 404 and 410: gone, no item and no problem.
- 5xx, 401, 403, 408, 429, a timeout or no connection: Problem(incomplete) - the run deletes
  nothing - and the crawl goes on.
- Over `limits.max_item_bytes`, redirected away, other 4xx: a Problem (the document is kept).
- A page that cannot be read lends the crawl the links it had last time, when they are known.
- The start address failing in any way (oversized only when its last links are unknown),
  robots.txt unknown, or the sitemap unreadable: the whole listing fails (ListingFailed), as a
  listing without them would delete every document. A nested sitemap that cannot be read is
  Problem(incomplete).
- `max_pages` (or `limits.max_items`, if lower) pages fetched with more to go:
  Problem("", "page limit of N reached", incomplete=True) and the listing stops.

An item's version is its ETag, else its Last-Modified, else the sha256 of its bytes; its state
keeps {"url", "version", "media_type", "etag", "last_modified", "links" (HTML only)}.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from django.utils.translation import gettext_noop

from sources.kinds.base import (
    ConfigInvalid,
    Fetched,
    Item,
    ItemProblem,
    Kind,
    Limits,
    ListingFailed,
    Problem,
    SourceUnavailable,
)
from sources.kinds.front_matter import item_front_matter
from sources.kinds.web_config import website_config_check
from sources.kinds.web_crawl import Crawl, Visit
from sources.kinds.web_html import html_read, robots_directives
from sources.kinds.web_http import (
    SITE_ANSWERED,
    Disallowed,
    OffSite,
    Response,
    TooLarge,
    TooManyRedirects,
    Unreachable,
    WebClient,
    WebError,
)
from sources.kinds.web_robots import Robots, robots_load
from sources.kinds.web_urls import (
    Site,
    url_file_name,
    url_item_path,
    url_media_type_guess,
    url_normalise,
)
from sources.network import AddressRefused, url_check
from sources.patterns import Patterns
from textkit.extract.registry import SUPPORTED_MEDIA_TYPES
from textkit.reasons import Reason, reason

# A Crawl-delay beyond this is taken as this: a day between pages would outlive any run.
CRAWL_DELAY_CAP = 60.0
# Answers that mean "try again later" or "not for you now": the listing may be missing pages.
_INCOMPLETE_STATUSES = frozenset({401, 403, 408, 429})
_GONE_STATUSES = frozenset({404, 410})
_GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_CHARSET = re.compile(r"charset\s*=\s*[\"']?([\w.:-]+)", re.IGNORECASE)

# What a website source says of a page (`path`: its item path; `url`: its address; `detail`:
# why it gave no answer to use, `web_http`'s words; `status`: the site's answer, with HTTP's
# phrase for it).
REFUSED_OR_OFF_SITE = reason(
    "website.refused_or_off_site",
    gettext_noop("%(path)s is refused by robots.txt or not on the site."),
)
ITEM_UNREACHABLE = reason("website.item_unreachable", gettext_noop("%(path)s %(detail)s."))
ITEM_UNUSABLE = reason("website.item_unusable", gettext_noop("%(path)s: %(detail)s."))
UNREAD_TYPE = reason(
    "website.unread_type", gettext_noop("%(path)s is %(media_type)s, which Canon does not read.")
)
GONE = reason("website.gone", gettext_noop("%(path)s is gone since the listing (%(status)s)."))
ITEM_ANSWERED = reason(
    "website.item_answered", gettext_noop("%(path)s: the site answered %(status)s.")
)
START_REDIRECT_REFUSED = reason(
    "website.start_redirect_refused",
    gettext_noop("The start address %(url)s redirects to a page robots.txt refuses."),
)
START_REDIRECTED = reason(
    "website.start_redirected",
    gettext_noop("The start address %(url)s was %(detail)s; use the address it leads to."),
)
START_TOO_LARGE = reason(
    "website.start_too_large",
    gettext_noop("The start address %(url)s: %(detail)s; its links are unknown."),
)
START_UNREACHABLE = reason(
    "website.start_unreachable", gettext_noop("The start address %(url)s %(detail)s.")
)
# `what`: the media type it answered with, or its status.
START_NOT_A_PAGE = reason(
    "website.start_not_a_page",
    gettext_noop("The start address %(url)s answered %(what)s, not a page to crawl."),
)


class WebsiteKind(Kind):
    name = "website"
    label = "website"
    CONFIG_FIELDS = ("start_url", "sitemap_url", "max_depth", "max_pages", "delay_seconds")

    def __init__(
        self,
        *,
        config: Mapping[str, Any],
        credentials: Mapping[str, str],
        patterns: Patterns,
        limits: Limits,
    ) -> None:
        super().__init__(config=config, credentials=credentials, patterns=patterns, limits=limits)
        self._http: WebClient | None = None
        self._robots: Robots | None = None

    @classmethod
    def check_config(cls, config: Mapping[str, Any], *, allow_private: bool) -> dict[str, Any]:
        """Addresses normalised ("" for one not given) and on one site; numbers in range, with
        their defaults filled in. Checks the host's addresses unless `allow_private`."""
        stored = super().check_config(config, allow_private=allow_private)
        return website_config_check(stored, allow_private=allow_private)

    def listing(self, previous: Mapping[str, Mapping[str, Any]]) -> Iterator[Item | Problem]:
        """Pages fetched and listed as they are met (see the module's docstring). Raises
        ListingFailed when the site cannot be crawled at all; that happens before any item but
        a sitemap source's start page."""
        try:
            config = self.check_config(self.config, allow_private=True)
            url_check(config["start_url"] or config["sitemap_url"], allow_private=self._private)
        except (ConfigInvalid, AddressRefused) as exc:
            raise ListingFailed(exc.why) from None
        http = self._client(config)
        robots = self._robots = robots_load(http)
        http.pacer.delay = max(config["delay_seconds"], min(robots.crawl_delay, CRAWL_DELAY_CAP))
        crawl = Crawl(
            site=http.site,
            robots=robots,
            patterns=self.patterns,
            visit=lambda url, start, lastmod: self._visit(url, previous, start, lastmod),
            http=http,
            max_depth=config["max_depth"],
            max_pages=min(config["max_pages"], self.limits.max_items),
        )
        if config["sitemap_url"]:
            yield from crawl.sitemap(config["sitemap_url"], start=config["start_url"])
        else:
            yield from crawl.links(config["start_url"])

    def fetch(self, item: Item) -> Fetched:
        """A plain GET of the item's address with the listing's checks: ItemProblem for what
        this item cannot give (too large, gone, redirected away, an unread type), and
        SourceUnavailable when the site does not answer."""
        try:
            config = self.check_config(self.config, allow_private=True)
        except ConfigInvalid as exc:
            raise SourceUnavailable(exc.why) from None
        http = self._client(config)
        url = str(item.state.get("url") or url_normalise(http.site.origin + "/" + item.path))
        try:
            robots = self._robots = self._robots or robots_load(http)
        except ListingFailed as exc:
            raise SourceUnavailable(exc.why) from None
        if not http.site.contains(url) or not robots.allows(url):
            raise ItemProblem(REFUSED_OR_OFF_SITE(path=item.path))
        try:
            answer = self._get(http, url, {}, allowed=robots.allows)
        except Unreachable as exc:
            raise SourceUnavailable(ITEM_UNREACHABLE(path=item.path, detail=exc.why)) from None
        except WebError as exc:
            raise ItemProblem(ITEM_UNUSABLE(path=item.path, detail=exc.why)) from None
        if answer.status == 200 and answer.content is not None:
            metadata: dict[str, Any] = item_front_matter(item, answer.content)
            if answer.media_type == "text/html":
                metadata = html_read(answer.content, answer.url, charset=_charset(answer)).metadata
            return Fetched(answer.content, answer.media_type, metadata)
        if answer.status == 200:
            raise ItemProblem(UNREAD_TYPE(path=item.path, media_type=answer.media_type))
        if answer.status in _GONE_STATUSES:
            raise ItemProblem(GONE(path=item.path, status=answer.status))
        answered = ITEM_ANSWERED(path=item.path, status=_status(answer.status))
        if answer.status in _INCOMPLETE_STATUSES or answer.status >= 500:
            raise SourceUnavailable(answered)
        raise ItemProblem(answered)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    @property
    def _private(self) -> bool:
        return self.limits.allow_private

    def _client(self, config: Mapping[str, Any]) -> WebClient:
        if self._http is None:
            self._http = WebClient(
                site=Site.of(config["start_url"] or config["sitemap_url"]),
                allow_private=self._private,
                timeout=self.limits.timeout,
                delay=config["delay_seconds"],
            )
        return self._http

    def _get(
        self,
        http: WebClient,
        url: str,
        previous: Mapping[str, Mapping[str, Any]],
        *,
        allowed: Callable[[str], bool],
    ) -> Response:
        return http.get(
            url,
            max_bytes=self.limits.max_item_bytes,
            media_type_for=_readable_type,
            conditional=lambda hop: _conditional(previous.get(url_item_path(hop))),
            allowed=allowed,
        )

    def _visit(
        self,
        url: str,
        previous: Mapping[str, Mapping[str, Any]],
        start: bool,
        lastmod: datetime | None,
    ) -> Visit:
        """One page: what to report of it, the links to follow from it, and the address it
        ended at. Raises ListingFailed when `start` and the page cannot be listed."""
        assert self._http is not None and self._robots is not None
        path = url_item_path(url)
        try:
            answer = self._get(self._http, url, previous, allowed=self._robots.allows)
        except Disallowed:
            if start:
                raise ListingFailed(START_REDIRECT_REFUSED(url=url)) from None
            return Visit()
        except (OffSite, TooManyRedirects) as exc:
            if start:
                raise ListingFailed(START_REDIRECTED(url=url, detail=exc.why)) from None
            return _unread(path, exc.why, previous, incomplete=False)
        except TooLarge as exc:
            visit = _unread(url_item_path(exc.url), exc.why, previous, incomplete=False)
            if start and not visit.links:
                raise ListingFailed(START_TOO_LARGE(url=url, detail=exc.why)) from None
            return visit
        except Unreachable as exc:
            if start:
                raise ListingFailed(START_UNREACHABLE(url=url, detail=exc.why)) from None
            return _unread(path, exc.why, previous, incomplete=True)
        final = answer.url
        path = url_item_path(final)
        if answer.status == 200 and answer.content is not None:
            return self._item(answer, lastmod)
        if answer.status == 304 and "version" in previous.get(path, {}):
            state = previous[path]
            item = Item(
                path,
                version=str(state["version"]),
                name=url_file_name(final, str(state.get("media_type", ""))),
                media_type=str(state.get("media_type", "")),
                state=dict(state),
            )
            return Visit((item,), tuple(state.get("links", ())), final)
        if start:
            what = answer.media_type if answer.status == 200 else _status(answer.status)
            raise ListingFailed(START_NOT_A_PAGE(url=url, what=what))
        if answer.status == 200:
            return Visit(final=final)  # a type Canon does not read
        if answer.status in _GONE_STATUSES:
            return Visit(final=final)
        # Other 4xx and 3xx without a Location are lasting answers about this one page; a 304
        # we did not ask for leaves its links unknown.
        status = answer.status
        incomplete = status in _INCOMPLETE_STATUSES or status >= 500 or status == 304
        return _unread(path, SITE_ANSWERED(status=_status(status)), previous, incomplete)

    def _item(self, answer: Response, lastmod: datetime | None) -> Visit:
        assert answer.content is not None and self._http is not None
        content, url, media_type = answer.content, answer.url, answer.media_type
        etag = answer.headers.get("etag", "")
        last_modified = answer.headers.get("last-modified", "")
        version = etag or last_modified or "sha256:" + hashlib.sha256(content).hexdigest()
        state: dict[str, Any] = {"url": url, "version": version, "media_type": media_type}
        if etag:
            state["etag"] = etag
        if last_modified:
            state["last_modified"] = last_modified
        links: tuple[str, ...] = ()
        metadata: dict[str, str] = {}
        robots = robots_directives(", ".join(answer.headers.get_list("x-robots-tag")))
        canonical: str | None = None
        if media_type == "text/html":
            page = html_read(content, url, charset=_charset(answer))
            robots |= page.robots
            if "nofollow" not in robots:
                links = tuple(link for link in page.links if self._http.site.contains(link))
            metadata = page.metadata
            state["links"] = list(links)
            canonical = page.canonical
        if canonical == url or (canonical is not None and not self._http.site.contains(canonical)):
            canonical = None  # itself, or another site's copy: this page is listed
        if "noindex" in robots or canonical is not None:
            # Not listed (so a page listed before is deleted), its links still followed;
            # the canonical address is visited in its place.
            return Visit(links=links, final=url, canonical=canonical)
        item = Item(
            url_item_path(url),
            version=version,
            size=len(content),
            modified=_http_date(last_modified) or lastmod,
            name=url_file_name(url, media_type),
            media_type=media_type,
            metadata=metadata,
            state=state,
            content=content,
        )
        if matter := item_front_matter(item, content):
            item = replace(item, metadata=matter)
        return Visit((item,), links, url)


def _unread(
    path: str, why: str | Reason, previous: Mapping[str, Mapping[str, Any]], incomplete: bool
) -> Visit:
    """A page that could not be read this time, lending the crawl its last known links."""
    links = tuple(previous.get(path, {}).get("links", ()))
    return Visit((Problem(path, why, incomplete=incomplete),), links)


def _readable_type(url: str, content_type: str) -> str | None:
    """The media type to read a 200 as, or None for one Canon does not read."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/xhtml+xml":
        media_type = "text/html"
    if media_type in _GENERIC_TYPES:
        media_type = url_media_type_guess(url)
    return media_type if media_type in SUPPORTED_MEDIA_TYPES else None


def _conditional(state: Mapping[str, Any] | None) -> dict[str, str]:
    # Without a stored version a 304 could not be listed, so ask only when there is one.
    if not state or "version" not in state:
        return {}
    headers = {}
    if state.get("etag"):
        headers["If-None-Match"] = str(state["etag"])
    if state.get("last_modified"):
        headers["If-Modified-Since"] = str(state["last_modified"])
    return headers


def _charset(answer: Response) -> str | None:
    match = _CHARSET.search(answer.headers.get("content-type", ""))
    return match.group(1) if match else None


def _http_date(value: str) -> datetime | None:
    try:
        return parsedate_to_datetime(value) if value else None
    except (TypeError, ValueError, IndexError):
        return None


def _status(status: int) -> str:
    phrase = httpx.codes.get_reason_phrase(status)
    return f"{status} {phrase}" if phrase else str(status)
