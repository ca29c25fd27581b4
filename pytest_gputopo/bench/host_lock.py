"""One benchmark at a time on this host for this user, across processes: an advisory file lock in a
folder only this user owns (``$TMPDIR/pytest-gputopo-<uid>/bench.lock``), so that two pytest
processes (xdist workers, parallel jobs) never measure the same host at once. A lock that cannot be
taken safely (a link or a folder another user planted) is refused (``LockRefused``): the benchmarks
that need it error, naming the path and where to point instead, never skip as if unmeasurable."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time

try:
    import fcntl
except ImportError:  # not POSIX: no lock
    fcntl = None  # type: ignore[assignment]


class LockRefused(PermissionError):
    """The benchmark lock's folder is not this user's own: another user could make every benchmark of
    this user's runs wait or vanish, so the run's benchmarks error rather than skip with exit status 0."""


def _refused(what: str) -> LockRefused:
    return LockRefused(
        f"{what}: benchmarks do not run while it is there; remove it, or point TMPDIR at a folder "
        f"only you can write (e.g. TMPDIR=$HOME/tmp)"
    )


def lock_path() -> str:
    """The benchmark lock of this user: a file in a folder of the temporary directory that only this
    user owns and can write (0700, checked with lstat: no symlink another user planted in a sticky
    /tmp, no folder another user made first), opened without following links."""
    uid = os.getuid()
    folder = os.path.join(tempfile.gettempdir(), f"pytest-gputopo-{uid}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise _refused(
            f"the benchmark lock's folder {folder} is "
            + (f"owned by user id {info.st_uid}, not by you ({uid})" if stat.S_ISDIR(info.st_mode) else "not a folder")
        )
    if info.st_mode & 0o077:
        os.chmod(folder, 0o700)  # ours: made private (a link another user left in it is not followed)
    return os.path.join(folder, "bench.lock")


@contextlib.contextmanager
def host_lock(timeout_s: float):
    """One benchmark at a time on this host for this user, across processes (an advisory file lock).
    A lock that cannot be taken safely is ``LockRefused`` naming the path, never a file made elsewhere."""
    if fcntl is None:
        yield
        return
    path = lock_path()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # a folder or a link (ELOOP) under the name
        raise _refused(f"the benchmark lock {path} cannot be opened ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refused(f"the benchmark lock {path} is not a regular file")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another process held the benchmark lock {path} for {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
