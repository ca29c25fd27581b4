"""An all-reduce benchmark's figures: per size the time, algbw and busbw as nccl-tests defines them,
the verification's count of wrong elements, and the row thresholds are judged at."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.collectives import allreduce_factor
from ..core.units import size_text


@dataclass(frozen=True)
class AllReduceRow:
    """One size of the sweep (one line of nccl-tests' table, out-of-place columns aside)."""

    size_bytes: int
    count: int  # elements per rank
    time_us: float  # harness median of the per-call time (mean over ranks)
    algbw_gbps: float
    busbw_gbps: float
    wrong: int  # mismatching elements after a verifiable all-reduce, summed over ranks
    iterations: int  # back-to-back all-reduce calls per timed sample
    samples: int
    spread: float  # max/min of the samples
    stable: bool  # the median's 95% interval met the target before the budget ran out
    wall_s: float
    time_ci_us: tuple[float, float] = (0.0, 0.0)  # 95% interval of time_us
    error: str | None = None
    algo: str | None = None  # NCCL algorithm from the TUNING log (None on gloo / unknown)

    @property
    def ok(self) -> bool:
        return self.error is None and self.wrong == 0

    @property
    def busbw_ci_gbps(self) -> tuple[float, float]:
        """The 95% interval of ``busbw_gbps``, from that of the time (a slower time, a lower busbw)."""
        low, high = self.time_ci_us
        return (
            self.busbw_gbps * self.time_us / high if high > 0 else 0.0,
            self.busbw_gbps * self.time_us / low if low > 0 else math.inf,
        )

    def to_json(self) -> dict:
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "wrong": self.wrong,
            "iterations": self.iterations,
            "samples": self.samples,
            "time_ci95_us": list(self.time_ci_us),
            "busbw_ci95_gbps": list(self.busbw_ci_gbps),
            "spread": self.spread,
            "stable": self.stable,
            "wall_s": self.wall_s,
            "error": self.error,
            "algo": self.algo,
        }


@dataclass(frozen=True)
class AllReduceResult:
    backend: str
    world_size: int
    dtype: str
    rows: tuple[AllReduceRow, ...]
    judged: AllReduceRow  # the row at judge_size: thresholds are judged there, not on the sweep average
    nvls: bool | None  # None on gloo or when NCCL did not say; True when NCCL chose NVLS/NVLS_TREE
    nvls_evidence: tuple[str, ...] = ()
    nccl_log: str = ""  # NCCL's INFO output of every rank (NCCL only): transports, algorithms, topology
    nccl_topo_xml: str = ""  # NCCL_TOPO_DUMP_FILE
    wall_s: float = 0.0
    worker_pids: tuple[int, ...] = ()
    measured: bool = True
    sched: str = "fair"  # the workers' CPU scheduling policy (SCHED_POLICIES)

    @property
    def ok(self) -> bool:
        """Every row verified (wrong == 0, no error)."""
        return all(row.ok for row in self.rows)

    @property
    def errors(self) -> tuple[str, ...]:
        out = []
        for row in self.rows:
            if row.error is not None:
                out.append(row.error)
            elif row.wrong:
                out.append(f"{row.wrong} wrong element(s) at {size_text(row.size_bytes)}")
        return tuple(out)

    def to_json(self) -> dict:
        return {
            "benchmark": "all_reduce",
            "backend": self.backend,
            "world_size": self.world_size,
            "dtype": self.dtype,
            "sched": self.sched,
            "busbw_factor": allreduce_factor(self.world_size),
            "rows": [row.to_json() for row in self.rows],
            "judged": self.judged.to_json(),
            "nvls": self.nvls,
            "nvls_evidence": list(self.nvls_evidence),
            "ok": self.ok,
            "errors": list(self.errors),
            "wall_s": self.wall_s,
            "measured": self.measured,
        }
