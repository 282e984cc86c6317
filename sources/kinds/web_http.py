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
from django.utils.translation import gettext_noop

from sources.kinds.web_urls import Site, url_host, url_normalise
from sources.network import AddressRefused, guarded_client
from textkit.reasons import Reason, ReasonedError, reason

USER_AGENT = "CanonSync/1.0"
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

# Why an address gave no answer to use: words that follow the address or a page's path ("...
# timed out after 30 s"). `host` where a redirect led, `error` the HTTP library's own words.
OFF_SITE = reason("website.off_site", gettext_noop("redirected off the site to %(host)s"))
OFF_WEB = reason(
    "website.off_web",
    gettext_noop("redirected off the site to an address that is not http(s)"),
)
REDIRECT_REFUSED = reason("website.redirect_refused", gettext_noop("refused by robots.txt"))
TIMED_OUT = reason("website.timed_out", gettext_noop("timed out after %(seconds)s s"))
NO_ANSWER = reason("website.no_answer", gettext_noop("gave no answer (%(error)s)"))
# `detail`: why the address is refused (`sources.network`).
ADDRESS_REFUSED = reason("website.address_refused", gettext_noop("was refused (%(detail)s)"))
TOO_MANY_REDIRECTS = reason(
    "website.too_many_redirects", gettext_noop("redirected more than %(limit)s times")
)
DECLARED_TOO_LARGE = reason(
    "website.declared_too_large",
    gettext_noop("%(size)s bytes is over the limit of %(limit)s bytes"),
)
PAGE_TOO_LARGE = reason(
    "website.page_too_large", gettext_noop("the page is over the limit of %(limit)s bytes")
)
# An answer that is no page (`status`: its code, and HTTP's phrase for it when known).
SITE_ANSWERED = reason("website.site_answered", gettext_noop("the site answered %(status)s"))


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


class WebError(ReasonedError):
    """A URL that gave no answer to use; `url` is the one that failed (after redirects), and the
    message is for a person (a declared reason)."""

    def __init__(self, url: str, message: str | Reason) -> None:
        super().__init__(message)
        self.url = url


class Disallowed(WebError):
    """A redirect led to an address robots.txt refuses."""


class OffSite(WebError):
    """A redirect led off the site (or, `host` "", to a non-web address); `host` names where."""

    def __init__(self, url: str, host: str) -> None:
        super().__init__(url, OFF_SITE(host=host) if host else OFF_WEB())
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
                            raise OffSite(url, "")
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
                raise Unreachable(url, TIMED_OUT(seconds=f"{self._timeout:g}")) from None
            except httpx.RequestError as exc:
                raise Unreachable(url, NO_ANSWER(error=_brief(exc))) from None
            except AddressRefused as exc:
                raise Unreachable(url, ADDRESS_REFUSED(detail=exc.why)) from None
            finally:
                self.pacer.done()
            assert target is not None  # every other way out of the `with` returned or raised
            if not self.site.contains(target):
                raise OffSite(url, url_host(target))
            if allowed is not None and not allowed(target):
                raise Disallowed(target, REDIRECT_REFUSED())
            url = target
        raise TooManyRedirects(url, TOO_MANY_REDIRECTS(limit=MAX_REDIRECTS))


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _body(answer: httpx.Response, url: str, max_bytes: int) -> bytes:
    """The decoded body, refused past `max_bytes` (by Content-Length, or while reading, which
    also bounds a compressed body that inflates)."""
    declared = answer.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(url, DECLARED_TOO_LARGE(size=int(declared), limit=max_bytes))
    chunks: list[bytes] = []
    size = 0
    for chunk in answer.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise TooLarge(url, PAGE_TOO_LARGE(limit=max_bytes))
        chunks.append(chunk)
    return b"".join(chunks)


def _brief(exc: Exception) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__
