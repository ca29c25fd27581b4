"""Read ``NCCL_DEBUG=INFO`` logs (NCCL 2.4 to today); the topology XML is ``parse.nccl_topo_xml``.

A log line is ``<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <msg>`` (WARN lines put ``<file>:<line>
[(<func>)]`` before ``NCCL WARN``), but real logs wrap it: mpirun ``[1,0]<stdout>:``, srun ``0: ``,
timestamps, and they interleave nccl-tests tables, application prints and Python tracebacks. So each
line is searched for ``NCCL INFO``/``NCCL WARN`` and only the message after it is read; the prefix
only gives host and pid. Transport lines (``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read``), their
shapes over the versions and their look-alikes are read by ``parse.nccl_transports``.

Nothing is ever raised by :func:`parse_nccl_log`: what cannot be read is a warning. Published logs are
often cut mid-line; a cut transport line is reported, never guessed at.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .nccl_transports import (
    INTERNAL_NETS,
    TRANSPORT_LINE,
    Connection,
    connection,
    cut_transport,
    ring_ranks,
    transport_family,
)

__all__ = [
    "Connection",
    "NcclLog",
    "parse_nccl_log",
    "transport_family",
]

RankSeat = tuple[str | None, int, str | None]  # a rank's (host, cudaDev, busId) as its comm line prints them

_MAX_TEXT = 160  # warnings keep this many characters of a message

# ----------------------------------------------------------------------------------- line patterns

_LEVEL = re.compile(r"NCCL (INFO|WARN)\b ?")
# Host names may hold '.', '-', '_'; the class stops at ']' and '>' so "[1,0]<stdout>:" never sticks
# to the host; a timestamp "14:14:47]" fails because a pid/tid must be followed by a space.
_PREFIX = re.compile(r"([^\s:\]>]{1,255}):(\d{1,10}):(\d{1,10})\s{1,8}\[(\d{1,6})\]")
# Triple only: torch's "NCCL version 2.7.8," and "2.23.4+cuda12.4" both read; "NCCL Tests version" not.
_VERSION = re.compile(r"\bNCCL version (\d{1,4}\.\d{1,4}\.\d{1,4})(?:\+cuda(\d{1,4}(?:\.\d{1,4})?))?")
_DRIVER = re.compile(r"^cudaDriverVersion (\d{1,9})")
_NET_USING = re.compile(r"^NET/(?P<net>\S+)\s+:\s+Using\s+(?P<rest>.*)$")
# "[0]mlx5_0:1/IB"; 2.20.3-2.23.4 print the ports of one NIC merged: "[0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/IB}"
_NET_DEVICE = re.compile(r"\[\d{1,4}\](?:=\{(?P<ports>[^}]*)\}?|(?P<dev>\S+))")
_NET_PORT = re.compile(r"\[\d{1,4}\]\s?([^\s,{}]+)")
_NETWORK = re.compile(r"^Using network (.+?)\s*$")
_COMM = re.compile(
    r"\bcomm (?:0x)?[0-9a-fA-F]+ rank (?P<rank>\d{1,9}) nranks (?P<nranks>\d{1,9})"
    r"(?: cudaDev (?P<cuda>-?\d{1,6}))?(?: nvmlDev -?\d{1,6})?(?: busId (?P<bus>[0-9a-fA-F]{1,16}))?"
    r"(?: nNodes (?P<nodes>\d{1,9}))?",
    re.IGNORECASE,
)
_P2P_OFF = re.compile(r"P2P is disabled between (NVLINK )?connected GPUs (\d{1,6}) and (\d{1,6})")
_P2P_OFF_OLD = re.compile(r"Could not enable P2P between dev (\d{1,6})\(=\w+\) and dev (\d{1,6})\(=\w+\)")
_ENV = re.compile(r"^([A-Z][A-Z0-9_]*) set by environment to (.*?)\s*$")
_NVLS_USED = re.compile(r"^NVLS comm |^Connected NVLS|\bAlgo NVLS|^NVLS rank \d+ .*alloc done")
_NVLS_CHANNELS = re.compile(r"\b(\d{1,6}) nvls channels")

# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class NcclLog:
    """What one log says. ``transports`` holds the names as printed (``NET/IBext_v8``),
    ``families`` the same grouped (``NET/IB``, see :func:`transport_family`).
    ``network`` is NCCL's "Using network X"; ``net_plugin`` is that name when it is an external
    plugin (not IB/Socket). ``nvls`` means NVLS was set up or chosen (NVLS comm / Connected NVLS /
    Algo NVLS / nvls channels > 0); ``nvls_available`` only that multicast is supported.
    ``ranks`` maps rank -> (host, cudaDev, busId) from the ``comm 0x.. rank R nranks N cudaDev D
    ... busId B`` lines (Init START/COMPLETE, Destroy, Abort), taken from the largest communicator.
    ``n_ranks`` is NCCL's nranks, or -- when the log has none -- one more than the highest rank any
    line names (a lower bound). ``n_nodes`` only from NCCL's "nNodes" (host names can repeat).
    ``processes`` lists (host, pid, cudaDevs printed by that process): one process with several
    devices is a single-process multi-GPU run (nccl-tests ``-g 8``). ``p2p_disabled`` keeps NCCL's
    sentences, ``p2p_disabled_pairs`` the (a, b) GPU pairs as printed. ``env_settings`` comes from
    "NAME set by environment to VALUE" (the full stop NCCL puts after numbers dropped)."""

    nccl_version: str | None = None
    cuda_version: str | None = None
    cuda_driver_version: int | None = None
    transports: frozenset[str] = frozenset()
    families: frozenset[str] = frozenset()
    connections: tuple[Connection, ...] = ()
    gdrdma: bool = False
    net_devices: tuple[str, ...] = ()
    network: str | None = None
    net_plugin: str | None = None
    nvls: bool = False
    nvls_available: bool = False
    collnet: bool = False
    ranks: dict[int, RankSeat] = field(default_factory=dict)
    n_ranks: int | None = None
    n_nodes: int | None = None
    n_channels: int | None = None
    hosts: tuple[str, ...] = ()
    processes: tuple[tuple[str, int, tuple[int, ...]], ...] = ()
    rings_connected: bool = False
    trees_connected: bool = False
    p2p_disabled: tuple[str, ...] = ()
    p2p_disabled_pairs: tuple[tuple[int, int], ...] = ()
    env_settings: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    nccl_lines: int = 0  # lines NCCL wrote (``NCCL INFO``/``WARN``...): none, and the text is no NCCL log

    @property
    def multi_node(self) -> bool:
        """Whether the log shows more than one node: NCCL's nNodes > 1, two host names, a NET or
        CollNet connection (inside a node NCCL takes the network only when P2P and SHM are both
        off), or one GPU driven by two processes under one host name (NCCL refuses two ranks on one
        GPU of a node, while containers on different nodes often share a host name)."""
        if (self.n_nodes or 0) > 1 or len(self.hosts) > 1:
            return True
        if any(c.transport.startswith("NET/") or c.transport == "COLLNET" for c in self.connections):
            return True
        users: dict[tuple[str | None, str], set[int]] = {}
        for c in self.connections:
            # The rank that printed the line owns its device: the receiver for NET receive lines.
            dev = c.dst_dev if c.direction == "receive" else c.src_dev
            if dev is not None and c.pid is not None:
                users.setdefault((c.host, dev), set()).add(c.pid)
        return any(len(pids) > 1 for pids in users.values())

    def pair_transports(self) -> dict[tuple[int, int], tuple[str, ...]]:
        """(src_rank, dst_rank) -> sorted transports seen between them (CollNet: dst -1)."""
        pairs: dict[tuple[int, int], set[str]] = {}
        for c in self.connections:
            pairs.setdefault((c.src_rank, c.dst_rank), set()).add(c.transport)
        return {k: tuple(sorted(v)) for k, v in sorted(pairs.items())}

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["transports"] = sorted(self.transports)
        out["families"] = sorted(self.families)
        out["net_devices"] = list(self.net_devices)
        out["hosts"] = list(self.hosts)
        out["processes"] = [{"host": h, "pid": p, "cuda_devs": list(d)} for h, p, d in self.processes]
        out["multi_node"] = self.multi_node
        out["p2p_disabled"] = list(self.p2p_disabled)
        out["p2p_disabled_pairs"] = [list(p) for p in self.p2p_disabled_pairs]
        out["warnings"] = list(self.warnings)
        # JSON keys are strings; the values become objects so their meaning travels with them.
        out["ranks"] = {str(r): {"host": h, "cuda_dev": d, "bus_id": b} for r, (h, d, b) in sorted(self.ranks.items())}
        out["connections"] = [asdict(c) for c in self.connections]
        return out


# ------------------------------------------------------------------------------------------ parsing


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


class _Reader:
    """Accumulates facts line by line; :meth:`result` freezes them."""

    def __init__(self) -> None:
        self.versions: list[tuple[str, str | None]] = []  # (version, cuda) in order of appearance
        self.driver: int | None = None
        self.conns: dict[Connection, None] = {}  # an ordered set (ranks print twice)
        self.net_devices: dict[str, None] = {}
        self.network: str | None = None
        self.nvls = self.nvls_available = False
        self.ranks: dict[int, RankSeat] = {}
        self.ranks_size = 0  # nranks of the communicator ``ranks`` comes from
        self.n_ranks: int | None = None
        self.max_rank = -1
        self.n_nodes: int | None = None
        self.n_channels: int | None = None
        self.hosts: dict[str, None] = {}
        self.procs: dict[tuple[str, int], dict[int, None]] = {}  # (host, pid) -> the cudaDevs it printed
        self.rings = self.trees = False
        self.p2p_off: dict[str, None] = {}
        self.p2p_pairs: dict[tuple[int, int], None] = {}
        self.env: dict[str, str] = {}
        self.warnings: dict[str, None] = {}
        self.nccl_lines = 0

    def warn(self, text: str) -> None:
        self.warnings.setdefault(_short(text), None)

    def line(self, line: str) -> None:
        m = _VERSION.search(line)
        if m:
            self.versions.append((m.group(1), m.group(2)))
        level = _LEVEL.search(line)
        if level is None:
            # torch reports NCCL failures in its own words ("NCCL error in: ..., unhandled system error")
            if "NCCL error" in line:
                self.warn(line.strip())
            return
        self.nccl_lines += 1
        # bounded window and bounded host: a huge token before "NCCL INFO" must not cost quadratic time
        prefix = _PREFIX.search(line, max(0, level.start() - 300), level.start())
        host = pid = None
        if prefix:
            host, pid = prefix.group(1), int(prefix.group(2))
            self.hosts.setdefault(host, None)
            self.procs.setdefault((host, pid), {}).setdefault(int(prefix.group(4)), None)
        msg = line[level.end() :].strip()
        if level.group(1) == "WARN":
            if not self.p2p(msg):
                self.warn(f"NCCL WARN {msg}")
            return
        self.info(msg, host, pid)

    def p2p(self, msg: str) -> bool:
        m = _P2P_OFF.search(msg)
        if m:
            nvlink, a, b = bool(m.group(1)), int(m.group(2)), int(m.group(3))
            kind = "NVLink-connected GPUs" if nvlink else "connected GPUs"
            self.p2p_off.setdefault(_short(msg.split(". ")[0].rstrip(".")), None)
            self.p2p_pairs.setdefault((a, b), None)
            self.warn(
                f"P2P disabled between {kind} {a} and {b}"
                + (" (NVML reports no P2P over NVLink: a hardware or driver fault)" if nvlink else "")
            )
            return True
        m = _P2P_OFF_OLD.search(msg)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            self.p2p_off.setdefault(_short(msg), None)
            self.p2p_pairs.setdefault((a, b), None)
            self.warn(f"P2P could not be enabled between GPUs {a} and {b}")
            return True
        return False

    def info(self, msg: str, host: str | None, pid: int | None) -> None:
        m = TRANSPORT_LINE.match(msg)
        if m:
            self.connection(m, host, pid)
            return
        ring = ring_ranks(msg)
        if ring is not None:
            channels, ranks = ring
            if channels is not None:
                self.n_channels = max(self.n_channels or 0, channels)
            self.max_rank = max([self.max_rank] + ranks)
            return
        if cut_transport(msg):
            self.warn(f"transport line not understood (cut short?): {msg!r}")
            return
        if self.p2p(msg):
            return
        m = _DRIVER.match(msg)
        if m:
            self.driver = int(m.group(1))
            return
        if msg.startswith("NVLS multicast support is available"):
            self.nvls_available = True
            return
        # before the comm lines: 2.17's "NVLS comm 0x.. rank R nranks N" would read as one
        m = _NVLS_CHANNELS.search(msg)
        if (m and int(m.group(1)) > 0) or _NVLS_USED.search(msg):
            self.nvls = True
            return
        m = _COMM.search(msg)
        if m:
            self.comm(m, host)
            return
        m = _NET_USING.match(msg)
        if m:
            for d in _NET_DEVICE.finditer(m.group("rest").split(";")[0]):
                for dev in _NET_PORT.findall(d.group("ports")) if d.group("ports") is not None else [d.group("dev")]:
                    self.net_devices.setdefault(dev, None)
            return
        if msg.startswith("NET/IB : No device found"):
            self.warn("no IB device found (NET/IB : No device found.)")
            return
        m = _NETWORK.match(msg)
        if m:
            self.network = m.group(1)
            return
        m = _ENV.match(msg)
        if m:
            value = m.group(2)
            # NCCL_PARAM prints "%lld." (a full stop after numbers); string settings have none.
            if re.fullmatch(r"-?\d+\.", value):
                value = value[:-1]
            self.env[m.group(1)] = value
            return
        if msg.startswith("Connected all rings"):
            self.rings = True
        elif msg.startswith("Connected all trees"):
            self.trees = True

    def connection(self, m: re.Match[str], host: str | None, pid: int | None) -> None:
        conn = connection(m, host, pid)
        if conn is None:
            self.warn(f"transport line without a peer rank ignored: {m.group(0)!r}")
            return
        self.conns.setdefault(conn, None)
        self.max_rank = max(self.max_rank, conn.src_rank, conn.dst_rank)

    def comm(self, m: re.Match[str], host: str | None) -> None:
        rank, nranks = int(m.group("rank")), int(m.group("nranks"))
        self.n_ranks = max(self.n_ranks or 0, nranks)
        self.max_rank = max(self.max_rank, rank)
        if m.group("nodes"):
            self.n_nodes = max(self.n_nodes or 0, int(m.group("nodes")))
        if m.group("cuda") is None:
            return
        # torch builds sub-communicators whose rank numbers differ; the largest one names the job.
        if nranks > self.ranks_size:
            self.ranks, self.ranks_size = {}, nranks
        if nranks == self.ranks_size:
            self.ranks.setdefault(rank, (host, int(m.group("cuda")), m.group("bus")))

    def result(self) -> NcclLog:
        if self.nccl_lines == 0:
            self.warn("no NCCL INFO lines")
        elif not self.conns:
            self.warn(
                "no transport lines (Channel ... via ...): the log ends before NCCL connected the "
                "ranks, or NCCL_DEBUG_SUBSYS leaves out INIT"
            )
        distinct = list(dict.fromkeys(v for v, _ in self.versions))
        if len(distinct) > 1:
            self.warn(f"several NCCL versions in one log: {', '.join(distinct)} (the first is reported)")
        version, cuda = self.versions[0] if self.versions else (None, None)
        if cuda is None:  # the first mention may be torch's, without "+cuda"
            cuda = next((c for v, c in self.versions if v == version and c), None)
        conns = tuple(self.conns)
        transports = frozenset(c.transport for c in conns)
        plugin = self.network if self.network and self.network not in INTERNAL_NETS else None
        if plugin is None:
            plugin = next(
                (t[4:] for t in sorted(transports) if t.startswith("NET/") and t[4:] not in INTERNAL_NETS), None
            )
        n_ranks = self.n_ranks if self.n_ranks is not None else (self.max_rank + 1 if self.max_rank >= 0 else None)
        return NcclLog(
            nccl_version=version,
            cuda_version=cuda,
            cuda_driver_version=self.driver,
            transports=transports,
            families=frozenset(transport_family(t, self.net_devices) for t in transports),
            connections=conns,
            gdrdma=any(c.gdrdma for c in conns),
            net_devices=tuple(self.net_devices),
            network=self.network,
            net_plugin=plugin,
            nvls=self.nvls or "NVLS" in transports,
            nvls_available=self.nvls_available or self.nvls,
            collnet="COLLNET" in transports,
            ranks=dict(sorted(self.ranks.items())),
            n_ranks=n_ranks,
            n_nodes=self.n_nodes,
            n_channels=self.n_channels,
            hosts=tuple(self.hosts),
            processes=tuple((h, p, tuple(d)) for (h, p), d in self.procs.items()),
            rings_connected=self.rings,
            trees_connected=self.trees,
            p2p_disabled=tuple(self.p2p_off),
            p2p_disabled_pairs=tuple(self.p2p_pairs),
            env_settings=dict(self.env),
            warnings=tuple(self.warnings),
            nccl_lines=self.nccl_lines,
        )


def parse_nccl_log(text: object) -> NcclLog:
    """Read an NCCL_DEBUG=INFO log, whatever surrounds it. Never raises: a line that cannot be read
    becomes a warning (the promise matters more than any one line: this runs on user logs in CI)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return NcclLog(warnings=(f"not text: {type(text).__name__}", "no NCCL INFO lines"))
    reader = _Reader()
    for number, line in enumerate(text.splitlines(), 1):
        try:
            reader.line(line)
        except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
            reader.warn(f"line {number} could not be read ({type(exc).__name__}): {line!r}")
    return reader.result()
