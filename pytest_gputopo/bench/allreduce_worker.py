"""The worker of an all-reduce benchmark: one per rank, ``python -m pytest_gputopo.bench.allreduce_worker
--worker CONFIG RANK``, started and supervised by ``bench.allreduce.run_allreduce``. It joins the
others, times and verifies the all-reduce at each size (``measure_allreduce``), writes its progress
to ``status.<rank>.json`` and rank 0 its rows to ``result.json``. It ends itself if its parent
disappears or a hard deadline passes. ``torch`` is imported here only, inside the functions.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

from ..core.collectives import allreduce_factor
from ..core.units import size_text
from ..runtime import environ
from .harness import MIN_SAMPLE_S, CudaEventTimer, WallTimer, measure
from .messages import CONFIG, ROWS, STATUS, WorkerConfig, WorkerRow, WorkerRows, WorkerStatus, rows_path, status_path

#: Largest integer each dtype holds exactly (so a sum of small integers stays exact).
_EXACT_LIMIT = {
    "float64": 2**53,
    "float32": 2**24,
    "float16": 2**11,
    "bfloat16": 2**8,
    "int64": 2**62,
    "int32": 2**30,
}
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}


def element_counts(sizes_bytes, dtype: str) -> list[int]:
    """The element counts sizes in bytes are measured at: whole elements of ``dtype``, at least one
    (nccl-tests' ``count = size / wordSize``), each count once, smallest first."""
    return sorted({max(1, int(size) // ITEMSIZE[dtype]) for size in sizes_bytes})


SCHED_POLICIES = ("fair", "fifo")  # CPU scheduling of the workers, see apply_sched
# The faults the project's own tests asked for (runtime.environ.test_faults).
_FAULTS: dict[str, Any] = {}


def _pattern(n: int, dtype: str) -> tuple[int, list[int]]:
    """(m, per-rank offsets): rank r holds (i mod m) + offsets[r]; the sum n*(i mod m) + sum(offsets)
    must stay exact in ``dtype``. Falls back to nccl-tests' trick (only two ranks carry values)."""
    limit = _EXACT_LIMIT[dtype]
    offsets = [r + 1 for r in range(n)]
    if sum(offsets) > limit:
        offsets = [1 if r < 2 else 0 for r in range(n)]
    m = max(1, min(251, (limit - sum(offsets)) // n + 1))
    return m, offsets


class _Status:
    def __init__(self, workdir: str, rank: int) -> None:
        self.path = status_path(workdir, rank)
        self.rank = rank
        self.step = 0
        self.phase = "start-up"

    def __call__(
        self,
        phase: str,
        error: str | None = None,
        *,
        advance: bool = True,
        size_bytes: int | None = None,
        outside_collective: bool = False,
        url: str | None = None,
        missing: Sequence[int] = (),
    ) -> None:
        """Record the current phase; ``step`` counts milestones (equal steps = the same point)."""
        if advance:
            self.step += 1
        self.phase = phase
        status = WorkerStatus(
            self.rank, self.step, phase, os.getpid(), error, size_bytes, outside_collective, url, tuple(missing)
        )
        STATUS.write_file(self.path, status)


def apply_sched(policy: str) -> None:
    """Put this process, and every thread it starts afterwards (threads inherit it), under ``policy``.

    ``fair`` leaves the kernel's default. ``fifo`` is ``SCHED_FIFO`` at priority 1: a rank's threads
    (gloo's I/O loop and worker, NCCL's proxy) run the moment they are woken. Under the fair policy a
    woken thread may wait for the scheduler's next tick when every core is busy (several milliseconds
    on a kernel without full preemption, see docs/performance.md), which is noise the interconnect
    did not make. Refused without root, ``CAP_SYS_NICE`` or ``RLIMIT_RTPRIO`` >= 1: PermissionError.
    """
    if policy not in SCHED_POLICIES:
        raise ValueError(f"unknown scheduling policy {policy!r}")
    if policy == "fair":
        return
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (AttributeError, OSError) as exc:
        raise PermissionError(
            f"SCHED_FIFO refused ({exc}): it needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO of at least 1 (ulimit -r)"
        ) from None


def _guard_worker(parent_pid: int, deadline_epoch: float) -> None:
    """End this worker if the parent disappears or the hard deadline passes."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:  # pragma: no cover
            pass
    if os.getppid() != parent_pid:
        os._exit(75)

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid or time.time() > deadline_epoch:
                os._exit(75)
            time.sleep(0.25)

    threading.Thread(target=watch, name="gputopo-watchdog", daemon=True).start()


def _worker_main(config_path: str, rank: int) -> int:
    cfg = CONFIG.read_file(config_path)  # the parent's own: one it cannot read is a bug, said
    status = _Status(cfg.workdir, rank)
    status("start-up")
    _FAULTS.update(environ.test_faults())
    _guard_worker(cfg.parent_pid, cfg.deadline_epoch)
    try:
        apply_sched(cfg.sched)  # before torch starts a thread: they all inherit it
        if "allreduce_busbw_gbps" in _FAULTS:  # the project's tests: a figure without a GPU (_engine_double)
            _engine_double(cfg, rank, status, float(_FAULTS["allreduce_busbw_gbps"]))
            return 0
        _worker(cfg, rank, status)
    except BaseException as exc:  # noqa: BLE001 - report anything, then fail
        status(status.phase, error=f"{type(exc).__name__}: {exc}".strip()[:500], advance=False)
        raise
    return 0


def _said(text: str | None) -> str | None:
    return text


def _engine_double(cfg: WorkerConfig, rank: int, status: _Status, busbw_gbps: float) -> None:
    """The all-reduce as the project's tests ask for it without GPUs (``runtime.environ.test_faults``:
    ``allreduce_busbw_gbps``, and ``corrupt`` for wrong data): the harness times each size on a clock
    that advances as a link of that busbw would, and the run goes on as for real (its launch, status
    files and rows); no process group, no torch."""
    rows = []
    n, itemsize = cfg.world_size, ITEMSIZE[cfg.dtype]
    for count in cfg.counts:
        size = count * itemsize
        status(f"all_reduce of {size_text(size)}", size_bytes=size)
        per_call_s = size * allreduce_factor(n) / (busbw_gbps * 1e9)
        now = [0.0]

        def run(k: int, per_call_s: float = per_call_s, now: list = now) -> None:
            now[0] += k * per_call_s

        def clock(now: list = now) -> float:
            return now[0]

        wrong = 1 if _FAULTS.get("corrupt") else 0
        said = f"{wrong} wrong element(s) of {count} (test fault)" if wrong else None
        m = measure(
            f"all_reduce of {size_text(size)}",
            run,
            size_bytes=size,
            timer=WallTimer(clock=clock),
            clock=clock,
            budget_s=cfg.budget_s,
            verify=functools.partial(_said, said),
        )
        rows.append(WorkerRow(size, count, wrong, m.to_json()))
    if rank == 0 or cfg.peer:
        ROWS.write_file(rows_path(cfg.workdir), WorkerRows(tuple(rows)))
    status("done")


def measure_allreduce(
    count: int,
    *,
    dtype: str = "float32",
    device: Any = None,
    warmup: int = 5,
    budget_s: float = 2.0,
    min_samples: int = 5,
    max_samples: int = 1000,
    target_ci: float = 1.10,
    min_sample_s: float = MIN_SAMPLE_S,
) -> tuple[Any, int]:
    """Time and verify an all-reduce of ``count`` elements in the *current* process group; call it on
    every rank. Returns ``(Measurement, wrong)``, the same on every rank: per-call time = mean over
    ranks, then the harness's median; ``wrong`` summed over ranks. The timer is a wall clock between
    barriers on CPU (gloo), CUDA events after a barrier on a CUDA ``device`` (NCCL).
    """
    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    tdtype = getattr(torch, dtype)
    device = torch.device("cpu") if device is None else torch.device(device)
    size = count * ITEMSIZE[dtype]

    def agree(values: Sequence[float]) -> list[float]:
        # The mean over ranks, as nccl-tests reports (-a 1): the same figure on every rank, so
        # every rank takes the same decisions.
        t = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return (t / n).tolist()

    # Timed buffer: zeros, so that back-to-back in-place sums stay finite (n**k overflows fp32 in
    # ~128 calls); the cost of an all-reduce does not depend on the values. Verification has its own.
    buf = torch.zeros(count, dtype=tdtype, device=device)

    def run(k: int) -> None:
        for _ in range(k):
            dist.all_reduce(buf)  # noqa: F821 (run is not called after buf is freed below)

    verification = _Verification(count, dtype, device)
    m = measure(
        f"all_reduce of {size_text(size)}",
        run,
        size_bytes=size,
        timer=_timer_for(device),
        warmup=warmup,
        budget_s=budget_s,
        min_samples=min_samples,
        max_samples=max_samples,
        target_ci=target_ci,
        min_sample_s=min_sample_s,
        verify=verification,
        agree=agree,
    )
    del buf
    return m, verification.wrong


def _timer_for(device: Any) -> Any:
    """CUDA events after a barrier on a CUDA device (NCCL); on CPU (gloo) a wall clock started after
    a barrier and stopped when this rank's own all-reduce returns."""
    import torch
    import torch.distributed as dist

    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()

        def barrier() -> None:
            dist.barrier(device_ids=[index])

        return CudaEventTimer(device, sync=barrier)
    # gloo's all_reduce is blocking: a rank's clock stops when its own part is done, as in
    # nccl-tests; agree() then averages the ranks. A barrier before stop would add its latency.
    return WallTimer(sync=dist.barrier, sync_at_stop=False)


class _Verification:
    """The harness's ``verify``: a fresh all-reduce of values whose sum is exact in ``dtype`` (see
    ``_pattern``), compared element by element; ``wrong`` is the mismatches summed over ranks."""

    def __init__(self, count: int, dtype: str, device: Any) -> None:
        self.count, self.dtype, self.device = count, dtype, device
        self.wrong = 0

    def __call__(self) -> str | None:
        import torch
        import torch.distributed as dist

        count, device = self.count, self.device
        n, rank = dist.get_world_size(), dist.get_rank()
        m_mod, offsets = _pattern(n, self.dtype)
        # (i mod m) built by repeating a block of m small integers: exact in every supported dtype,
        # and a copy rather than an integer modulo over the whole buffer (0.5 s for 64 MiB on a CPU).
        residues = torch.arange(m_mod, dtype=getattr(torch, self.dtype), device=device)
        pattern = residues.repeat(-(-count // m_mod))[:count]
        x = pattern + offsets[rank]
        dist.all_reduce(x)
        if _FAULTS.get("corrupt") and rank == n - 1:
            x[count // 2] += 1  # test fault: one flipped element
        expected = pattern.mul_(n).add_(sum(offsets))  # in place: pattern is not needed any more
        local = int((x != expected).sum().item())
        w = torch.tensor([local], dtype=torch.int64, device=device)
        dist.all_reduce(w)
        self.wrong = int(w.item())
        if self.wrong:
            return (
                f"{self.wrong} wrong element(s) of {count} after all_reduce of "
                f"{size_text(count * ITEMSIZE[self.dtype])}"
            )
        return None


def _worker(cfg: WorkerConfig, rank: int, status: _Status) -> None:
    import torch
    import torch.distributed as dist

    n = cfg.world_size
    backend = cfg.backend
    itemsize = ITEMSIZE[cfg.dtype]

    peer = cfg.peer
    if backend == "nccl":
        devices = cfg.devices
        if peer:  # one worker per caller: its device comes first, else the caller's LOCAL_RANK
            local = environ.local_rank()
            index = devices[0] if devices else (local if local is not None else rank % torch.cuda.device_count())
        else:
            index = devices[rank] if devices else rank
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    timeout = timedelta(seconds=cfg.pg_timeout_s)
    if peer and cfg.init_method is not None and cfg.init_method.startswith("tcp://"):
        store = _join(cfg.init_method, rank, n, timeout, status)
        status("init_process_group")
        dist.init_process_group(backend, store=store, rank=rank, world_size=n, timeout=timeout)
    else:
        status("init_process_group")
        init_method = cfg.init_method if peer else "file://" + cfg.store
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=n, timeout=timeout)

    rows = []
    for count in cfg.counts:
        size = count * itemsize
        what = f"all_reduce of {size_text(size)}"
        status(what, size_bytes=size)
        if _FAULTS.get("hang_rank") == rank:
            status(f"test fault: sleeping instead of {what}", advance=False, size_bytes=size, outside_collective=True)
            while True:
                time.sleep(1)
        if _FAULTS.get("die_rank") == rank:
            os._exit(9)
        m, wrong = measure_allreduce(
            count,
            dtype=cfg.dtype,
            device=device,
            warmup=cfg.warmup,
            budget_s=cfg.budget_s,
            min_samples=cfg.min_samples,
            max_samples=cfg.max_samples,
            target_ci=cfg.target_ci,
            min_sample_s=cfg.min_sample_s,
        )
        rows.append(WorkerRow(size, count, wrong, m.to_json()))

    status("finishing")
    if rank == 0 or peer:  # cross-rank mode: every caller reads its own worker's (agreed) figures
        ROWS.write_file(rows_path(cfg.workdir), WorkerRows(tuple(rows)))
    dist.barrier()
    dist.destroy_process_group()
    status("done")


def _join(url: str, rank: int, n: int, timeout: Any, status: _Status) -> Any:
    """Rendezvous at ``tcp://host:port`` (rank 0 hosts the store) keeping a record of who has joined,
    so that a peer that never comes is named: ``missing`` in the status file."""
    import torch.distributed as dist

    u = urlparse(url)
    host, port = u.hostname, u.port
    if host is None or port is None:
        raise ValueError(f"init_method {url!r} lacks host:port")
    if rank == 0:
        status("rendezvous: hosting the store", url=url, missing=list(range(1, n)))
        store = dist.TCPStore(host, port, n, is_master=True, timeout=timeout, wait_for_workers=False)
    else:
        status("rendezvous: waiting for rank 0's store", url=url, missing=[0])
        store = dist.TCPStore(host, port, n, is_master=False, timeout=timeout)
    key = "gputopo-joined/{}".format
    store.set(key(rank), str(os.getpid()))
    last = None
    while True:
        missing = [r for r in range(n) if not store.check([key(r)])]
        if not missing:
            break
        if missing != last:
            status("rendezvous: waiting for peers", advance=last is None, url=url, missing=missing)
            last = missing
        time.sleep(0.05)
    status("rendezvous: all joined", url=url)
    return dist.PrefixStore("gputopo", store)


def _main(argv: Sequence[str]) -> int:
    if len(argv) == 3 and argv[0] == "--worker":
        return _worker_main(argv[1], int(argv[2]))
    print("usage: python -m pytest_gputopo.bench.allreduce_worker --worker CONFIG RANK", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
