"""Limits no real machine reaches, each with where it comes from, and how an untrusted value is
shown in an error: a damaged or hostile profile, cache entry or argument is refused before
anything is allocated or compared by its figures."""

from __future__ import annotations

import reprlib
from typing import Any, TypeGuard

# NVML_NVLINK_MAX_LINKS of the newest nvml.h (pynvml.py of nvidia-ml-py 13: 36; H100 and B200 use 18):
# no GPU has more NVLinks, so no pair of GPUs is joined by more.
MAX_NVLINKS = 36
MAX_GPUS = 1024  # GPUs one host shows; the largest NVLink domain today is 72 (GB200 NVL72)
MAX_NUMA_NODES = 1024  # Linux MAX_NUMNODES at CONFIG_NODES_SHIFT=10, the most x86-64 allows
MAX_PCIE_GEN = 16  # PCIe 7.0 is the newest specification
MAX_PCIE_WIDTH = 32  # x32, the widest link the PCIe specification defines
# MIG devices of one GPU: seven at most on A100, H100 and B200 (NVIDIA MIG User Guide, "Supported GPUs":
# "up to seven"): compute instances share their GPU instance's slices, so none holds more than its slices.
MAX_MIG_DEVICES = 64
MAX_MEMORY_BYTES = 2**44  # 16 TiB; the largest GPU memory today is 288 GB (B300)
MAX_GBPS = 1e6  # GB/s: a thousand times NVLink 5's 1.8 TB/s per GPU
MAX_BYTES = 2**40  # 1 TiB: a message size above the memory of any GPU
MAX_NICS = 1024  # network devices of one host (an 8-GPU node has about 10 RDMA NICs)
MAX_WARNINGS = 10_000
MAX_CPUS = 65536  # Linux NR_CPUS tops out at 8192 (CONFIG_MAXSMP)
# One document gputopo fleet reads (a run's or a check's report, a profile): a full check of an 8-GPU node
# (165 figures) is about 0.3 MB with 20 samples per figure, 4 MB where every figure took the harness's
# 1,000 samples (about 170,000 JSON values and 2,000 objects and lists). Its values and containers are
# bounded too, as 16 MiB of "{}," would take 380 MB to parse (docs/performance.md, "The fleet view").
MAX_DOCUMENT_BYTES = 16 * 2**20
MAX_DOCUMENT_VALUES = 1_000_000  # separators (","), counted before parsing: 16 MiB of figures has 700,000
MAX_DOCUMENT_CONTAINERS = 200_000  # "{" and "[", counted before parsing
# GPUs of one node gputopo fleet compares: four times the most one host shows today (16: DGX-2, HGX-2);
# a node's facts grow with its pairs (64 GPUs: 2,016 pairs, about 0.6 MB kept; 8 GPUs: 19 KB)
MAX_FLEET_NODE_GPUS = 64


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 3, 6, 4


def is_bandwidth(value: Any) -> TypeGuard[float]:
    """A figure in GB/s a verdict may compare: a number above 0 and at most MAX_GBPS. Written as a
    comparison, which is False for NaN and needs no float() of 10**400."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_GBPS


def show_value(value: Any) -> str:
    """A short, safe rendering of an untrusted value for an error message: never the repr of a
    5,000-digit integer (ValueError), of a deeply nested list (RecursionError) or of 60 MB."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        return _SHORT.repr(value)
    except (ValueError, RecursionError):  # a huge integer inside a list
        return f"a {type(value).__name__}"
