"""The lock folder is hostile ground (issue 41 item 3): whatever another process left at a lock or
ticket path, a run neither blocks nor ends with an INTERNALERROR; a GPU whose lock file cannot be
trusted is never leased and is named; records are read up to their bound and validated; a waiting
test that stopped looking reserves nothing.

Before: a FIFO at a lock or ticket path hung the run past ``--gputopo-lease-timeout`` (open(2) of a
FIFO for reading waits for a writer unless ``O_NONBLOCK``, fifo(7)); a folder, a symbolic link or
another user's file at a lock path, a ticket saying ``1e400`` (``float`` gives inf; ``int(inf)`` and
``time.localtime(inf)`` raise OverflowError) or 3,000 nested ``[`` (``json.loads`` raises
RecursionError, not ValueError) ended the run with an INTERNALERROR; a 300 MB lock file was padded
to its size at every record written; a stopped waiting run kept every GPU it reserved.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from emulated import emulated_libs, needs_compiler  # noqa: F401  (a fixture)
from lease_comparison import host_env, lease_args
from pytest_gputopo.probe.recorded import load_profile
from pytest_gputopo.runtime import gpu_locks

UUID = "GPU-00000000-0000-0000-0000-000000000001"


def _soon(call, guard_s: float = 30.0):
    """``call()``'s result, from a thread: a call that blocks fails the test (a hang guard)."""
    found: list = []
    thread = threading.Thread(target=lambda: found.append(call()), daemon=True)
    thread.start()
    thread.join(guard_s)
    assert not thread.is_alive(), f"{call} blocked"
    return found[0]


def _lock_path(folder) -> str:
    return os.path.join(str(folder), f"{UUID}.lock")


def _plant(folder, what: str) -> None:
    path = _lock_path(folder)
    if what == "a FIFO":
        os.mkfifo(path)
    elif what == "a folder":
        os.mkdir(path)
    elif what == "a symbolic link":
        os.symlink(os.path.join(str(folder), "elsewhere"), path)
    elif what == "another user's file":
        if os.getuid() != 0:
            pytest.skip("only root can give a file to another user here")
        with open(path, "w") as handle:
            handle.write("{}")
        os.chown(path, 12345, 12345)


@pytest.mark.parametrize("planted", ["a FIFO", "a folder", "a symbolic link", "another user's file"])
def test_a_lock_path_that_is_not_this_users_file_is_never_taken_and_named_without_blocking(tmp_path, planted):
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    _plant(folder, planted)
    found = _soon(lambda: gpu_locks.holder(folder, UUID))
    assert isinstance(found, gpu_locks.Unusable) and _lock_path(folder) in str(found), found
    lock = gpu_locks.GpuLock(folder, UUID)
    assert _soon(lambda: lock.take(gpu_locks.Holder(os.getpid(), "t", time.time()))) is False
    assert lock.fd is None


def test_a_fifo_among_the_tickets_is_passed_over_without_blocking(tmp_path):
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    os.mkfifo(os.path.join(folder, f"{gpu_locks.TICKET_PREFIX}1-fifo"))
    assert _soon(lambda: gpu_locks.waiters(folder)) == []


def _live_ticket(folder, record: bytes) -> int:
    """A ticket held by a live process (this one, another open file than the reader's)."""
    fd = os.open(os.path.join(folder, f"{gpu_locks.TICKET_PREFIX}{os.getpid()}-planted"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, record, 0)
    return fd


GOOD = {"pid": 4242, "test": "t", "since": 1.7e9, "reserved": [UUID], "looked": 1.7e9}


@pytest.mark.parametrize(
    "record",
    [
        json.dumps(GOOD | {"since": 1e400}).encode(),  # inf: localtime and int() overflow
        json.dumps(GOOD | {"pid": 1e400}).encode(),
        json.dumps(GOOD | {"turn": [1e400, 1]}).encode(),
        json.dumps(GOOD | {"pid": True}).encode(),
        json.dumps(GOOD | {"reserved": "GPU-1"}).encode(),
        b"[" * 3000 + b"]" * 3000,
        b'{"pid": 4242, "test": ' + b"[" * 3000,
    ],
    ids=["since 1e400", "pid 1e400", "turn 1e400", "pid true", "reserved a string", "3000 [", "cut"],
)
def test_a_ticket_that_is_no_ticket_of_ours_is_skipped(tmp_path, record):
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    fd = _live_ticket(folder, record)
    try:
        assert gpu_locks.waiters(folder) == []
        assert gpu_locks.reserved_before(folder, None) == set()
    finally:
        os.close(fd)


@pytest.mark.parametrize("record", [{"pid": 1e400, "test": "t", "since": 1}, {"pid": 1, "test": "t", "since": 1e400}])
def test_a_held_lock_whose_record_is_odd_is_held_by_someone_unnamed(tmp_path, record):
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    fd = os.open(_lock_path(folder), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    try:
        assert gpu_locks.holder(folder, UUID) is True
    finally:
        os.close(fd)


def test_a_huge_lock_file_is_cut_to_one_record_when_taken_not_padded_to_its_size(tmp_path):
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    with open(_lock_path(folder), "wb") as handle:
        handle.truncate(300 * 2**20)  # 300 MB (sparse)
    lock = gpu_locks.GpuLock(folder, UUID)
    holder = gpu_locks.Holder(os.getpid(), "t", time.time())
    assert lock.take(holder)
    lock.say(holder._replace(test="a longer name than before"))
    try:
        assert os.path.getsize(_lock_path(folder)) <= gpu_locks.MAX_HOLDER_BYTES
        with open(_lock_path(folder), "rb") as handle:
            assert json.loads(handle.read())["test"] == "a longer name than before"
    finally:
        lock.release()


def test_a_waiting_test_that_stopped_looking_reserves_nothing_and_is_named_so(tmp_path):
    """A run stopped while it waited (Ctrl-Z, a frozen job) kept every GPU it reserved idle: another
    run's one-GPU test failed with all eight idle. Its ticket lives (its process does), but a waiter
    that has not looked for ``STOPPED_S`` holds nobody back."""
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    now = time.time()
    stopped = _live_ticket(folder, json.dumps(GOOD | {"since": now - 100, "looked": now - 100}).encode())
    try:
        (found,) = [w for _, w in gpu_locks.waiters(folder)]
        assert gpu_locks.stopped_looking(found, now) and gpu_locks.reserved_before(folder, None) == set()
    finally:
        os.close(stopped)
    looking = _live_ticket(folder, json.dumps(GOOD | {"since": now - 100, "looked": now}).encode())
    try:
        assert gpu_locks.reserved_before(folder, None) == {UUID}
    finally:
        os.close(looking)


@pytest.mark.slow
@needs_compiler
def test_a_run_whose_gpus_lock_is_a_fifo_fails_that_test_naming_it_and_never_hangs(emulated_libs, tmp_path):
    """On the emulated one-GPU host, a FIFO planted at the GPU's lock: the leased test waits its
    ``--gputopo-lease-timeout`` and fails naming the file; the run ends, without an INTERNALERROR."""
    env = host_env(tmp_path, emulated_libs, "single-gpu")
    (gpu,) = load_profile("single-gpu").topology.gpus
    locks = gpu_locks.lock_folder(str(tmp_path / "locks"))
    os.mkfifo(os.path.join(locks, f"{gpu.uuid}.lock"))
    (tmp_path / "test_it.py").write_text("import pytest\n@pytest.mark.requires_gpus(1)\ndef test_one():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *lease_args(locks)]
        + ["--gputopo-lease-timeout=1"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "INTERNALERROR" not in done.stdout + done.stderr, done.stdout[-3000:]
    assert done.returncode == 1 and "is not a regular file" in done.stdout, done.stdout[-3000:]
