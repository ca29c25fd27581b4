"""The one supervisor of every process the plugin starts: the probe's NVML and CUDA child, a copy
benchmark, the all-reduce ranks, nccl-tests (under a keeper, ``reaper``), a leased test's process
(under its keeper) are started here (``start``, ``Children``); a ``ranks(n)`` test's ranks are started by
torch and ended here (``end``).

Each child leads its own process group (its own session, unless it shares the run's terminal), so
that ending it ends everything it started, and dies with the process that started it (SIGKILL, its
parent-death signal: ``lineage.dies_with_this_process``). ``end`` is the one way they are ended --
time to end on their own, SIGTERM to each group, ``KILL_GRACE_S``, SIGKILL to each group, every child
reaped -- whatever happened (a deadline, a failed rank, Ctrl-C), so that the pytest run goes on with
a reason and nothing is left behind. What leaves a group (a ``setsid`` helper) is a keeper's to end.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO, Protocol

from .lineage import dies_with_this_process

KILL_GRACE_S = 5.0  # SIGTERM -> SIGKILL: time for a child to end what it started
POLL_S = 0.02


class BenchTimeout(Exception):
    """A benchmark did not finish in time; its whole process group was killed."""


def tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class Started(Protocol):
    """A started child as the supervisor sees it: ``subprocess.Popen``, or the ``Popen`` behind a
    ``multiprocessing.Process`` (its ``_popen``)."""

    pid: int
    returncode: int | None  # set once reaped

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...


class Children:
    """The children of one piece of work, supervised together; a context manager whose exit ends
    and reaps every child (``close``)."""

    def __init__(self, grace_s: float = KILL_GRACE_S) -> None:
        self.grace_s = grace_s
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: Sequence[str], **how) -> subprocess.Popen:
        """Start ``argv`` (``start``) among these children."""
        proc = start(argv, **how)
        self.procs.append(proc)
        return proc

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self.procs)

    def exit_codes(self) -> list[int | None]:
        """Each child's exit status (negative: the signal that ended it), None while it runs. Not
        reaped: a pid -- and with it its process group id -- stays reserved until ``close``."""
        return [exited(p) for p in self.procs]

    def wait(self, deadline: float, stop_on_failure: bool = True) -> list[int | None]:
        """Poll until every child has exited, one failed (``stop_on_failure``) or ``deadline``
        (``time.monotonic()``) passed; the exit statuses then, None for a child still running."""
        while True:
            codes = self.exit_codes()
            if all(c is not None for c in codes) or (stop_on_failure and any(c not in (None, 0) for c in codes)):
                return codes
            now = time.monotonic()
            if now >= deadline:
                return codes
            _until_one_exits([p for p, c in zip(self.procs, codes, strict=True) if c is None], deadline - now)

    def close(self) -> None:
        """End every child (``end``)."""
        end(self.procs, self.grace_s)

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start(
    argv: Sequence[str],
    *,
    output: IO | int | None,
    env: Mapping[str, str] | None = None,
    stdin: IO | int | None = subprocess.DEVNULL,
    cwd: str | os.PathLike | None = None,
    pass_fds: Sequence[int] = (),
    session: bool = True,
) -> subprocess.Popen:
    """Start ``argv`` as the leader of a new session (``session``; else in this process's group and
    session: a child that shares the terminal, and whose keeper ends what it starts), stdout and
    stderr to ``output`` (a file, ``subprocess.PIPE``; None: this process's own), dying with this
    process. ``OSError`` when it cannot start."""
    return subprocess.Popen(
        list(argv),
        stdin=stdin,
        stdout=output,
        stderr=None if output is None else subprocess.STDOUT,
        env=None if env is None else dict(env),
        cwd=cwd,
        pass_fds=tuple(pass_fds),
        start_new_session=session,
        preexec_fn=dies_with_this_process(),  # noqa: PLW1509 - one prctl(2), looked up before the fork
    )


def end(procs: Sequence[Started], grace_s: float = KILL_GRACE_S, patience_s: float = 0.0) -> None:
    """The one way the plugin ends its children: ``patience_s`` for them to end on their own, SIGTERM
    to each one's process group, ``grace_s`` for them to end what they started, SIGKILL to each group
    (exited leaders' too: a grandchild left in a group dies with it), and every child reaped."""
    _until_ended(procs, patience_s)
    for p in procs:
        signal_group(p, signal.SIGTERM)
    _until_ended(procs, grace_s)
    for p in procs:
        signal_group(p, signal.SIGKILL)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            pass


def _until_ended(procs: Sequence[Started], wait_s: float) -> None:
    until = time.monotonic() + wait_s
    while time.monotonic() < until and any(exited(p) is None for p in procs):
        time.sleep(POLL_S)


def signal_group(proc: Started, sig: int) -> None:
    """``sig`` to the child's process group where it leads one, else to the child alone; never to one
    already reaped (its pid may be someone else's by now)."""
    if proc.returncode is not None:
        return
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    grace_s: float = KILL_GRACE_S,
    reap: bool = False,
) -> tuple[int, str]:
    """Run ``argv`` (stdout and stderr together) and return ``(exit status, output)``; past
    ``timeout_s`` its process group is killed and ``BenchTimeout`` says so with the output's tail.
    ``OSError`` when it cannot start. ``reap``: run it under ``runtime.reaper`` (Linux), which ends
    what it leaves behind even outside its process group (a helper started with ``setsid``)."""
    command = " ".join(argv)
    if reap and sys.platform.startswith("linux"):
        if shutil.which(argv[0], path=None if env is None else env.get("PATH")) is None:
            raise FileNotFoundError(2, "not found on PATH", argv[0])
        argv = [sys.executable, "-m", "pytest_gputopo.runtime.reaper", *argv]
    # A file, not a pipe: a grandchild that left the group cannot hold the output open past the end.
    with tempfile.TemporaryFile() as output:
        with Children(grace_s) as children:  # leaving it ends the group and reaps the child
            children.start(argv, output=output, env=env)
            (code,) = children.wait(time.monotonic() + timeout_s)
        text = _read(output)
    if code is None:
        raise BenchTimeout(
            f"{command} did not finish within {timeout_s:g} s; its process group was "
            f"killed" + (f". Last output:\n{tail(text)}" if text.strip() else "")
        )
    return children.procs[0].returncode, text


def _until_one_exits(procs: list[subprocess.Popen], timeout_s: float) -> None:
    """Sleep until one of ``procs`` exits (without reaping it) or ``timeout_s`` passed: on Linux its
    pidfd turns readable the moment it exits, so a short child (the probe's, every marked run) is
    not waited for up to a whole poll interval more; elsewhere, one poll interval."""
    fds: list[int] = []
    try:
        for p in procs:
            fds.append(os.pidfd_open(p.pid))
    except (AttributeError, OSError):  # no pidfd_open (not Linux 5.3+), or a pid already reaped
        for fd in fds:
            os.close(fd)
        time.sleep(min(POLL_S, timeout_s))
        return
    try:
        select.select(fds, [], [], timeout_s)
    finally:
        for fd in fds:
            os.close(fd)


def _read(output: IO) -> str:
    output.seek(0)
    return output.read().decode(errors="replace")


def exited(proc: Started) -> int | None:
    """The child's exit status (negative: a signal) if it has exited, None while it runs; not reaped,
    so that its pid and process group id stay its own until ``end``."""
    if proc.returncode is not None:
        return proc.returncode
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # pragma: no cover - macOS < 3.13, Windows
        return proc.poll()
    try:
        info = waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already reaped elsewhere
        return proc.poll()
    if info is None or info.si_pid == 0:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status
