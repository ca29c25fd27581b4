"""How CI ends a run, for the tests that a run so ended leaves nothing behind (issue 41): a signal to
pytest alone (GitHub's cancel reaches the step's shell; ``kill``; a container's stop), to its process
group (Ctrl-C), or to every process of the job (Slurm's scancel signals each process of the step, its
own sessions too: here every descendant of the run); and what is left of a run afterwards.

Each deadline here is a hang guard, never a timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from pytest_gputopo.runtime import run_folder

GUARD_S = 60.0  # a hang guard: far beyond what any step here takes

ENDS = {
    "SIGKILL to pytest": (signal.SIGKILL, "pytest"),
    "SIGTERM to pytest": (signal.SIGTERM, "pytest"),
    "SIGINT to pytest under -n 2": (signal.SIGINT, "pytest"),
    "SIGINT to the group under -n 2": (signal.SIGINT, "group"),
    "SIGTERM to every process": (signal.SIGTERM, "every"),
    # GitHub Actions' cancel: SIGINT to the step's shell, 7.5 s, SIGTERM, 2.5 s, the tree killed
    # (actions/runner: ProcessInvoker's cancel; here pytest is the step's process)
    "GitHub's cancel under -n 2": (signal.SIGINT, "github"),
}


def as_a_runner_starts_it() -> None:
    """``preexec_fn`` of a run these tests end: SIGINT as a CI runner's step has it. A shell that runs
    this suite as a background job without job control (``.ci/run &``) leaves SIGINT ignored in every
    process it starts (POSIX), Python then keeps it ignored, and a SIGINT would end nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def workers(how: str) -> list[str]:
    """The run's xdist option for an ending of ``ENDS``."""
    return ["-n", "2"] if "-n 2" in how else ["-n", "0"]


def signal_run(run: subprocess.Popen, sig: int, whom: str) -> None:
    """End ``run`` (a pytest leading its own group) as ``ENDS`` says."""
    if whom == "github":
        for sig_, wait_s in ((signal.SIGINT, 7.5), (signal.SIGTERM, 2.5)):
            os.kill(run.pid, sig_)
            try:
                run.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        signal_run(run, signal.SIGKILL, "every")
    elif whom == "pytest":
        os.kill(run.pid, sig)
    elif whom == "group":
        os.killpg(run.pid, sig)
    else:
        for pid in [run.pid, *descendants(run.pid)]:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):  # gone (a zombie's pid is still ours)
                pass


def descendants(pid: int) -> list[int]:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, todo = [], [pid]
    while todo:
        of = todo.pop()
        children = [p for p, parent in parents.items() if parent == of]
        found += children
        todo += children
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it waits for its parent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state.rsplit(")", 1)[1].split()[0] != "Z"


def until(condition, what) -> None:
    """Wait until ``condition()``; ``what`` (text, or a callable giving it then) says what failed."""
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"still not so after {GUARD_S:g} s: {what() if callable(what) else what}"
        time.sleep(0.05)


def kill_group(run: subprocess.Popen) -> None:
    """The test's own cleanup, whatever failed: nothing of the run it started outlives it."""
    try:
        os.killpg(run.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    run.wait()


def left(temp: Path) -> list[str]:
    """What is left under ``temp``, for a failure's message."""
    return [f"{p.relative_to(temp)}" for p in temp.rglob("*")]


def folders_left_after_a_later_run(temp: Path) -> list[str]:
    """The plugin's folders under ``temp`` (a killed run's ``TMPDIR``) once a later run has swept
    what the ended run's processes could not remove (``run_folder``: each aged an hour here, its
    owner gone): none, where every process of the run has ended."""
    for folder in temp.glob("pytest-gputopo-*"):
        os.utime(folder, (time.time() - 3600,) * 2)
    run_folder.remove_abandoned(str(temp))
    return left(temp) if list(temp.glob("pytest-gputopo-*")) else []
