"""``python -m pytest_gputopo.runtime.reaper [--parent PID] [--hold FD] [--folder PATH] -- ARGV...``: run
ARGV and, when it ends or this process is told to stop (SIGTERM), end every process it left behind --
also those that left its process group.

A benchmark's process group is killed at its deadline (``procs.Children``), but a wrapper script
of nccl-tests may start a helper with ``setsid``: a new session, out of the group's reach, orphaned
after the deadline. This process is a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``, see
prctl(2)): an orphan among its descendants is re-parented to it rather than to init, so it can find
each one (``/proc/<pid>/stat``: parent pid) and end it. It is a process of its own, started by
``procs.run_child(..., reap=True)`` or for a leased test's process (``lease_child``), or the process
of a rank, which forks its body below itself (``keep_a_fork``): the pytest process itself is never
made a subreaper and gets no signal handler.

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

import contextlib
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from .lineage import adopt_orphans, die_with_parent, dies_with_this_process, end_descendants

GRACE_S = 5.0  # SIGTERM -> SIGKILL for what is left below
RUN_GOING_S = 1.0  # told to stop: how long to see whether the run goes too (its folder is then ours)
MAX_FDS = 1024


def _become_keeper(parent: int, folder: str | None, grace_s: float) -> bool:
    """Make this process the keeper of what it starts next: orphans below come to it, it dies with
    ``parent`` (SIGTERM: it ends what is below first), SIGINT is left to what runs below. False where
    ``parent`` has gone already (its folder removed then)."""
    adopt_orphans()
    if parent and not die_with_parent(parent, signal.SIGTERM):
        _orphaned(parent, folder)
        return False

    def stop(signum, frame):  # told to stop, or the run has gone: what runs below goes first
        end_descendants(grace_s if not parent or os.getppid() == parent else 0.0)
        # The run's own stop, or every process of the job told at once (Slurm's scancel): then the
        # run goes too, in a moment, and leaves the folder to this process.
        until = time.monotonic() + RUN_GOING_S
        while parent and folder and os.getppid() == parent and time.monotonic() < until:
            time.sleep(0.01)
        _orphaned(parent, folder)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return True


def keep_a_fork(parent: int, folder: str | None, grace_s: float, deaf_to: tuple[int, ...] = ()) -> None:
    """Split this process in two: return in a new child, which goes on (and dies with this process:
    SIGKILL); this one becomes its keeper (``_become_keeper``, deaf to ``deaf_to`` too: signals sent
    to the group for the child) and never returns: once the child has ended, it ends what is left
    below and exits as the child did -- its status, or its signal. A rank's process (``rank_body``):
    a rank killed outright (the OOM killer, a segfault) leaves nothing running, a ``setsid`` helper
    included, and a run killed outright takes its ranks' helpers along."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    if not _become_keeper(parent, folder, grace_s):
        os._exit(128 + signal.SIGTERM)
    for sig in deaf_to:
        signal.signal(sig, signal.SIG_IGN)  # (inherited until the child sets its own handler)
    keeper = os.getpid()
    child = os.fork()
    if child == 0:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not die_with_parent(keeper):
            os._exit(128 + signal.SIGKILL)
        return
    status = (128 + signal.SIGKILL) << 8  # should anything below fail: this process never goes the child's way
    try:
        _, status = os.waitpid(child, 0)
        end_descendants(grace_s)
        _orphaned(parent, folder)
    finally:
        _exit_as(status)


def _exit_as(status: int) -> None:
    """Exit with the wait ``status`` of the child: its exit status, or killed by its signal (without a
    core of this process: the child's is the one that tells)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's cannot be set (nor needs to be)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default does not end a process (it did end the child)
    os._exit(os.waitstatus_to_exitcode(status))


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
    parent, folder = int(options.get("--parent", "0")), options.get("--folder")
    grace_s = GRACE_S if parent else 0.0  # a benchmark's helpers (no --parent) are ended at once
    if not _become_keeper(parent, folder, GRACE_S):
        return 128 + signal.SIGTERM
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
            preexec_fn=dies_with_this_process() if parent else None,  # noqa: PLW1509
        )
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    _close_inherited()
    kept: list[int] = []
    if relay is not None:
        threading.Thread(target=_relay_locks, args=(*relay, kept), daemon=True).start()
    status = child.wait()
    end_descendants(grace_s)
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
