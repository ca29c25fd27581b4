"""The all-reduce sweep of ``gputopo bench allreduce``, for people (markers judge at one size): the
sizes from ``begin`` to ``end`` by ``factor`` as nccl-tests' ``-b -e -f`` step them, measured by
``bench.allreduce.run_allreduce`` (nccl-tests' time, algbw, busbw and #wrong), kept as one JSON entry
(``sweeps`` of a report document) that the text table and the HTML report are drawn from."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..core.ranks_requirement import RANK_BASE_BYTES
from ..core.spec import Figure
from ..core.units import counted, size_text
from .allreduce_result import AllReduceResult
from .allreduce_worker import ITEMSIZE, element_counts


def sweep_sizes(begin: int, end: int, factor: int) -> list[int]:
    """``begin``, ``begin*factor``, ... up to ``end`` included: nccl-tests' loop ``for (size =
    minBytes; size <= maxBytes; size *= stepFactor)`` (src/common.cu)."""
    if not 1 <= begin <= end:
        raise ValueError(f"sizes: need 1 <= begin <= end, got {begin} and {end}")
    if factor < 2:
        raise ValueError(f"factor must be 2 or more, got {factor}")
    sizes, size = [], begin
    while size <= end:
        sizes.append(size)
        size *= factor
    return sizes


def element_sizes(sizes: Sequence[int], dtype: str) -> list[int]:
    """The sizes in bytes ``run_allreduce`` measures for ``sizes`` (``element_counts``), so that what
    is announced is run."""
    return [count * ITEMSIZE[dtype] for count in element_counts(sizes, dtype)]


def sweep_entry(
    result: AllReduceResult,
    *,
    host: str | None,
    devices: Sequence[int] | None,
    sizes: tuple[int, int, int],
    expected: Figure | None,
    basis: str,
) -> dict:
    """The JSON of one sweep: what was run where, every row (``AllReduceResult.to_json``), and the
    busbw the links should give (``expected``: null with the reason when nothing says)."""
    begin, end, factor = sizes
    ranks = f"{result.world_size} rank{'s' if result.world_size != 1 else ''}"
    where = ", ".join(f"GPU{d}" for d in devices) if devices else "CPU processes"
    return {
        "what": f"all-reduce sweep, {ranks} ({result.backend}, {where}), {result.dtype}, "
        f"{size_text(begin)} to {size_text(end)} x{factor}",
        "origin": "measured",
        "host": host,
        "devices": list(devices) if devices else None,
        "sizes": {"begin": begin, "end": end, "factor": factor},
        "expected": {
            "gbps": expected.gbps if expected else None,
            "basis": basis,
            "source": expected.source if expected else None,
        },
        "result": result.to_json(),
        "worker_pids": list(result.worker_pids),
    }


# How many gloo ranks this machine can run, and why (``gputopo bench allreduce --ranks``). Each gloo
# rank is one busy process (OMP_NUM_THREADS=1) that imports torch (about 1 s of CPU each); past two per
# CPU each rank waits more than it runs, so the figures describe the scheduler, not the all-reduce
# (40 ranks on 2 cores took 43 s for one small size).
RANKS_PER_CPU = 2
# A gloo rank's memory: python with torch resident before any buffer (``RANK_BASE_BYTES``), then the
# buffers of the largest size it holds at once (the timed buffer, the verification pattern, its sum and
# the comparison, gloo's own copies: a peak of about 5.5x the size measured at 64 MiB, VmHWM).
RANK_BUFFERS = 6


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, as taskset and cgroup cpusets set it),
    else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes that can be allocated without swapping: /proc/meminfo's MemAvailable, less when the
    cgroup (v2) limit leaves less; None where neither is known."""
    found = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit.isdigit():
            left = max(0, int(limit) - used)
            found = left if found is None else min(found, left)
    except (OSError, ValueError):
        pass
    return found


def rank_memory(max_bytes: int) -> int:
    """The memory one gloo rank needs for a sweep whose largest size is ``max_bytes``."""
    return RANK_BASE_BYTES + RANK_BUFFERS * max_bytes


def gloo_rank_limit(max_bytes: int, *, cpus: int | None = None, available: int | None = -1) -> tuple[int, str]:
    """(the most gloo ranks this machine runs a sweep up to ``max_bytes`` with, why): at most
    ``RANKS_PER_CPU`` per usable CPU, and no more than fit in the available memory (``rank_memory``
    each). ``cpus`` and ``available`` default to this machine's (``available=None``: unknown, no
    memory bound)."""
    cpus = usable_cpus() if cpus is None else cpus
    available = available_memory() if available == -1 else available
    by_cpu = RANKS_PER_CPU * cpus
    why = (
        f"{counted(cpus, 'usable CPU')} x {RANKS_PER_CPU} ranks each: a gloo rank is a busy "
        f"process, and past that the sweep measures the scheduler, not the all-reduce"
    )
    if available is None:
        return by_cpu, why
    need = rank_memory(max_bytes)
    by_memory = available // need
    if by_memory < by_cpu:
        return by_memory, (
            f"{available / 1e9:.1f} GB of memory available, {need / 1e9:.1f} GB per rank "
            f"({size_text(RANK_BASE_BYTES)} for python and torch + {RANK_BUFFERS} x "
            f"{size_text(max_bytes)}, the largest size)"
        )
    return by_cpu, why
