"""What a link should carry, and where each figure comes from: PCIe, NVLink, host<->device and GPU copies
(the all-reduce is ``collectives``, how much of a figure a healthy machine must reach ``thresholds``).

Pure core: the standard library and ``.model`` only; no I/O, no environment. Units: GB/s = 1e9
bytes/s (the nccl-tests convention), **per direction** unless a name says otherwise. Every figure is
a ``Figure`` whose ``source`` names the public document it comes from (docs/sources.md lists each
one: title, publisher, address, and the phrases quoted here), with the arithmetic that turns a
published number (often bidirectional or rounded) into the per-direction figure used here.

The rules (docs/thresholds.md explains them and their justification):

- an *expected* figure is the link's one-direction line rate (for a PCIe path through the CPU, half
  of it);
- a measurement passes when it reaches ``floor_ratio x expected`` (``thresholds.DEFAULT_FLOORS``), or,
  where a public operator publishes an absolute floor for the SKU (``collectives.sku_allreduce_floor``), that floor
  instead: the published floor wins over the default ratio when known (a floor the user set
  explicitly wins over both: ``judgement.threshold``, the one rule, then sets no absolute floor);
- unknown facts give ``None`` (no expectation, no verdict), never a guess.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .model import Gpu, LinkClass, Topology

__all__ = [
    "Figure",
    "PCIE_VIA_CPU_FACTOR",
    "PAGEABLE_FACTOR",
    "PAGEABLE_CEILING",
    "pcie_gbps",
    "pcie_line_rate",
    "nvlink_per_link",
    "nvlink_gbps",
    "gpu_nvlink_version",
    "nvlink_version_note",
    "h2d_expected",
    "p2p_expected",
    "format_gbps",
]


@dataclass(frozen=True)
class Figure:
    """A bandwidth in GB/s (1e9 B/s, per direction), its citation, and a short name for messages."""

    gbps: float
    source: str
    label: str = ""  # what the figure is, e.g. "NV12 NVLink 3.1"; used by judgement.Judgement.describe

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
# PCIe: x16 per direction, after line encoding, from PCI-SIG's per-lane rates and encodings. Articles
# round the raw rate (Gen4 "32 GB/s") or add both directions (Gen4 "64 GB/s"); the figure here is
# transfers/s x lanes x encoding / 8.

_PCI_SIG = "PCI-SIG, PCI Express Base Specification"

PCIE_X16: dict[int, Figure] = {
    1: Figure(
        2.5 * 16 * 8 / 10 / 8,
        f"{_PCI_SIG} 1.0: 2.5 GT/s per lane, 8b/10b encoding; 2.5 GT/s x 16 lanes x 8/10 / 8 = 4.0 GB/s",
        "PCIe Gen1 x16",
    ),
    2: Figure(
        5.0 * 16 * 8 / 10 / 8,
        f"{_PCI_SIG} 2.0: 5 GT/s per lane, 8b/10b; 5 GT/s x 16 x 8/10 / 8 = 8.0 GB/s",
        "PCIe Gen2 x16",
    ),
    3: Figure(
        8.0 * 16 * 128 / 130 / 8,
        f"{_PCI_SIG} 3.0: 8 GT/s per lane, 128b/130b; 8 GT/s x 16 x 128/130 / 8 "
        "= 15.75 GB/s (rounded to 16 GB/s, or 32 GB/s for both directions, in vendor tables)",
        "PCIe Gen3 x16",
    ),
    4: Figure(
        16.0 * 16 * 128 / 130 / 8,
        f"{_PCI_SIG} 4.0: 16 GT/s per lane, 128b/130b; 16 GT/s x 16 x 128/130 / 8 "
        "= 31.51 GB/s (rounded to 32 GB/s, or 64 GB/s for both directions)",
        "PCIe Gen4 x16",
    ),
    5: Figure(
        32.0 * 16 * 128 / 130 / 8,
        f"{_PCI_SIG} 5.0: 32 GT/s per lane, 128b/130b; 32 GT/s x 16 x 128/130 / 8 "
        "= 63.02 GB/s (rounded to 64 GB/s, or 128 GB/s for both directions; ml-engineering measured "
        "55.43 GB/s host-to-device = 88% of it on H200)",
        "PCIe Gen5 x16",
    ),
    6: Figure(
        64.0 * 16 / 8 * 242 / 256,
        f"{_PCI_SIG} 6.0: 64 GT/s per lane (PAM4) is a raw 128 GB/s at x16; "
        "in FLIT mode each 256-byte flit carries 242 bytes of TLP and DLLP traffic (236 + 6; CRC and "
        "FEC take the rest): 128 x 242/256 = 121.0 GB/s",
        "PCIe Gen6 x16",
    ),
}

PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)

# A PCIe path through the CPU (PHB, NODE, SYS): half the line rate. EngineersOfAI's "PCIe and NVLink
# Interconnects": "GPU0 to GPU2: two switch hops + CPU - 50% of PCIe bandwidth (shared)", and "the
# effective bandwidth for cross-switch GPU communication is often 8-12 GB/s rather than the 32 GB/s
# theoretical for PCIe 4.0". Measured (nccl-tests#74, 8x A40 on EPYC): ~25 GB/s per direction within a
# socket, ~20 across sockets on Gen4.
PCIE_VIA_CPU_FACTOR = 0.5
_VIA_CPU = (LinkClass.PHB, LinkClass.NODE, LinkClass.SYS)
_VIA_CPU_NOTE = (
    'x 0.5 for a path through the CPU (EngineersOfAI, PCIe and NVLink Interconnects: "two switch '
    'hops + CPU - 50% of PCIe bandwidth", "cross-switch ... often 8-12 GB/s rather than the 32 GB/s '
    'theoretical")'
)


def pcie_gbps(gen: int, width: int = 16) -> Figure:
    """One direction of a PCIe link of generation ``gen`` (1-6) and ``width`` lanes, after encoding."""
    if isinstance(gen, bool) or gen not in PCIE_X16:
        raise ValueError(f"unknown PCIe generation {gen!r} (known: {', '.join(map(str, PCIE_X16))})")
    if isinstance(width, bool) or width not in PCIE_WIDTHS:
        raise ValueError(f"unknown PCIe width x{width!r} (known: {', '.join(f'x{w}' for w in PCIE_WIDTHS)})")
    x16 = PCIE_X16[gen]
    if width == 16:
        return x16
    return _scaled(x16, width / 16, f"PCIe Gen{gen} x{width}", f"x{width} = x16 x {width}/16")


def pcie_line_rate(gpu: Gpu) -> Figure | None:
    """What the GPU's PCIe link can carry: its maximum generation and width for this device and
    system (``nvmlDeviceGetMaxPcieLinkGeneration`` / ``...Width``); None when unknown.

    Not the *current* link: the current generation and width "may be reduced when the GPU is not in
    use" (nvidia-smi --help-query-gpu, pcie.link.gen.current), which would make every expectation
    trivially low. A link trained down shows as a measured
    figure below this one, and as a current width below the maximum (the ``pcie`` check)."""
    gen, width = gpu.pcie_gen_max, gpu.pcie_width_max
    if gen is None or width is None or gen not in PCIE_X16 or width not in PCIE_WIDTHS:
        return None
    return pcie_gbps(gen, width)


# ---------------------------------------------------------------------------------------------
# NVLink, per link and per direction, by the version string NVML reports (model.NvLink.version).
# NVIDIA publishes per-GPU totals counting both directions (links x per-link = per-GPU aggregate); the
# per-direction rate per link is half the per-link share.

_NVLINK_PAGE = "NVIDIA, NVLink and NVLink Switch (nvidia.com)"

NVLINK_PER_LINK: dict[str, Figure] = {
    "1.0": Figure(
        20.0,
        "NVIDIA Tesla P100 whitepaper (WP-08019-001): 4 NVLinks per P100, 160 GB/s bidirectional "
        "per GPU: 40 GB/s per link both ways, 20 GB/s per link per direction",
        "NVLink 1.0",
    ),
    "2.0": Figure(
        25.0,
        "NVIDIA DGX-1 With Tesla V100 System Architecture whitepaper: 6 NVLinks per V100, 300 GB/s "
        "bidirectional per GPU: 50 GB/s per link both ways, 25 GB/s per link per direction",
        "NVLink 2.0",
    ),
    "2.2": Figure(
        25.0,
        "NVML_NVLINK_VERSION_2_2 (nvml.h) is a revision of NVLink 2 with no published rate of its "
        "own, so the 2.0 rate is used (V100: 6 links, 300 GB/s bidirectional per GPU)",
        "NVLink 2.2",
    ),
    "3.0": Figure(
        25.0,
        f"{_NVLINK_PAGE}: an A100 has 12 third-generation NVLinks, 600 GB/s per GPU both ways: "
        "25 GB/s per link per direction; `nvidia-smi nvlink -s` on an A100-SXM4-80GB shows 12 links at "
        "25 GB/s each (nccl-tests#228, cited by the dgx-a100 profile)",
        "NVLink 3.0",
    ),
    "3.1": Figure(
        25.0,
        "NVML reports A100 as NVLink 3.1 (encoded 5; hwloc#658), the same signalling as 3.0: "
        f"{_NVLINK_PAGE}, 12 links, 600 GB/s per GPU both ways = 25 GB/s per link per direction",
        "NVLink 3.1",
    ),
    "4.0": Figure(
        25.0,
        'NVIDIA Technical Blog, Introducing NVIDIA HGX H100: "the NVLink bidirectional speed of '
        '900 gigabytes per second (GB/s)" per GPU, over 18 links (NV18 in `nvidia-smi topo -m`); '
        'sjeaugey (nccl-tests#212): "450GB/s is the line rate" per direction',
        "NVLink 4.0",
    ),
    "5.0": Figure(
        50.0,
        f'{_NVLINK_PAGE}: a Blackwell GPU "supports up to 18 NVLink 100 gigabyte-per-second '
        '(GB/s) connections for a total bandwidth of 1.8 terabytes per second (TB/s)", bidirectional: '
        "100 / 2 = 50 GB/s per link per direction",
        "NVLink 5.0",
    ),
}

# GA102 (compute capability 8.6: RTX 3090, RTX A6000/A5500/A5000, A40) also reports NVLink 3.1 (nvtop#469)
# but its bridge runs 4 links at a lower rate than GA100's.
NVLINK_GA102 = Figure(
    112.5 / 2 / 4,
    'NVIDIA Ampere GA102 GPU Architecture whitepaper: "four x4 links, with each link providing 14.0625 GB/sec '
    'bandwidth in each direction", "112.5 GB/sec total bandwidth between two GPUs" (the RTX A5500 and A40 '
    "datasheets give the same 112.5 GB/s bidirectional per 2-card bridge): 112.5 / 2 / 4 = 14.06 GB/s per link "
    "per direction, 56.25 per GPU; measured: 101.6 GB/s bidirectional over an A40 bridge (nccl-tests#74, 90%)",
    "NVLink 3.x (GA102 bridge)",
)

GA102_CC = "8.6"
_GA102_NAME = re.compile(r"RTX 3090|RTX 3080|RTX A6000|RTX A5500|RTX A5000|RTX A4500|\bA40\b|\bA10\b", re.I)
_GA100_NAME = re.compile(r"\bA100\b|\bA30\b|\bA800\b", re.I)
# Compute capability -> the NVLink versions that architecture has (Pascal P100 1.0, Volta V100 2.x, Ampere
# A100 and GA102 3.x, Hopper 4.0, Blackwell 5.0: NVIDIA's whitepapers and NVLink page). The first is taken
# where a source gives no per-link version (nvidia-smi text) or one the architecture cannot have: NVML's
# answer is not trusted alone (public code reads H100's 7, NVML_NVLINK_VERSION_5_0, as NVLink 4:
# TensorRT-LLM's auto_parallel/cluster_info.py ``nvlink_version``; tests/test_spec.py cites it).
_CC_NVLINK = {
    "6.0": ("1.0",),
    "7.0": ("2.0", "2.2"),
    "8.0": ("3.0", "3.1"),
    "8.6": ("3.0", "3.1"),
    "9.0": ("4.0",),
    "10.0": ("5.0",),
    "10.3": ("5.0",),
}


def nvlink_per_link(version: str, compute_capability: str | None = None) -> Figure:
    """One NVLink of ``version`` ("3.1", "4.0", ...), one direction. For 3.x, compute capability 8.6
    (GA102 bridges) has its own rate; without it the GA100 (A100) rate is given. Unknown versions
    (e.g. "6.0", for which no public source here gives a figure) raise ValueError."""
    version = str(version).strip()
    if version not in NVLINK_PER_LINK:
        raise ValueError(f"no bandwidth figure for NVLink version {version!r} (known: {', '.join(NVLINK_PER_LINK)})")
    if version.startswith("3.") and compute_capability == GA102_CC:
        return NVLINK_GA102
    return NVLINK_PER_LINK[version]


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
        return "GA102" if gpu.compute_capability == GA102_CC else "GA100"
    if gpu.name and _GA102_NAME.search(gpu.name):
        return "GA102"
    if gpu.name and _GA100_NAME.search(gpu.name):
        return "GA100"
    return None


def _nvlink_version(gpu: Gpu) -> tuple[str | None, str | None]:
    said = {ln.version for ln in gpu.nvlinks if ln.active and ln.version}
    can = _CC_NVLINK.get(gpu.compute_capability or "")
    if can and said - set(can):
        return can[0], (
            f"NVML says NVLink {', '.join(sorted(said))}, compute capability {gpu.compute_capability} "
            f"has {' or '.join(can)}: {can[0]} taken"
        )
    known = said & NVLINK_PER_LINK.keys()
    if known:
        return min(known, key=lambda v: (NVLINK_PER_LINK[v].gbps, v)), None
    return (can[0] if can else None), None


def gpu_nvlink_version(gpu: Gpu) -> str | None:
    """The NVLink version of the GPU's active links as NVML gives it (the slowest when they differ),
    where the GPU's compute capability can have it; else the version the capability implies (and
    ``nvlink_version_note`` says why); NVML's answer for a capability not known here; None when
    neither is known."""
    return _nvlink_version(gpu)[0]


def nvlink_version_note(gpu: Gpu) -> str | None:
    """Why the GPU's NVLink version is not the one NVML gives (a version its architecture cannot have,
    e.g. H100 answering NVML_NVLINK_VERSION_5_0), as a warning; None when NVML's answer is taken."""
    return _nvlink_version(gpu)[1]


def _gpu_per_link(gpu: Gpu) -> Figure | None:
    version, note = _nvlink_version(gpu)
    if version is None:
        return None
    one = NVLINK_PER_LINK[version]
    if version.startswith("3."):
        chip = _gpu_chip_3x(gpu)
        if chip is None:
            return None  # A100 and RTX 3090 both report 3.1 at different rates: unknown, not guessed
        one = NVLINK_GA102 if chip == "GA102" else one
    if note:  # the warning travels with the figure, into every message and report that shows it
        return Figure(
            one.gbps,
            f"{one.source}; {note}",
            f"{one.label} (compute capability {gpu.compute_capability}, not NVML's version)",
        )
    return one


def _switched(gpu: Gpu) -> bool:
    active = [ln for ln in gpu.nvlinks if ln.active]
    return bool(active) and all(ln.remote_type == "SWITCH" for ln in active)


# ---------------------------------------------------------------------------------------------
# Host <-> device

# Pageable copies are staged through a pinned buffer by a CPU memcpy (NVIDIA, "How to Optimize Data
# Transfers in CUDA C/C++"). EngineersOfAI's "PCIe and NVLink Interconnects": "This halves effective
# bandwidth", "(from ~28 GB/s to ~12 GB/s on PCIe 4.0)", "Pageable memory to GPU: ~8-12 GB/s (effective,
# due to staging copy)"; the staging memcpy runs at "~10-15 GB/s (limited by CPU memory bandwidth)", so a
# faster link does not raise it: the expectation is min(line / 2, 12 GB/s).
PAGEABLE_FACTOR = 0.5
PAGEABLE_CEILING = Figure(
    12.0,
    'EngineersOfAI, PCIe and NVLink Interconnects: pageable staging "halves effective '
    'transfer bandwidth (from ~28 GB/s to ~12 GB/s on PCIe 4.0)", "Pageable memory to GPU: '
    '~8-12 GB/s (effective, due to staging copy)"; measured 10.0 and 10.8 GB/s on a DGX A100 '
    "(gengwg/gpu, bandwidthTest)",
    "pageable staging ceiling",
)


def h2d_expected(gpu: Gpu, pinned: bool = True) -> Figure | None:
    """Host->device (and device->host) copy expectation over the GPU's current PCIe link.

    Pinned: the line rate. Pageable: min(line rate / 2, 12 GB/s) (``PAGEABLE_CEILING``). None when the link's
    generation or width is unknown. (On Grace Hopper the host link is NVLink-C2C, not PCIe: the
    PCIe-based expectation understates it.)"""
    line = pcie_line_rate(gpu)
    if line is None:
        return None
    if pinned:
        return Figure(
            line.gbps,
            f"{line.source}; pinned copies are bounded by the line rate (EngineersOfAI: "
            f'"Pinned memory to GPU: ~25-30 GB/s (near theoretical PCIe 4.0 limit)")',
            f"pinned, {line.label} line rate",
        )
    half = line.gbps * PAGEABLE_FACTOR
    if half <= PAGEABLE_CEILING.gbps:
        return Figure(
            half,
            f'{line.source}; pageable: x 0.5, EngineersOfAI: staging "halves effective bandwidth"',
            f"pageable, half of {line.label}",
        )
    return Figure(
        PAGEABLE_CEILING.gbps,
        f"{PAGEABLE_CEILING.source} (half of {line.label} is {format_gbps(half)}, above the staging ceiling)",
        f"pageable staging ceiling, {line.label}",
    )


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
        one: Figure = min(rates, key=lambda r: r.gbps)  # type: ignore[union-attr, assignment]  # no None (above)
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
    line: Figure = min(lines, key=lambda x: x.gbps)  # type: ignore[union-attr, assignment]  # no None (above)
    if link.pcie in _VIA_CPU:
        return _scaled(line, PCIE_VIA_CPU_FACTOR, f"{line.label} via CPU ({link.pcie.name})", _VIA_CPU_NOTE)
    return Figure(line.gbps, line.source, f"{line.label} ({link.pcie.name})")
