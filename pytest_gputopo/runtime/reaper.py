"""``python -m pytest_gputopo.runtime.reaper [--parent PID] [--hold FD] [--folder PATH] -- ARGV...``: run
ARGV and, when it ends or this process is told to stop (SIGTERM), end every process it left behind --
also those that left its process group.

A benchmark's process group is killed at its deadline (``procs.Children``), but a wrapper script
of nccl-tests may start a helper with ``setsid``: a new session, out of the group's reach, orphaned
after the deadline. This process is a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``, see
prctl(2)): an orphan among its descendants is re-parented to it rather than to init, so it can find
each one (``/proc/<pid>/stat``: parent pid) and end it. It is a process of its own, started by
``procs.run_child(..., reap=True)`` or for a leased test's process (``lease_child``): the pytest
process itself is never made a subreaper and gets no signal handler.

For a leased test's process it is also the keeper of the lease:

- ``--parent PID``: it dies with the run (``PR_SET_PDEATHSIG``: SIGTERM to it when the run's process
  ends, however -- killed, crashed -- checked against the run having gone already), ending everything
  below it first; ARGV dies with it (SIGKILL, ``PR_SET_PDEATHSIG`` in ARGV's process).
- ``--hold FD``: FD is the run's end of the socket the GPUs' lock descriptors come over
  (``socket.send_fds``); ARGV is given a socket of its own at that same descriptor number, and the
  descriptors this process receives are passed on to it and kept here: the GPUs stay locked until the
  last process below it has gone, whatever became of ARGV (a crashed test's helper still running on
  its GPU holds it; flock(2): a lock goes with the last descriptor of its open file).
- ``--folder PATH``: removed when it ends after the run has gone (the lease's own folder, which the
  run removes itself once it has read ARGV's output there).

SIGINT is ignored here: where ARGV shares the run's terminal (``-s``, ``--pdb``) a Ctrl-C reaches it
too, and ARGV decides; this process ends when ARGV has.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 5.0  # SIGTERM -> SIGKILL for what is left below
RUN_GOING_S = 1.0  # told to stop: how long to see whether the run goes too (its folder is then ours)
MAX_FDS = 1024


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


def end_descendants(grace_s: float = 0.0) -> None:
    """End every descendant until none is left: SIGTERM and ``grace_s`` to end (where given), then
    SIGKILL; the children of an ended one come to us, and are ended in turn."""
    me = os.getpid()
    if grace_s > 0:
        _terminate(_children(me), grace_s)
    while True:
        children = _children(me)
        if not children:
            return
        _signal(children, signal.SIGKILL)
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _terminate(pids: list[int], grace_s: float) -> None:
    """SIGTERM to ``pids``, up to ``grace_s`` for them to end (reaped as they do), then SIGKILL."""
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


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def adopt_orphans() -> None:
    """Make this process a child subreaper: what its descendants leave behind comes to it."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def end_escaped(grace_s: float) -> None:
    """End this subreaper's descendants that left its process group (a ``setsid`` helper, a daemon,
    adopted here): those the end of its group does not reach. SIGTERM, ``grace_s``, SIGKILL."""
    group = os.getpgrp()
    _terminate([pid for pid in _children(os.getpid()) if _group_of(pid) not in (group, None)], grace_s)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> bool:
    """In a child: ``sig`` to this process when ``parent`` ends (``PR_SET_PDEATHSIG``: sent when the
    parent's thread ends, not if it has already); False where it has already (the caller ends)."""
    _prctl(PR_SET_PDEATHSIG, sig)
    return os.getppid() == parent


def _parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Its options (before ``--``) and ARGV; without ``--``, ARGV is the whole of ``argv``."""
    if "--" not in argv:
        return {}, argv
    split = argv.index("--")
    options, rest = argv[:split], argv[split + 1 :]
    return dict(zip(options[::2], options[1::2], strict=True)), rest


def _relay_locks(from_run: socket.socket, to_argv: socket.socket, kept: list[int]) -> None:
    """The run's lock descriptors, passed on to ARGV and kept (``kept``) until this process ends."""
    try:
        message, fds, _, _ = socket.recv_fds(from_run, 1, MAX_FDS, socket.MSG_CMSG_CLOEXEC)
        kept.extend(fds)
        if message:
            socket.send_fds(to_argv, [message], fds)
    except OSError:
        pass  # ARGV has ended, or the run has: nothing is held, or everything ends
    finally:
        from_run.close()
        to_argv.close()


def main(argv: list[str]) -> int:
    options, argv = _parse(argv)
    adopt_orphans()
    parent, folder = int(options.get("--parent", "0")), options.get("--folder")
    if parent and not die_with_parent(parent, signal.SIGTERM):  # SIGTERM: it ends what is below first
        _orphaned(parent, folder)
        return 128 + signal.SIGTERM

    def stop(signum, frame):  # told to stop, or the run has gone: what runs below goes first
        end_descendants(GRACE_S if not parent or os.getppid() == parent else 0.0)
        # The run's own stop, or every process of the job told at once (Slurm's scancel): then the
        # run goes too, in a moment, and leaves the folder to this process.
        until = time.monotonic() + RUN_GOING_S
        while parent and folder and os.getppid() == parent and time.monotonic() < until:
            time.sleep(0.01)
        _orphaned(parent, folder)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    relay = None
    if "--hold" in options:  # ARGV's socket at the run's descriptor number; the run's end kept here
        fd = int(options["--hold"])
        from_run = socket.socket(fileno=os.dup(fd))  # not inheritable, as every socket made here
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        os.dup2(theirs.fileno(), fd)  # inheritable: ARGV's
        theirs.close()
        relay = (from_run, mine)
    try:
        child = subprocess.Popen(  # with what the run passed down for it (inheritable here): its pipes
            argv,
            close_fds=False,
            preexec_fn=(lambda: _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)) if parent else None,  # noqa: PLW1509
        )
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    _close_inherited()
    kept: list[int] = []
    if relay is not None:
        threading.Thread(target=_relay_locks, args=(*relay, kept), daemon=True).start()
    status = child.wait()
    end_descendants(GRACE_S if parent else 0.0)
    _orphaned(parent, folder)
    return status if status >= 0 else 128 - status


def _orphaned(parent: int, folder: str | None) -> None:
    """Where the run has gone, remove the folder it would have removed (it reads ARGV's output there
    once this process has ended)."""
    if folder and parent and os.getppid() != parent:
        shutil.rmtree(folder, ignore_errors=True)


def _close_inherited() -> None:
    """Close this process's copies of what the run passed down for ARGV (ARGV's end of a pipe held
    here too would never read as closed when ARGV's process ends)."""
    for fd in _open_fds():
        try:
            if fd > 2 and os.get_inheritable(fd):
                os.close(fd)
        except OSError:  # the descriptor listing /proc/self/fd itself, closed since
            pass


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return []


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
