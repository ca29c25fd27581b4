"""What each rank of a ``@pytest.mark.ranks(n)`` test runs, in the process torch spawned for it: the
rank's environment as torchrun sets it, its process group, the test's body with the fixture values
the pytest process made, and its outcome written for the pytest process to report.

The test module is loaded again here from its file, with pytest's assertion rewriting
(``_pytest.assertion.rewrite.rewrite_asserts``, as pytest's import hook does it), so that a failed
``assert`` on a rank says what it compared, as it would in the pytest process.
"""

from __future__ import annotations

import ast
import asyncio
import faulthandler
import importlib.util
import inspect
import os
import pickle
import sys
import time
import traceback
from datetime import timedelta
from typing import NamedTuple

from ..runtime import lineage, rank_procs, reaper
from ..runtime.rank_messages import (
    POOL_BARRIER_S,
    TO_RANK,
    BodyJob,
    BodyResult,
    CoverageSpec,
    Opened,
    RankSetup,
    Ready,
    receive,
    send,
)

RANK_FIXTURE = "gputopo_rank"
FLIGHT_RECORDER_ENTRIES = 2000  # NCCL's flight recorder: the last collectives each rank keeps


class RankInfo(NamedTuple):
    """What ``gputopo_rank`` gives a rank: ``rank``, ``world_size``, ``local_rank`` (the rank: one node),
    ``device`` (``"cuda:<i>"`` or ``"cpu"``) and ``gpus`` (the rank's GPU as a ``core.model.Gpu``, or ())."""

    rank: int
    world_size: int
    local_rank: int
    device: str
    gpus: tuple


def main(rank: int, workdir: str, setup: RankSetup, job: BodyJob) -> None:
    """A rank started for one test (``torch.multiprocessing`` calls ``main(rank, workdir, setup, job)``):
    its group, the body, its result written; it exits 1 when the body failed."""
    info, trail = _start(rank, workdir, setup)
    group = _Group(info, setup, rank_procs.store_path(workdir))
    try:
        group.open()
        result = _run_body(job, info, trail)
    except BaseException as exc:  # noqa: BLE001 - a rank's outcome, whatever it is, goes to the report
        result = _result(job, exc)
    if result.outcome == "passed":  # a failed body's group is left to the process's end: its peers
        group.close()  # may still be inside a collective with it
    _save_coverage()
    rank_procs.write_result(workdir, rank, result)  # what it started ends when it has: its keeper
    if result.outcome == "failed":
        sys.exit(1)


def serve(rank: int, workdir: str, setup: RankSetup, pipes: tuple) -> None:
    """A rank of a warm pool: its group opened at the first job and kept; then each ``BodyJob`` that
    comes on its pipe run, its ``BodyResult`` sent, and the barrier that decides whether the group is
    fit for the next test met (``Ready``). It ends at ``Stop``, when its pipe closes, or after a test
    that left the group unfit (the pool is started afresh for the next one)."""
    pipe = pipes[rank]
    for other in pipes:
        if other is not pipe:
            other.close()
    info, trail = _start(rank, workdir, setup)
    group = _Group(info, setup, rank_procs.store_path(workdir))
    try:
        while isinstance(job := receive(pipe, TO_RANK, "the pytest process's pipe"), BodyJob):
            result = _run_in_pool(job, info, trail, group, pipe)
            _save_coverage()  # each test's lines saved as it ends: a pool ends after the run's coverage is combined
            sys.stdout.flush()  # the test's output before its result: the report takes it from here
            sys.stderr.flush()
            send(pipe, result)
            ready = _ready(job.seq, result)
            send(pipe, ready)
            if not ready.usable:
                return
            _end_helpers()
    except (EOFError, OSError):  # the pytest process has gone: so does this rank
        return
    group.close()


def _run_in_pool(job: BodyJob, info: RankInfo, trail, group: _Group, pipe) -> BodyResult:
    try:
        group.open()
    except BaseException as exc:  # noqa: BLE001 - the group's error is the first test's
        return _result(job, exc)
    send(pipe, Opened(job.seq))
    return _run_body(job, info, trail)


def _ready(seq: int, result: BodyResult) -> Ready:
    """Whether the group is fit for the next test: the body did not fail (its peers may be stuck in a
    collective with it), the group is still there, and every rank meets a barrier within
    ``POOL_BARRIER_S`` (a rank left in a collective, or one that skipped alone, does not)."""
    import torch.distributed as dist

    if result.outcome == "failed" or not dist.is_initialized():  # (a test may destroy the group)
        return Ready(seq, False)
    try:
        dist.barrier(async_op=True).wait(timeout=timedelta(seconds=POOL_BARRIER_S))
    except Exception:  # noqa: BLE001 - gloo raises "Operation timed out!", NCCL its own
        return Ready(seq, False)
    return Ready(seq, True)


def _end_helpers() -> None:
    """What the test's body started and left running ends before the next test (the keeper ends what
    left the rank's tree with the pool)."""
    children = lineage.children_of(os.getpid())
    if children:
        lineage.terminate(children, rank_procs.HELPERS_GRACE_S)


def _start(rank: int, workdir: str, setup: RankSetup):
    """The rank's process made ready for bodies: its own group, its output, its keeper, its stacks,
    its environment, and the trail of its torch.distributed calls."""
    rank_procs.lead_group()
    if setup.capture:
        rank_procs.write_output_to_files(workdir, rank)
    # From here on this is the body's process, below the rank's own, which keeps it: the body and
    # all it started end with the rank, and the rank with pytest, however either ends (torch's
    # ``_wrap`` asks for SIGINT when pytest ends, which a rank blocked inside CUDA or NCCL does not
    # act on: it would run on GPUs whose lease has gone).
    reaper.keep_a_fork(setup.parent, workdir, rank_procs.HELPERS_GRACE_S, deaf_to=(rank_procs.STACK_SIGNAL,))
    stack = open(rank_procs.stack_path(workdir, rank), "w", encoding="utf-8")  # noqa: SIM115 (open for life)
    faulthandler.register(rank_procs.STACK_SIGNAL, file=stack, all_threads=True)
    faulthandler.enable(file=stack, all_threads=True)  # a fatal signal's stack, for the report
    _native_traces()
    if setup.coverage is not None:
        _measure_coverage(setup.coverage)
    gpus = (setup.gpus[rank],) if setup.gpus else ()
    info = RankInfo(rank, setup.n, rank, f"cuda:{gpus[0].index}" if gpus else "cpu", gpus)
    _environment(info, setup.visible)
    if "nccl" in setup.backend:
        _flight_recorder(workdir)
    from .rank_trail import Trail  # torch's functions wrapped before the test's module takes them

    trail = Trail(rank_procs.trail_path(workdir, rank))
    trail.install()
    return info, trail


_measuring: list = []  # the rank's coverage.Coverage, where the run measures coverage


def _measure_coverage(spec: CoverageSpec) -> None:
    """Coverage measured in this rank as the run measures it, before the test's module is loaded: a
    parallel data file of its own beside the run's (``data_suffix``), saved by the rank alone
    (``auto_data`` off: nothing written after the run has combined)."""
    import coverage

    measuring = coverage.Coverage(
        data_file=spec.data_file,
        data_suffix=True,
        config_file=spec.config_file,
        source=spec.source,
        source_pkgs=spec.source_pkgs,
        include=spec.include,
        omit=spec.omit,
        branch=spec.branch,
        timid=spec.timid,
        cover_pylib=spec.cover_pylib,
    )
    measuring.start()
    _measuring.append(measuring)


def _save_coverage() -> None:
    for measuring in _measuring:
        measuring.save()


def _run_body(job: BodyJob, info: RankInfo, trail) -> BodyResult:
    """The test's body on this rank, its trail on while it runs (numbered from 1 for each test)."""
    try:
        body, kwargs = _body(job, info)
        trail.begin()
        try:
            done = body(**kwargs)
            if inspect.iscoroutine(done):  # an ``async def`` test: awaited here, never left un-run
                asyncio.run(done)
        finally:
            trail.on = False
    except BaseException as exc:  # noqa: BLE001 - a rank's outcome, whatever it is, goes to the report
        return _result(job, exc)
    return BodyResult(job.seq, job.test, "passed", ended_at=time.time())


def _native_traces() -> None:
    """torch's C++ traces too, as its own ``MultiProcessTestCase`` asks for them in each rank
    (torch/testing/_internal/common_distributed.py, ``run_test``): every thread's native stack on the
    rank's stderr at a fatal signal (c10's ``FatalSignalHandler``, which then calls faulthandler's), and
    the C++ stack in the message of an error torch raises (``TORCH_SHOW_CPP_STACKTRACES``)."""
    os.environ.setdefault("TORCH_SHOW_CPP_STACKTRACES", "1")
    if sys.platform.startswith("linux"):  # (torch installs no such handler on Windows or macOS)
        import torch  # imported already: torch.multiprocessing spawned this process

        torch._C._set_print_stack_traces_on_fatal_signal(True)


def _environment(info: RankInfo, visible: str | None) -> None:
    """What torchrun gives each local rank (torch/distributed/elastic/agent/server/local_elastic_agent.py,
    ``_start_workers``: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE...), one thread per rank unless
    said (torch/distributed/run.py sets OMP_NUM_THREADS=1 for more than one process per node), gloo's
    and NCCL's sockets on loopback (one node), and the GPUs of the test's lease alone where it holds
    one (before anything can start CUDA here). This process is the rank's own: the user's pytest
    keeps its environment."""
    n = str(info.world_size)
    os.environ.update(
        {
            "RANK": str(info.rank),
            "LOCAL_RANK": str(info.local_rank),
            "GROUP_RANK": "0",
            "WORLD_SIZE": n,
            "LOCAL_WORLD_SIZE": n,
        }
    )
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    if info.world_size > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    if os.path.exists("/sys/class/net/lo"):  # the ranks of one test share one host: loopback only
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        # NCCL's sockets (its bootstrap; its network transport, where P2P and SHM are off) on the
        # interface named lo exactly ("=" matches a whole name; NCCL's docs, env.html,
        # NCCL_SOCKET_IFNAME: "=eth0 : Use only interface eth0"), not the host's first interface.
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "=lo")


def _flight_recorder(workdir: str) -> None:
    """NCCL's flight recorder on, dumped at a watchdog timeout into the test's folder (one file per
    rank, ``nccl_trace_rank_<r>``: ``ranks_run`` keeps them and names them), unless the user set it:
    ``TORCH_NCCL_TRACE_BUFFER_SIZE`` (the ring's entries; torch 2.13 also reads ``TORCH_FR_BUFFER_SIZE``),
    ``TORCH_NCCL_DUMP_ON_TIMEOUT`` (which needs the buffer), and the dump's path prefix
    (``TORCH_FR_DUMP_TEMP_FILE``, named ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` before): torch's
    ProcessGroupNCCL environment variables (docs: torch_nccl_environment_variables)."""
    if "TORCH_FR_BUFFER_SIZE" not in os.environ:
        os.environ.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", str(FLIGHT_RECORDER_ENTRIES))
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    if "TORCH_FR_DUMP_TEMP_FILE" not in os.environ and "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in os.environ:
        prefix = rank_procs.flight_recorder_prefix(workdir)
        os.environ.update(TORCH_FR_DUMP_TEMP_FILE=prefix, TORCH_NCCL_DEBUG_INFO_TEMP_FILE=prefix)


def _body(job: BodyJob, info: RankInfo):
    """The test function, bound to its instance for a method, and its arguments: the fixture values
    made in the pytest process, and this rank's ``gputopo_rank``."""
    module = _load(job.module, job.path, job.rewrite)
    owner, _, name = job.qualname.rpartition(".")
    if owner:
        instance = pickle.loads(job.instance) if job.instance is not None else None
        body = getattr(instance if instance is not None else _attr(module, owner)(), name)
    else:
        body = getattr(module, name)
    kwargs = {arg: pickle.loads(value) for arg, value in job.kwargs.items()}
    if job.takes_rank:
        kwargs[RANK_FIXTURE] = info
    return body, kwargs


def _attr(module, path: str):
    for part in path.split("."):
        module = getattr(module, part)
    return module


def _load(name: str, path: str, rewrite: bool):
    """The test module, from its file under the name pytest gave it (so that the fixture values,
    pickled by reference to its classes, find them)."""
    if name in sys.modules:
        return sys.modules[name]

    with open(path, "rb") as f:
        source = f.read()
    tree = ast.parse(source, filename=path)
    if rewrite:
        from _pytest.assertion.rewrite import rewrite_asserts

        rewrite_asserts(tree, source, path, None)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]  # a .py file's path: a spec
    sys.modules[name] = module
    exec(compile(tree, path, "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - the user's test
    return module


def _bound_to_gpu(dist, backend: str, gpus) -> dict:
    """An NCCL rank's GPU made current, and the group bound to it (``device_id``: NCCL's communicator
    is made at once, an error in it raised there, not at the first collective, and barrier() knows its
    device: torch's init_process_group docstring, torch/distributed/distributed_c10d.py); a torch from
    before the argument, or another backend, is given none."""
    if backend != "nccl" or not gpus:
        return {}
    import torch

    device = torch.device("cuda", gpus[0].index)
    torch.cuda.set_device(device)
    return {"device_id": device} if "device_id" in inspect.signature(dist.init_process_group).parameters else {}


class _Group:
    """The rank's process group: opened before the first body (on gloo, every rank connected first)
    and closed after the last one that passed."""

    def __init__(self, info: RankInfo, setup: RankSetup, store: str) -> None:
        self.info, self.setup, self.store = info, setup, store

    def open(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            return
        bound = _bound_to_gpu(dist, self.setup.backend, self.info.gpus)
        timeout = timedelta(seconds=self.setup.group_timeout_s)
        store = dist.FileStore(self.store, self.info.world_size)
        store.set_timeout(timeout)  # a body's read of a key no rank sets ends as a collective would (300 s by default)
        dist.init_process_group(
            self.setup.backend,
            store=store,
            rank=self.info.rank,
            world_size=self.info.world_size,
            timeout=timeout,
            **bound,
        )
        if "gloo" in self.setup.backend and "nccl" not in self.setup.backend:
            # gloo connects every pair eagerly (connectFullMesh) and may return on one rank while its
            # peer is still finishing the pair: a rank whose body ended at once closed the connection
            # under it ("Connection closed by peer", seen on a loaded 2-core run). No body starts
            # before every rank is connected. (NCCL connects lazily, at the first collective.)
            dist.barrier()

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _result(job: BodyJob, exc: BaseException) -> BodyResult:
    """A failed (or skipped) rank in words: the exception in one line, and its traceback from the test
    function on (this module's frames left out)."""
    import pytest

    if isinstance(exc, pytest.skip.Exception):
        return BodyResult(job.seq, job.test, "skipped", str(exc.msg), ended_at=time.time())
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    if isinstance(exc, pytest.fail.Exception):
        error = f"Failed: {exc.msg}"
    else:
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    trace = "".join(traceback.format_exception(type(exc), exc, tb))
    return BodyResult(job.seq, job.test, "failed", error, trace, ended_at=time.time())
