"""What one all-reduce benchmark call will do, checked before any process starts: the ranks this
call starts, the element counts it measures, the harness's options, and what its workers are given
(their configuration file and their environment). A bad argument is a ValueError here, never a
worker that dies with it. ``bench.allreduce`` runs a plan.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

from ..core.units import counted
from ..runtime import environ
from .allreduce_worker import ITEMSIZE, SCHED_POLICIES, element_counts
from .harness import MIN_SAMPLE_S
from .messages import WorkerConfig

WORKER_GRACE_S = 10.0  # a worker outlives the parent's deadline by at most this much

_NCCL_LOG_VARS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_TOPO_DUMP_FILE")


@dataclass(frozen=True)
class AllReducePlan:
    """A validated all-reduce call (see ``bench.allreduce.run_allreduce`` for each option).
    ``ranks``: the worker ranks this call starts (every rank, or in cross-rank mode its own only);
    ``counts``: the element counts measured, smallest first; ``judge_count`` the one judged at;
    ``init_method``: where the workers of every caller meet (cross-rank mode), else None."""

    world_size: int
    ranks: tuple[int, ...]
    counts: tuple[int, ...]
    judge_count: int
    backend: str
    dtype: str
    devices: tuple[int, ...] | None
    init_method: str | None
    timeout_s: float
    budget_s_per_size: float
    warmup: int
    min_samples: int
    max_samples: int
    target_ci: float
    min_sample_s: float
    sched: str
    log_nccl: bool
    env: tuple[tuple[str, str], ...]  # the caller's additions to the workers' environment

    @property
    def cross_rank(self) -> bool:
        return self.init_method is not None

    @property
    def reads_nccl_log(self) -> bool:
        return self.backend == "nccl" and self.log_nccl

    def worker_config(self, workdir: str) -> WorkerConfig:
        """The configuration every worker reads (``allreduce_worker._worker``)."""
        return WorkerConfig(
            backend="nccl" if self.backend == "nccl" else "gloo",
            world_size=self.world_size,
            counts=self.counts,
            dtype=self.dtype,
            devices=self.devices,
            budget_s=self.budget_s_per_size,
            warmup=self.warmup,
            min_samples=self.min_samples,
            max_samples=self.max_samples,
            target_ci=self.target_ci,
            min_sample_s=self.min_sample_s,
            sched=self.sched,
            store=os.path.join(workdir, "store"),
            peer=self.cross_rank,
            init_method=self.init_method,
            workdir=workdir,
            parent_pid=os.getpid(),
            deadline_epoch=time.time() + self.timeout_s + WORKER_GRACE_S,
            pg_timeout_s=self.timeout_s + 60.0,  # the parent's deadline always fires first
        )

    def worker_environment(self, workdir: str) -> dict[str, str]:
        """The workers' environment: the caller's, as torchrun gives it (one thread per rank), with
        gloo on loopback for a single-node run, NCCL's logging as this run wants it, this package
        importable, and the caller's ``env`` last."""
        child_env = environ.environment()  # the workers inherit the caller's environment ...
        child_env.setdefault("OMP_NUM_THREADS", "1")  # ... as torchrun does, one thread per rank
        if (
            self.backend == "gloo"
            and "GLOO_SOCKET_IFNAME" not in child_env
            and os.path.exists("/sys/class/net/lo")
            and (not self.cross_rank or _is_loopback_url(self.init_method))
        ):
            child_env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only: a single-node benchmark
        if self.cross_rank:
            # The worker hosts/joins the store at init_method itself, never torchrun's agent store.
            child_env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        if self.backend == "nccl":
            for name in _NCCL_LOG_VARS:  # the caller's own NCCL logging would run in the timed loop
                child_env.pop(name, None)
            child_env.update(_nccl_env(workdir, self.log_nccl))
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, child_env.get("PYTHONPATH")) if p)
        child_env.update(self.env)
        return child_env


def plan_allreduce(
    world_size: int,
    sizes_bytes: Sequence[int],
    *,
    backend: str = "gloo",
    judge_size: int | None = None,
    timeout_s: float = 120.0,
    budget_s_per_size: float = 2.0,
    dtype: str = "float32",
    devices: Sequence[int] | None = None,
    env: dict[str, str] | None = None,
    peer: tuple[int, str] | None = None,
    warmup: int = 5,
    min_samples: int = 5,
    max_samples: int = 1000,
    target_ci: float = 1.10,
    min_sample_s: float = MIN_SAMPLE_S,
    sched: str = "fair",
    log_nccl: bool = False,
) -> AllReducePlan:
    """The plan of an all-reduce sweep over ``world_size`` worker processes (``run_allreduce``), checked
    whole before any process starts: a ValueError names the first bad argument.

    ``judge_size`` (default: the largest size; added to the sweep when absent) is the row thresholds
    are judged at. ``timeout_s`` bounds the whole run, start-up included; past it, or when a rank dies,
    :class:`BenchError` names the rank and what it was doing, and no worker survives. A verification
    failure is not an exception: the row carries ``wrong > 0`` / ``error`` and ``result.ok`` is False.
    The project's tests inject faults through the workers' environment (``env``, see
    ``runtime.environ.test_faults``), never through this signature.

    ``log_nccl`` (backend nccl): NCCL logs at INFO and the result carries its log, its topology and
    the algorithm it chose per size (``nvls``). That costs time inside the loop, so a logged run is
    for NCCL's account, never for a figure; without it NCCL logs warnings only and says nothing of
    its algorithm (``algo``/``nvls`` None).

    ``peer=(rank, init_method)`` selects cross-rank mode: ``world_size`` is then the global world
    size, this call starts only the worker of global ``rank``, and that worker joins the others at
    ``init_method`` (``tcp://HOST:PORT``, hosted by rank 0's worker; other URLs go to
    ``init_process_group`` as they are). Every rank must call with the same arguments; each gets the
    (agreed, identical) figures. ``devices``, if given, is this rank's device first: the caller passes
    its LOCAL_RANK's GPU (default: ``$LOCAL_RANK``).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if dtype not in ITEMSIZE:
        raise ValueError(f"dtype must be one of {sorted(ITEMSIZE)}, got {dtype!r}")
    if sched not in SCHED_POLICIES:
        raise ValueError(f"sched must be one of {', '.join(SCHED_POLICIES)}, got {sched!r}")
    if not sizes_bytes and judge_size is None:
        raise ValueError("no sizes to measure")
    ranks, init_method = _ranks_and_meeting_point(world_size, devices, peer)
    wanted = list(sizes_bytes) + ([judge_size] if judge_size is not None else [])
    counts = element_counts(wanted, dtype)
    judge_count = counts[-1] if judge_size is None else max(1, int(judge_size) // ITEMSIZE[dtype])
    return AllReducePlan(
        world_size=world_size,
        ranks=tuple(ranks),
        counts=tuple(counts),
        judge_count=judge_count,
        backend=backend,
        dtype=dtype,
        devices=tuple(devices) if devices is not None else None,
        init_method=init_method,
        timeout_s=timeout_s,
        budget_s_per_size=budget_s_per_size,
        warmup=warmup,
        min_samples=min_samples,
        max_samples=max_samples,
        target_ci=target_ci,
        min_sample_s=min_sample_s,
        sched=sched,
        log_nccl=log_nccl,
        env=tuple((env or {}).items()),
    )


def _ranks_and_meeting_point(
    world_size: int, devices: Sequence[int] | None, peer: tuple[int, str] | None
) -> tuple[list, str | None]:
    """The ranks this call starts and, in cross-rank mode (``peer``), the URL the workers meet at."""
    if peer is None:
        if devices is not None and len(devices) < world_size:
            raise ValueError(f"{counted(len(devices), 'device')} given for {counted(world_size, 'rank')}")
        return list(range(world_size)), None
    peer_rank, init_method = int(peer[0]), str(peer[1])
    if not 0 <= peer_rank < world_size:
        raise ValueError(f"peer rank {peer_rank} outside world size {world_size}")
    if "://" not in init_method:
        raise ValueError(f"peer init_method must be a URL such as tcp://host:port, got {init_method!r}")
    if devices is not None and len(devices) < 1:
        raise ValueError("devices given but empty")
    return [peer_rank], init_method


def _nccl_env(workdir: str, logged: bool) -> dict[str, str]:
    """NCCL's logging for the workers. A timed run logs warnings only: at INFO, NCCL writes a TUNING
    line per collective on rank 0, a write per line (src/debug.cc), inside the timed loop. A logged run is for
    NCCL's account: INIT/P2P/SHM/NET print the transport of every channel and peer, TUNING the
    algorithm per size, GRAPH NCCL's view of the topology; rank 0 dumps NCCL's own topology XML."""
    if not logged:
        return {"NCCL_DEBUG": "WARN"}
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,TUNING,P2P,SHM,NET,GRAPH,ENV",
        "NCCL_DEBUG_FILE": os.path.join(workdir, "nccl.%h.%p.log"),
        "NCCL_TOPO_DUMP_FILE": os.path.join(workdir, "nccl-topo.xml"),
    }


def _is_loopback_url(url: str | None) -> bool:
    try:
        host = urlparse(url or "").hostname or ""
    except ValueError:
        return False
    return host == "localhost" or host.startswith("127.") or host == "::1"
