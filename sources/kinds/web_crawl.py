"""The order a website source visits pages in, and what it keeps of each visit.

`Crawl.links` goes breadth-first from the start address through each page's same-site links;
`Crawl.sitemap` takes the sitemap's pages in document order and follows no links. Both visit a
URL at most once (a redirect target counts as visited), never visit what robots.txt disallows,
list each item path once, and stop with an incomplete Problem when `max_pages` pages were fetched
and another is due. A page naming another canonical address has that address visited next, in
either mode. Fetching and judging one page is the kind's (`visit`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TypeGuard

from django.utils.translation import gettext_noop

from sources.kinds.base import Item, ListingFailed, Problem
from sources.kinds.web_http import SITE_ANSWERED, WebClient, WebError
from sources.kinds.web_robots import Robots
from sources.kinds.web_sitemap import (
    SITEMAP_MAX_BYTES,
    Entry,
    Sitemap,
    SitemapInvalid,
    sitemap_parse,
)
from sources.kinds.web_urls import Site, url_item_path, url_media_type_guess, url_normalise
from sources.patterns import Patterns
from textkit.reasons import reason

# An index of indexes of sitemaps is as deep as a sitemap goes here.
MAX_SITEMAP_NESTING = 2

# What a crawl says (`detail`: why a sitemap could not be read, `web_http`'s or `web_sitemap`'s).
START_REFUSED = reason(
    "website.start_refused", gettext_noop("robots.txt refuses the start address %(url)s.")
)
PAGE_LIMIT = reason("website.page_limit", gettext_noop("page limit of %(limit)s reached"))
SITEMAP_UNREADABLE = reason(
    "website.sitemap_unreadable",
    gettext_noop("The sitemap %(url)s could not be read: %(detail)s."),
)
NESTED_SITEMAP_UNREADABLE = reason(
    "website.nested_sitemap_unreadable", gettext_noop("sitemap could not be read: %(detail)s")
)


@dataclass(frozen=True)
class Visit:
    """What one page gave: items and problems to report, links to follow, the address it
    ended at after redirects (None when no answer came), and the other address it names as
    its canonical one (to visit instead: the page itself is not listed)."""

    reports: tuple[Item | Problem, ...] = ()
    links: tuple[str, ...] = ()
    final: str | None = None
    canonical: str | None = None


# visit(url, start, lastmod): raises ListingFailed when `start` and the page cannot be listed.
VisitPage = Callable[[str, bool, datetime | None], Visit]


class Crawl:
    def __init__(
        self,
        *,
        site: Site,
        robots: Robots,
        patterns: Patterns,
        visit: VisitPage,
        http: WebClient,
        max_depth: int,
        max_pages: int,
    ) -> None:
        self._site = site
        self._robots = robots
        self._patterns = patterns
        self._visit = visit
        self._http = http
        self._max_depth = max_depth
        self._max_pages = max_pages
        self._pages = 0  # addresses asked for (a redirect chain is one)
        self._fetched: set[str] = set()
        self._listed: set[str] = set()

    def links(self, start: str) -> Iterator[Item | Problem]:
        """Breadth-first from `start` (depth 0) to `max_depth`."""
        self._start_check(start)
        queue: deque[tuple[str, int]] = deque([(start, 0)])
        seen = {start}
        while queue:
            url, depth = queue.popleft()
            if url in self._fetched or (url != start and not self._worth_reading(url, depth)):
                continue
            if self._pages >= self._max_pages:
                yield self._limit_reached()
                return
            visit = self._take(url, start=url == start)
            yield from self._reports(visit)
            if self._admits(visit.canonical) and visit.canonical not in seen:
                seen.add(visit.canonical)
                queue.appendleft((visit.canonical, depth))  # in the page's place, at its depth
            if depth >= self._max_depth:
                continue
            for link in visit.links:
                if link not in seen and self._site.contains(link) and self._robots.allows(link):
                    seen.add(link)
                    queue.append((link, depth + 1))

    def sitemap(self, sitemap_url: str, *, start: str = "") -> Iterator[Item | Problem]:
        """The sitemap's same-site pages that robots.txt and the patterns admit; `start`, when
        given, first."""
        if start:
            self._start_check(start)
            yield from self._reports(self._take(start, start=True))
        for entry in self._sitemap_entries(sitemap_url):
            if isinstance(entry, Problem):
                yield entry
                continue
            url = entry.loc
            if (
                url in self._fetched
                or not self._robots.allows(url)
                or not self._patterns.admits(url_item_path(url))
            ):
                continue
            if self._pages >= self._max_pages:
                yield self._limit_reached()
                return
            visit = self._take(url, start=False, lastmod=entry.lastmod)
            yield from self._reports(visit)
            if self._admits(visit.canonical) and visit.canonical not in self._fetched:
                if self._pages >= self._max_pages:
                    yield self._limit_reached()
                    return
                yield from self._reports(self._take(visit.canonical, start=False))

    def _admits(self, url: str | None) -> TypeGuard[str]:
        """Whether `url` (a page's canonical address) may be visited: on the site, allowed by
        robots.txt, its item path admitted by the patterns."""
        return (
            url is not None
            and self._site.contains(url)
            and self._robots.allows(url)
            and self._patterns.admits(url_item_path(url))
        )

    def _start_check(self, start: str) -> None:
        if not self._robots.allows(start):
            raise ListingFailed(START_REFUSED(url=start))

    def _worth_reading(self, url: str, depth: int) -> bool:
        """A page the patterns exclude is read only for links that will be followed, and only
        when its extension does not say it is some other kind of file."""
        if self._patterns.admits(url_item_path(url)):
            return True
        return depth < self._max_depth and url_media_type_guess(url) in ("", "text/html")

    def _limit_reached(self) -> Problem:
        return Problem("", PAGE_LIMIT(limit=self._max_pages), incomplete=True)

    def _take(self, url: str, *, start: bool, lastmod: datetime | None = None) -> Visit:
        self._pages += 1
        self._fetched.add(url)
        visit = self._visit(url, start, lastmod)
        if visit.final is not None:
            self._fetched.add(visit.final)
        return visit

    def _reports(self, visit: Visit) -> Iterator[Item | Problem]:
        for report in visit.reports:
            admitted = self._patterns.admits(report.path)
            if isinstance(report, Item):
                if admitted and report.path not in self._listed:
                    self._listed.add(report.path)
                    yield report
            elif admitted or report.incomplete:
                yield report

    def _sitemap_entries(self, sitemap_url: str) -> Iterator[Entry | Problem]:
        """Page entries on the site, through index files; an unreadable nested sitemap is an
        incomplete Problem, an unreadable `sitemap_url` fails the listing."""
        pending: deque[tuple[str, int]] = deque([(sitemap_url, 0)])
        visited = {sitemap_url}
        while pending:
            url, level = pending.popleft()
            try:
                sitemap = self._sitemap_read(url)
            except (WebError, SitemapInvalid) as exc:
                if url == sitemap_url:
                    raise ListingFailed(SITEMAP_UNREADABLE(url=url, detail=exc.why)) from None
                yield Problem(url_item_path(url), NESTED_SITEMAP_UNREADABLE(detail=exc.why), True)
                continue
            for entry in sitemap.entries:
                loc = url_normalise(entry.loc)
                if loc is None or not self._site.contains(loc):
                    continue
                if not sitemap.is_index:
                    yield Entry(loc, entry.lastmod)
                elif level < MAX_SITEMAP_NESTING and loc not in visited:
                    visited.add(loc)
                    pending.append((loc, level + 1))

    def _sitemap_read(self, url: str) -> Sitemap:
        answer = self._http.get(
            url, max_bytes=SITEMAP_MAX_BYTES, media_type_for=lambda _url, content_type: content_type
        )
        if answer.status != 200 or answer.content is None:
            raise WebError(url, SITE_ANSWERED(status=answer.status))
        return sitemap_parse(answer.content)
