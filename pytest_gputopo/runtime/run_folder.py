"""The run's own temporary folders (where xdist's processes share the machine and the benchmarks; a
``ranks(n)`` test's store, results and stacks; a lease's process's spec and output), made private,
and never left behind for good: a run ended by SIGTERM or SIGKILL cannot remove them, and the plugin
installs no signal handler in the user's process, so a later run removes them instead.

While its run lives, the folder's ``.owner`` file is locked (``flock``) by the process that made it;
the kernel drops the lock when that process ends, however it ends (and sees it across PID namespaces
that share the folder). A later run removes each folder of this user whose lock it can take, so
never one whose owner still runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time

try:
    import fcntl
except ImportError:  # not POSIX: no lock, and nothing judged abandoned
    fcntl = None  # type: ignore[assignment]

PREFIX = "pytest-gputopo-run-"
RANKS = "pytest-gputopo-ranks-"  # a ranks(n) test's folder
LEASE = "pytest-gputopo-lease-"  # a leased test's process's folder (its spec, its output)
PREFIXES = (PREFIX, RANKS, LEASE)
OWNER = ".owner"
# Between making a folder and locking it its owner takes microseconds; a folder younger than this is
# never judged abandoned.
YOUNG_S = 60.0
_held: dict[str, int] = {}  # folder -> the descriptor whose lock says its run lives


def make(prefix: str = PREFIX) -> str:
    """A new private folder (named ``prefix``, one of ``PREFIXES``) for this run, locked as alive
    until ``remove``; abandoned ones of this user (their run was killed) are removed first."""
    remove_abandoned(tempfile.gettempdir())
    folder = tempfile.mkdtemp(prefix=prefix)
    if fcntl is None:
        return folder
    fd = os.open(os.path.join(folder, OWNER), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _held[folder] = fd
    return folder


def remove(folder: str) -> None:
    """The end of this run's folder: removed, and its lock let go."""
    shutil.rmtree(folder, ignore_errors=True)
    fd = _held.pop(folder, None)
    if fd is not None:
        os.close(fd)


def remove_abandoned(parent: str) -> list[str]:
    """Remove the run folders in ``parent`` that are this user's and whose run no longer holds them
    (their ``.owner`` lock is free); the paths removed. Another user's folder, a link, a folder
    without its lock file (not made this way) or a young one is left alone."""
    if fcntl is None:
        return []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIXES)]
    except OSError:
        return []
    removed = []
    for name in names:
        folder = os.path.join(parent, name)
        try:
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or time.time() - info.st_mtime < YOUNG_S:
                continue
            fd = os.open(os.path.join(folder, OWNER), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its run still holds it
            continue
        else:
            shutil.rmtree(folder, ignore_errors=True)  # removes without following links in it
            removed.append(folder)
        finally:
            os.close(fd)
    return removed
