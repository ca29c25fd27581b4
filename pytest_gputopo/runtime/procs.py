"""Child processes under a deadline: a benchmark runs in its own process group, so that on
timeout (or Ctrl-C) everything it started is ended -- SIGTERM, then SIGKILL after a grace period --
and the pytest run goes on with a reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Mapping, Sequence

KILL_GRACE_S = 5.0


class BenchTimeout(Exception):
    """A benchmark did not finish in time; its whole process group was killed."""


def tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_child(argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None = None,
              grace_s: float = KILL_GRACE_S, reap: bool = False) -> tuple[int, str]:
    """Run ``argv`` (stdout and stderr together) and return ``(exit status, output)``; past
    ``timeout_s`` its process group is killed and ``BenchTimeout`` says so with the output's tail.
    ``OSError`` when it cannot start. ``reap``: run it under ``bench.reaper`` (Linux), which ends
    what it leaves behind even outside its process group (a helper started with ``setsid``)."""
    command = " ".join(argv)
    if reap and sys.platform.startswith("linux"):
        if shutil.which(argv[0], path=None if env is None else env.get("PATH")) is None:
            raise FileNotFoundError(2, "not found on PATH", argv[0])
        argv = [sys.executable, "-m", "pytest_gputopo.runtime.reaper", *argv]
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=None if env is None else dict(env), start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc, grace_s)
        partial = _drain(proc, grace_s)
        raise BenchTimeout(f"{command} did not finish within {timeout_s:g} s; its process group was "
                           f"killed" + (f". Last output:\n{tail(partial)}" if partial.strip() else "")) from None
    except BaseException:  # Ctrl-C or a pytest timeout: leave no benchmark running behind us
        kill_group(proc, grace_s)
        _drain(proc, grace_s)
        raise
    return proc.returncode, output


def kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the whole process group (mpirun, NCCL proxy threads' helpers...), SIGKILL after the
    grace period to whatever is left of it."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return  # the group is gone
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.02)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _drain(proc: subprocess.Popen, grace_s: float) -> str:
    """What the killed child had written; never blocks past the grace period (a grandchild that left
    the group could hold the pipe open)."""
    try:
        output, _ = proc.communicate(timeout=grace_s)
        return output or ""
    except subprocess.TimeoutExpired:
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait(timeout=grace_s)
        return ""
