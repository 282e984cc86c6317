"""robots.txt of a website source, read with protego (RFC 9309), once per listing.

What the site's answer means (RFC 9309 2.3.1): a 2xx is the rules; any other 4xx but 429 means
there are none (crawl everything); a 429, a 5xx, no answer at all, or robots.txt redirected off
the site means they cannot be known, and the listing fails rather than guess."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_noop
from protego import Protego

from sources.kinds.base import ListingFailed
from sources.kinds.web_http import USER_AGENT, WebClient, WebError
from textkit.reasons import reason

# RFC 9309 2.5: crawlers must parse at least 500 KiB; a larger file fails the listing.
ROBOTS_MAX_BYTES = 512 * 1024

# `detail`: why robots.txt gave no answer (`web_http`); `status`: the site's answer.
UNREADABLE = reason(
    "website.robots_unreadable",
    gettext_noop("robots.txt could not be read (%(detail)s), so what may be crawled is unknown."),
)
ANSWERED = reason(
    "website.robots_answered",
    gettext_noop(
        "robots.txt could not be read (the site answered %(status)s), so what may be crawled is "
        "unknown."
    ),
)


@dataclass(frozen=True)
class Robots:
    rules: Protego

    def allows(self, url: str) -> bool:
        return bool(self.rules.can_fetch(url, USER_AGENT))

    @property
    def crawl_delay(self) -> float:
        """The site's Crawl-delay for us in seconds (0 when it names none)."""
        delay = self.rules.crawl_delay(USER_AGENT)
        return float(delay) if delay else 0.0


def robots_load(http: WebClient) -> Robots:
    """The site's rules. Raises ListingFailed when they cannot be known."""
    url = http.site.origin + "/robots.txt"
    try:
        answer = http.get(
            url,
            max_bytes=ROBOTS_MAX_BYTES,
            media_type_for=lambda _url, content_type: content_type,
        )
    except WebError as exc:
        raise ListingFailed(UNREADABLE(detail=exc.why)) from None
    if answer.status == 200 and answer.content is not None:
        return Robots(Protego.parse(answer.content.decode("utf-8", errors="replace")))
    if 400 <= answer.status < 500 and answer.status != 429:
        return Robots(Protego.parse(""))
    raise ListingFailed(ANSWERED(status=answer.status))
