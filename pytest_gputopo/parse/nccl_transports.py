"""NCCL's transport lines in an ``NCCL_DEBUG=INFO`` log: which transport joins two ranks on a
channel, and the network family a plugin's name belongs to. ``parse.nccl_log`` hands each message
here; their shapes changed over NCCL's versions:

    Ring 00 : 0[1] -> 1[2] via P2P/IPC                          <= 2.6 (bracket: nvmlDev or busId)
    Ring 00 : 0 -> 1 [send] via NET/IB/0/GDRDMA                 <= 2.6 NET: no device token
    Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC/read          2.7 - 2.11 (busId; 2.9-2.11 add
                                                                " comm 0x.. nRanks 08")
    Channel 00 : 2[89000] -> 3[b2000] via direct shared memory  SHM up to 2.12
    Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read              2.12+ (nvmlDev since 2.18.3)
    Channel 02 : 3[3] -> 0[0] via SHM/direct/direct             SHM keeps no /connIndex
    Channel 00/0 : 3[1] -> 4[0] [send] via NET/IBext_v8/5(2)/GDRDMA   PXN: (proxy rank)
    Channel 00/0 : 0[35000] -> 1[f5000] [receive] via NET/AWS Libfabric/0   plugin names have spaces
    CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA       (also "Coll 00 :", "CollNet 00 :")

Look-alikes that are no transport: rank 0's ring order "Channel 00/02 :    0   1" (from 2.23.4
unpadded, "Channel 00/32 : 0 2 4 ... 36 3..." cut with dots past 127 characters) and NCCL_GRAPH's
neighbours "Ring 00 : 3 -> 0 -> 1" (prev -> rank -> next; the plugin's own runs log GRAPH).
The per-version line shapes are held by tests/test_nccl_log_versions.py (stub logs of 2.18/2.21/2.27).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "INTERNAL_NETS",
    "TRANSPORT_LINE",
    "Connection",
    "connection",
    "cut_transport",
    "ring_ranks",
    "transport_family",
]

TRANSPORT_LINE = re.compile(
    r"^(?P<kind>Ring|Channel|CollNet|Coll)\s+(?P<ch>\d{1,9})(?:/(?P<ci>\d{1,9}))?\s*:\s*"
    r"(?P<src>\d{1,9})(?:\[(?P<sdev>[0-9a-fA-F]{1,16})\])?"
    r"(?:\s*->\s*(?P<dst>\d{1,9})(?:\[(?P<ddev>[0-9a-fA-F]{1,16})\])?)?"
    r"(?:\s*\[(?P<dir>send|receive)\])?"
    r"\s+via\s+(?P<via>\S.*?)\s*$"
)
# 2.9-2.11 append the communicator to every transport line.
_COMM_SUFFIX = re.compile(r"\s+comm\s+0x[0-9a-fA-F]+\s+nRanks\s+\d+\s*$")
# "name/dev[(proxy)][/GDRDMA][(PCI)][/Shared]"; the name is whatever comes before "/<digits>".
_NET_VIA = re.compile(r"^(?P<name>.+?)/(?P<dev>\d{1,9})(?:\((?P<proxy>\d{1,9})\))?(?P<tail>/.*)?$")
# Rank 0's ring order, "Channel 00/02 :    0   1"; from 2.23.4 (graph/rings.cc dumpLine) a line past 127
# characters ends in "..." over whatever it cuts, a number's first digits included: those are no rank.
_RING_ORDER = re.compile(
    r"^(?:Ring|Channel)\s+\d{1,9}(?:/(?P<n>\d{1,9}))?\s*:((?:\s+\d{1,9})+)(?:\s+\d{0,9}\.\.\.)?\s*$"
)
# NCCL_GRAPH's ring neighbours, "Ring 00 : 3 -> 0 -> 1" (prev -> rank -> next, init.cc 2.7 to today).
_RING_NEIGHBOURS = re.compile(r"^Ring\s+\d{1,9}\s*:\s*(\d{1,9})\s*->\s*(\d{1,9})\s*->\s*(\d{1,9})\s*$")
_CHANNELISH = re.compile(r"^(?:Ring|Channel|CollNet|Coll)\s+\d")

# Network names NCCL itself has ("IB", "Socket") stay as they are; external plugins are grouped by
# the family they implement so that a requirement "NET/IB" is met by nccl-rdma-sharp-plugins.
INTERNAL_NETS = ("IB", "Socket")
# nccl-rdma-sharp-plugins' UCX plugins: "UCX", "UCX-RMA", "UCX-UCT", "UCX-UCT-RD" (NCCL_PLUGIN_P2P=ucx_rma...).
_UCX = re.compile(r"^ucx(?:[-_].*)?$", re.IGNORECASE)
# A verbs device as NET/IB's "Using" line lists it: "mlx5_0:1/IB", "mlx5_1:1/RoCE/SHARP" (link layer).
_VERBS_DEVICE = re.compile(r"^[^\s:/]+:\d+/(?:IB|RoCE)\b")


def transport_family(transport: str, net_devices: Iterable[str] = ()) -> str:
    """``NET/IBext_v8`` and ``NET/NCCL RDMA Plugin v9`` -> ``NET/IB`` (nccl-rdma-sharp-plugins),
    ``NET/AWS Libfabric`` -> ``NET/OFI`` (aws-ofi-nccl); everything else is returned unchanged.

    The UCX plugins (``NET/UCX``, ``NET/UCX-RMA``, ...) -> ``NET/IB`` only where ``net_devices`` (the
    log's, :attr:`NcclLog.net_devices`) lists a verbs device: they open only the ibverbs devices
    (``nccl_ucx_init`` -> ``nccl_p2p_ib_init``) and pin UCX to one (``NET_DEVICES=<hca>:<port>``), so they
    run where NCCL's own NET/IB does (InfiniBand or RoCE), and the plugin logs them in NET/IB's
    "Using [0]mlx5_0:1/IB" line. Without that line nothing says where UCX ran: unknown, the name kept."""
    if not transport.startswith("NET/"):
        return transport
    name = transport[4:]
    if name in INTERNAL_NETS:
        return transport
    if _UCX.match(name):
        return "NET/IB" if any(_VERBS_DEVICE.match(d) for d in net_devices) else transport
    low = name.lower()
    if low.startswith("ib") or "rdma" in low:
        return "NET/IB"
    if "libfabric" in low or "ofi" in low:
        return "NET/OFI"
    return transport


@dataclass(frozen=True)
class Connection:
    """One transport line. ``src_dev``/``dst_dev`` are the bracket tokens as printed: the NVML index
    since 2.18.3, a PCI busId in hex ("3e000") in 2.7-2.18.1, None in old NET lines and CollNet.
    CollNet connects a rank to the collective network, not to a peer: ``dst_rank`` is -1 there.
    ``proxy_rank`` is the PXN proxy rank of a NET send (``NET/IB/0(4)``) or the intermediate rank
    of ``P2P/indirect/2[2]``. ``via`` is the text after "via " (without the 2.9-2.11 comm suffix)."""

    channel: int
    conn_index: int | None
    src_rank: int
    src_dev: str | None
    dst_rank: int
    dst_dev: str | None
    transport: str
    detail: str
    direction: str | None = None
    gdrdma: bool = False
    host: str | None = None
    pid: int | None = None
    net_dev: int | None = None
    proxy_rank: int | None = None
    via: str = ""

    @property
    def family(self) -> str:
        """By the name alone (a UCX plugin's family needs the log's devices: :attr:`NcclLog.families`)."""
        return transport_family(self.transport)


def connection(m: re.Match[str], host: str | None, pid: int | None) -> Connection | None:
    """The connection a ``TRANSPORT_LINE`` match names, printed by ``host``'s process ``pid``; None when
    it names no peer rank (only CollNet's have none: its peer is the network)."""
    via = _COMM_SUFFIX.sub("", m.group("via"))
    kind = m.group("kind")
    src = int(m.group("src"))
    if m.group("dst") is not None:
        dst = int(m.group("dst"))
    elif kind.startswith("Coll"):
        dst = -1  # CollNet: the peer is the network's collective engine, not a rank
    else:
        return None
    net_dev = proxy = None
    if via == "direct shared memory":  # <= 2.12 wording of SHM
        transport, detail = "SHM", via
    else:
        head, _, detail = via.partition("/")
        transport = head
        if head in ("NET", "COLLNET"):
            n = _NET_VIA.match(detail)
            if head == "NET":
                transport = f"NET/{n.group('name') if n else detail.split('/')[0]}"
            if n:
                net_dev = int(n.group("dev"))
                proxy = int(n.group("proxy")) if n.group("proxy") else None
        elif head == "P2P" and detail.startswith("indirect/"):
            ind = re.match(r"indirect/(\d{1,9})", detail)
            proxy = int(ind.group(1)) if ind else None
    return Connection(
        channel=int(m.group("ch")),
        conn_index=int(m.group("ci")) if m.group("ci") is not None else None,
        src_rank=src,
        src_dev=m.group("sdev"),
        dst_rank=dst,
        dst_dev=m.group("ddev"),
        transport=transport,
        detail=detail,
        direction=m.group("dir"),
        gdrdma="/GDRDMA" in via,
        host=host,
        pid=pid,
        net_dev=net_dev,
        proxy_rank=proxy,
        via=via,
    )


def ring_ranks(msg: str) -> tuple[int | None, list[int]] | None:
    """A look-alike that is no transport -- rank 0's ring order ("Channel 00/02 :    0   1") or
    NCCL_GRAPH's neighbours ("Ring 00 : 3 -> 0 -> 1") -- as (the channel count a ring order names, or
    None; the ranks it names); None for any other message."""
    m = _RING_ORDER.match(msg)
    if m:
        return (int(m.group("n")) if m.group("n") else None), [int(r) for r in m.group(2).split()]
    m = _RING_NEIGHBOURS.match(msg)
    if m:
        return None, [int(r) for r in m.groups()]
    return None


def cut_transport(msg: str) -> bool:
    """Whether a message that is no ``TRANSPORT_LINE`` nor ring line looks like one cut short."""
    return bool(_CHANNELISH.match(msg)) and ("->" in msg or " via" in msg or msg.rstrip().endswith(":"))
