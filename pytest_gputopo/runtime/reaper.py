"""``python -m pytest_gputopo.runtime.reaper ARGV...``: run ARGV and, when it ends or this process is
told to stop (SIGTERM), end every process it left behind -- also those that left its process group.

A benchmark's process group is killed at its deadline (``procs.Children``), but a wrapper script
of nccl-tests may start a helper with ``setsid``: a new session, out of the group's reach, orphaned
after the deadline. This process is a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``, see
prctl(2)): an orphan among its descendants is re-parented to it rather than to init, so it can find
each one (``/proc/<pid>/stat``: parent pid) and kill it. It is a process of its own, started by
``procs.run_child(..., reap=True)``: the pytest process itself is never made a subreaper and gets
no signal handler.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a scan of /proc: needs no CONFIG_PROC_CHILDREN)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    stat = handle.read()
            except OSError:
                continue  # gone meanwhile
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 1 and int(fields[1]) == pid:
                found.append(int(name))
    return found


def end_descendants() -> None:
    """SIGKILL every descendant until none is left: the children of a killed one come to us."""
    me = os.getpid()
    while True:
        children = _children(me)
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def main(argv: list[str]) -> int:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def stop(signum, frame):  # the deadline's SIGTERM to our group: take the escaped ones along
        end_descendants()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    status = child.wait()
    end_descendants()
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
