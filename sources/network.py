"""Which addresses a source may reach. A source names a host; before any request Canon resolves
it and refuses loopback, link-local, private, multicast and reserved addresses unless
`CANON_SOURCES_ALLOW_PRIVATE` is set (tests and single-host installs with an internal share set
it). Every redirect is checked again (`GuardedTransport`), so a public page cannot send the
crawler to 169.254.169.254.

What this does not stop: a name that resolves to a public address here and a private one a
moment later (DNS rebinding) between the check and the connect; a deployment that needs that
closed puts the workers behind an egress proxy."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx


class AddressRefused(Exception):
    """The host is not one a source may reach; the message names the host, never a URL's
    credentials or query."""


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise AddressRefused(
            f"The host {host} cannot be resolved ({exc.strerror or exc})."
        ) from None
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def _private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast


def host_check(host: str, *, allow_private: bool) -> None:
    """Raise AddressRefused when `host` resolves to an address a source may not reach."""
    if not host:
        raise AddressRefused("The address names no host.")
    if allow_private:
        return
    for address in _addresses(host):
        if _private(address):
            raise AddressRefused(
                f"The host {host} is a loopback, link-local or private address ({address}); "
                "sources may not reach those unless CANON_SOURCES_ALLOW_PRIVATE is set."
            )


def url_check(
    url: str, *, allow_private: bool, schemes: tuple[str, ...] = ("http", "https")
) -> None:
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise AddressRefused(f"Only {' and '.join(schemes)} addresses are accepted.")
    host_check(parts.hostname or "", allow_private=allow_private)


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that checks every request's host (redirects included) first."""

    def __init__(self, *, allow_private: bool, **kwargs: Any) -> None:
        self._inner = httpx.HTTPTransport(**kwargs)
        self._allow_private = allow_private

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        host_check(request.url.host, allow_private=self._allow_private)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def guarded_client(*, allow_private: bool, timeout: float, **kwargs: Any) -> httpx.Client:
    """An httpx client whose every request passes `host_check`."""
    return httpx.Client(
        transport=GuardedTransport(allow_private=allow_private),
        timeout=timeout,
        follow_redirects=False,
        **kwargs,
    )
