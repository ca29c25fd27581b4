"""The all-reduce sweep of ``gputopo bench allreduce``, for people (markers judge at one size): the
sizes from ``begin`` to ``end`` by ``factor`` as nccl-tests' ``-b -e -f`` step them, measured by
``bench.allreduce.run_allreduce`` (nccl-tests' time, algbw, busbw and #wrong), kept as one JSON entry
(``sweeps`` of a report document) that the text table and the HTML report are drawn from."""

from __future__ import annotations

from typing import Optional, Sequence

from ..core.spec import Figure
from ..core.units import size_text
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


def sweep_entry(result: AllReduceResult, *, host: Optional[str], devices: Optional[Sequence[int]],
                sizes: tuple[int, int, int], expected: Optional[Figure], basis: str) -> dict:
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
        "expected": {"gbps": expected.gbps if expected else None, "basis": basis,
                     "source": expected.source if expected else None},
        "result": result.to_json(),
        "worker_pids": list(result.worker_pids),
    }
