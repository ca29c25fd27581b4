"""All-reduce bus bandwidth with ``torch.distributed``: one process per rank, a sweep of sizes.

Figures follow nccl-tests (``src/all_reduce.cu``, ``doc/PERFORMANCE.md``):

- ``algbw_gbps = size_bytes / time / 1e9`` (GB/s = 1e9 B/s), ``time`` the time of one all-reduce;
- ``busbw_gbps = algbw_gbps * 2(n-1)/n`` -- 0 for a single rank, as nccl-tests prints;
- ``time`` is the **mean across ranks** of each sample, as nccl-tests reports by default (``-a 1``;
  each rank's clock stops when its own part is done), then the median of the harness's samples (its
  samples, which carry a 95% interval);
- ``wrong``: after timing, a fresh all-reduce of "verifiable" inputs whose sum is exact in the dtype
  (rank ``r`` holds ``(i mod m) + r + 1`` at element ``i``; every element must equal
  ``n*(i mod m) + n(n+1)/2``, tolerance 0), the count of mismatching elements summed over ranks.
  ``wrong > 0`` fails the row and the result, whatever the speed.

Thresholds are judged at one large size (``judge_size``), never at the sweep average (nccl-tests'
"Avg bus bandwidth" is pulled down by the small sizes).

Process model (why subprocess and not multiprocessing): each rank is ``python -m
pytest_gputopo.bench.allreduce_worker --worker CONFIG RANK`` started with ``start_new_session=True``, so
it leads its own process group and no terminal signal reaches it; the parent alone decides when it
dies. Workers write their progress (phase, size) to ``status.<rank>.json`` and rank 0 its rows to
``result.json`` in a private temporary directory (typed messages, ``bench.messages``); stdout/stderr go
to files there (a full pipe would block a worker). The parent polls exits without reaping them
(``waitid(WNOWAIT)``), so a process group id cannot be reused before it is killed. Whatever happens
-- success, a dead rank, a hang past ``timeout_s``, an exception or Ctrl-C in the parent -- the
``finally`` block sends SIGTERM to every worker's group, SIGKILL after a grace period, reaps every
worker and deletes the directory. Should the parent itself be killed outright, each worker ends on its
own: ``PR_SET_PDEATHSIG`` (Linux), a watchdog thread that sees the parent pid change, and a hard
deadline a little after the parent's.

Cross-rank mode (``peer=(rank, init_method)``), for a caller that is itself one rank of several
(pytest under torchrun, one process per GPU, possibly on several nodes): each caller starts only the
worker of its own global rank, and the workers of all callers form one process group at
``init_method`` (e.g. ``tcp://10.0.0.1:29731``; every caller passes the same URL, sizes and options).
Every worker writes its own ``result.json`` (the figures are agreed across ranks, so every caller
gets the same rows) and every node keeps its own NCCL logs. The same supervision applies to this one
worker; a peer that never joins is named (``rank 1 did not join``) when ``timeout_s`` runs out.

``torch`` is imported only inside the worker (and never by this module at import time).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import NamedTuple

from ..core.collectives import allreduce_factor
from ..parse.nccl_tuning import algo_by_size, parse_nccl_tuning
from ..runtime.messages import MessageError
from ..runtime.procs import Children
from .allreduce_plan import AllReducePlan, plan_allreduce
from .allreduce_result import AllReduceResult, AllReduceRow
from .allreduce_worker import SCHED_POLICIES
from .messages import CONFIG, ROWS, WorkerRow, WorkerStatus, read_status, rows_path

__all__ = [
    "AllReduceResult",
    "AllReduceRow",
    "BenchError",
    "SCHED_POLICIES",
    "run_allreduce",
    "run_plan",
]


class BenchError(RuntimeError):
    """The benchmark could not produce figures: a rank died, a collective hung past the timeout,
    the workers could not start. ``reason`` says which rank and what it was doing; ``pids`` are the
    worker processes (all gone by the time this is raised); ``logs`` the tail of the culprit's output."""

    def __init__(self, reason: str, *, pids: Sequence[int] = (), logs: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.pids = tuple(pids)
        self.logs = logs


def _read_nccl_logs(workdir: str) -> str:
    text = []
    for name in sorted(os.listdir(workdir)):
        if name.startswith("nccl.") and name.endswith(".log"):
            try:
                with open(os.path.join(workdir, name), errors="replace") as f:
                    text.append(f.read())
            except OSError:
                pass
    return "\n".join(text)


# --------------------------------------------------------------------------------------------------
# Parent side


def _tail(path: str, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _describe_code(code: int) -> str:
    if code < 0:
        try:
            return f"code {code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"code {code}"
    return f"code {code}"


def _phase_text(status: WorkerStatus | None) -> str:
    return status.phase if status is not None and status.phase else "start-up"


def _failure_reason(workdir: str, codes: dict[int, int], order: list[int]) -> tuple[str, str]:
    """Name the culprit among failed ranks: one that died without a Python error record (killed,
    ``os._exit``) before one that raised (typically "connection closed" as a consequence)."""
    statuses = {r: read_status(workdir, r) for r in codes}
    errors = {r: status.error for r, status in statuses.items() if status is not None and status.error}
    hard = [r for r in order if r not in errors]
    soft = [r for r in order if r not in hard]
    parts = []
    for r in hard:
        parts.append(f"rank {r} exited with {_describe_code(codes[r])} during {_phase_text(statuses[r])}")
    for r in soft:
        parts.append(f"rank {r} failed during {_phase_text(statuses[r])}: {errors[r]}")
    culprit = (hard or soft)[0]
    return "; ".join(parts), _tail(os.path.join(workdir, f"rank{culprit}.log"))


def _timeout_reason(workdir: str, timeout_s: float, running: list[int], done: list[int]) -> str:
    statuses = {r: read_status(workdir, r) for r in running + done}
    missing = sorted({m for r in running if (status := statuses[r]) is not None for m in status.missing})
    if missing:  # cross-rank mode: still waiting for peers to join the process group
        who = "rank" if len(missing) == 1 else "ranks"
        where = "; ".join(f"rank {r} in {_phase_text(statuses[r])}" for r in running)
        return (
            f"timed out after {timeout_s:g} s: {who} {', '.join(map(str, missing))} did not join "
            f"the process group ({where})"
        )
    # Suspects: the ranks furthest behind; among them, a rank known to be outside the collective
    # (the others are waiting inside it for that one).
    steps = {r: status.step if (status := statuses[r]) is not None else -1 for r in running}
    behind = min(steps.values())
    laggards = [r for r in running if steps[r] == behind]
    outside = [r for r in laggards if (status := statuses[r]) is not None and status.outside_collective]
    laggards = outside or laggards
    who = "rank" if len(laggards) == 1 else "ranks"
    where = "; ".join(f"rank {r} in {_phase_text(statuses[r])}" for r in running)
    reason = f"timed out after {timeout_s:g} s waiting for {who} {', '.join(map(str, laggards))} ({where})"
    if done:
        reason += f"; finished: {', '.join(f'rank {r}' for r in done)}"
    return reason


WORKDIR_PREFIX = "gputopo-allreduce-"
STALE_AFTER_S = 3600.0  # untouched this long: no live run's (a live one rewrites its status files)


def _own_workdirs(prefix: str):
    """(name, path, lstat) of this user's folders in the temporary directory named ``prefix...``
    (never a link, never another user's)."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if info.st_uid == os.getuid() and stat.S_ISDIR(info.st_mode):
            yield name, path, info


def sweep_stale_workdirs(now: float | None = None) -> list[str]:
    """Remove the run folders that a parent killed outright (SIGKILL: no ``finally``) left behind:
    this user's ``gputopo-allreduce-<pid>-*`` whose pid is no live process and that nobody touched for
    an hour. Never another run's live folder: its pid lives, and its status files change."""
    now = time.time() if now is None else now
    removed = []
    for name, path, info in _own_workdirs(WORKDIR_PREFIX):
        pid = name[len(WORKDIR_PREFIX) :].split("-")[0]
        try:
            if not (pid.isascii() and pid.isdigit()):
                continue
            touched = max([info.st_mtime] + [os.lstat(os.path.join(path, f)).st_mtime for f in os.listdir(path)])
            if now - touched < STALE_AFTER_S:
                continue
            os.kill(int(pid), 0)
            continue  # its parent lives (or another process has its pid): not ours to judge
        except ProcessLookupError:
            pass
        except OSError:  # PermissionError: a live process of another user
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def remove_workdirs_of(pid: int) -> list[str]:
    """Remove every run folder of process ``pid`` (``gputopo-allreduce-<pid>-*`` of this user): what
    ``gputopo bench allreduce`` does when SIGINT or SIGTERM ended it, should the signal have landed
    before ``run_allreduce``'s ``finally`` could remove its folder, or inside it."""
    removed = []
    for _, path, _ in _own_workdirs(f"{WORKDIR_PREFIX}{pid}-"):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def run_allreduce(world_size: int, sizes_bytes: Sequence[int], **options) -> AllReduceResult:
    """Run an all-reduce sweep over ``world_size`` worker processes and return its figures: the plan
    ``plan_allreduce`` checks (its docstring says each option), then ``run_plan``."""
    return run_plan(plan_allreduce(world_size, sizes_bytes, **options))


class _Gathered(NamedTuple):
    """What the workers left in the run's folder, read before the folder goes."""

    rows: tuple[WorkerRow, ...]  # rank 0's (or, cross-rank, this worker's) result.json rows
    nccl_log: str
    nccl_topo_xml: str


def run_plan(plan: AllReducePlan) -> AllReduceResult:
    """Launch the plan's workers in a private folder, wait for them under the deadline, gather what
    they wrote, and turn it into figures. Whatever happens, no worker and no folder outlives this."""
    t_start = time.monotonic()
    deadline = t_start + plan.timeout_s
    sweep_stale_workdirs()
    workdir = tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-")
    children = Children()
    logs: list = []
    try:
        pids = _launch(plan, workdir, children, logs)
        _wait(plan, workdir, children, deadline)
        gathered = _gather(plan, workdir, pids)
    finally:
        children.close()
        for log in logs:
            log.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return _result(plan, gathered, t_start=t_start, pids=pids)


def _launch(plan: AllReducePlan, workdir: str, children: Children, logs: list) -> tuple[int, ...]:
    """Write the workers' configuration and start one worker per rank of ``plan.ranks``, each
    writing its output to ``rank<r>.log`` (opened files are appended to ``logs``)."""
    config_path = os.path.join(workdir, "config.json")
    CONFIG.write_file(config_path, plan.worker_config(workdir))
    child_env = plan.worker_environment(workdir)
    for rank in plan.ranks:
        log = open(os.path.join(workdir, f"rank{rank}.log"), "wb")
        logs.append(log)
        argv = [sys.executable, "-m", "pytest_gputopo.bench.allreduce_worker", "--worker", config_path, str(rank)]
        children.start(argv, output=log, env=child_env)
    return children.pids


def _wait(plan: AllReducePlan, workdir: str, children: Children, deadline: float) -> None:
    """Wait for every worker to end well; a :class:`BenchError` names a failed or hung rank."""
    ranks = plan.ranks
    codes = dict(zip(ranks, children.wait(deadline), strict=True))
    failed = [r for r, c in codes.items() if c not in (None, 0)]
    if failed:
        # Let the consequences (peers losing their connection) land, then name the culprit: the
        # first to fail, as polled, else the lowest rank.
        codes_now = children.wait(min(deadline, time.monotonic() + 0.5), stop_on_failure=False)
        later = dict(zip(ranks, codes_now, strict=True))
        failed += sorted(r for r, c in later.items() if c not in (None, 0) and r not in failed)
        reason, tail = _failure_reason(workdir, {r: later[r] for r in failed}, failed)  # type: ignore[misc]  # ended
        raise BenchError(reason, pids=children.pids, logs=tail)
    running = [r for r, c in codes.items() if c is None]
    if running:
        done = [r for r, c in codes.items() if c == 0]
        reason = _timeout_reason(workdir, plan.timeout_s, running, done)
        raise BenchError(reason, pids=children.pids, logs=_tail(os.path.join(workdir, f"rank{running[0]}.log")))


def _gather(plan: AllReducePlan, workdir: str, pids: tuple[int, ...]) -> _Gathered:
    """The rows the first of this call's workers wrote, and NCCL's log and topology where it wrote them."""
    first = plan.ranks[0]
    try:
        written = ROWS.read_file(rows_path(workdir))
    except OSError:
        raise BenchError(
            f"rank {first} exited without writing its results",
            pids=pids,
            logs=_tail(os.path.join(workdir, f"rank{first}.log")),
        ) from None
    except MessageError as exc:
        raise BenchError(str(exc), pids=pids, logs=_tail(os.path.join(workdir, f"rank{first}.log"))) from None
    nccl_log = _read_nccl_logs(workdir) if plan.reads_nccl_log else ""
    topo_xml = os.path.join(workdir, "nccl-topo.xml")
    nccl_topo_xml = open(topo_xml, errors="replace").read() if os.path.exists(topo_xml) else ""
    counts = tuple(row.count for row in written.rows)
    if counts != plan.counts:
        raise BenchError(
            f"rank {first} wrote rows of {counts} elements, not of the {plan.counts} it was asked", pids=pids
        )
    return _Gathered(written.rows, nccl_log, nccl_topo_xml)


def _result(plan: AllReducePlan, gathered: _Gathered, *, t_start: float, pids: tuple[int, ...]) -> AllReduceResult:
    """nccl-tests' figures per size (algbw, busbw from the median time), the row judged at, and
    NCCL's algorithm where its log names one."""
    algos = algo_by_size(parse_nccl_tuning(gathered.nccl_log))
    nvls_lines = [ln.strip() for ln in gathered.nccl_log.splitlines() if "NVLS" in ln][:5]
    factor = allreduce_factor(plan.world_size)
    rows = []
    for item in gathered.rows:
        m = item.measurement
        size = item.size_bytes
        median_s = m["median_s"]
        algbw = size / median_s / 1e9 if median_s > 0 else math.inf
        low, high = m["median_ci95_s"]
        rows.append(
            AllReduceRow(
                size_bytes=size,
                count=item.count,
                time_us=median_s * 1e6,
                algbw_gbps=algbw,
                busbw_gbps=algbw * factor,
                wrong=item.wrong,
                iterations=m["iterations_per_sample"],
                samples=len(m["samples_s"]),
                spread=m["spread"],
                stable=m["stable"],
                wall_s=m["wall_s"],
                time_ci_us=(low * 1e6, high * 1e6),
                error=m["error"],
                algo=algos.get(size),
            )
        )
    judged = next(r for r in rows if r.count == plan.judge_count)
    nvls: bool | None = None
    if plan.backend == "nccl" and judged.algo is not None:
        nvls = judged.algo.upper().startswith("NVLS")
    return AllReduceResult(
        backend=plan.backend,
        world_size=plan.world_size,
        dtype=plan.dtype,
        rows=tuple(rows),
        judged=judged,
        nvls=nvls,
        nvls_evidence=tuple(nvls_lines),
        nccl_log=gathered.nccl_log,
        nccl_topo_xml=gathered.nccl_topo_xml,
        wall_s=time.monotonic() - t_start,
        worker_pids=pids,
        sched=plan.sched,
    )
