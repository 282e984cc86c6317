"""A real HTTP server for website-source tests: routes set by the test, every request recorded
(path, headers, arrival time), ETag / Last-Modified answered with 304 like a real server; and
`small_site`, the site most of those tests crawl."""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Route:
    """What the server answers for one path (with its query). `stream`: no Content-Length, the
    body ends when the connection closes. `sleep`: seconds to wait before answering."""

    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    etag: str | None = None
    last_modified: str | None = None
    stream: bool = False
    sleep: float = 0.0


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    at: float


class SiteServer:
    """Serves `routes` on 127.0.0.1 at a free port until `stop`; unknown paths answer 404."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.site = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def page(self, path: str, html: str, **options: Any) -> Route:
        route = self.routes[path] = Route(body=html.encode(), **options)
        return route

    def requested(self) -> list[str]:
        """Paths asked for, in order."""
        with self._lock:
            return [request.path for request in self.requests]

    def requests_for(self, path: str) -> list[Request]:
        with self._lock:
            return [request for request in self.requests if request.path == path]

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    site: SiteServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (a timeout test) is expected, not news


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        site = self.server.site
        site.record(Request(self.path, dict(self.headers.items()), time.monotonic()))
        route = site.routes.get(self.path)
        if route is None:
            self._answer(404, b"not found", "text/plain", {})
            return
        if route.sleep:
            time.sleep(route.sleep)
        if self._not_modified(route):
            self.send_response(304)
            if route.etag:
                self.send_header("ETag", route.etag)
            self.end_headers()
            return
        headers = dict(route.headers)
        if route.etag:
            headers["ETag"] = route.etag
        if route.last_modified:
            headers["Last-Modified"] = route.last_modified
        self._answer(route.status, route.body, route.content_type, headers, stream=route.stream)

    def _not_modified(self, route: Route) -> bool:
        if route.status != 200:
            return False
        if_none_match = self.headers.get("If-None-Match")
        if if_none_match is not None:
            tags = [tag.strip() for tag in if_none_match.split(",")]
            return route.etag is not None and route.etag in tags
        since = self.headers.get("If-Modified-Since")
        return since is not None and since == route.last_modified

    def _answer(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: dict[str, str],
        *,
        stream: bool = False,
    ) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in headers.items():
            self.send_header(name, value)
        if not stream:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


# --- the site most tests crawl ---------------------------------------------------------------

MAX_BYTES = 20_000
PDF = b"%PDF-1.4\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n"
INDEX_MODIFIED = "Wed, 01 Jan 2025 10:00:00 GMT"


def html(body: str, head: str = "") -> str:
    return f"<!doctype html><html><head>{head}</head><body>{body}</body></html>"


def links(*hrefs: str) -> str:
    return "".join(f'<a href="{href}">link</a>' for href in hrefs)


def small_site() -> SiteServer:
    """A small site: an index linking every case, pages three levels deep, robots.txt that
    disallows /private/, redirects, a 404, a 500, pages over MAX_BYTES, a PDF and sitemaps."""
    server = SiteServer()
    base = server.url
    server.page("/robots.txt", "User-agent: *\nDisallow: /private/\n", content_type="text/plain")
    server.page(
        "/",
        html(
            links(
                "docs/install.html",  # relative
                f"{base}/docs/guide/",  # absolute, same site
                "/broken.html",  # 500 mid-crawl
                "http://example.com/elsewhere",  # another site
                "#top",  # a fragment of this page
                "docs/install.html#usage",  # a fragment of a linked page
                "mailto:team@example.com",
                "javascript:void(0)",
                "/private/secret.html",  # disallowed by robots.txt
                "/old",  # redirects on the site
                "/away",  # redirects off the site
                "/missing.html",  # 404
                "/huge.html",  # over the limit by Content-Length
                "/huge-stream.html",  # over the limit while reading
                "/files/manual.pdf",
                "/styles.css",  # a type Canon does not read
                "search?q=canon",
            ),
            head=(
                "<title>Canon  home</title>"
                '<meta name="description" content="What Canon is">'
                '<meta name="author" content="Ada">'
                '<meta name="keywords" content="rag, search">'
                '<meta property="article:published_time" content="2025-01-01T10:00:00Z">'
                '<meta property="article:modified_time" content="2025-02-01T10:00:00Z">'
            ),
        ).replace("<html>", '<html lang="en">'),
        last_modified=INDEX_MODIFIED,
    )
    server.page(
        "/docs/install.html",
        html(links("../deep/one.html")),
        etag='"install-v1"',
        last_modified="Thu, 02 Jan 2025 10:00:00 GMT",
    )
    server.page("/docs/guide/", html(links("two.html", "/")))
    server.page("/docs/guide/two.html", html("<p>two</p>"))
    server.page("/deep/one.html", html(links("three.html")), etag='"one-v1"')
    server.page("/deep/three.html", html("<p>three</p>"))
    server.page("/deep/hidden.html", html("<p>only linked from an oversized page</p>"))
    server.page("/docs/new.html", html("<p>moved here</p>"))
    server.page("/private/secret.html", html("<p>secret</p>"))
    server.page("/search?q=canon", html("<p>results</p>"))
    server.page("/broken.html", "oops", status=500)
    server.page("/huge.html", html("x" * (MAX_BYTES + 1)))
    server.page("/huge-stream.html", html("y" * (MAX_BYTES + 1)), stream=True)
    server.page("/styles.css", "body {}", content_type="text/css")
    server.routes["/files/manual.pdf"] = Route(body=PDF, content_type="application/pdf")
    server.routes["/old"] = Route(status=301, headers={"Location": "/docs/new.html"})
    server.routes["/away"] = Route(
        status=302, headers={"Location": f"http://localhost:{server.port}/docs/new.html"}
    )
    sitemap = urlset(
        f"{base}/docs/install.html",
        f"{base}/docs/guide/",
        f"{base}/private/secret.html",
        "http://example.com/not-this-site.html",
        f"{base}/files/manual.pdf",
    )
    server.routes["/sitemap.xml"] = Route(body=sitemap, content_type="application/xml")
    server.routes["/sitemap-more.xml.gz"] = Route(
        body=gzip.compress(urlset(f"{base}/deep/three.html")), content_type="application/gzip"
    )
    server.routes["/sitemap_index.xml"] = Route(
        body=(
            '<?xml version="1.0"?>'
            '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<sitemap><loc>{base}/sitemap.xml</loc></sitemap>"
            f"<sitemap><loc>{base}/sitemap-more.xml.gz</loc></sitemap>"
            f"<sitemap><loc>{base}/sitemap-missing.xml</loc></sitemap>"
            "</sitemapindex>"
        ).encode(),
        content_type="application/xml",
    )
    return server


def urlset(*urls: str) -> bytes:
    entries = "".join(f"<url><loc>{url}</loc><lastmod>2025-03-01</lastmod></url>" for url in urls)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
    ).encode()
