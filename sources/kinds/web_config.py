"""A website source's settings as stored: addresses normalised and checked, numbers in range
with their defaults filled in."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

from django.utils.translation import gettext_noop

from sources.kinds.base import ConfigInvalid
from sources.kinds.web_urls import Site, url_normalise
from sources.network import AddressRefused, url_check
from textkit.reasons import reason

# name: (lowest, highest, default)
_INT_FIELDS = {"max_depth": (0, 20, 5), "max_pages": (1, 100_000, 1000)}
_DELAY = (0.0, 60.0, 1.0)

# Why a website source's settings are refused (`key`: the setting's name, quoted).
NEEDS_ADDRESS = reason(
    "website.needs_address",
    gettext_noop("A website source needs 'start_url' or 'sitemap_url'."),
)
SITEMAP_ELSEWHERE = reason(
    "website.sitemap_elsewhere",
    gettext_noop("'sitemap_url' must be on the same site (scheme, host and port) as 'start_url'."),
)
NOT_AN_ADDRESS = reason("website.not_an_address", gettext_noop("%(key)s must be an address."))
NOT_WEB = reason(
    "website.not_web", gettext_noop("%(key)s must be an http or https address with a host.")
)
ADDRESS_USERINFO = reason(
    "website.address_userinfo", gettext_noop("%(key)s may not hold a user name or password.")
)
# `detail`: why its address is refused (`sources.network`).
SETTING_REFUSED = reason("website.setting_refused", gettext_noop("%(key)s: %(detail)s"))
NOT_WHOLE = reason("website.not_whole", gettext_noop("%(key)s must be a whole number."))
OUT_OF_RANGE = reason(
    "website.out_of_range", gettext_noop("%(key)s must be between %(lowest)s and %(highest)s.")
)
DELAY_NOT_NUMBER = reason(
    "website.delay_not_number", gettext_noop("'delay_seconds' must be a number of seconds.")
)
DELAY_OUT_OF_RANGE = reason(
    "website.delay_out_of_range",
    gettext_noop("'delay_seconds' must be between %(lowest)s and %(highest)s."),
)


def website_config_check(stored: dict[str, Any], *, allow_private: bool) -> dict[str, Any]:
    """`stored` (unknown keys already refused) with "start_url" and "sitemap_url" normalised
    ("" for one not given; at least one given, both on one site) and "max_depth", "max_pages",
    "delay_seconds" in range. Resolves the host unless `allow_private`. Raises ConfigInvalid."""
    for key in ("start_url", "sitemap_url"):
        stored[key] = _url_field(stored.get(key), key, allow_private=allow_private)
    start, sitemap = stored["start_url"], stored["sitemap_url"]
    if not start and not sitemap:
        raise ConfigInvalid(NEEDS_ADDRESS())
    if start and sitemap and Site.of(start) != Site.of(sitemap):
        raise ConfigInvalid(SITEMAP_ELSEWHERE())
    for key, (lowest, highest, default) in _INT_FIELDS.items():
        stored[key] = _int_field(stored.get(key), key, lowest, highest, default)
    stored["delay_seconds"] = _delay_field(stored.get("delay_seconds"))
    return stored


def _url_field(value: Any, key: str, *, allow_private: bool) -> str:
    if value in (None, ""):
        return ""
    if not isinstance(value, str):
        raise ConfigInvalid(NOT_AN_ADDRESS(key=repr(key)))
    normal = url_normalise(value)
    if normal is None:
        raise ConfigInvalid(NOT_WEB(key=repr(key)))
    parts = urlsplit(value.strip())
    if parts.username or parts.password:
        raise ConfigInvalid(ADDRESS_USERINFO(key=repr(key)))
    try:
        url_check(normal, allow_private=allow_private)
    except AddressRefused as exc:
        raise ConfigInvalid(SETTING_REFUSED(key=repr(key), detail=exc.why)) from None
    return normal


def _int_field(value: Any, key: str, lowest: int, highest: int, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigInvalid(NOT_WHOLE(key=repr(key))) from None
    if not lowest <= number <= highest:
        raise ConfigInvalid(OUT_OF_RANGE(key=repr(key), lowest=str(lowest), highest=str(highest)))
    return number


def _delay_field(value: Any) -> float:
    lowest, highest, default = _DELAY
    if value in (None, ""):
        return default
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigInvalid(DELAY_NOT_NUMBER()) from None
    if math.isnan(number) or not lowest <= number <= highest:
        raise ConfigInvalid(DELAY_OUT_OF_RANGE(lowest=f"{lowest:g}", highest=f"{highest:g}"))
    return number
