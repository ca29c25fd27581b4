"""The measurements a run can take, named: a benchmark result's key, the same in memory, in the JSON
report (``"key": ["p2p", 0, 1]``), in pytest's cache and in the folder xdist workers share.

- ``Copy``: a copy between two GPUs, ``p2p`` (peer to peer), ``p2p_staged`` (through pinned host
  memory, P2P off) or ``p2p_bidir`` (both ways at once);
- ``HostCopy``: ``h2d`` or ``d2h`` on one GPU, pinned or pageable host memory;
- ``AllReduce``: busbw among ``ranks`` at ``size_bytes`` (on ``devices``, when a test named them);
- ``NcclTransports``: NCCL's own account of a small all-reduce among ``ranks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .limits import MAX_BYTES, MAX_GPUS
from .units import counted, size_text

MAX_RANKS = 2**31 - 1  # the ranks of a run, as a launcher numbers them

COPY_KINDS = ("p2p", "p2p_staged", "p2p_bidir")
JUDGED_AGAINST = {
    "p2p": "the pair's link: its per-direction P2P figure x the p2p floor",
    "p2p_bidir": "the pair's link both ways: twice its per-direction P2P figure x the p2p floor",
    "p2p_staged": "nothing of its own: the host path the pair's P2P copy must beat (no floor, never a fault)",
}
HOST_KINDS = ("h2d", "d2h")


@dataclass(frozen=True)
class Copy:
    kind: str
    src: int
    dst: int

    def describe(self) -> str:
        if self.kind == "p2p_bidir":
            return f"GPU{self.src}<->GPU{self.dst} copies both ways at once, P2P"
        how = "P2P" if self.kind == "p2p" else "staged through the host (P2P off)"
        return f"GPU{self.src}->GPU{self.dst} copy, {how}"

    @property
    def floor(self) -> str | None:
        """The floor ratio it is judged by (``core.thresholds.DEFAULT_FLOORS``); None for the staged
        twin, which has no healthy value of its own: it is the host path a P2P copy must beat."""
        return None if self.kind == "p2p_staged" else "p2p"

    @property
    def judged_against(self) -> str:
        """What the figure is held to, in words (the report and the docs say it)."""
        return JUDGED_AGAINST[self.kind]

    def staged(self) -> Copy:
        """The same copy through the host, P2P off: what a P2P copy must beat."""
        return Copy("p2p_staged", self.src, self.dst)

    def to_list(self) -> list[Any]:
        return [self.kind, self.src, self.dst]


@dataclass(frozen=True)
class HostCopy:
    kind: str
    gpu: int
    pinned: bool

    def describe(self) -> str:
        way = "host->device" if self.kind == "h2d" else "device->host"
        return f"GPU{self.gpu} {way} copy, {'pinned' if self.pinned else 'pageable'}"

    @property
    def floor(self) -> str:
        return "h2d_pinned" if self.pinned else "h2d_pageable"

    @property
    def judged_against(self) -> str:
        if self.pinned:
            return "the GPU's PCIe link to the host: its rate x the h2d_pinned floor"
        return "the GPU's PCIe link to the host: min(half its rate, 12 GB/s) x the h2d_pageable floor"

    def to_list(self) -> list[Any]:
        return [self.kind, self.gpu, self.pinned]


@dataclass(frozen=True)
class AllReduce:
    kind: ClassVar[str] = "allreduce"
    ranks: int
    size_bytes: int
    devices: tuple[int, ...] | None = None  # the GPUs, one rank each, when not cuda:0..ranks-1

    def describe(self) -> str:
        on = f" on {', '.join(f'GPU{d}' for d in self.devices)}" if self.devices else ""
        return f"all-reduce busbw, {counted(self.ranks, 'rank')}{on}, {size_text(self.size_bytes)}"

    @property
    def floor(self) -> str:
        return "allreduce"

    def to_list(self) -> list[Any]:
        return [self.kind, self.ranks, self.size_bytes] + ([list(self.devices)] if self.devices else [])


@dataclass(frozen=True)
class NcclTransports:
    kind: ClassVar[str] = "nccl_transports"
    ranks: int

    def describe(self) -> str:
        return f"NCCL's transports among {counted(self.ranks, 'GPU')} (a small all-reduce with NCCL_DEBUG=INFO)"

    def to_list(self) -> list[Any]:
        return [self.kind, self.ranks]


Key = Copy | HostCopy | AllReduce | NcclTransports


def name_of(key: Key) -> str:
    """The key as a file or cache name: ``p2p-0-1``, ``allreduce-8-1073741824``, ``allreduce-2-1024-0.5``."""
    return "-".join(".".join(map(str, part)) if isinstance(part, list) else str(part) for part in key.to_list())


def gpus_of(key: Key) -> tuple[int, ...]:
    """The GPUs a key names, by index, in its order: a copy's two, a host copy's one, an all-reduce's
    devices (cuda:0..ranks-1 where it names none); none for NCCL's account."""
    if isinstance(key, Copy):
        return (key.src, key.dst)
    if isinstance(key, HostCopy):
        return (key.gpu,)
    if isinstance(key, AllReduce):
        return key.devices or tuple(range(key.ranks))
    return ()


def renumbered(key: Key, gpus: tuple[int, ...]) -> Key:
    """The same measurement on ``gpus`` (``gpus_of``'s order): a figure another process numbered
    otherwise, in this one's numbering. An all-reduce on cuda:0..ranks-1 names no devices."""
    if isinstance(key, Copy):
        return Copy(key.kind, *gpus)
    if isinstance(key, HostCopy):
        return HostCopy(key.kind, gpus[0], key.pinned)
    if isinstance(key, AllReduce):
        devices = tuple(sorted(gpus))
        return AllReduce(key.ranks, key.size_bytes, None if devices == tuple(range(key.ranks)) else devices)
    return key


def _index(value: Any, high: int) -> bool:
    return type(value) is int and 0 <= value < high


def from_list(items: Any) -> Key:
    """The key a JSON report, the cache or another process wrote; ValueError when it names no
    measurement (it is untrusted input)."""
    if isinstance(items, list) and items:
        kind, rest = items[0], items[1:]
        if kind in COPY_KINDS and len(rest) == 2 and all(_index(v, MAX_GPUS) for v in rest):
            return Copy(kind, *rest)
        if kind in HOST_KINDS and len(rest) == 2 and _index(rest[0], MAX_GPUS) and type(rest[1]) is bool:
            return HostCopy(kind, *rest)
        if kind == AllReduce.kind and len(rest) == 2 and _index(rest[0], MAX_RANKS) and _index(rest[1], MAX_BYTES + 1):
            return AllReduce(*rest)
        if (
            kind == AllReduce.kind
            and len(rest) == 3
            and _index(rest[1], MAX_BYTES + 1)
            and isinstance(rest[2], list)
            and len(rest[2]) == rest[0]
            and rest[2] == sorted(set(rest[2]))
            and all(_index(d, MAX_GPUS) for d in rest[2])
        ):
            return AllReduce(rest[0], rest[1], tuple(rest[2]))
        if kind == NcclTransports.kind and len(rest) == 1 and _index(rest[0], MAX_RANKS):
            return NcclTransports(*rest)
    raise ValueError("not a benchmark key")
