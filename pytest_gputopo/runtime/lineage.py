"""The kernel's hold on a process's lifetime (Linux; elsewhere these do nothing): a signal when the
parent ends (``PR_SET_PDEATHSIG``), orphans re-parented here (``PR_SET_CHILD_SUBREAPER``), and this
process's descendants found in ``/proc`` and ended -- what the supervisor (``procs``) and the keepers
(``reaper``) are built on. See prctl(2)."""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")


@functools.cache
def prctl_function() -> Callable[..., int]:
    """libc's ``prctl``, looked up once (a child between fork and exec calls it, and looks up nothing)."""
    return ctypes.CDLL(None, use_errno=True).prctl


def _prctl(option: int, value: int) -> None:
    if LINUX:
        prctl_function()(option, value, 0, 0, 0)


def adopt_orphans() -> None:
    """Make this process a child subreaper: what its descendants leave behind comes to it."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> bool:
    """In a child: ``sig`` to this process when ``parent`` ends (``PR_SET_PDEATHSIG``: sent when the
    parent's thread ends, not if it has already); False where it has already (the caller ends)."""
    _prctl(PR_SET_PDEATHSIG, sig)
    return os.getppid() == parent


def dies_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets SIGKILL when this process ends (its
    parent-death signal, set between fork and exec, where nothing is looked up), at once where this
    process has ended already. None off Linux, and off the main thread: the signal comes when the
    *thread* that started the child ends (prctl(2)), and only the main thread lasts as the process."""
    if not LINUX or threading.current_thread() is not threading.main_thread():
        return None
    prctl, parent = prctl_function(), os.getpid()

    def in_the_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return in_the_child


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a scan of /proc: needs no CONFIG_PROC_CHILDREN)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and _parent(name) == pid]


def _parent(name: str) -> int | None:
    """The parent of process ``name`` (a /proc entry), or None: gone meanwhile."""
    try:
        with open(f"/proc/{name}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def descendants(pid: int, but: Collection[int] = ()) -> set[int]:
    """Every process below ``pid``, none of ``but`` or below them (one scan of /proc)."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = _parent(name)
            if parent is not None:
                parents.setdefault(parent, []).append(int(name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            if child not in found and child not in but:
                found.add(child)
                todo.append(child)
    return found


def end_descendants(grace_s: float = 0.0) -> None:
    """End every descendant until none is left: SIGTERM and ``grace_s`` to end (where given), then
    SIGKILL; the children of an ended one come to us (a subreaper), and are ended in turn."""
    me = os.getpid()
    if grace_s > 0:
        terminate(children_of(me), grace_s)
    while True:
        children = children_of(me)
        if not children:
            return
        _signal(children, signal.SIGKILL)
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def terminate(pids: list[int], grace_s: float) -> None:
    """SIGTERM to ``pids`` (children of this process), up to ``grace_s`` for them to end (reaped as
    they do), then SIGKILL."""
    _signal(pids, signal.SIGTERM)
    until = time.monotonic() + grace_s
    while time.monotonic() < until and _living(pids):
        _reap_any()
        time.sleep(0.02)
    _signal(pids, signal.SIGKILL)
    _reap_any()


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _living(pids: list[int]) -> bool:
    """Whether any of ``pids`` is alive (a zombie is not: it waits for us to reap it)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 :][:1] != b"Z":
            return True
    return False


def _reap_any() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
