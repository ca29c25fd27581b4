"""The suite's traffic stays on loopback (docs/testing.md, "Traffic").

A test, a tool and a benchmark of this project may send traffic only to the loopback range
(127.0.0.0/8, ::1) or into a network namespace the test made itself. In the test processes (the
xdist workers, and every pytester run inside them) a Python audit hook (PEP 578: ``socket.connect``,
``socket.sendto``, ``socket.sendmsg`` and the name lookups raise audit events before they act)
refuses a socket aimed anywhere else, and a lookup of any name but localhost's, before anything is
sent; the test that asked fails naming it, even where the code caught the refusal. Processes a test
starts (ranks, torchrun, gputopo) are traced whole by ``dev/loopback-audit``.
"""

from __future__ import annotations

import ipaddress
import socket
import sys

LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_ADDRESSED = frozenset({"socket.connect", "socket.sendto", "socket.sendmsg"})
_LOOKUPS = frozenset(
    {
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyname_ex",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
    }
)

refused: list[str] = []  # what the hook refused, in order: the autouse fixture fails the test that asked


class BeyondLoopback(RuntimeError):
    """A socket or lookup of this process would leave loopback."""


def on_loopback(host) -> bool:
    """Whether ``host`` (an address or a name, as a socket call takes it) stays on this host's loopback.
    A name other than localhost's is not: looking it up may ask a DNS server."""
    if host is None:  # getaddrinfo(None, ...): the wildcard, to bind; no lookup
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = str(host).partition("%")[0]  # an IPv6 scope ("fe80::1%eth0") is not part of the address
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1, as torch's client dials 127.0.0.1
    return (mapped or ip).is_loopback


def _numeric(host) -> bool:
    try:
        ipaddress.ip_address(str(host).partition("%")[0])
        return True
    except ValueError:
        return False


def why_refused(event: str, args: tuple) -> str | None:
    """Why this audit event would leave loopback, or None."""
    if event in _ADDRESSED:
        sock, address = args[0], args[1]
        if address is None or getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
            return None  # a connected socket's send, a Unix socket, netlink
        if not on_loopback(address[0]):
            return f"{event.removeprefix('socket.')} to {address[0]!r} port {address[1]}"
        return None
    if event in _LOOKUPS:
        host = args[0]
        if event == "socket.getnameinfo":
            host = host[0] if isinstance(host, tuple) and host else host
        # A numeric address is not looked up (getaddrinfo parses it); where it leads, connect says.
        if event == "socket.getaddrinfo" and host is not None and _numeric(host):
            return None
        if not on_loopback(host):
            return f"{event.removeprefix('socket.')} of {host!r} (a name server may be asked)"
    return None


def _hook(event: str, args: tuple) -> None:
    if event not in _ADDRESSED and event not in _LOOKUPS:
        return
    why = why_refused(event, args)
    if why:
        refused.append(why)
        raise BeyondLoopback(f"tests send traffic to loopback only (docs/testing.md): refused {why}")


_installed = False


def install() -> None:
    """Guard this process from now on (an audit hook cannot be removed: install once)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
