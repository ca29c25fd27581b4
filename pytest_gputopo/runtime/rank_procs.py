"""The processes of a test run as n ranks (``@pytest.mark.ranks``): started by torch's own launcher,
supervised under the test's deadline, each live rank's Python stack taken before it is ended, every
rank ended and reaped whatever happened (a failure, a hang, Ctrl-C).

The ranks are started by ``torch.multiprocessing.start_processes`` (torch/multiprocessing/spawn.py),
the engine torchrun's own ``MultiprocessContext`` drives (torch/distributed/elastic/multiprocessing/
api.py, ``MultiprocessContext._start``), with ``join=False``. Not ``elastic.multiprocessing.
start_processes`` itself: its ``PContext.start`` installs handlers for SIGTERM, SIGINT, SIGHUP and
SIGQUIT in the calling process, which is the user's pytest. Nor ``ProcessContext.join``: at the first
failure it ends the other ranks at once and keeps that one cause, where a test's report wants every
failed rank and every stuck rank's stack.

A rank leads a process group of its own (``lead_group``, first thing in the rank), so that ending it
ends what it started, and keeps its body in a process below itself (``reaper.keep_a_fork``): the
rank's process dies with pytest (SIGTERM, where torch's ``_wrap`` asks for SIGINT, which a rank blocked
inside CUDA does not act on) and ends its body and everything below, the helpers that left its group
(``setsid``) included, whether the body ended, was killed outright or pytest was; the supervisor
(``procs.end``) ends every rank's group.
"""

from __future__ import annotations

import multiprocessing.connection
import multiprocessing.reduction
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import procs as supervisor
from .messages import MessageError
from .rank_messages import RESULTS, BodyResult

STACK_SIGNAL = signal.SIGUSR1  # faulthandler.register()ed in each rank: its threads' stacks to its stack file
STACK_WAIT_S = 2.0  # for a rank to write its stack (faulthandler writes from the signal handler itself)
FAILED_GRACE_S = 3.0  # after one rank failed: time for the others to end on their own, with their own cause
# A rank that wrote its result and is still running this long after is hung in exit (a failed NCCL
# communicator's teardown: NVIDIA/nccl #1013, #1777): ended then, its own result reported.
EXIT_GRACE_S = 5.0
HELPERS_GRACE_S = 2.0  # what a rank's body left running, ended by its keeper: SIGTERM, this long, SIGKILL
HUNG = "hung in exit"  # a rank's state in ``_state``: its result written, its process not ending


def stack_path(workdir: str, rank: int) -> str:
    return os.path.join(workdir, f"rank{rank}.stack")


def result_path(workdir: str, rank: int) -> str:
    return os.path.join(workdir, f"rank{rank}.json")


def store_path(workdir: str) -> str:
    """The ranks' FileStore: a file in the test's private folder, so no port is picked, held or raced for."""
    return os.path.join(workdir, "store")


# What of a rank's stdout or stderr goes into the test's report: its first 16 KiB and its last 48 KiB
# (where a failure's own lines are); longer output is kept whole beside the report, never dropped.
OUTPUT_HEAD_BYTES = 16 * 1024
OUTPUT_TAIL_BYTES = 48 * 1024


@dataclass(frozen=True)
class Output:
    """A rank's stream as the report shows it: ``head`` and ``tail`` (the whole of it in ``head`` when
    it fits), and its ``size`` in bytes."""

    head: str
    tail: str
    size: int

    @property
    def cut(self) -> int:
        """The bytes between ``head`` and ``tail`` that the report leaves out."""
        return max(0, self.size - OUTPUT_HEAD_BYTES - OUTPUT_TAIL_BYTES) if self.tail else 0


def read_output(path: str, offset: int = 0) -> Output | None:
    """A rank's stream from ``offset`` (where this test's output starts in a pool's rank), capped for
    the report; None where it wrote nothing."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size - offset
            if size <= 0:
                return None
            f.seek(offset)
            if size <= OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES:
                return Output(f.read(size).decode("utf-8", "replace"), "", size)
            head = f.read(OUTPUT_HEAD_BYTES)
            f.seek(offset + size - OUTPUT_TAIL_BYTES)
            tail = f.read(OUTPUT_TAIL_BYTES)
    except OSError:
        return None
    return Output(head.decode("utf-8", "replace"), tail.decode("utf-8", "replace"), size)


def flight_recorder_prefix(workdir: str) -> str:
    """Where an NCCL rank's flight recorder dumps (the rank's number is appended; torch's ``fr_trace``
    reads a folder of them)."""
    return os.path.join(workdir, "nccl_trace_rank_")


def flight_recorder_dumps(workdir: str) -> list[str]:
    """The flight recorder dumps the ranks wrote (at an NCCL watchdog timeout)."""
    prefix = os.path.basename(flight_recorder_prefix(workdir))
    try:
        names = sorted(name for name in os.listdir(workdir) if name.startswith(prefix))
    except OSError:
        return []
    return [os.path.join(workdir, name) for name in names if os.path.isfile(os.path.join(workdir, name))]


def trail_path(workdir: str, rank: int) -> str:
    """The rank's trail of torch.distributed calls (``plugin.rank_trail``)."""
    return os.path.join(workdir, f"rank{rank}.trail")


def read_trail(workdir: str, rank: int, offset: int = 0) -> str:
    """The rank's trail as text from ``offset`` (this test's, in a pool's rank), its last 1 MiB at most
    (a long loop of collectives ends where it stopped)."""
    try:
        with open(trail_path(workdir, rank), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(offset, size - (1 << 20)))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def sizes(workdir: str, n: int) -> dict[str, int]:
    """The size of each rank's output and trail files now (where a pool's next test starts in them)."""
    found = {}
    for rank in range(n):
        for path in (
            output_path(workdir, rank, "stdout"),
            output_path(workdir, rank, "stderr"),
            trail_path(workdir, rank),
        ):
            try:
                found[path] = os.stat(path).st_size
            except OSError:
                found[path] = 0
    return found


def output_path(workdir: str, rank: int, stream: str) -> str:
    """Where rank ``rank`` writes its ``stream`` ("stdout" or "stderr") when the run captures output."""
    return os.path.join(workdir, f"rank{rank}.{stream}")


def write_output_to_files(workdir: str, rank: int) -> None:
    """In the rank: its stdout and stderr (descriptors 1 and 2: Python's, torch's C++ and every process
    it starts) to files of its own, so that the report takes what fits and the rest is kept."""
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        target = os.open(output_path(workdir, rank, stream), flags, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a rank killed keeps its lines


def write_result(workdir: str, rank: int, result: BodyResult) -> None:
    RESULTS.write_file(result_path(workdir, rank), result)


def read_result(workdir: str, rank: int) -> BodyResult | None:
    """What the rank wrote when its body ended, or None: it died first, or what is there is not a
    result (read as untrusted: a body may write anything anywhere)."""
    try:
        return RESULTS.read_file(result_path(workdir, rank))
    except (OSError, MessageError):
        return None


def lead_group() -> None:
    """In the rank: lead a process group of its own (what it starts is ended with it)."""
    try:
        os.setpgid(0, 0)
    except OSError:  # pragma: no cover - already a group leader
        pass


class Inherited:
    """A descriptor every rank holds for its life, the same open file as this process's: a GPU lease's
    lock, so that the GPU stays locked while a rank lives, this process killed or not (flock(2): a
    lock goes with the last descriptor of its open file). Pickled with the ranks' arguments, it asks
    ``multiprocessing.reduction.DupFd``, which under spawn passes the descriptor to the child at its
    own number (``popen_spawn_posix.Popen.duplicate_for_child``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        return (_inherit, (multiprocessing.reduction.DupFd(self.fd),))


def _inherit(passed) -> int:
    """In the rank: the descriptor passed, kept from what the rank executes (its helpers hold no GPU
    past its end: its keeper holds them until they have gone)."""
    fd = passed.detach()
    os.set_inheritable(fd, False)
    return fd


@dataclass(frozen=True)
class RankExit:
    rank: int
    status: int | None  # its exit status (negative: the signal that ended it); None: running when ended
    stack: str = ""  # its threads' Python stacks: taken before it was ended, or written as a signal killed it
    hung_in_exit: bool = False  # running when ended, its result written ``EXIT_GRACE_S`` before


@dataclass(frozen=True)
class Ended:
    exits: tuple[RankExit, ...]
    timed_out: bool  # the deadline passed with ranks still running

    @property
    def failed(self) -> list[RankExit]:
        return [e for e in self.exits if e.status not in (0, None)]

    @property
    def stuck(self) -> list[RankExit]:
        return [e for e in self.exits if e.status is None and not e.hung_in_exit]


def run_ranks(
    entry: Callable, args: tuple, n: int, timeout_s: float, workdir: str, grace_s: float = FAILED_GRACE_S
) -> Ended:
    """``entry(rank, *args)`` in ``n`` processes spawned by torch; wait until all end, one fails (and
    then ``grace_s`` for the others) or ``timeout_s`` passes; take the stacks of the ranks still
    running, end them and reap every rank."""
    import torch.multiprocessing as mp  # torch, when a ranks test runs

    context = mp.start_processes(entry, args=args, nprocs=n, join=False, start_method="spawn")
    procs = context.processes
    try:
        timed_out = _wait(procs, workdir, time.monotonic() + timeout_s, grace_s)
        states = [_state(p, workdir, i) for i, p in enumerate(procs)]
        running = [i for i, state in enumerate(states) if state is None or state == HUNG]
        stacks = take_stacks(procs, running, workdir)
        exits = []
        for i, state in enumerate(states):
            code = None if state == HUNG else state
            killed = isinstance(code, int) and code < 0  # its fatal signal's stack (faulthandler), if any
            stack = stacks.get(i, "") or (read_text(stack_path(workdir, i)) if killed else "")
            exits.append(RankExit(i, code, stack, state == HUNG))  # type: ignore[arg-type]
        return Ended(tuple(exits), timed_out)
    finally:
        _end(procs)
        for path in context.error_files:  # torch's, written only if ``entry`` raised (it does not)
            if path and os.path.exists(path):
                os.unlink(path)


def _wait(procs: list, workdir: str, deadline: float, grace_s: float) -> bool:
    """Until every rank ended (or hung in exit), or ``grace_s`` after the first failure (a rank hung
    in exit counts as one); True when the deadline passed with no rank failed."""
    failed_by = None  # when the others' time is up, once one rank failed
    while True:
        states = [_state(p, workdir, i) for i, p in enumerate(procs)]
        if all(s is not None for s in states):
            return False
        now = time.monotonic()
        if failed_by is None and any(s not in (None, 0) for s in states):
            failed_by = min(deadline, now + grace_s)
        stop = deadline if failed_by is None else failed_by
        if now >= stop:
            return failed_by is None
        waiting = [p.sentinel for p, s in zip(procs, states, strict=True) if s is None]
        multiprocessing.connection.wait(waiting, timeout=min(stop - now, EXIT_GRACE_S / 5))


def _state(proc, workdir: str, rank: int) -> int | str | None:
    """The rank's exit status, ``HUNG`` where it wrote its result ``EXIT_GRACE_S`` ago and runs on,
    else None (running)."""
    status = _status(proc)
    if status is not None:
        return status
    try:
        written = os.stat(result_path(workdir, rank)).st_mtime
    except OSError:
        return None
    return HUNG if time.time() - written > EXIT_GRACE_S else None


def _status(proc) -> int | None:
    """The rank's exit status (negative: a signal), None while it runs; not reaped, so that its pid
    and process group id stay the rank's until ``supervisor.end`` (``multiprocessing``'s ``exitcode`` reaps)."""
    return supervisor.exited(proc._popen)


def take_stacks(procs: list, running: list[int], workdir: str) -> dict[int, str]:
    """The Python stacks of the ranks still running, each asked for with ``STACK_SIGNAL``."""
    for i in running:
        _signal(procs[i], STACK_SIGNAL)
    end = time.monotonic() + STACK_WAIT_S
    while time.monotonic() < end and not all(read_text(stack_path(workdir, i)).endswith("\n") for i in running):
        time.sleep(0.02)
    time.sleep(0.05 if running else 0)  # the last thread's lines
    return {
        i: read_text(stack_path(workdir, i)) or "(no stack: the rank did not answer SIGUSR1 in time)" for i in running
    }


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return ""


def _end(procs: list) -> None:
    """End every rank and what it started (``supervisor.end``), and let ``multiprocessing`` know."""
    supervisor.end([p._popen for p in procs])
    for p in procs:
        p.join()


def _signal(proc, sig: int) -> None:
    supervisor.signal_group(proc._popen, sig)
