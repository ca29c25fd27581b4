"""GPU leases that share a GPU by memory. A lease with a memory budget holds the GPU's lock file
shared (``flock(LOCK_SH)``: an exclusive lease, ``LOCK_EX``, cannot take the GPU while any share holds
it, nor a share while an exclusive lease does) and a record of its own, ``<uuid>.<id>.share``, locked
by it, saying who holds how much (pid, test, since, budget in GiB). Whether a new budget fits beside
the others is decided under the GPU's short mutex, ``<uuid>.mutex``, so that two budgets never both
take the same room; a record whose lock has gone is a dead holder's, removed there. Like the
exclusive locks (``gpu_locks``) every one dies with the last process holding its descriptors.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .gpu_locks import (
    MAX_HOLDER_BYTES,
    Holder,
    LockFolderError,
    holder_of,
    lock_path,
    open_own_file,
    read_record,
    valid_budget,
)

SHARE = ".share"
MUTEX = ".mutex"
MUTEX_WAIT_S = 1.0  # the mutex is held for a few file operations; one held longer is a stopped process's


class Share(NamedTuple):
    holder: Holder
    budget_gib: float


def _prefix(folder: str, uuid: str) -> str:
    return lock_path(folder, uuid)[: -len(".lock")]  # the GPU's UUID, checked, in the folder


def shares(folder: str, uuid: str) -> list[Share]:
    """The live shares of the GPU (a record whose lock has gone, or that is not one, left out)."""
    return every_share(folder).get(uuid, [])


def every_share(folder: str) -> dict[str, list[Share]]:
    """The live shares of every GPU, by UUID, from one listing of the folder."""
    found: dict[str, list[Share]] = {}
    for name in os.listdir(folder):
        if name.endswith(SHARE):
            share = _live(os.path.join(folder, name))
            if isinstance(share, Share):
                found.setdefault(name.split(".", 1)[0], []).append(share)  # <uuid>.<id>.share
    return found


def _share_paths(folder: str, uuid: str) -> list[str]:
    prefix = os.path.basename(_prefix(folder, uuid)) + "."
    return [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(SHARE)]


def _live(path: str, remove_dead: bool = False) -> Share | bool:
    """The share recorded at ``path``: a ``Share``, True where it is held but not readable (yet),
    False where its holder has gone (removed where ``remove_dead``: only under the mutex)."""
    try:
        fd = open_own_file(path, os.O_RDONLY)
    except OSError:  # gone meanwhile, or not this user's regular file
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # its holder holds it
            found = read_record(fd, _share)
            return True if found is None else found  # (None: not readable yet)
        if remove_dead:
            os.unlink(path)
        return False
    finally:
        os.close(fd)


def _share(raw: dict) -> Share:
    return Share(holder_of(raw), valid_budget(raw["budget_gib"]))


class SharedLock:
    """A share of one GPU's memory, taken or not: the GPU's lock file held shared, and this share's
    record held. Its descriptors are close-on-exec (``fds``: pass them on to a process that should
    hold the share too)."""

    def __init__(self, folder: str, uuid: str, budget_gib: float):
        self.folder, self.uuid, self.budget_gib = folder, uuid, budget_gib
        self.fd: int | None = None  # the GPU's lock file, held shared
        self.record: int | None = None
        self.path = f"{_prefix(folder, uuid)}.{os.getpid()}-{os.urandom(4).hex()}{SHARE}"

    @property
    def fds(self) -> list[int]:
        return [fd for fd in (self.fd, self.record) if fd is not None]

    def take(self, holder: Holder, fits: Callable[[Sequence[float]], bool]) -> bool:
        """Take the share now if ``fits(the budgets of the GPU's live shares)``; False where it does
        not, an exclusive lease holds the GPU, its files cannot be trusted, or the mutex stays held."""
        try:
            mutex = open_own_file(f"{_prefix(self.folder, self.uuid)}{MUTEX}", os.O_RDWR | os.O_CREAT)
        except LockFolderError:
            return False
        try:
            return _hold_mutex(mutex) and self._take(holder, fits)
        finally:
            os.close(mutex)  # (its lock goes with it)

    def _take(self, holder: Holder, fits: Callable[[Sequence[float]], bool]) -> bool:
        try:
            fd = open_own_file(lock_path(self.folder, self.uuid), os.O_RDWR | os.O_CREAT)
        except LockFolderError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # an exclusive lease holds it
            os.close(fd)
            return False
        live = [_live(path, remove_dead=True) for path in _share_paths(self.folder, self.uuid)]
        if any(share is True for share in live) or not fits([s.budget_gib for s in live if isinstance(s, Share)]):
            os.close(fd)  # (a share not readable yet: its budget unknown, nothing fits beside it)
            return False
        record = open_own_file(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        fcntl.flock(record, fcntl.LOCK_EX)  # a new file of its own: nobody else holds it
        self.fd, self.record = fd, record
        self.say(holder)
        return True

    def say(self, holder: Holder) -> None:
        """Write who holds the share, and its budget."""
        if self.record is not None:
            entry = {**holder._asdict(), "budget_gib": self.budget_gib}
            os.ftruncate(self.record, 0)  # (read under its lock only by readers that find it held)
            os.pwrite(self.record, json.dumps(entry).encode()[:MAX_HOLDER_BYTES], 0)

    def release(self, handed_on: bool = False) -> None:
        """Let it go; ``handed_on``: a process this one passed ``fds`` to may hold it still (its
        record stays, removed under the mutex once that process has gone)."""
        if self.record is not None and not handed_on:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        for fd in self.fds:
            os.close(fd)
        self.fd = self.record = None


def _hold_mutex(fd: int) -> bool:
    """The GPU's mutex, waited for up to ``MUTEX_WAIT_S`` (never blocked on: a process stopped while
    holding it would hold every taker)."""
    until = time.monotonic() + MUTEX_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > until:
                return False
            time.sleep(0.005)
