"""A test run as n ranks (``@pytest.mark.ranks``): where its ranks go (one GPU each, or the CPUs),
what that needs of the machine, and the time and memory its processes are given."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .causes import Finding, Unknown
from .limits import show_value
from .model import Topology
from .requirements import MIG_INSTANCE, Requirement, RequirementError, int_arg, mig_enabled, shortfall

MAX_RANKS = 1024  # ranks of one test on one host (MAX_GPUS: one GPU each)
MAX_RANKS_TIMEOUT_S = 24 * 3600
# torch's MultiProcessTestCase gives a test 300 s (TIMEOUT_DEFAULT, torch/testing/_internal/common_distributed.py)
RANKS_TIMEOUT_S = 300.0
# A rank's memory before its body allocates anything: python with torch resident (about 150 MiB measured
# on torch 2.x CPU: a gloo rank's VmRSS), with room. The gloo sweep adds its buffers (bench.sweep).
RANK_BASE_BYTES = 256 * 2**20
GROUP_MARGIN_S = (5.0, 30.0)  # the least and most of a test's time left after its group's timeout: 5 s, the 3 s the
# other ranks are given after one failed (rank_procs.FAILED_GRACE_S) and 2 s for their stacks


@dataclass(frozen=True)
class RanksRequirement(Requirement):
    """``ranks(n, timeout=, backend=)``: the test runs as ``n`` ranks, each on one GPU where it runs
    on GPUs (``backend="nccl"``, or no backend named on a machine with a GPU), else on the CPUs. On
    GPUs it needs ``n`` of them (a MIG-enabled one is unknown: a process sees an instance); on the
    CPUs nothing."""

    n: int = 1  # given a list of world sizes: the first, until each test is given its own (``of_size``)
    timeout: float | None = None  # seconds for the whole test; None: RANKS_TIMEOUT_S
    backend: str | None = None  # the process group's backend; None: NCCL on GPUs, gloo on CPUs
    sizes: tuple[int, ...] | None = None  # ``ranks([2, 4])``: one test per world size
    pool: bool | None = None  # a warm pool of ranks kept between tests; None: the ini's gputopo_ranks_pool

    def __post_init__(self) -> None:
        sizes = self.n
        if isinstance(sizes, (list, tuple)):
            if not sizes:
                raise RequirementError("n (ranks) must list at least one world size, got []")
            for size in sizes:
                int_arg(size, "each world size in n (ranks)", 1, MAX_RANKS)
            if len(set(sizes)) < len(sizes):
                raise RequirementError(f"n (ranks) lists a world size twice: {show_value(list(sizes))}")
            object.__setattr__(self, "sizes", tuple(sizes))
            object.__setattr__(self, "n", sizes[0])
        else:
            int_arg(self.n, "n (ranks)", 1, MAX_RANKS)
        if self.timeout is not None:
            if (
                isinstance(self.timeout, bool)
                or not isinstance(self.timeout, (int, float))
                or not 0 < self.timeout <= MAX_RANKS_TIMEOUT_S
            ):
                raise RequirementError(
                    f"timeout must be a number of seconds above 0 and at most "
                    f"{MAX_RANKS_TIMEOUT_S}, got {show_value(self.timeout)}"
                )
            object.__setattr__(self, "timeout", float(self.timeout))  # 5 and 5.0 are one requirement
        if self.pool is not None and not isinstance(self.pool, bool):
            raise RequirementError(f"pool must be True, False or None, got {show_value(self.pool)}")
        if self.backend is not None and (
            not isinstance(self.backend, str)
            or not self.backend
            or not all(c.isascii() and (c.isalnum() or c in "_:,") for c in self.backend)
        ):
            raise RequirementError(
                f"backend must be a torch.distributed backend name such as 'nccl' or 'gloo' "
                f"(or None: NCCL on GPUs, gloo on CPUs), got {show_value(self.backend)}"
            )

    def __str__(self) -> str:
        n = str(list(self.sizes)) if self.sizes else str(self.n)
        args = [n] + ([f"timeout={self.timeout:g}"] if self.timeout is not None else [])
        args += [f"backend={self.backend!r}"] if self.backend is not None else []
        args += [f"pool={self.pool}"] if self.pool is not None else []
        return f"ranks({', '.join(args)})"

    def of_size(self, size: int) -> RanksRequirement:
        """The requirement of the test that runs at world size ``size`` of ``sizes`` (``ranks(2)``), one
        test per size as DeepSpeed's ``world_size = [1, 2, 4]``."""
        return replace(self, n=size, sizes=None)

    @property
    def timeout_s(self) -> float:
        return RANKS_TIMEOUT_S if self.timeout is None else self.timeout

    @property
    def group_timeout_s(self) -> float:
        """The process group's timeout: a collective that waits this long raises on its rank (gloo) or
        is aborted by NCCL's watchdog, which names it, before the test's own deadline ends the ranks
        with stacks only. A tenth of the test's time is left (5 s to 30 s, never above half of it):
        for the rank to report, and for the others' stacks."""
        margin = min(max(self.timeout_s / 10, GROUP_MARGIN_S[0]), GROUP_MARGIN_S[1], self.timeout_s / 2)
        return self.timeout_s - margin

    def on_gpus(self, topology: Topology) -> bool:
        """Whether the ranks run on GPUs: NCCL needs them, gloo is given the CPUs, and any other
        backend (or none named) takes GPUs where the machine has one."""
        if self.backend is not None and self.backend.lower() in ("nccl", "gloo"):
            return self.backend.lower() == "nccl"
        return bool(topology.gpus)

    def backend_on(self, topology: Topology) -> str:
        return self.backend or ("nccl" if self.on_gpus(topology) else "gloo")

    def memory_shortfall(self, available: int | None) -> str | None:
        """Why ``available`` bytes of this host cannot hold the ranks' processes (``RANK_BASE_BYTES``
        each, before the body allocates), None when they fit or the memory is unknown."""
        need = self.n * RANK_BASE_BYTES
        if available is None or need <= available:
            return None
        return (
            f"{self.n} ranks need about {need / 2**30:.1f} GiB of this host's memory before their body "
            f"allocates anything ({RANK_BASE_BYTES // 2**20} MiB each: python and torch), and "
            f"{available / 2**30:.1f} GiB is available"
        )

    def findings(self, topology: Topology) -> list[Finding]:
        if not topology.gpus_known and (self.backend or "").lower() not in ("nccl", "gloo"):
            # Never gloo on the CPUs for a host whose GPUs NVML could not list: the test would pass
            # on a GPU node that cannot run it.
            return [
                Finding(
                    Unknown(
                        f"whether this host has GPUs for the ranks is unknown ({topology.problem}); "
                        f"backend='gloo' runs them on the CPUs"
                    )
                )
            ]
        if not self.on_gpus(topology):
            return []
        missing = shortfall(topology, self.n)
        if missing:
            return [Finding(f"one GPU per rank, {missing}")]
        mig = mig_enabled(topology, range(self.n))
        return [Finding(Unknown(f"{mig} ({MIG_INSTANCE})"))] if mig else []
