"""Hosts as Linux network namespaces, each linked to this machine by a veth pair.

    this machine (the "primary": PostgreSQL, Redis, beat)       host h1 (netns canon-h1-<run>)
        cv<run>h1  10.231.<k>.1/30   <──── veth ────>   cv<run>n1  10.231.<k>.2/30
        cv<run>h2  10.231.<k>.5/30   <──── veth ────>   cv<run>n2  10.231.<k>.6/30  (host h2)

A host reaches the servers only through its link; `cut()` sets the primary's end of the link
down, which is what a pulled cable or a partition looks like to both ends: packets stop, no
connection is reset, TCP keeps retransmitting until the link is back. Every name carries the run
id, so two runs never share a namespace, an interface or a subnet, and `close()` removes all of
them (and ends the processes left inside) however the test ended.

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for `ip netns`); `unavailable()` says why not.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

SUBNET_PREFIX = "10.231"
# Retransmissions on the hosts' side are capped at 1 s (Linux >= 6.15, per namespace), so a
# host's stalled queries go out within a second of the link coming back instead of after TCP's
# exponential backoff (up to two minutes); with the cap, TCP's default 15 retries would give up
# on a connection after about 15 s, so a host retries 60 times (about a minute, where the
# default is about 15 minutes). The primary's own namespace is left as it is.
HOST_SYSCTLS = {"net.ipv4.tcp_rto_max_ms": "1000", "net.ipv4.tcp_retries2": "60"}


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None when they can): not root, no iproute2, or the
    kernel/container refuses (`ip netns add` needs CAP_SYS_ADMIN, veth needs CAP_NET_ADMIN)."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces and veth links (run as root)"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"needs `{tool}` ({package}) to make and enter namespaces"
    probe = f"canon-probe-{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here: {made.stderr.strip()}"
    try:
        veth = _ip(
            "link", "add", f"cvp{probe[-6:]}", "type", "veth", "peer", "name", f"cvq{probe[-6:]}",
            "netns", probe, check=False,
        )  # fmt: skip
        if veth.returncode != 0:
            return f"cannot create a veth pair: {veth.stderr.strip()}"
    finally:
        _ip("link", "del", f"cvp{probe[-6:]}", check=False)
        _ip("netns", "del", probe, check=False)
    return None


def _free_octet() -> int:
    """A third octet k such that 10.231.k.0/24 is on no interface or route of this machine."""
    used = _ip("-4", "route", "show", "table", "all").stdout + _ip("-4", "addr").stdout
    for _ in range(200):
        k = secrets.randbelow(256)
        net = ipaddress.ip_network(f"{SUBNET_PREFIX}.{k}.0/24")
        if not any(
            ipaddress.ip_address(word.split("/")[0]) in net
            for word in used.split()
            if word.startswith(f"{SUBNET_PREFIX}.")
        ):
            return k
    raise RuntimeError(f"no free {SUBNET_PREFIX}.x.0/24 subnet")


@dataclass
class Host:
    """One namespace and its link; `address` is this host's own, `server_address` the primary's
    end of its link (where PostgreSQL and Redis listen for it)."""

    name: str
    netns: str
    outer: str  # the primary's end of the veth pair
    inner: str  # the host's end, inside the namespace
    server_address: str
    address: str

    def argv(self, command: list[str]) -> list[str]:
        """`command` run inside this host: its network namespace, and a UTS namespace of its own
        whose hostname is the host's name (so lease owners and worker names say which host)."""
        return [
            "ip", "netns", "exec", self.netns,
            "unshare", "--uts", "--",
            "sh", "-c", 'echo "$0" > /proc/sys/kernel/hostname && exec "$@"', self.name, *command,
        ]  # fmt: skip

    def cut(self) -> None:
        """Pull the cable: the primary's end of the link goes down."""
        _ip("link", "set", self.outer, "down")

    def restore(self) -> None:
        _ip("link", "set", self.outer, "up")

    def is_cut(self) -> bool:
        return "state DOWN" in _ip("link", "show", self.outer).stdout


@dataclass
class Network:
    run: str
    hosts: dict[str, Host] = field(default_factory=dict)

    @classmethod
    def create(cls, names: list[str]) -> Network:
        """Namespaces and links for `names` (e.g. ["h1", "h2"]); on any failure, what was made
        so far is removed before the error propagates."""
        network = cls(run=secrets.token_hex(3))
        k = _free_octet()
        try:
            for i, name in enumerate(names):
                network._add(name, k, i)
        except BaseException:
            network.close()
            raise
        return network

    def _add(self, name: str, k: int, i: int) -> None:
        base = 4 * i
        host = Host(
            name=f"canon-{name}-{self.run}",
            netns=f"canon-{name}-{self.run}",
            outer=f"cv{self.run}{name}"[:15],
            inner=f"cv{self.run}n{i + 1}"[:15],
            server_address=f"{SUBNET_PREFIX}.{k}.{base + 1}",
            address=f"{SUBNET_PREFIX}.{k}.{base + 2}",
        )
        self.hosts[name] = host
        _ip("netns", "add", host.netns)
        _ip("link", "add", host.outer, "type", "veth", "peer", "name", host.inner,
            "netns", host.netns)  # fmt: skip
        _ip("addr", "add", f"{host.server_address}/30", "dev", host.outer)
        _ip("link", "set", host.outer, "up")
        inside = ["-n", host.netns]
        _ip(*inside, "addr", "add", f"{host.address}/30", "dev", host.inner)
        _ip(*inside, "link", "set", host.inner, "up")
        _ip(*inside, "link", "set", "lo", "up")
        for key, value in HOST_SYSCTLS.items():
            # Best effort, without procps: older kernels lack the cap, and the test then only
            # waits longer for h1's late statements.
            proc_file = "/proc/sys/" + key.replace(".", "/")
            subprocess.run(
                ["ip", "netns", "exec", host.netns, "sh", "-c", f"echo {value} > {proc_file}"],
                check=False,
                capture_output=True,
            )

    def server_addresses(self) -> list[str]:
        return [host.server_address for host in self.hosts.values()]

    def close(self) -> None:
        """End the processes still inside each namespace, then remove namespaces and links.
        Idempotent; never raises."""
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                pids = _ip("netns", "pids", host.netns, check=False).stdout.split()
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(Exception):
                _ip("link", "del", host.outer, check=False)
            with contextlib.suppress(Exception):
                _ip("netns", "del", host.netns, check=False)
