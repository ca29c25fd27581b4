"""Host-wide exclusive GPU locks: one file per GPU, named by its UUID (the same whatever CUDA numbers
it), held with ``fcntl.flock`` so that a lock dies with the last process holding it (a killed run
leaves no stale lock), in a folder only this user can write.

The holder writes who it is into its lock (pid, test, start time), for the "who holds what" of a
test that waited in vain. The folder is refused, never repaired, when another user made it first,
it is a link, or others may write it: anyone who can write there can take or fake every lock.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, TypeVar

from ..core.lease_policy import STOPPED_S, in_line, in_line_before

# Not $TMPDIR: two runs on one host must find the same locks whatever temporary folder each job sets.
DEFAULT_FOLDER = "/tmp/pytest-gputopo-leases-{uid}"
MAX_HOLDER_BYTES = 4096
T = TypeVar("T")


class LockFolderError(OSError):
    """The lock folder cannot be trusted or made; the message names it and says why."""


class Holder(NamedTuple):
    pid: int
    test: str
    since: float  # time.time() when the lease was taken

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.test}, since {time.strftime('%H:%M:%S', time.localtime(self.since))})"


def holder_of(raw: dict) -> Holder:
    """A lock's record, validated (a record is anyone's writing)."""
    return Holder(valid_pid(raw["pid"]), str(raw["test"])[:MAX_HOLDER_BYTES], valid_time(raw["since"]))


class Unusable(NamedTuple):
    """A GPU whose lock file cannot be trusted (a FIFO, a folder, a link, another user's file): no
    lease takes it, and a test that waits for it is told why."""

    why: str

    def __str__(self) -> str:
        return f"nobody: {self.why}"


def valid_pid(value) -> int:
    """A record's pid: a positive whole number (a record is anyone's writing: validated)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
        raise ValueError(f"not a pid: {value!r}")
    return value


def valid_time(value) -> float:
    """A record's time.time(): finite, after 1970 and before 5138 (``time.localtime`` takes it)."""
    found = float(value)
    if not math.isfinite(found) or not 0 <= found < 1e11:
        raise ValueError(f"not a time: {value!r}")
    return found


def valid_budget(value) -> float:
    """A record's memory budget in GiB (a share's, a ticket's): a number above 0 and below 1e6."""
    if isinstance(value, bool):
        raise ValueError(f"not a budget: {value!r}")
    found = float(value)
    if not 0 < found < 1e6:  # (NaN too)
        raise ValueError(f"not a budget: {value!r}")
    return found


def default_folder() -> str:
    return DEFAULT_FOLDER.format(uid=os.getuid())


def lock_folder(path: str) -> str:
    """``path``, made (0700) if absent; a folder that is a link, another user's, or writable by
    group or others is a ``LockFolderError`` saying which."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LockFolderError(f"the GPU lease folder {path} cannot be made: {exc.strerror}") from None
    info = os.lstat(path)
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "is a symbolic link" if stat.S_ISLNK(info.st_mode) else "is not a folder"
    elif info.st_uid != os.getuid():
        problem = f"belongs to another user (uid {info.st_uid}), who made it first"
    elif info.st_mode & 0o022:
        problem = f"may be written by users other than its owner (mode {stat.S_IMODE(info.st_mode):04o})"
    if problem:
        raise LockFolderError(f"the GPU lease folder {path} {problem}")
    return path


def lock_path(folder: str, uuid: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9-]{1,80}", uuid):
        raise ValueError(f"{uuid[:80]!r} is not a GPU UUID")
    return os.path.join(folder, f"{uuid}.lock")


def open_own_file(path: str, flags: int) -> int:
    """The lock file, never through a link and only when it is this user's regular file: anything
    else there is a ``LockFolderError`` naming it, at once (``O_NONBLOCK``: a FIFO's open would wait
    for a writer; on a regular file it changes nothing)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except FileNotFoundError:
        raise
    except OSError as exc:  # a link (ELOOP), a folder (EISDIR), another user's file (EACCES), ...
        raise LockFolderError(f"the GPU lock {path} cannot be opened: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"another user's (uid {info.st_uid})"
        raise LockFolderError(f"the GPU lock {path} is {what}: no lease holds this GPU while it is there")
    return fd


class GpuLock:
    """One GPU's lock, taken or not. The file descriptor is close-on-exec: a process the test starts
    does not keep the GPU when the test ends (pass ``fd`` on to a child that should hold it too)."""

    def __init__(self, folder: str, uuid: str):
        self.path = lock_path(folder, uuid)
        self.fd: int | None = None

    @property
    def fds(self) -> list[int]:
        return [] if self.fd is None else [self.fd]

    def take(self, holder: Holder) -> bool:
        """Take it now, writing who holds it; False when another process holds it, or its file
        cannot be trusted (``holder`` says why)."""
        try:
            fd = open_own_file(self.path, os.O_RDWR | os.O_CREAT)
        except LockFolderError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        self.say(holder)
        return True

    def say(self, holder: Holder) -> None:
        """Write who holds it now (a lease kept for the next test: that test, since it began)."""
        if self.fd is not None:  # in one write, padded over a longer record before (``Ticket._write``)
            record = json.dumps(holder._asdict()).encode()[:MAX_HOLDER_BYTES]
            size = os.fstat(self.fd).st_size
            if size > MAX_HOLDER_BYTES:  # a file grown by someone else: cut to what is read, once, held
                os.ftruncate(self.fd, MAX_HOLDER_BYTES)
            os.pwrite(self.fd, record.ljust(min(size, MAX_HOLDER_BYTES)), 0)

    def release(self, handed_on: bool = False) -> None:
        """Let it go; ``handed_on``: a process this one passed ``fd`` to may hold it still (its lock
        goes when that process ends), and it is still who the lock says holds it."""
        if self.fd is not None:
            if not handed_on:
                os.ftruncate(self.fd, 0)  # while still held: no reader sees a former holder as the current one
            os.close(self.fd)  # the lock goes with the last descriptor of this open file
            self.fd = None


def holder(folder: str, uuid: str) -> Holder | Unusable | None | bool:
    """Who holds the GPU's lock: a ``Holder``, True where it is held by a process that has not said
    who it is (yet, or not readably), ``Unusable`` where its file cannot be trusted, None where it
    is free."""
    try:
        fd = open_own_file(lock_path(folder, uuid), os.O_RDONLY)
    except FileNotFoundError:
        return None
    except LockFolderError as exc:
        return Unusable(str(exc))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # we could lock it: nobody holds it (closing the descriptor lets it go)
        except BlockingIOError:
            pass
        found = read_record(fd, holder_of)
        return True if found is None else found  # (None: empty while its holder has not said yet)
    finally:
        os.close(fd)


# Waiting in turn: a test that finds no free set writes a ticket (its own file, flock'd, so that it
# dies with its process as a lock does) naming the GPUs it reserves; a test that comes later may not
# take those GPUs, so a large set is not starved by small tests that keep taking its GPUs one by one.
TICKET_PREFIX = "wait-"
STALE_TICKET_S = 60.0  # an unlocked ticket older than this is removed by whoever reads it


class Waiter(NamedTuple):
    pid: int
    test: str
    since: float  # time.time() when it began to wait: who came first is served first
    reserved: tuple[str, ...]  # UUIDs of the GPUs it waits for
    # Under xdist, a test of a run (``run``, an id its workers share) goes before the run's waiting
    # tests that come after it in the run's order: ``turn`` is (when it waits from against others,
    # its place in the run's order), from ``turn_in``.
    turn: tuple[float, int] | None = None
    run: str | None = None
    looked: float = 0.0  # time.time() of its last look at the locks, its reservation made from it
    budget_gib: float | None = None  # its memory budget on each GPU it reserved; None: the whole GPUs

    def place(self) -> tuple[float, int, int]:
        return in_line(self.turn, self.since, self.pid)

    def before(self, other: Waiter) -> bool:
        return in_line_before(self.place(), other.place())


class Ticket:
    """This process's place in the queue while one of its tests waits for GPUs."""

    def __init__(
        self,
        folder: str,
        pid: int,
        test: str,
        since: float,
        turn: tuple[float, int] | None = None,
        run: str | None = None,
    ):
        self.path = os.path.join(folder, f"{TICKET_PREFIX}{pid}-{os.urandom(4).hex()}")  # unique across pid namespaces
        self.me = Waiter(pid, test, since, (), turn, run, time.time())
        fd = open_own_file(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a new file of its own: nobody else holds it
        self.fd: int | None = fd
        self._length = 0  # of the longest record written: a shorter one is padded to it
        self._write(fd)

    def reserve(self, uuids: Iterable[str], looked: float | None = None, budget_gib: float | None = None) -> None:
        """Say which GPUs this test waits for, with its budget on each (None: whole GPUs), and when it
        looked at the locks to choose them (``looked``; written only when one of them changes)."""
        reserved = tuple(uuids)  # once: a generator read twice is empty the second time
        seen = self.me.looked if looked is None else looked
        wanted = (reserved, seen, budget_gib)
        if wanted != (self.me.reserved, self.me.looked, self.me.budget_gib) and self.fd is not None:
            self.me = self.me._replace(reserved=reserved, looked=seen, budget_gib=budget_gib)
            self._write(self.fd)

    def _write(self, fd: int) -> None:
        """One write, never a truncation first (a reader between the two saw an empty file, and the
        reservation vanished for a look); a shorter record is padded with spaces, which JSON allows
        after it. A read racing it may still see part of each record: ``read_record`` reads again.
        Written at every look (``looked``)."""
        record = json.dumps(self.me._asdict()).encode()[:MAX_HOLDER_BYTES]
        os.pwrite(fd, record.ljust(self._length), 0)
        self._length = max(self._length, len(record))

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = None


def read_record(fd: int, check: Callable[[dict], T]) -> T | None:
    """A live ticket's (or held lock's) record, as ``check`` reads it (raising ValueError, TypeError,
    KeyError, IndexError or OverflowError where it is not one), or None: not one, or none yet (an
    empty file, being made). Read again where a read caught it being written: Linux copies a page to
    a reader without the writer's lock, so a read racing ``Ticket._write`` can return part of each
    record (seen 8 times in 233,000 reads of a ticket rewritten 20,000 times a second), which may even
    parse; skipped, a waiting test's reservation would vanish for a look."""
    for _ in range(5):
        try:
            raw = json.loads(os.pread(fd, MAX_HOLDER_BYTES, 0) or b"null")
            if raw is None:
                return None
            if not isinstance(raw, dict):
                raise TypeError("not a record")
            return check(raw)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError):
            continue  # (RecursionError: 3,000 nested "[" exhaust the parser's stack)
    return None


def waiters(folder: str) -> list[tuple[str, Waiter]]:
    """The tests waiting for GPUs now, with their tickets' paths (a ticket whose process is gone is
    stale and left out)."""
    found = []
    for name in os.listdir(folder):
        if not name.startswith(TICKET_PREFIX):
            continue
        path = os.path.join(folder, name)
        try:
            fd = open_own_file(path, os.O_RDONLY)
        except OSError:  # gone meanwhile, or not this user's regular file (LockFolderError)
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                if time.time() - os.fstat(fd).st_mtime > STALE_TICKET_S:  # its process is gone: no reservation
                    try:
                        os.unlink(path)
                    except OSError:  # another reader was first
                        pass
                continue  # (a young one may be being made: read it at the next poll)
            except BlockingIOError:
                pass
            waiter = read_record(fd, _waiter)
            if waiter is not None:  # (else being made, or not a ticket of ours: read at the next poll)
                found.append((path, waiter))
        finally:
            os.close(fd)
    return found


def _waiter(raw: dict) -> Waiter:
    """A live ticket's record, validated (ValueError, TypeError, KeyError, ... where it is not one)."""
    turn, run = raw.get("turn"), raw.get("run")
    reserved = raw["reserved"]
    if not isinstance(reserved, list) or len(reserved) > 4096:
        raise ValueError("not a list of GPUs")
    return Waiter(
        valid_pid(raw["pid"]),
        str(raw["test"])[:MAX_HOLDER_BYTES],
        valid_time(raw["since"]),
        tuple(str(u) for u in reserved),
        None if turn is None else (valid_time(turn[0]), int(turn[1])),
        None if run is None else str(run),
        valid_time(raw.get("looked", 0.0)),
        None if raw.get("budget_gib") is None else valid_budget(raw["budget_gib"]),
    )


def stopped_looking(waiter: Waiter, now: float) -> bool:
    """Whether ``waiter`` has not looked at the locks for ``STOPPED_S`` (a waiting test looks every
    poll): its process is stopped (Ctrl-Z, a frozen job) or stuck, and its reservation holds nobody
    back -- else it would keep every GPU it reserved idle for as long as it is stopped."""
    return now - waiter.looked > STOPPED_S


def waiting_before(folder: str, ticket: Ticket | Waiter | None) -> list[Waiter]:
    """The tests waiting before ``ticket``'s (a ``Waiter``: a test that would wait in that place;
    None: every waiting test), those that stopped looking left out (``stopped_looking``)."""
    me = ticket.me if isinstance(ticket, Ticket) else ticket
    mine = ticket.path if isinstance(ticket, Ticket) else None
    now = time.time()
    return [
        w
        for path, w in waiters(folder)
        if (me is None or (path != mine and w.before(me))) and not stopped_looking(w, now)
    ]


def reserved_before(folder: str, ticket: Ticket | Waiter | None) -> set[str]:
    """The GPUs reserved by the tests waiting before ``ticket``'s: not for this test to take."""
    return {u for w in waiting_before(folder, ticket) for u in w.reserved}


def turn_in(folder: str, run: str, since: float, place: int) -> tuple[float, int]:
    """The turn of a test of ``run`` that waits from ``since``, ``place``-th in the run's order. It
    goes before the run's waiting tests that come after it in the run's order (a large test handed
    out after the run's first round, whose small tests all wait from the run's start): it waits from
    the earliest of their turns, and its place decides between them. Where none is waiting, from its
    own start: as tests are handed out in the run's order, that is most of them, and another run's
    tests are served as they came against them."""
    later = [w.turn[0] for _, w in waiters(folder) if w.run == run and w.turn is not None and w.turn[1] > place]
    return (min([since, *later]), place)
