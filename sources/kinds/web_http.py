"""HTTP for a website source: one polite GET at a time, redirects followed by hand and checked,
bodies read up to a limit.

Every request goes through `sources.network.guarded_client` (each host's addresses checked,
redirects never followed by httpx itself). Between the end of one response and the start of
the next request at least `Pacer.delay` seconds pass, so the site never sees requests closer
together than that, whatever the pages' sizes."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx

from sources.kinds.web_urls import Site, url_host, url_normalise
from sources.network import AddressRefused, guarded_client

USER_AGENT = "CanonSync/1.0"
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class Pacer:
    """Keeps `delay` seconds between one request's end and the next one's start."""

    def __init__(
        self,
        delay: float,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.delay = delay
        self._sleep = sleep
        self._clock = clock
        self._last: float | None = None

    def wait(self) -> None:
        if self._last is not None:
            remaining = self._last + self.delay - self._clock()
            if remaining > 0:
                self._sleep(remaining)

    def done(self) -> None:
        self._last = self._clock()


@dataclass(frozen=True)
class Response:
    """The last answer of a redirect chain. `content` is None for a 304, for any status but
    200, and when `media_type_for` declined the body; `media_type` is what it answered."""

    url: str
    status: int
    headers: httpx.Headers
    media_type: str
    content: bytes | None


class WebError(Exception):
    """A URL that gave no answer to use; `url` is the one that failed (after redirects), and the
    message is for a person."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(message)
        self.url = url


class Disallowed(WebError):
    """A redirect led to an address robots.txt refuses."""


class OffSite(WebError):
    """A redirect led off the site (or to a non-web address); `host` names where."""

    def __init__(self, url: str, host: str) -> None:
        super().__init__(url, f"redirected off the site to {host}")
        self.host = host


class TooManyRedirects(WebError):
    pass


class TooLarge(WebError):
    pass


class Unreachable(WebError):
    """No answer: a timeout, a refused connection, an address refused, a broken response."""


MediaTypeFor = Callable[[str, str], str | None]


class WebClient:
    """GETs on one site for one source; not thread-safe (a crawl is one request at a time)."""

    def __init__(self, *, site: Site, allow_private: bool, timeout: float, delay: float) -> None:
        self.site = site
        self.pacer = Pacer(delay)
        self._timeout = timeout
        self._client = guarded_client(
            allow_private=allow_private,
            timeout=timeout,
            headers={"User-Agent": USER_AGENT},
        )

    def close(self) -> None:
        self._client.close()

    def get(
        self,
        url: str,
        *,
        max_bytes: int,
        media_type_for: MediaTypeFor,
        conditional: Callable[[str], Mapping[str, str]] | None = None,
        allowed: Callable[[str], bool] | None = None,
    ) -> Response:
        """GET `url` (normalised, on the site), following up to MAX_REDIRECTS redirects that
        stay on the site and that `allowed` admits. `conditional(url)` gives each hop's
        If-None-Match / If-Modified-Since headers. `media_type_for(url, content_type)` names the
        media type of a 200's body, or None to leave it unread. Raises a WebError subclass."""
        for _hop in range(MAX_REDIRECTS + 1):
            headers = dict(conditional(url)) if conditional is not None else {}
            target: str | None = None
            self.pacer.wait()
            try:
                with self._client.stream("GET", url, headers=headers) as answer:
                    status = answer.status_code
                    if status in _REDIRECTS and answer.headers.get("location"):
                        target = url_normalise(answer.headers["location"], base=url)
                        if target is None:
                            raise OffSite(url, "an address that is not http(s)")
                    else:
                        content_type = answer.headers.get("content-type", "")
                        media_type = _media_type(content_type)
                        content = None
                        if status == 200:
                            chosen = media_type_for(url, content_type)
                            if chosen is not None:
                                media_type = chosen
                                content = _body(answer, url, max_bytes)
                        return Response(url, status, answer.headers, media_type, content)
            except httpx.TimeoutException:
                raise Unreachable(url, f"timed out after {self._timeout:g} s") from None
            except httpx.RequestError as exc:
                raise Unreachable(url, f"gave no answer ({_brief(exc)})") from None
            except AddressRefused as exc:
                raise Unreachable(url, f"was refused ({exc})") from None
            finally:
                self.pacer.done()
            assert target is not None  # every other way out of the `with` returned or raised
            if not self.site.contains(target):
                raise OffSite(url, url_host(target))
            if allowed is not None and not allowed(target):
                raise Disallowed(target, "refused by robots.txt")
            url = target
        raise TooManyRedirects(url, f"redirected more than {MAX_REDIRECTS} times")


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _body(answer: httpx.Response, url: str, max_bytes: int) -> bytes:
    """The decoded body, refused past `max_bytes` (by Content-Length, or while reading, which
    also bounds a compressed body that inflates)."""
    declared = answer.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(url, f"{int(declared)} bytes is over the limit of {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    for chunk in answer.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise TooLarge(url, f"the page is over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _brief(exc: Exception) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__
