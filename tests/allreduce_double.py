"""What a stand-in for ``bench.allreduce.run_allreduce`` answers: one size, timed once, every element
right, at the bandwidths the test names (the tests that use it are about what the plugin does with
a figure, not how it is measured)."""

from __future__ import annotations

from pytest_gputopo.bench.allreduce_result import AllReduceResult, AllReduceRow


def one_size_result(
    world_size: int, size_bytes: int, *, algbw_gbps: float, busbw_gbps: float, algo: str | None = None, **result
) -> AllReduceResult:
    """``result``: AllReduceResult's optional fields (``nvls``, ``nvls_evidence``, ...); nvls unknown unless given."""
    row = AllReduceRow(
        size_bytes=size_bytes,
        count=size_bytes // 4,  # float32 elements
        time_us=1.0,
        algbw_gbps=algbw_gbps,
        busbw_gbps=busbw_gbps,
        wrong=0,
        iterations=1,
        samples=1,
        spread=1.0,
        stable=True,
        wall_s=0.1,
        algo=algo,
    )
    return AllReduceResult("nccl", world_size, "float32", (row,), row, **{"nvls": None, **result})
