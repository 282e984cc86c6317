"""Which addresses a source may reach. A source names a host; before any request Canon resolves
it and refuses loopback, link-local, private, multicast and reserved addresses unless
`CANON_SOURCES_ALLOW_PRIVATE` is set (tests and single-host installs with an internal share set
it). Every redirect is checked again (`GuardedTransport`), so a public page cannot send the
crawler to 169.254.169.254.

A name that resolves to a public address at the check and to a private one a moment later, at
the connect (DNS rebinding), is stopped too: every direct connection a source makes has the
address it actually reached checked before anything is sent on it (`peer_check`): the
website kind's through `GuardedTransport`, the Git and S3 kinds' through urllib3 connection
classes (`PeerChecked`). Through a proxy, which resolves the names itself, the connection
checks are the proxy's."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
from django.utils.translation import gettext_noop

from textkit.reasons import ReasonedError, reason

# Why an address is refused (`host`: a host name or address; `address`: what it resolved or
# connected to; `detail`: the resolver's own words).
UNRESOLVED = reason(
    "source.host_unresolved", gettext_noop("The host %(host)s cannot be resolved (%(detail)s).")
)
NO_HOST = reason("source.no_host", gettext_noop("The address names no host."))
PRIVATE_HOST = reason(
    "source.private_host",
    gettext_noop(
        "The host %(host)s is a loopback, link-local or private address (%(address)s); sources "
        "may not reach those unless CANON_SOURCES_ALLOW_PRIVATE is set."
    ),
)
NOT_WEB = reason("source.not_web", gettext_noop("Only http and https addresses are accepted."))
PEER_UNTOLD = reason(
    "source.peer_untold", gettext_noop("The host %(host)s led to an address that cannot be told.")
)
PEER_PRIVATE = reason(
    "source.peer_private",
    gettext_noop(
        "The host %(host)s led to a loopback, link-local or private address (%(address)s) when "
        "connecting; sources may not reach those unless CANON_SOURCES_ALLOW_PRIVATE is set."
    ),
)
LOCAL_SOCKET = reason(
    "source.local_socket", gettext_noop("Sources do not connect to local sockets.")
)


class AddressRefused(ReasonedError):
    """The host is not one a source may reach; the message (a declared reason) names the host,
    never a URL's credentials or query."""


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise AddressRefused(UNRESOLVED(host=host, detail=str(exc.strerror or exc))) from None
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def _private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast


def host_check(host: str, *, allow_private: bool) -> None:
    """Raise AddressRefused when `host` resolves to an address a source may not reach."""
    if not host:
        raise AddressRefused(NO_HOST())
    if allow_private:
        return
    for address in _addresses(host):
        if _private(address):
            raise AddressRefused(PRIVATE_HOST(host=host, address=str(address)))


def url_check(url: str, *, allow_private: bool) -> None:
    """Raise AddressRefused unless `url` is an http(s) address whose host a source may reach."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise AddressRefused(NOT_WEB())
    host_check(parts.hostname or "", allow_private=allow_private)


def peer_check(address: str, *, host: str) -> None:
    """Raise AddressRefused when a connection to `host` reached `address`, a private one (or
    one that cannot be told)."""
    try:
        reached = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        raise AddressRefused(PEER_UNTOLD(host=host)) from None
    if _private(reached):
        raise AddressRefused(PEER_PRIVATE(host=host, address=address))


class PeerChecked:
    """For urllib3 connection classes (the Git kind's, botocore's for S3), before them in the
    bases: the address a new connection reached is checked before anything, a TLS handshake
    included, is sent on it."""

    host: str

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        try:
            peer_check(str(sock.getpeername()[0]), host=self.host)
        except AddressRefused:
            sock.close()
            raise
        return sock


def peer_checked_pools(**pools: type) -> dict[str, type]:
    """urllib3 connection pool classes by scheme (`http=..., https=...`, urllib3's or
    botocore's) made into ones whose connections are `PeerChecked`: what a pool manager's
    `pool_classes_by_scheme` takes."""
    return {
        scheme: type(
            f"PeerChecked{pool.__name__}",
            (pool,),
            {
                "ConnectionCls": type(
                    f"PeerChecked{pool.ConnectionCls.__name__}",  # type: ignore[attr-defined]
                    (PeerChecked, pool.ConnectionCls),  # type: ignore[attr-defined]
                    {},
                )
            },
        )
        for scheme, pool in pools.items()
    }


class _PeerCheckedBackend(httpcore.NetworkBackend):
    """httpcore's network backend, with each new TCP connection's peer address checked before
    the connection is used: what the name resolved to at the connect, not at the check."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        peer = stream.get_extra_info("server_addr")
        try:
            peer_check(str(peer[0]) if peer else "", host=host)
        except AddressRefused:
            stream.close()
            raise
        return stream

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        raise AddressRefused(LOCAL_SOCKET())

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that checks every request's host (redirects included) first, and,
    unless private addresses are allowed, the address each new connection reached."""

    def __init__(self, *, allow_private: bool, **kwargs: Any) -> None:
        self._inner = httpx.HTTPTransport(**kwargs)
        self._allow_private = allow_private
        if not allow_private:
            # httpx builds its httpcore pool without a way to pass a network backend; the pool
            # keeps it here (httpx and httpcore are pinned; a test connects to prove it).
            pool = self._inner._pool
            pool._network_backend = _PeerCheckedBackend(pool._network_backend)

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
