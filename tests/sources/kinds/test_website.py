"""Website sources against a real HTTP server on loopback (tests/sources/site_server.py): what a
crawl and a sitemap list, robots.txt, redirects, limits, conditional GETs and politeness."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from sources.kinds.base import (
    ConfigInvalid,
    Item,
    ItemProblem,
    Limits,
    ListingFailed,
    Problem,
    SourceUnavailable,
)
from sources.kinds.website import WebsiteKind
from sources.patterns import Patterns
from tests.sources.site_server import (
    INDEX_MODIFIED,
    MAX_BYTES,
    PDF,
    Route,
    SiteServer,
    html,
    links,
    small_site,
    urlset,
)


@pytest.fixture
def site() -> Iterator[SiteServer]:
    server = small_site()
    yield server
    server.stop()


def make_kind(
    *,
    allow_private: bool = True,
    timeout: float = 5.0,
    include: tuple[str, ...] = (),
    **config: Any,
) -> WebsiteKind:
    config.setdefault("delay_seconds", 0)
    return WebsiteKind(
        config=WebsiteKind.check_config(config, allow_private=True),
        credentials={},
        patterns=Patterns.of(include),
        limits=Limits(
            max_item_bytes=MAX_BYTES,
            max_items=1000,
            timeout=timeout,
            allow_private=allow_private,
        ),
    )


def run(
    kind: WebsiteKind, previous: dict[str, Any] | None = None
) -> tuple[dict[str, Item], list[Problem]]:
    items: dict[str, Item] = {}
    problems: list[Problem] = []
    try:
        for report in kind.listing(previous or {}):
            if isinstance(report, Item):
                assert report.path not in items, f"{report.path} listed twice"
                items[report.path] = report
            else:
                problems.append(report)
    finally:
        kind.close()
    return items, problems


def states(items: dict[str, Item]) -> dict[str, Any]:
    return {path: dict(item.state) for path, item in items.items()}


CRAWLED = {
    "index",
    "docs/install.html",
    "docs/guide/",
    "docs/new.html",
    "files/manual.pdf",
    "search?q=canon",
    "deep/one.html",
    "docs/guide/two.html",
    "deep/three.html",
}


# --- crawling --------------------------------------------------------------------------------


def test_crawl_lists_the_sites_pages_and_readable_files(site: SiteServer) -> None:
    items, problems = run(make_kind(start_url=site.url + "/"))

    assert set(items) == CRAWLED
    requested = site.requested()
    assert requested.count("/docs/install.html") == 1, "a fragment is the same page"
    assert "/private/secret.html" not in requested, "robots.txt disallows it"
    assert "/styles.css" in requested and "styles.css" not in items
    assert "missing.html" not in items and all(p.path != "missing.html" for p in problems)
    assert all(r.headers.get("User-Agent") == "CanonSync/1.0" for r in site.requests)
    assert all(
        item.content is not None and item.size == len(item.content) for item in items.values()
    )
    assert items["files/manual.pdf"].content == PDF
    assert items["files/manual.pdf"].media_type == "application/pdf"


def test_item_names_media_types_and_metadata(site: SiteServer) -> None:
    items, _ = run(make_kind(start_url=site.url))

    assert (items["index"].name, items["index"].media_type) == ("index.html", "text/html")
    assert items["docs/guide/"].name == "index.html"
    assert items["docs/install.html"].name == "install.html"
    assert items["search?q=canon"].name == "search.html"
    assert items["files/manual.pdf"].name == "manual.pdf"
    assert dict(items["index"].metadata) == {
        "title": "Canon home",
        "description": "What Canon is",
        "author": "Ada",
        "keywords": "rag, search",
        "published": "2025-01-01T10:00:00Z",
        "modified": "2025-02-01T10:00:00Z",
        "language": "en",
    }
    assert items["index"].modified is not None and items["index"].modified.year == 2025


def test_a_markdown_pages_front_matter_is_its_metadata(site: SiteServer) -> None:
    # Given a page served as Markdown with front matter, and linked from the start page
    note = "---\ntitle: Herons\nyear: soon\n---\n# Herons\n\nThey wade.\n"
    site.page("/notes/herons", note, content_type="text/markdown; charset=utf-8")
    site.page("/start.html", html(links("/notes/herons")))
    kind = make_kind(start_url=site.url + "/start.html")
    # When it is crawled, and fetched again
    items, _ = run(kind)
    page = items["notes/herons"]
    kind = make_kind(start_url=site.url + "/start.html")
    try:
        fetched = kind.fetch(page)
    finally:
        kind.close()
    # Then its front matter is offered to the metadata map both times
    assert (page.name, page.media_type) == ("herons.md", "text/markdown")
    assert dict(page.metadata) == {"title": "Herons", "year": "soon"}
    assert fetched.metadata == {"title": "Herons", "year": "soon"}


def test_versions_come_from_etag_then_last_modified_then_the_bytes(site: SiteServer) -> None:
    items, _ = run(make_kind(start_url=site.url))

    assert items["docs/install.html"].version == '"install-v1"'
    assert items["index"].version == INDEX_MODIFIED
    assert items["docs/guide/two.html"].version.startswith("sha256:")
    assert items["index"].state["links"][:2] == [
        site.url + "/docs/install.html",
        site.url + "/docs/guide/",
    ]
    assert not any("example.com" in link for link in items["index"].state["links"])


def test_redirects_on_and_off_the_site(site: SiteServer) -> None:
    items, problems = run(make_kind(start_url=site.url))

    assert "docs/new.html" in items and "old" not in items
    assert items["docs/new.html"].state["url"] == site.url + "/docs/new.html"
    away = [p for p in problems if p.path == "away"]
    assert away == [
        Problem("away", f"redirected off the site to localhost:{site.port}", incomplete=False)
    ]
    assert "/docs/new.html" in site.requested(), "reached through /old"


def test_too_many_redirects_and_redirect_into_disallowed(site: SiteServer) -> None:
    site.page("/", html(links("/loop", "/to-private")))
    site.routes["/loop"] = Route(status=302, headers={"Location": "/loop"})
    site.routes["/to-private"] = Route(status=302, headers={"Location": "/private/secret.html"})

    items, problems = run(make_kind(start_url=site.url))

    assert set(items) == {"index"}
    assert problems == [Problem("loop", "redirected more than 5 times", incomplete=False)]
    assert len(site.requests_for("/loop")) == 6
    assert "/private/secret.html" not in site.requested()


def test_a_500_mid_crawl_is_incomplete_and_the_crawl_goes_on(site: SiteServer) -> None:
    items, problems = run(make_kind(start_url=site.url))

    broken = [p for p in problems if p.path == "broken.html"]
    assert broken == [
        Problem("broken.html", "the site answered 500 Internal Server Error", incomplete=True)
    ]
    assert site.requested().index("/broken.html") < site.requested().index("/files/manual.pdf")
    assert {"files/manual.pdf", "deep/three.html"} <= set(items)


def test_oversized_pages_are_problems_that_keep_their_last_links(site: SiteServer) -> None:
    previous = {"huge.html": {"version": "old", "links": [site.url + "/deep/hidden.html"]}}

    items, problems = run(make_kind(start_url=site.url), previous)

    oversized = {p.path: p for p in problems if "over the limit" in p.reason}
    assert set(oversized) == {"huge.html", "huge-stream.html"}
    assert not any(p.incomplete for p in oversized.values())
    assert f"{MAX_BYTES:,}" in oversized["huge.html"].reason  # grouped: "20,000"
    assert "huge.html" not in items and "huge-stream.html" not in items
    assert "deep/hidden.html" in items, "the oversized page's last links are still followed"


def test_depth_limit(site: SiteServer) -> None:
    items, problems = run(make_kind(start_url=site.url, max_depth=1))

    assert set(items) == CRAWLED - {"deep/one.html", "docs/guide/two.html", "deep/three.html"}
    assert "/deep/one.html" not in site.requested()
    assert not any(p.incomplete and p.path == "" for p in problems)

    items, _ = run(make_kind(start_url=site.url, max_depth=0))
    assert set(items) == {"index"}


def test_page_limit_stops_the_listing_as_incomplete(site: SiteServer) -> None:
    items, problems = run(make_kind(start_url=site.url, max_pages=3))

    assert set(items) == {"index", "docs/install.html", "docs/guide/"}
    assert problems[-1] == Problem("", "page limit of 3 reached", incomplete=True)
    assert [p for p in site.requested() if p != "/robots.txt"] == [
        "/",
        "/docs/install.html",
        "/docs/guide/",
    ]


def test_patterns_choose_items_but_excluded_pages_still_lead_the_crawl(site: SiteServer) -> None:
    items, _ = run(make_kind(start_url=site.url, include=("docs/**",)))

    assert set(items) == {
        "docs/install.html",
        "docs/guide/",
        "docs/new.html",
        "docs/guide/two.html",
    }
    assert "/" in site.requested(), "read for its links"
    assert "/files/manual.pdf" not in site.requested(), "excluded and no page: not fetched"


def test_timeouts_and_refusals_on_a_page_are_incomplete(site: SiteServer) -> None:
    site.page("/", html(links("/slow.html", "/secret.html", "/docs/guide/two.html")))
    site.page("/slow.html", html(""), sleep=1.0)
    site.page("/secret.html", "no", status=403)

    items, problems = run(make_kind(start_url=site.url, timeout=0.3))

    assert {p.path: p.incomplete for p in problems} == {"slow.html": True, "secret.html": True}
    assert "timed out" in next(p.reason for p in problems if p.path == "slow.html")
    assert set(items) == {"index", "docs/guide/two.html"}


# --- conditional GETs ------------------------------------------------------------------------


def test_unchanged_pages_answer_304_and_their_links_are_still_followed(site: SiteServer) -> None:
    first, _ = run(make_kind(start_url=site.url))
    site.requests.clear()

    second, _ = run(make_kind(start_url=site.url), states(first))

    assert set(second) == set(first)
    (install,) = site.requests_for("/docs/install.html")
    assert install.headers.get("If-None-Match") == '"install-v1"'
    (index,) = site.requests_for("/")
    assert index.headers.get("If-Modified-Since") == INDEX_MODIFIED
    for path in ("index", "docs/install.html", "deep/one.html"):
        assert second[path].content is None, path
        assert second[path].version == first[path].version
        assert dict(second[path].state) == dict(first[path].state)
    # deep/one.html is linked only from install.html, which answered 304 this time
    assert site.requests_for("/deep/one.html") and site.requests_for("/deep/three.html")
    assert second["docs/guide/two.html"].content is not None, "no validators: read again"


def test_a_changed_page_gets_a_new_version(site: SiteServer) -> None:
    first, _ = run(make_kind(start_url=site.url))
    site.page("/docs/install.html", html("<p>new text</p>"), etag='"install-v2"')
    site.page("/docs/guide/two.html", html("<p>two, changed</p>"))

    second, _ = run(make_kind(start_url=site.url), states(first))

    assert second["docs/install.html"].version == '"install-v2"'
    assert second["docs/install.html"].content == html("<p>new text</p>").encode()
    assert second["docs/guide/two.html"].version != first["docs/guide/two.html"].version
    assert "deep/one.html" not in second, "no longer linked: gone"


# --- robots.txt and politeness ---------------------------------------------------------------


def test_robots_txt_unreadable_fails_the_listing(site: SiteServer) -> None:
    site.page("/robots.txt", "down", status=500)

    with pytest.raises(ListingFailed, match=r"robots\.txt could not be read"):
        run(make_kind(start_url=site.url))
    assert site.requested() == ["/robots.txt"]


def test_no_robots_txt_allows_everything(site: SiteServer) -> None:
    del site.routes["/robots.txt"]

    items, _ = run(make_kind(start_url=site.url))

    assert "private/secret.html" in items


def test_requests_are_spaced_by_the_delay_and_by_crawl_delay(site: SiteServer) -> None:
    site.page("/", html(links("/a.html", "/b.html")))
    site.page("/a.html", html(""))
    site.page("/b.html", html(""))

    run(make_kind(start_url=site.url, delay_seconds=0.25))
    gaps = [b.at - a.at for a, b in zip(site.requests, site.requests[1:], strict=False)]
    assert len(gaps) == 3 and min(gaps) >= 0.24, gaps

    site.requests.clear()
    site.page("/robots.txt", "User-agent: *\nCrawl-delay: 0.4\n", content_type="text/plain")
    run(make_kind(start_url=site.url, delay_seconds=0))
    gaps = [b.at - a.at for a, b in zip(site.requests, site.requests[1:], strict=False)]
    assert len(gaps) == 3 and min(gaps) >= 0.39, gaps


# --- the start address -----------------------------------------------------------------------


def test_private_addresses_are_refused_unless_allowed(site: SiteServer) -> None:
    with pytest.raises(ListingFailed, match="loopback, link-local or private"):
        run(make_kind(start_url=site.url, allow_private=False))
    assert site.requests == []


def test_a_name_that_resolves_public_then_connects_private_is_refused(
    site: SiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the check before the request sees a public address, the connection
    reaches loopback. The address each connection reached is checked before it is used."""
    from sources import network

    monkeypatch.setattr(network, "_addresses", lambda host: [ipaddress.ip_address("192.0.32.10")])
    kind = make_kind(start_url=site.url.replace("127.0.0.1", "localhost"), allow_private=False)
    with pytest.raises(ListingFailed, match=r"localhost led to a loopback.*127\.0\.0\.1"):
        run(kind)
    assert site.requests == [], "nothing was sent on the connection"


@pytest.mark.parametrize(
    ("route", "message"),
    [
        (Route(status=500), "answered 500 Internal Server Error"),
        (Route(status=403), "answered 403 Forbidden"),
        (Route(status=404), "answered 404 Not Found"),
        (Route(status=302, headers={"Location": "http://localhost/"}), "off the site"),
        (Route(body=b"PK", content_type="application/zip"), "application/zip"),
    ],
)
def test_a_start_address_that_fails_fails_the_listing(
    site: SiteServer, route: Route, message: str
) -> None:
    site.routes["/"] = route

    with pytest.raises(ListingFailed, match=message):
        run(make_kind(start_url=site.url))


def test_an_unreachable_site_fails_the_listing() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the listing: nothing listens

    with pytest.raises(ListingFailed, match=r"robots\.txt could not be read .*gave no answer"):
        run(make_kind(start_url=f"http://127.0.0.1:{port}/"))


def test_a_start_address_robots_txt_refuses_fails_the_listing(site: SiteServer) -> None:
    with pytest.raises(ListingFailed, match=r"robots\.txt refuses the start address"):
        run(make_kind(start_url=site.url + "/private/secret.html"))


# --- sitemaps --------------------------------------------------------------------------------


def test_sitemap_lists_its_pages_and_follows_no_links(site: SiteServer) -> None:
    items, problems = run(make_kind(sitemap_url=site.url + "/sitemap.xml"))

    assert set(items) == {"docs/install.html", "docs/guide/", "files/manual.pdf"}
    assert problems == []
    assert "/deep/one.html" not in site.requested(), "links are not followed"
    assert "/private/secret.html" not in site.requested()
    modified = items["docs/guide/"].modified
    assert modified is not None, "lastmod from the sitemap"
    assert modified.tzinfo is not None, "a zoneless lastmod is UTC, never a naive datetime"


def test_sitemap_index_with_gzip_and_a_missing_sitemap(site: SiteServer) -> None:
    items, problems = run(make_kind(sitemap_url=site.url + "/sitemap_index.xml"))

    assert set(items) == {"docs/install.html", "docs/guide/", "files/manual.pdf", "deep/three.html"}
    assert [(p.path, p.incomplete) for p in problems] == [("sitemap-missing.xml", True)]


def test_an_unreadable_sitemap_fails_the_listing(site: SiteServer) -> None:
    site.routes["/sitemap.xml"] = Route(body=b"<urlset><url>", content_type="application/xml")

    with pytest.raises(ListingFailed, match=r"sitemap .* could not be read: not valid XML"):
        run(make_kind(sitemap_url=site.url + "/sitemap.xml"))


# --- fetch -----------------------------------------------------------------------------------


def test_fetch_reads_an_item_again(site: SiteServer) -> None:
    kind = make_kind(start_url=site.url)
    try:
        items = {item.path: item for item in kind.listing({}) if isinstance(item, Item)}
        fetched = kind.fetch(items["index"])
        assert fetched.data == items["index"].content
        assert fetched.media_type == "text/html" and fetched.metadata["title"] == "Canon home"

        del site.routes["/docs/install.html"]
        with pytest.raises(ItemProblem, match="gone"):
            kind.fetch(items["docs/install.html"])
        site.routes["/files/manual.pdf"] = Route(status=503)
        with pytest.raises(SourceUnavailable, match="503"):
            kind.fetch(items["files/manual.pdf"])
    finally:
        kind.close()


# --- configuration ---------------------------------------------------------------------------


def test_check_config_fills_defaults_and_normalises() -> None:
    stored = WebsiteKind.check_config(
        {"start_url": "HTTP://Docs.Example.COM:80/a/./b/../"}, allow_private=True
    )

    assert stored == {
        "start_url": "http://docs.example.com/a/",
        "sitemap_url": "",
        "max_depth": 5,
        "max_pages": 1000,
        "delay_seconds": 1.0,
    }


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "needs 'start_url' or 'sitemap_url'"),
        ({"start_url": "ftp://example.com/"}, "http or https"),
        ({"start_url": "http://user:pw@example.com/"}, "user name"),
        ({"start_url": "http://a.example/", "sitemap_url": "https://a.example/s.xml"}, "same site"),
        ({"start_url": "http://a.example/", "max_depth": 21}, "between 0 and 20"),
        ({"start_url": "http://a.example/", "max_pages": 0}, "between 1 and 100000"),
        ({"start_url": "http://a.example/", "max_pages": True}, "whole number"),
        ({"start_url": "http://a.example/", "delay_seconds": 61}, "between 0 and 60"),
        ({"start_url": "http://a.example/", "depth": 2}, "no setting 'depth'"),
    ],
)
def test_check_config_refuses(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigInvalid, match=message):
        WebsiteKind.check_config(config, allow_private=True)


def test_check_config_refuses_private_hosts_unless_allowed() -> None:
    with pytest.raises(ConfigInvalid, match="loopback"):
        WebsiteKind.check_config({"start_url": "http://127.0.0.1:8000/"}, allow_private=False)
    stored = WebsiteKind.check_config({"start_url": "http://127.0.0.1:8000/"}, allow_private=True)
    assert stored["start_url"] == "http://127.0.0.1:8000/"


# --- what pages ask of crawlers ----------------------------------------------------------


@pytest.fixture
def asking_site() -> Iterator[SiteServer]:
    """Pages with robots meta tags, an X-Robots-Tag header, a rel=nofollow link and
    canonical addresses."""
    server = SiteServer()
    server.page("/robots.txt", "User-agent: *\nDisallow: /private/\n", content_type="text/plain")
    server.page(
        "/",
        html(
            links(
                "/noindex.html",
                "/nofollow.html",
                "/none.html",
                "/others.html",
                "/header.pdf",
                "/copy.html",
                "/to-private.html",
                "/self.html",
            )
            + '<a rel="external nofollow" href="/rel-skipped.html">x</a>'
        ),
    )
    server.page(
        "/noindex.html",
        html(links("/via-noindex.html"), head='<meta name="robots" content="NOINDEX">'),
    )
    server.page("/via-noindex.html", html("<p>reached through a noindex page</p>"))
    server.page(
        "/nofollow.html",
        html(links("/not-followed.html"), head='<meta name="CanonSync" content="nofollow">'),
    )
    server.page("/not-followed.html", html("<p>only linked from a nofollow page</p>"))
    server.page(
        "/none.html", html(links("/none-child.html"), head='<meta name="robots" content="none">')
    )
    server.page("/none-child.html", html("<p>x</p>"))
    server.page(
        "/others.html",
        html("<p>for us</p>", head='<meta name="otherbot" content="noindex, nofollow">'),
    )
    server.routes["/header.pdf"] = Route(
        body=PDF, content_type="application/pdf", headers={"X-Robots-Tag": "noindex"}
    )
    server.page("/rel-skipped.html", html("<p>x</p>"))
    server.page(
        "/copy.html",
        html("<p>the same text</p>", head='<link rel="canonical" href="/canonical.html">'),
    )
    server.page("/canonical.html", html("<p>the same text</p>"))
    server.page(
        "/to-private.html",
        html("<p>y</p>", head='<link rel="canonical" href="/private/original.html">'),
    )
    server.page("/private/original.html", html("<p>y</p>"))
    server.page("/self.html", html("<p>z</p>", head='<link rel="canonical" href="self.html">'))
    server.routes["/sitemap.xml"] = Route(
        body=urlset(*(f"{server.url}{p}" for p in ("/copy.html", "/noindex.html", "/self.html"))),
        content_type="application/xml",
    )
    yield server
    server.stop()


def test_robots_meta_tags_and_headers_are_honoured(asking_site: SiteServer) -> None:
    items, problems = run(make_kind(start_url=asking_site.url + "/"))

    assert problems == []
    assert set(items) == {
        "index",
        "nofollow.html",  # listed; its links are not followed
        "via-noindex.html",  # a noindex page's links are followed
        "others.html",  # another crawler's directives are not ours
        "canonical.html",
        "self.html",  # its canonical address is itself
    }
    requested = asking_site.requested()
    for never in ("/not-followed.html", "/none-child.html", "/rel-skipped.html"):
        assert never not in requested, never
    assert "/header.pdf" in requested and "header.pdf" not in items
    assert "/private/original.html" not in requested, "robots.txt refuses the canonical page"
    assert requested.count("/canonical.html") == 1


def test_a_page_that_turns_noindex_is_no_longer_listed(asking_site: SiteServer) -> None:
    first, _ = run(make_kind(start_url=asking_site.url + "/"))
    assert "others.html" in first
    asking_site.page(
        "/others.html", html("<p>now hidden</p>", head='<meta name="robots" content="noindex">')
    )
    second, problems = run(make_kind(start_url=asking_site.url + "/"), states(first))
    assert problems == [] and "others.html" not in second
    assert set(second) == set(first) - {"others.html"}


def test_a_sitemap_page_with_a_canonical_address_lists_that_address(
    asking_site: SiteServer,
) -> None:
    items, problems = run(make_kind(sitemap_url=asking_site.url + "/sitemap.xml"))

    assert problems == []
    assert set(items) == {"canonical.html", "self.html"}
    assert "/via-noindex.html" not in asking_site.requested(), "a sitemap follows no links"
