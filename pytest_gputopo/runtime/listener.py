"""Where the store rank 0 serves listens: on the address ``MASTER_ADDR`` names on this host, no wider.

torch's ``TCPStore`` binds every interface ("::", else "0.0.0.0": ``UvTcpServer::makeWithPort`` in
torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp), so anyone who reaches the port on any
network of rank 0's host can read and write the ranks' records. It also takes a socket already bound
(``master_listen_fd``: ``makeWithSocket`` calls ``uv_tcp_open`` on it, then ``uv_listen``): the
plugin binds one to the address the other ranks are told to reach, MASTER_ADDR, and hands it over.

Where that would stop a rank from reaching the store, the store listens as torch's does, and says
why: MASTER_ADDR names no address of this host (a NAT, a container's published port), it is the
wildcard itself, or it is a loopback address while the ranks span several nodes (Debian's
``127.0.1.1 <hostname>`` line in /etc/hosts: the other nodes resolve the name to the host's real
address).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import NamedTuple


class Listener(NamedTuple):
    sock: socket.socket | None  # bound to MASTER_ADDR's address; None: every interface, as torch binds
    where: str  # for the header: the address it listens on, or why it listens on every interface


def is_loopback(sock: socket.socket) -> bool:
    """Whether ``sock`` is bound to a loopback address: then no other host can reach it."""
    return ipaddress.ip_address(sock.getsockname()[0].partition("%")[0]).is_loopback


def bind_store(master_addr: str, port: int, nodes: int | None) -> Listener:
    """A socket bound to ``master_addr``'s address on this host and ``port``, or why there is none.
    ``nodes`` is how many nodes the ranks run on (None: not said): a loopback address serves one only.
    Raises OSError when the port is taken (torch's own bind would fail the same way)."""
    try:
        found = socket.getaddrinfo(master_addr, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return Listener(None, f"every interface: MASTER_ADDR={master_addr!r} does not resolve here ({exc})")
    why = f"every interface: MASTER_ADDR={master_addr!r} is not an address of this host"
    for family, kind, proto, _, address in found:
        # An IPv6 scope ("%eth0") is not part of it. An INET or INET6 address starts with its text:
        ip = ipaddress.ip_address(address[0].partition("%")[0])  # type: ignore[union-attr]
        if ip.is_unspecified:
            return Listener(None, f"every interface: MASTER_ADDR={master_addr!r} names them all")
        if ip.is_loopback and nodes != 1:
            why = (
                f"every interface: MASTER_ADDR={master_addr!r} is {ip}, a loopback address, here, "
                f"and ranks on other nodes could not reach it there"
            )
            continue
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch sets it on its listener
            sock.bind(address)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRNOTAVAIL:  # an address of another host
                continue
            raise OSError(exc.errno, f"cannot listen on {ip}:{port}: {exc.strerror or exc}") from None
        return Listener(sock, f"{master_addr} ({ip}) only" if master_addr != str(ip) else f"{ip} only")
    return Listener(None, why)
