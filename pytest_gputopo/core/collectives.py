"""The all-reduce: nccl-tests' algbw/busbw definitions, what a machine's links should give as busbw,
and the floors public operators publish per GPU model. Pure, like ``spec``; every figure cites its
source."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import Topology
from .spec import Figure, p2p_expected
from .units import counted

# ---------------------------------------------------------------------------------------------
# All-reduce. nccl-tests' doc/PERFORMANCE.md: an all-reduce of S bytes over n ranks, each with bandwidth B
# to the others, takes at best t = (S/B) x 2(n-1)/n (ring or tree); algbw = S / t (src/all_reduce.cu),
# busbw = algbw x 2(n-1)/n, which "should reflect the speed of the hardware bottleneck" and is compared
# with the per-direction link rate (nccl-tests PR #189). (Articles that plug in NVLink 4.0's 900 GB/s use
# the bidirectional figure; the per-direction 450 is the one busbw is comparable with.)


# nccl-tests' -d names (src/common.cu test_typenames) -> torch dtype names; those torch.distributed
# reduces on both gloo and NCCL.
NCCL_TESTS_TYPES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bfloat16": "bfloat16",
    "int32": "int32",
    "int64": "int64",
}


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
    """Ring all-reduce time t = 2(n-1)/n x B / W (nccl-tests' PERFORMANCE.md), W in GB/s per direction;
    0 for n = 1."""
    if nbytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {nbytes!r}")
    factor = allreduce_factor(n)
    if factor == 0:
        return 0.0
    if not link_gbps > 0:
        raise ValueError(f"link bandwidth must be > 0 GB/s, got {link_gbps!r}")
    return factor * nbytes / (link_gbps * 1e9)


_HAMILTON_MAX = 12  # exact ring search up to this many GPUs; beyond, only uniform or complete graphs


def _has_ring(n: int, ok: set[tuple[int, int]]) -> bool:
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


def allreduce_expected_busbw(
    topology: Topology, n: int | None = None, devices: tuple[int, ...] | None = None
) -> Figure | None:
    """Expected all-reduce busbw among ``cuda:0 .. cuda:n-1`` (all GPUs when n is None), or among
    ``devices`` when given.

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
    chosen = list(range(n)) if devices is None else list(devices)
    if n < 2 or n > total or len(chosen) != n or topology.chosen(chosen) != chosen:
        return None
    place = {gpu: i for i, gpu in enumerate(chosen)}  # the ring search numbers the GPUs 0..n-1
    figs = {}
    for link in topology.pairs(chosen):
        fig = p2p_expected(topology, link.a, link.b)
        if fig is None:
            return None
        figs[(link.a, link.b)] = fig
    rates = sorted({f.gbps for f in figs.values()}, reverse=True)
    best = rates[-1]
    for rate in rates:
        ok = {(place[a], place[b]) for (a, b), f in figs.items() if f.gbps >= rate}
        if n == 2 or _has_ring(n, ok):
            best = rate
            break
    ring = {pair: f for pair, f in figs.items() if f.gbps >= best}
    slowest_pair, bottleneck = min(ring.items(), key=lambda kv: (kv[1].gbps, kv[0]))
    uniform = len({f.gbps for f in figs.values()}) == 1
    where = "every pair" if uniform else f"ring bottleneck GPU{slowest_pair[0]}-GPU{slowest_pair[1]}"
    notes = [
        f"busbw of a ring = the bottleneck link's per-direction rate (nccl-tests PERFORMANCE.md: "
        f"t = (S/B) x 2(n-1)/n, busbw = algbw x 2(n-1)/n); {where} over {counted(n, 'GPU')}: {bottleneck.source}"
    ]
    if bottleneck.label.startswith("PCIe"):
        notes.append(
            'PCIe-only ring: "On PCI systems, the performance you get is usually determined by the '
            'bandwidth your CPU and memory can deliver" (sjeaugey, nccl#1639: 8x RTX 5090 Gen5 busbw '
            "28 GB/s with 8 GPUs, 35 with 4)"
        )
    if not uniform:
        notes.append("mixed links: the best single ring, a lower bound (NCCL runs several rings)")
    return Figure(bottleneck.gbps, "; ".join(notes), f"{bottleneck.label}, {where}")


# ---------------------------------------------------------------------------------------------
# Published per-SKU all-reduce floors (8 GPUs, one node, large sizes). Where operators differ, the lower
# (more lenient) floor is kept, so that a node a public operator would accept is not failed here.

LARGE_ALLREDUCE_BYTES = 8 * 2**30  # peak busbw needs >= 8G (sjeaugey, nccl-tests#149); Azure runs 8G/16G


@dataclass(frozen=True)
class _SkuFloor:
    pattern: re.Pattern[str]
    gbps: float
    nvls: bool  # the floor is above what a ring reaches: it assumes NCCL's default NVLink SHARP algorithm
    label: str
    source: str


_SKU_FLOORS = (
    _SkuFloor(
        re.compile(r"V100-SXM2", re.I),
        110.0,
        False,
        "V100 SXM2 8-GPU all-reduce floor",
        "Azure azurehpc-health-checks conf NDv2 (8x V100 SXM2): all-reduce >= 110 GB/s @8G; the only "
        "published V100 floor",
    ),
    _SkuFloor(
        re.compile(r"\bA100-SXM", re.I),
        185.0,
        False,
        "A100 SXM 8-GPU all-reduce floor",
        "OCI oci-hpc active_healthcheck.py: A100 shapes (BM.GPU4.8, B4.8, A100-v2.8) 185 GB/s, 8 ranks, "
        "NCCL_ALGO=Ring, avg busbw 1G-10G; lower than Azure ND A100 v4 (228 @16G) and AWS p4d "
        "(200, advisory), so OCI's is used",
    ),
    _SkuFloor(
        re.compile(r"\bH100\b(?!.*(?:PCIe|NVL)).*(?:HBM3|SXM)|\bH100 SXM", re.I),
        440.0,
        True,
        "H100 SXM 8-GPU all-reduce floor",
        "OCI oci-hpc active_healthcheck.py: H100 440 GB/s (avg busbw 1G-16G); lower than Azure ND H100 "
        "v5 (460 @16G) and AWS p5 (500, advisory), so OCI's is used; above the ~370 a ring reaches "
        "(nccl-tests#212): assumes NVLS",
    ),
    _SkuFloor(
        re.compile(r"\bH200\b(?!.*NVL)", re.I),
        431.0,
        True,
        "H200 8-GPU all-reduce floor",
        "Azure azurehpc-health-checks conf ND H200 v5: all-reduce >= 431 GB/s @16G; lower than OCI "
        "(440) and AWS p5e/p5en (500, advisory), so Azure's is used; above the ~368 a ring reaches "
        "(ml-engineering, NCCL_NVLS_ENABLE=0): assumes NVLS",
    ),
    _SkuFloor(
        re.compile(r"(?<![A-Za-z])B200\b", re.I),
        440.0,
        False,
        "B200 8-GPU all-reduce floor",
        "OCI oci-hpc active_healthcheck.py: B200 440 GB/s; lower than AWS p6-b200 (600, advisory), "
        "so OCI's is used (measured 682 ring, 838 NVLS: ml-engineering)",
    ),
    _SkuFloor(
        re.compile(r"(?<![A-Za-z])B300\b", re.I),
        800.0,
        True,
        "B300 8-GPU all-reduce floor",
        "OCI oci-hpc active_healthcheck.py: B300 800 GB/s, the only published B300 floor; above "
        "what a ring reaches on NVLink 5 (B200 ring 682, ml-engineering): assumes NVLS",
    ),
)


def sku_allreduce_floor(
    gpu_name: str | None, n: int, size_bytes: int | None = None, nvls: bool | None = None
) -> Figure | None:
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
