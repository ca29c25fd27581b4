"""What the benchmarks' children and the run say to each other, one type per message, each channel's
messages written and read through its ``Channel`` here (``runtime.messages``: checked field by field
on read, a plain dict refused on write).

- The copy child (``bench.copies``, started by ``bench.subproc``): a ``CopyRequest`` per line on its
  input, a ``CopyAnswer`` per line on its output (``REQUESTS``, ``ANSWERS``).
- An all-reduce's workers (``bench.allreduce_worker``, started by ``bench.allreduce``), through files in
  the call's private folder: their configuration (``WorkerConfig``, written once by the parent), each
  worker's progress (``WorkerStatus``, ``status.<rank>.json``, rewritten at each step) and the rows
  it measured (``WorkerRows``, ``result.json``). Each file is written whole (replaced at once) and
  read back as untrusted: a worker may die mid-write.

A measurement travels as ``MeasurementRecord``: ``harness.Measurement.to_json()``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from ..core import keys
from ..runtime.messages import Channel, MessageError, codec


class MeasurementRecord(TypedDict):
    """``harness.Measurement.to_json()``: one figure's timing as the harness measured it."""

    name: str
    size_bytes: int
    bytes_per_iteration: int
    iterations_per_sample: int
    samples_s: list[float]
    median_s: float
    median_ci95_s: list[float]
    min_s: float
    max_s: float
    spread: float
    target_ci: float
    stable: bool
    bw_gbps: float
    bw_ci95_gbps: list[float]
    verified: bool
    error: str | None
    warmup_iterations: int
    wall_s: float
    verify_s: float


def _copy_key(items: Any) -> keys.Copy | keys.HostCopy:
    key = keys.from_list(items)
    if not isinstance(key, (keys.Copy, keys.HostCopy)):
        raise ValueError(f"{key.describe()} is not a copy")
    return key


@dataclass(frozen=True)
class CopyRequest:
    """One copy to measure: its key, the harness's budget, and (a host copy) the GPU's CPUs."""

    key: keys.Copy | keys.HostCopy = field(metadata=codec(lambda key: key.to_list(), _copy_key))
    budget_s: float
    cpu_affinity: str | None = None  # as nvidia-smi prints it, "0-23,48-71"


@dataclass(frozen=True)
class CopyAnswer:
    """What the child measured (``measurement``: ``harness.Measurement.to_json()``), or that the GPUs
    have no peer access (``peer_access`` False: nothing is measured as P2P); ``test_fault``: a figure
    the project's tests planted (``runtime.environ.test_faults``)."""

    worker_pid: int
    bw_gbps: float | None
    error: str | None = None
    peer_access: bool | None = None
    test_fault: bool = False
    measurement: MeasurementRecord | None = None

    def detail(self) -> dict[str, Any]:
        """The figure's detail, as the suite keeps it: the measurement's fields and the child's pid."""
        said = {"peer_access": self.peer_access, "test_fault": self.test_fault or None, "error": self.error}
        return {
            **(self.measurement or {}),
            **{k: v for k, v in said.items() if v is not None},
            "bw_gbps": self.bw_gbps,
            "worker_pid": self.worker_pid,
        }


REQUESTS = Channel("a copy benchmark's request", CopyRequest)
ANSWERS = Channel("the copy benchmark's answer", CopyAnswer)


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker of one call is told (``AllReducePlan.worker_config``)."""

    backend: Literal["gloo", "nccl"]
    world_size: int
    counts: tuple[int, ...]
    dtype: str
    devices: tuple[int, ...] | None
    budget_s: float
    warmup: int
    min_samples: int
    max_samples: int
    target_ci: float
    min_sample_s: float
    sched: str
    store: str  # the FileStore of a single call's workers
    peer: bool  # cross-rank mode: one worker per caller, meeting at ``init_method``
    init_method: str | None
    workdir: str
    parent_pid: int
    deadline_epoch: float  # time.time() past which a worker ends itself
    pg_timeout_s: float


@dataclass(frozen=True)
class WorkerStatus:
    """A worker's progress: ``step`` counts its milestones (equal steps: the same point), ``phase`` says
    what it does, ``error`` what it raised; ``size_bytes`` the size in hand, ``outside_collective`` a
    rank known to be outside the collective the others wait in, ``url`` and ``missing`` the rendezvous
    and the ranks it still waits for there."""

    rank: int
    step: int
    phase: str
    pid: int
    error: str | None = None
    size_bytes: int | None = None
    outside_collective: bool = False
    url: str | None = None
    missing: tuple[int, ...] = ()


@dataclass(frozen=True)
class WorkerRow:
    """One size of the sweep: its timing and the wrong elements the verification counted."""

    size_bytes: int
    count: int
    wrong: int
    measurement: MeasurementRecord

    def invalid(self) -> str | None:
        return None if len(self.measurement["median_ci95_s"]) == 2 else "median_ci95_s is not an interval"


@dataclass(frozen=True)
class WorkerRows:
    """What rank 0 (cross-rank: every worker) measured, smallest size first."""

    rows: tuple[WorkerRow, ...]


CONFIG = Channel("an all-reduce worker's configuration", WorkerConfig)
STATUS = Channel("an all-reduce worker's status", WorkerStatus)
ROWS = Channel("an all-reduce worker's result", WorkerRows)


def status_path(workdir: str, rank: int) -> str:
    return os.path.join(workdir, f"status.{rank}.json")


def rows_path(workdir: str) -> str:
    return os.path.join(workdir, "result.json")


def read_status(workdir: str, rank: int) -> WorkerStatus | None:
    """The worker's last status, None where it wrote none, or none that is one (progress only: the
    reason a run failed says "start-up" then, never a refusal in place of the rank's failure)."""
    try:
        return STATUS.read_file(status_path(workdir, rank))
    except (OSError, MessageError):
        return None
