"""What a link should carry, where each figure comes from, and how much of it a healthy machine must reach.

Pure core: the standard library and ``.model`` only; no I/O, no environment. Units: GB/s = 1e9
bytes/s (the nccl-tests convention), **per direction** unless a name says otherwise. Every figure is
a ``Figure`` whose ``source`` cites the seed document (``../shared/seeds``, quoted) or the public
reference (``../shared/reference/benchmarks-and-thresholds.md``) it comes from, with the arithmetic
that turns a quoted number (often bidirectional or rounded) into the per-direction figure used here.

The rules (docs/thresholds.md explains them and their justification):

- an *expected* figure is the link's one-direction line rate (for a PCIe path through the CPU, half
  of it, as seed 004 says);
- a measurement passes when it reaches ``floor_ratio x expected`` (``DEFAULT_FLOORS``), or, where a
  public operator publishes an absolute floor for the SKU (``sku_allreduce_floor``), that floor
  instead: the published floor wins over the default ratio when known (a floor the user set
  explicitly wins over both: the caller then passes no absolute floor);
- unknown facts give ``None`` (no expectation, no verdict), never a guess.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from .model import Gpu, LinkClass, Topology

__all__ = [
    "Figure", "Check", "DEFAULT_FLOORS", "FLOOR_KEYS", "LARGE_ALLREDUCE_BYTES", "PCIE_VIA_CPU_FACTOR",
    "PAGEABLE_FACTOR", "PAGEABLE_CEILING", "pcie_gbps", "pcie_line_rate", "nvlink_per_link", "nvlink_gbps",
    "gpu_nvlink_version", "h2d_expected", "p2p_expected", "allreduce_factor", "algbw",
    "busbw_from_algbw", "busbw_from_time", "allreduce_expected_time_s", "allreduce_expected_busbw",
    "sku_allreduce_floor", "parse_floor_ratio", "merged_floors", "table_rows", "format_gbps",
]


@dataclass(frozen=True)
class Figure:
    """A bandwidth in GB/s (1e9 B/s, per direction), its citation, and a short name for messages."""

    gbps: float
    source: str
    label: str = ""  # what the figure is, e.g. "NV12 NVLink 3.1"; used by Check.describe

    def __post_init__(self) -> None:
        if not (isinstance(self.gbps, (int, float)) and math.isfinite(self.gbps) and self.gbps >= 0):
            raise ValueError(f"a figure needs a finite bandwidth >= 0 GB/s, got {self.gbps!r}")
        if not self.source:
            raise ValueError("a figure needs a source")

    def __str__(self) -> str:
        return f"{format_gbps(self.gbps)} GB/s ({self.label or self.source})"


def format_gbps(gbps: float) -> str:
    """At most two decimals, no trailing zeros: 15.75, 31.51, 121, 14.06."""
    return f"{gbps:.2f}".rstrip("0").rstrip(".")


def _scaled(fig: Figure, factor: float, label: str, note: str) -> Figure:
    return Figure(fig.gbps * factor, f"{fig.source}; {note}" if note else fig.source, label)


# ---------------------------------------------------------------------------------------------
# PCIe: x16 per direction, after line encoding. The seeds quote the raw rate rounded ("Gen4 32 GB/s")
# or the bidirectional total ("PCIe 4.0's 64GB/s"); the figure here is transfers/s x lanes x encoding / 8.

_PCIE_X16: dict[int, Figure] = {
    1: Figure(2.5 * 16 * 8 / 10 / 8, 'seed 004 table: "PCIe 1.0 ... 4 GB/s" (x16, each direction, "8 GB/s" total); '
              "2.5 GT/s x 16 lanes x 8b/10b / 8 = 4.0 GB/s", "PCIe Gen1 x16"),
    2: Figure(5.0 * 16 * 8 / 10 / 8, 'seed 004 table: "PCIe 2.0 ... 8 GB/s" (x16, each direction, "16 GB/s" total); '
              "5 GT/s x 16 x 8b/10b / 8 = 8.0 GB/s", "PCIe Gen2 x16"),
    3: Figure(8.0 * 16 * 128 / 130 / 8, 'seed 003: "PCIe Gen3 16 GB/s" (x16, each direction), seed 001: '
              '"PCIe 3.0 32 GB/s" (bidirectional); both round the raw rate: 8 GT/s x 16 x 128b/130b / 8 = 15.75 GB/s',
              "PCIe Gen3 x16"),
    4: Figure(16.0 * 16 * 128 / 130 / 8, 'seed 003: "PCIe Gen4 32 GB/s" (x16, each direction), seed 001: '
              '"PCIe 4.0\'s 64GB/s" (bidirectional); 16 GT/s x 16 x 128b/130b / 8 = 31.51 GB/s', "PCIe Gen4 x16"),
    5: Figure(32.0 * 16 * 128 / 130 / 8, 'seed 004: "PCIe 5.0 gives you 64 GB/s between CPU and GPU", seed 000 '
              '(table): "Bidirectional bandwidth" of "PCIe 5.0 x16" "128 GB/s"; 32 GT/s x 16 x 128b/130b / 8 = 63.02 GB/s '
              "(ml-engineering measured 55.43 H2D = 88% of it on H200)", "PCIe Gen5 x16"),
    6: Figure(64.0 * 16 / 8 * 242 / 256, 'seed 003: "PCIe Gen6 128 GB/s" (x16, each direction) is the raw '
              "64 GT/s x 16 / 8; FLIT mode carries 242 of every 256 bytes (236 TLP + 6 DLLP; CRC and FEC "
              "take the rest): 128 x 242/256 = 121.0 GB/s", "PCIe Gen6 x16"),
}

PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)

# A PCIe path through the CPU (PHB, NODE, SYS): half the line rate. Seed 004: "GPU0 to GPU2: two switch
# hops + CPU - 50% of PCIe bandwidth (shared)", and "the effective bandwidth for cross-switch GPU
# communication is often 8-12 GB/s rather than the 32 GB/s theoretical for PCIe 4.0". Measured (reference,
# nccl-tests#74, 8xA40 on EPYC): ~25 GB/s per direction within a socket, ~20 across sockets on Gen4.
PCIE_VIA_CPU_FACTOR = 0.5
_VIA_CPU = (LinkClass.PHB, LinkClass.NODE, LinkClass.SYS)
_VIA_CPU_NOTE = ('x 0.5 for a path through the CPU (seed 004: "two switch hops + CPU - 50% of PCIe '
                 'bandwidth", "cross-switch ... often 8-12 GB/s rather than the 32 GB/s theoretical")')


def pcie_gbps(gen: int, width: int = 16) -> Figure:
    """One direction of a PCIe link of generation ``gen`` (1-6) and ``width`` lanes, after encoding."""
    if isinstance(gen, bool) or gen not in _PCIE_X16:
        raise ValueError(f"unknown PCIe generation {gen!r} (known: {', '.join(map(str, _PCIE_X16))})")
    if isinstance(width, bool) or width not in PCIE_WIDTHS:
        raise ValueError(f"unknown PCIe width x{width!r} (known: {', '.join('x%d' % w for w in PCIE_WIDTHS)})")
    x16 = _PCIE_X16[gen]
    if width == 16:
        return x16
    return _scaled(x16, width / 16, f"PCIe Gen{gen} x{width}", f"x{width} = x16 x {width}/16")


def pcie_line_rate(gpu: Gpu) -> Figure | None:
    """What the GPU's PCIe link can carry: its maximum generation and width for this device and
    system (``nvmlDeviceGetMaxPcieLinkGeneration`` / ``...Width``); None when unknown.

    Not the *current* link: an idle GPU drops to Gen1 to save power (reference nvml-nccl-torch.md
    2.5), which would make every expectation trivially low. A link trained down shows as a measured
    figure below this one, and as a current width below the maximum (the ``pcie`` check)."""
    gen, width = gpu.pcie_gen_max, gpu.pcie_width_max
    if gen is None or width is None or gen not in _PCIE_X16 or width not in PCIE_WIDTHS:
        return None
    return pcie_gbps(gen, width)


# ---------------------------------------------------------------------------------------------
# NVLink, per link and per direction, by the version string NVML reports (model.NvLink.version).
# Seed 003's table is the self-consistent one (links x per-link = per-GPU aggregate, "All figures
# bidirectional"); seed 004's NVLink table mixes per-direction and bidirectional columns (it gives
# NVLink 4.0 "25 GB/s per direction" with "Total (16 links, H100) 900 GB/s"), so it is not used.

_NVLINK_PER_LINK: dict[str, Figure] = {
    "1.0": Figure(20.0, 'seed 003: "NVLink 1.0 P100 (2016) 4 x 40 GB/s 160 GB/s", "All figures bidirectional": '
                  "40 / 2 = 20 GB/s per link per direction", "NVLink 1.0"),
    "2.0": Figure(25.0, 'seed 003: "NVLink 2.0 V100 (2017) 6 x 50 GB/s 300 GB/s" (bidirectional): '
                  "50 / 2 = 25 GB/s per link per direction", "NVLink 2.0"),
    "2.2": Figure(25.0, "NVML_NVLINK_VERSION_2_2 (reference nvml-nccl-torch.md 1.5) is a revision of NVLink 2; "
                  'no seed gives it a separate rate, so the 2.0 rate is used (seed 003: "6 x 50 GB/s", '
                  "bidirectional)", "NVLink 2.2"),
    "3.0": Figure(25.0, 'seed 003: "NVLink 3.0 A100 (2020) 12 x 50 GB/s 600 GB/s" (bidirectional), seed 001: '
                  '"NVLink 3.0 (A100) 600 GB/s"; `nvidia-smi nvlink -s` on an A100-SXM4-80GB shows 12 links at '
                  "25 GB/s each (nccl-tests#228, cited by the dgx-a100 profile)", "NVLink 3.0"),
    "3.1": Figure(25.0, "NVML reports A100 as NVLink 3.1 (encoded 5; hwloc#658, reference nvml-nccl-torch.md 1.5), "
                  'the same signalling as 3.0: seed 003 "NVLink 3.0 A100 (2020) 12 x 50 GB/s 600 GB/s" (bidirectional) '
                  "= 25 GB/s per link per direction", "NVLink 3.1"),
    "4.0": Figure(25.0, 'seed 003: "NVLink 4.0 H100 (2022) 18 x 50 GB/s 900 GB/s" (bidirectional), seed 002: '
                  '"900 GB/s of bidirectional bandwidth per GPU"; sjeaugey (nccl-tests#212): "450GB/s is the '
                  'line rate" per direction', "NVLink 4.0"),
    "5.0": Figure(50.0, 'seed 003: "NVLink 5.0 B200 (2024-26) 18 x 100 GB/s 1.8 TB/s" (bidirectional), seed 002: '
                  '"1.8 TB/s of GPU-to-GPU bandwidth per GPU": 100 / 2 = 50 GB/s per link per direction', "NVLink 5.0"),
}

# GA102 (compute capability 8.6: RTX 3090, RTX A6000/A5500/A5000, A40) also reports NVLink 3.1 (nvtop#469)
# but its bridge runs 4 links at a lower rate than GA100's.
_NVLINK_GA102 = Figure(
    112.5 / 2 / 4,
    "NVIDIA RTX A5500 datasheet (nvidia.com, proviz-nvidia-rtx-a5500-datasheet): 112.5 GB/s bidirectional "
    "NVLink for a 2-card bridge, as for the A40; a GA102 GPU has 4 NVLinks (nvtop#469, RTX 3090): 112.5 / 2 / 4 = 14.06 GB/s "
    "per link per direction, 56.25 per GPU; measured: 101.6 GB/s bidirectional over an A40 bridge "
    "(nccl-tests#74, 90%)", "NVLink 3.x (GA102 bridge)")

_GA102_CC = "8.6"
_GA102_NAME = re.compile(r"RTX 3090|RTX 3080|RTX A6000|RTX A5500|RTX A5000|RTX A4500|\bA40\b|\bA10\b", re.I)
_GA100_NAME = re.compile(r"\bA100\b|\bA30\b|\bA800\b", re.I)
# Compute capability -> NVLink version, for sources that give no per-link version (e.g. nvidia-smi text).
_CC_NVLINK = {"6.0": "1.0", "7.0": "2.0", "8.0": "3.0", "8.6": "3.0", "9.0": "4.0", "10.0": "5.0", "10.3": "5.0"}


def nvlink_per_link(version: str, compute_capability: str | None = None) -> Figure:
    """One NVLink of ``version`` ("3.1", "4.0", ...), one direction. For 3.x, compute capability 8.6
    (GA102 bridges) has its own rate; without it the GA100 (A100) rate is given. Unknown versions
    (e.g. "6.0", for which no seed or reference gives a figure) raise ValueError."""
    version = str(version).strip()
    if version not in _NVLINK_PER_LINK:
        raise ValueError(f"no bandwidth figure for NVLink version {version!r} "
                         f"(known: {', '.join(_NVLINK_PER_LINK)})")
    if version.startswith("3.") and compute_capability == _GA102_CC:
        return _NVLINK_GA102
    return _NVLINK_PER_LINK[version]


def nvlink_gbps(version: str, links: int, compute_capability: str | None = None) -> Figure:
    """``links`` bonded NVLinks of ``version``, one direction (e.g. ("4.0", 18) -> 450 GB/s)."""
    if isinstance(links, bool) or not isinstance(links, int) or links < 1:
        raise ValueError(f"an NVLink bundle needs at least one link, got {links!r}")
    one = nvlink_per_link(version, compute_capability)
    name = f"NV{links} {one.label}"
    return _scaled(one, links, name, f"x {links} links" if links != 1 else "")


def _gpu_chip_3x(gpu: Gpu) -> str | None:
    """For an NVLink 3.x GPU: "GA102" or "GA100"; None when neither the compute capability nor the name says."""
    if gpu.compute_capability is not None:
        return "GA102" if gpu.compute_capability == _GA102_CC else "GA100"
    if gpu.name and _GA102_NAME.search(gpu.name):
        return "GA102"
    if gpu.name and _GA100_NAME.search(gpu.name):
        return "GA100"
    return None


def gpu_nvlink_version(gpu: Gpu) -> str | None:
    """The NVLink version of the GPU's active links (the slowest when they differ); else the version its
    compute capability implies; None when neither is known."""
    versions = {ln.version for ln in gpu.nvlinks if ln.active and ln.version in _NVLINK_PER_LINK}
    if versions:
        return min(versions, key=lambda v: (_NVLINK_PER_LINK[v].gbps, v))
    return _CC_NVLINK.get(gpu.compute_capability or "")


def _gpu_per_link(gpu: Gpu) -> Figure | None:
    version = gpu_nvlink_version(gpu)
    if version is None:
        return None
    if version.startswith("3."):
        chip = _gpu_chip_3x(gpu)
        if chip is None:
            return None  # A100 and RTX 3090 both report 3.1 at different rates: unknown, not guessed
        return _NVLINK_GA102 if chip == "GA102" else _NVLINK_PER_LINK[version]
    return _NVLINK_PER_LINK[version]


def _switched(gpu: Gpu) -> bool:
    active = [ln for ln in gpu.nvlinks if ln.active]
    return bool(active) and all(ln.remote_type == "SWITCH" for ln in active)


# ---------------------------------------------------------------------------------------------
# Host <-> device

# Pageable copies are staged through a pinned buffer by a CPU memcpy. Seed 004: "This halves effective
# bandwidth", "(from ~28 GB/s to ~12 GB/s on PCIe 4.0)", "Pageable memory to GPU: ~8-12 GB/s (effective,
# due to staging copy)"; the staging memcpy runs at "~10-15 GB/s (limited by CPU memory bandwidth)", so a
# faster link does not raise it: the expectation is min(line / 2, 12 GB/s).
PAGEABLE_FACTOR = 0.5
PAGEABLE_CEILING = Figure(12.0, 'seed 004: pageable staging "halves effective transfer bandwidth (from ~28 GB/s to '
                          '~12 GB/s on PCIe 4.0)", "Pageable memory to GPU: ~8-12 GB/s (effective, due to staging '
                          'copy)"', "pageable staging ceiling")


def h2d_expected(gpu: Gpu, pinned: bool = True) -> Figure | None:
    """Host->device (and device->host) copy expectation over the GPU's current PCIe link.

    Pinned: the line rate. Pageable: min(line rate / 2, 12 GB/s) (seed 004). None when the link's
    generation or width is unknown. (On Grace Hopper the host link is NVLink-C2C, not PCIe: the
    PCIe-based expectation understates it.)"""
    line = pcie_line_rate(gpu)
    if line is None:
        return None
    if pinned:
        return Figure(line.gbps, f"{line.source}; pinned copies are bounded by the line rate (seed 004: "
                      f"\"Pinned memory to GPU: ~25-30 GB/s (near theoretical PCIe 4.0 limit)\")",
                      f"pinned, {line.label} line rate")
    half = line.gbps * PAGEABLE_FACTOR
    if half <= PAGEABLE_CEILING.gbps:
        return Figure(half, f"{line.source}; pageable: x 0.5, seed 004: staging \"halves effective bandwidth\"",
                      f"pageable, half of {line.label}")
    return Figure(PAGEABLE_CEILING.gbps, f"{PAGEABLE_CEILING.source} (half of {line.label} is "
                  f"{format_gbps(half)}, above the staging ceiling)", f"pageable staging ceiling, {line.label}")


# ---------------------------------------------------------------------------------------------
# GPU <-> GPU copies


def p2p_expected(topology: Topology, a: int, b: int) -> Figure | None:
    """One direction of a direct copy between ``cuda:a`` and ``cuda:b`` over the link between them.

    NVLink pair: the NV# count x the per-link rate of the GPUs' NVLink version (the slower GPU's when
    they differ); on an NVSwitch system (every active link of both GPUs goes to a switch) the smaller of
    the two GPUs' active link counts. PCIe pair: the smaller of the two GPUs' current line rates,
    halved for a path through the CPU (PHB, NODE, SYS). None when the link, the version or the PCIe
    state is unknown. Whether P2P works is a separate fact (``Topology.p2p``): this is the link's
    figure, not a promise that a copy will use it."""
    link = topology.link(a, b)
    ga, gb = topology.gpus[link.a], topology.gpus[link.b]
    if link.nvlinks is None:
        return None
    if link.nvlinks > 0:
        rates = [_gpu_per_link(g) for g in (ga, gb)]
        if any(r is None for r in rates):
            return None
        one = min(rates, key=lambda r: r.gbps)
        if _switched(ga) and _switched(gb):
            links = min(ga.active_nvlinks, gb.active_nvlinks)
            how = f"NVSwitch: {links} active links per GPU"
        else:
            links = link.nvlinks
            how = f"{link.name} NV{links}"
        return Figure(links * one.gbps, f"{one.source}; x {links} links ({how})", f"NV{links} {one.label}")
    if link.pcie is None:
        return None
    lines = [pcie_line_rate(g) for g in (ga, gb)]
    if any(x is None for x in lines):
        return None
    line = min(lines, key=lambda x: x.gbps)
    if link.pcie in _VIA_CPU:
        return _scaled(line, PCIE_VIA_CPU_FACTOR, f"{line.label} via CPU ({link.pcie.name})", _VIA_CPU_NOTE)
    return Figure(line.gbps, line.source, f"{line.label} ({link.pcie.name})")


# ---------------------------------------------------------------------------------------------
# All-reduce. Seed 004: "Time for ring all-reduce on N GPUs with link bandwidth W:
# t_all-reduce = 2 x (N-1)/N x B/W"; seed 003: "The ring algorithm ... moves 2(N-1)/N of the data per GPU
# regardless of N". nccl-tests (src/all_reduce.cu, doc/PERFORMANCE.md): algbw = S / t, busbw = algbw x
# 2(n-1)/n, which "should reflect the speed of the hardware bottleneck" and is compared with the
# per-direction link rate (nccl-tests PR #189). (Seed 004's worked example plugs in W = 900 GB/s, the
# bidirectional figure; the per-direction 450 is the one busbw is comparable with.)


def allreduce_factor(n: int) -> float:
    """nccl-tests' all-reduce bus factor 2(n-1)/n; 0 for one rank (so busbw is 0, nccl-tests#249)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"an all-reduce needs at least one rank, got n={n!r}")
    return 2 * (n - 1) / n


def algbw(nbytes: float, seconds: float) -> float:
    """nccl-tests' algorithm bandwidth in GB/s: bytes / 1e9 / seconds."""
    if nbytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {nbytes!r}")
    if not seconds > 0:
        raise ValueError(f"time must be > 0 s, got {seconds!r}")
    return nbytes / 1e9 / seconds


def busbw_from_algbw(algbw_gbps: float, n: int) -> float:
    return algbw_gbps * allreduce_factor(n)


def busbw_from_time(nbytes: float, n: int, seconds: float) -> float:
    """All-reduce bus bandwidth in GB/s: algbw x 2(n-1)/n; 0 for n = 1 whatever the time."""
    factor = allreduce_factor(n)
    if factor == 0:
        return 0.0
    return algbw(nbytes, seconds) * factor


def allreduce_expected_time_s(nbytes: float, n: int, link_gbps: float) -> float:
    """Ring all-reduce time t = 2(n-1)/n x B / W (seed 004), W in GB/s per direction; 0 for n = 1."""
    if nbytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {nbytes!r}")
    factor = allreduce_factor(n)
    if factor == 0:
        return 0.0
    if not link_gbps > 0:
        raise ValueError(f"link bandwidth must be > 0 GB/s, got {link_gbps!r}")
    return factor * nbytes / (link_gbps * 1e9)


_HAMILTON_MAX = 12  # exact ring search up to this many GPUs; beyond, only uniform or complete graphs


def _has_ring(n: int, ok: set) -> bool:
    """Is there a cycle through all of 0..n-1 using only pairs in ``ok``? Beyond ``_HAMILTON_MAX`` GPUs
    only a complete set of pairs counts (False otherwise), so the caller falls back to a lower rate."""
    if len(ok) == n * (n - 1) // 2:
        return True
    adj = [0] * n
    for a, b in ok:
        adj[a] |= 1 << b
        adj[b] |= 1 << a
    if any(bin(m).count("1") < 2 for m in adj) or n > _HAMILTON_MAX:
        return False
    # reach[mask] = set of end vertices of paths from 0 covering mask (bitmask DP)
    full = (1 << n) - 1
    reach = {1: 1}
    for _ in range(n - 1):
        nxt: dict[int, int] = {}
        for mask, ends in reach.items():
            v = 0
            while ends:
                if ends & 1:
                    free = adj[v] & ~mask
                    while free:
                        low = free & -free
                        w = low.bit_length() - 1
                        nxt[mask | low] = nxt.get(mask | low, 0) | (1 << w)
                        free ^= low
                ends >>= 1
                v += 1
        reach = nxt
    return bool(reach.get(full, 0) & adj[0])


def allreduce_expected_busbw(topology: Topology, n: int | None = None) -> Figure | None:
    """Expected all-reduce busbw among ``cuda:0 .. cuda:n-1`` (all GPUs when n is None).

    The bottleneck link of the best ring: the largest rate W such that the pairs at W or more close a
    ring through all n GPUs (for 2 GPUs, their pair). On an NVSwitch system, or wherever every pair
    is alike, that is the slowest pair's per-direction rate; on a partial NVLink mesh (DGX-1) it is the
    best single ring, a lower bound (NCCL runs several rings at once). None for fewer than 2 GPUs, more
    GPUs than the machine has, or any pair's figure unknown. With NVLink SHARP (NVLS) busbw can exceed
    this (see docs/thresholds.md); on PCIe-only machines the CPU and memory usually bind first."""
    total = len(topology.gpus)
    n = total if n is None else n
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"n must be a GPU count, got {n!r}")
    if n < 2 or n > total:
        return None
    figs = {}
    for link in topology.pairs(n):
        fig = p2p_expected(topology, link.a, link.b)
        if fig is None:
            return None
        figs[(link.a, link.b)] = fig
    rates = sorted({f.gbps for f in figs.values()}, reverse=True)
    best = rates[-1]
    for rate in rates:
        ok = {pair for pair, f in figs.items() if f.gbps >= rate}
        if n == 2 or _has_ring(n, ok):
            best = rate
            break
    ring = {pair: f for pair, f in figs.items() if f.gbps >= best}
    slowest_pair, bottleneck = min(ring.items(), key=lambda kv: (kv[1].gbps, kv[0]))
    uniform = len({f.gbps for f in figs.values()}) == 1
    where = "every pair" if uniform else f"ring bottleneck GPU{slowest_pair[0]}-GPU{slowest_pair[1]}"
    notes = [f"busbw of a ring = the bottleneck link's per-direction rate (seed 004: t = 2(n-1)/n x B/W; "
             f"nccl-tests busbw = algbw x 2(n-1)/n); {where} over {n} GPUs: {bottleneck.source}"]
    if bottleneck.label.startswith("PCIe"):
        notes.append('PCIe-only ring: "On PCI systems, the performance you get is usually determined by the '
                     'bandwidth your CPU and memory can deliver" (sjeaugey, nccl#1639: 8x RTX 5090 Gen5 busbw '
                     "28 GB/s with 8 GPUs, 35 with 4)")
    if not uniform:
        notes.append("mixed links: the best single ring, a lower bound (NCCL runs several rings)")
    return Figure(bottleneck.gbps, "; ".join(notes), f"{bottleneck.label}, {where}")


# ---------------------------------------------------------------------------------------------
# Published per-SKU all-reduce floors (8 GPUs, one node, large sizes). Where operators differ, the lower
# (more lenient) floor is kept, so that a node a public operator would accept is not failed here.

LARGE_ALLREDUCE_BYTES = 8 * 2**30  # peak busbw needs >= 8G (sjeaugey, nccl-tests#149); Azure runs 8G/16G


@dataclass(frozen=True)
class _SkuFloor:
    pattern: re.Pattern
    gbps: float
    nvls: bool  # the floor is above what a ring reaches: it assumes NCCL's default NVLink SHARP algorithm
    label: str
    source: str


_SKU_FLOORS = (
    _SkuFloor(re.compile(r"V100-SXM2", re.I), 110.0, False, "V100 SXM2 8-GPU all-reduce floor",
              "Azure azurehpc-health-checks conf NDv2 (8x V100 SXM2): all-reduce >= 110 GB/s @8G; the only "
              "published V100 floor"),
    _SkuFloor(re.compile(r"\bA100-SXM", re.I), 185.0, False, "A100 SXM 8-GPU all-reduce floor",
              "OCI oci-hpc active_healthcheck.py: A100 shapes (BM.GPU4.8, B4.8, A100-v2.8) 185 GB/s, 8 ranks, "
              "NCCL_ALGO=Ring, avg busbw 1G-10G; lower than Azure ND A100 v4 (228 @16G) and AWS p4d "
              "(200, advisory), so OCI's is used"),
    _SkuFloor(re.compile(r"\bH100\b(?!.*(?:PCIe|NVL)).*(?:HBM3|SXM)|\bH100 SXM", re.I), 440.0, True,
              "H100 SXM 8-GPU all-reduce floor",
              "OCI oci-hpc active_healthcheck.py: H100 440 GB/s (avg busbw 1G-16G); lower than Azure ND H100 "
              "v5 (460 @16G) and AWS p5 (500, advisory), so OCI's is used; above the ~370 a ring reaches "
              "(nccl-tests#212): assumes NVLS"),
    _SkuFloor(re.compile(r"\bH200\b(?!.*NVL)", re.I), 431.0, True, "H200 8-GPU all-reduce floor",
              "Azure azurehpc-health-checks conf ND H200 v5: all-reduce >= 431 GB/s @16G; lower than OCI "
              "(440) and AWS p5e/p5en (500, advisory), so Azure's is used; above the ~368 a ring reaches "
              "(ml-engineering, NCCL_NVLS_ENABLE=0): assumes NVLS"),
    _SkuFloor(re.compile(r"(?<![A-Za-z])B200\b", re.I), 440.0, False, "B200 8-GPU all-reduce floor",
              "OCI oci-hpc active_healthcheck.py: B200 440 GB/s; lower than AWS p6-b200 (600, advisory), "
              "so OCI's is used (measured 682 ring, 838 NVLS: ml-engineering)"),
    _SkuFloor(re.compile(r"(?<![A-Za-z])B300\b", re.I), 800.0, True, "B300 8-GPU all-reduce floor",
              "OCI oci-hpc active_healthcheck.py: B300 800 GB/s, the only published B300 floor; above "
              "what a ring reaches on NVLink 5 (B200 ring 682, ml-engineering): assumes NVLS"),
)


def sku_allreduce_floor(gpu_name: str | None, n: int, size_bytes: int | None = None,
                        nvls: bool | None = None) -> Figure | None:
    """A public operator's absolute all-reduce busbw floor for the SKU whose NVML name is ``gpu_name``.

    Only for a full 8-GPU node (``n == 8``) at a large size (``size_bytes`` >= 8 GiB when given):
    the operators publish nothing else. Floors above what a ring can reach assume NCCL's default
    NVLink SHARP (NVLS) algorithm; with ``nvls=False`` (known to be off) those give None. PCIe and
    NVL variants, and export SKUs with fewer NVLinks (A800, H800), have no floor."""
    if not gpu_name or n != 8:
        return None
    if size_bytes is not None and size_bytes < LARGE_ALLREDUCE_BYTES:
        return None
    if re.search(r"\b[AH]800\b", gpu_name):
        return None
    for sku in _SKU_FLOORS:
        if sku.pattern.search(gpu_name):
            if sku.nvls and nvls is False:
                return None
            return Figure(sku.gbps, sku.source, sku.label)
    return None


# ---------------------------------------------------------------------------------------------
# Efficiency floors: the share of the expected figure a healthy machine must reach. Each is set below
# every healthy public measurement and at or below the most lenient public operator floor, and far above
# what the failures it exists to catch produce (PCIe fallback of an NVLink pair <= 0.14, NUMA-remote H2D
# 0.24, SHM fallback on a partial NVLink node 0.07):
#
# p2p (copies over NVLink or PCIe)  0.70: healthy 0.81-0.92 of the per-direction line rate (H100 364-393 of
#     450, H200 396 = 0.88, GB200 744 of 900 = 0.83, A100 272-277 of 300, A40 bridge 101.6 of 112.5
#     bidirectional); Azure's P2P floors are 0.74 (H100 335/450, lowered from 350 on 2024-06-28) and 0.78
#     (A100 235/300); ml-engineering's "~80% of the unidirectional spec" is the typical value, not a floor;
#     DCGM's "measured x 0.75" convention gives 0.63-0.69.
# h2d_pinned 0.65: healthy 0.77-0.88 (P100 Gen3 12.15/15.75, A100 Gen4 25.7/31.5, H200 Gen5 55.43/63,
#     seed 004's sample 27.8/31.5); operator floors: Azure ND A100 v4 21/31.5 = 0.67 (the most lenient),
#     Azure H100 48/63 = 0.76, OCI 52/63 = 0.83.
# h2d_pageable 0.5 of min(line/2, 12): healthy 0.71-0.97 (DGX A100 10.0 and 10.8 of 12, seed 004's sample
#     11.6 and 10.9, Dell A100 PCIe D2H 8.5); pageable speed depends on the host CPU and memory, hence the
#     widest slack. (Dell's H2D 3.3 fails, as does its pinned H2D 17.3: a host worth a look.)
# allreduce 0.60: ring busbw is 0.73-0.82 of the line rate (A100 220-235/300, H100/H200 ring 367-370/450,
#     B200 ring 682/900); OCI's A100 floor is 185/300 = 0.62; DCGM's "x 0.75" of a typical 0.78 is 0.59.
#     Two GPUs on an NVLink bridge measure less (2x H100 PCIe 116 GB/s, nccl#1161; 2x A100 72 of 100,
#     nccl-tests#331): lower the floor for those (docs/thresholds.md).
DEFAULT_FLOORS: dict[str, float] = {"p2p": 0.70, "h2d_pinned": 0.65, "h2d_pageable": 0.50, "allreduce": 0.60}
FLOOR_KEYS = tuple(DEFAULT_FLOORS)
_FLOOR_MAX = 2.0  # NVLS busbw can exceed the line rate (480 of 450): a floor above 1 is legitimate


def parse_floor_ratio(value: object, where: str) -> float:
    """A floor override (ini, env, CLI or marker) as a float in (0, 2]; ``where`` names its origin in errors."""
    try:
        ratio = float(value.strip()) if isinstance(value, str) else float(value)  # type: ignore[arg-type]
        if isinstance(value, bool):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number such as 0.8 (a share of the expected bandwidth), "
                         f"got {value!r}") from None
    if not (math.isfinite(ratio) and 0 < ratio <= _FLOOR_MAX):
        raise ValueError(f"{where}: floor must be > 0 and <= {_FLOOR_MAX:g} (a share of the expected "
                         f"bandwidth), got {value!r}")
    return ratio


def gbps_text(gbps: float) -> str:
    """One decimal for GPU-sized figures, three significant digits for the small ones of CPUs."""
    return f"{gbps:.1f}" if gbps >= 10 else f"{gbps:.3g}"


def interval_text(interval: tuple[float, float]) -> str:
    """A measured figure's 95% interval, as messages print it."""
    return f"95% interval {gbps_text(interval[0])}-{gbps_text(interval[1])}"


@dataclass(frozen=True)
class Check:
    """A measurement against its expectation.

    Rule: with an ``absolute_floor`` (a published operator floor for the SKU) the measurement must
    reach that floor, and the relative floor is not applied; otherwise it must reach
    ``floor_ratio x expected``. With neither there is no verdict (``passed()`` is None). A caller
    whose user set the floor explicitly passes ``absolute_floor=None`` so that the user's ratio rules."""

    measured_gbps: float
    expected: Figure | None
    floor_ratio: float
    absolute_floor: Figure | None = None

    def __post_init__(self) -> None:
        m = self.measured_gbps
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m < 0:
            raise ValueError(f"a measurement must be a finite bandwidth >= 0 GB/s, got {m!r}")
        parse_floor_ratio(self.floor_ratio, "Check.floor_ratio")

    def needed_gbps(self) -> float | None:
        if self.absolute_floor is not None:
            return self.absolute_floor.gbps
        if self.expected is not None:
            return self.floor_ratio * self.expected.gbps
        return None

    def passed(self) -> bool | None:
        needed = self.needed_gbps()
        return None if needed is None else self.measured_gbps >= needed

    def ratio(self) -> float | None:
        """Measured / expected (None without an expectation, or for an expectation of 0)."""
        if self.expected is None or self.expected.gbps == 0:
            return None
        return self.measured_gbps / self.expected.gbps

    def describe(self) -> str:
        """One line, e.g. "measured 231.4 GB/s, needed 180.0 (0.80 x expected 225.0 GB/s from NV12
        NVLink 3.1), ratio 1.03"."""
        text = f"measured {gbps_text(self.measured_gbps)} GB/s"
        exp = self.expected
        exp_text = f"expected {gbps_text(exp.gbps)} GB/s from {exp.label or exp.source}" if exp is not None else None
        ratio = self.ratio()
        if self.absolute_floor is not None:
            floor = self.absolute_floor
            text += f", needed {gbps_text(floor.gbps)} (published {floor.label or floor.source})"
            if exp_text:
                text += f", {exp_text}, ratio {ratio:.2f}" if ratio is not None else f", {exp_text}"
            return text
        if exp is None:
            return text + ", no expected figure for this link (not judged)"
        text += f", needed {gbps_text(self.needed_gbps())} ({self.floor_ratio:.2f} x {exp_text})"
        return text + (f", ratio {ratio:.2f}" if ratio is not None else "")


# ---------------------------------------------------------------------------------------------
# The table `gputopo spec` prints and docs/thresholds.md reproduces.

_PER_GPU = (
    ("P100 (NVLink 1.0 x 4)", "1.0", 4, None),
    ("V100 (NVLink 2.0 x 6)", "2.0", 6, None),
    ("A100 (NVLink 3.x x 12)", "3.1", 12, None),
    ("RTX 3090 / RTX A6000 / A40 bridge (NVLink 3.x GA102 x 4)", "3.1", 4, _GA102_CC),
    ("H100 / H200 (NVLink 4.0 x 18)", "4.0", 18, None),
    ("B200 / GB200 (NVLink 5.0 x 18)", "5.0", 18, None),
)

_SKU_EXAMPLES = (
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA B300 SXM6 AC", "B300"),
)


def table_rows() -> list[tuple[str, str, Figure]]:
    """(category, item, figure) for every figure the rules use."""
    rows: list[tuple[str, str, Figure]] = []
    for gen in sorted(_PCIE_X16):
        rows.append(("PCIe, x16, per direction", f"Gen{gen}", _PCIE_X16[gen]))
    for version, fig in _NVLINK_PER_LINK.items():
        rows.append(("NVLink, per link, per direction", version, fig))
    rows.append(("NVLink, per link, per direction", "3.x on GA102 (compute capability 8.6)", _NVLINK_GA102))
    for item, version, links, cc in _PER_GPU:
        rows.append(("NVLink, per GPU, per direction", item, nvlink_gbps(version, links, cc)))
    rows.append(("Host<->device", "pageable staging ceiling", PAGEABLE_CEILING))
    for name, item in _SKU_EXAMPLES:
        fig = sku_allreduce_floor(name, 8)
        assert fig is not None, name
        rows.append(("All-reduce busbw floor, 8 GPUs, >= 8 GiB", f"{item} ({name})", fig))
    return rows


def _markdown_table() -> str:  # used to write docs/thresholds.md; the tests compare the two
    lines = ["| category | item | GB/s | source |", "|---|---|---|---|"]
    for cat, item, fig in table_rows():
        lines.append(f"| {cat} | {item} | {format_gbps(fig.gbps)} | {fig.source} |")
    return "\n".join(lines)


def merged_floors(overrides: Mapping[str, object] | None = None, where: str = "floors") -> dict[str, float]:
    """``DEFAULT_FLOORS`` with validated overrides (unknown keys are an error naming ``where``)."""
    floors = dict(DEFAULT_FLOORS)
    for key, value in (overrides or {}).items():
        if key not in floors:
            raise ValueError(f"{where}: unknown floor {key!r} (known: {', '.join(FLOOR_KEYS)})")
        floors[key] = parse_floor_ratio(value, f"{where}: {key}")
    return floors
