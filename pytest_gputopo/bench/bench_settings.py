"""How the run's benchmarks are taken: backend, engine, sizes, deadlines. Kept apart from ``suite``
so that the plugin reads and checks them at start-up without importing the benchmarks."""

from __future__ import annotations

from typing import NamedTuple

from ..core.units import GIB, MIB


class BenchSettings(NamedTuple):  # not a dataclass: cheaper to define, and the plugin loads it
    allreduce_backend: str = "nccl"  # "gloo" runs the same all-reduce on CPUs
    allreduce_engine: str = "torch"  # or "nccl-tests" (all_reduce_perf)
    allreduce_sched: str = "fair"  # or "fifo": the workers' CPU scheduling (bench.allreduce_worker.apply_sched)
    world_size: int | None = None  # gloo: how many processes (default 2)
    size_bytes: int | None = None  # the size thresholds are judged at (default: 1 GiB on GPUs, 16 MiB on gloo)
    timeout_s: float = 300.0  # per benchmark: a hang or a dead rank ends it with a reason
    budget_s: float = 10.0  # time to reach a stable estimate, per size
    cache_max_age_s: float = 24 * 3600.0  # --gputopo-cache: older entries are measured again
    nccl_tests_binary: str | None = None

    def judge_size(self, size: int | None) -> int:
        """The size thresholds are judged at, in whole float32 elements: the size measured, and so the
        size every label names (5 bytes are one element, 4 bytes)."""
        if size is None:
            size = self.size_bytes
        if size is None:
            size = 16 * MIB if self.allreduce_backend == "gloo" else GIB
        return max(4, size - size % 4)
