"""Child processes under a deadline: the one supervisor of every process the plugin starts (the probe's
CUDA child, a copy benchmark, the all-reduce ranks, nccl-tests).

Each child leads its own process group, so that ending it ends everything it started; ``Children``
ends every group -- SIGTERM, then SIGKILL after ``KILL_GRACE_S`` -- and reaps every child, whatever
happened (a deadline, a failed rank, Ctrl-C), so that the pytest run goes on with a reason and
nothing is left behind.
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
from typing import IO

KILL_GRACE_S = 5.0  # SIGTERM -> SIGKILL: time for a child to end what it started
POLL_S = 0.02


class BenchTimeout(Exception):
    """A benchmark did not finish in time; its whole process group was killed."""


def tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class Children:
    """The children of one piece of work, supervised together; a context manager whose exit ends
    and reaps every child (``close``)."""

    def __init__(self, grace_s: float = KILL_GRACE_S) -> None:
        self.grace_s = grace_s
        self.procs: list[subprocess.Popen] = []

    def start(
        self,
        argv: Sequence[str],
        *,
        output: IO | int,
        env: Mapping[str, str] | None = None,
        stdin: IO | int = subprocess.DEVNULL,
    ) -> subprocess.Popen:
        """Start ``argv`` as the leader of a new process group, stdout and stderr to ``output`` (a
        file, or ``subprocess.PIPE``). ``OSError`` when it cannot start."""
        proc = subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            start_new_session=True,
            close_fds=True,
        )
        self.procs.append(proc)
        return proc

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self.procs)

    def exit_codes(self) -> list[int | None]:
        """Each child's exit status (negative: the signal that ended it), None while it runs. Not
        reaped: a pid -- and with it its process group id -- stays reserved until ``close``."""
        return [_exited(p) for p in self.procs]

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
        """SIGTERM to every child's process group, SIGKILL to what is left after the grace period
        (exited leaders too: a grandchild left in a group dies with it), and reap every child."""
        for p in self.procs:
            _signal_group(p, signal.SIGTERM)
        end = time.monotonic() + self.grace_s
        while time.monotonic() < end and any(_exited(p) is None for p in self.procs):
            time.sleep(POLL_S)
        for p in self.procs:
            _signal_group(p, signal.SIGKILL)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
                pass

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


def _exited(proc: subprocess.Popen) -> int | None:
    """The exit code (negative = signal) if ``proc`` has exited, without reaping it."""
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


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.returncode is not None:  # reaped: its pid may belong to someone else by now
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
