"""Leases that share a GPU by memory (``runtime/gpu_shares.py``, issue 42 item 1), with real locks in
this process and in others: budgets that fit share the GPU, one that does not waits, shares and an
exclusive lease never hold one GPU together, a dead holder's record counts for nothing, and the
lock folder stays hostile ground (a FIFO at the mutex, a record that is not one).

Sources: flock(2) (``LOCK_SH`` and ``LOCK_EX`` exclude each other across open files; a lock goes with
the last descriptor of its open file)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_gputopo.runtime import gpu_locks, gpu_shares
from pytest_gputopo.runtime.gpu_locks import GpuLock, Holder

UUID = "GPU-00000000-85b8-4a64-8aa3-000000000000"


def under(limit):
    """``fits`` for a GPU of ``limit`` GiB: the budgets held and the new one's within it."""
    return lambda new: lambda held: sum(held) + new <= limit


def share(folder, budget, limit=80.0, test="t"):
    lock = gpu_shares.SharedLock(str(folder), UUID, budget)
    return lock if lock.take(Holder(os.getpid(), test, time.time()), under(limit)(budget)) else None


@pytest.fixture
def folder(tmp_path):
    return gpu_locks.lock_folder(str(tmp_path / "locks"))


def test_budgets_that_fit_share_a_gpu_and_one_that_does_not_waits(folder):
    first, second = share(folder, 30.0, test="a"), share(folder, 40.0, test="b")
    assert first is not None and second is not None
    assert share(folder, 20.0) is None  # 30 + 40 + 20 > 80
    assert sorted((s.holder.test, s.budget_gib) for s in gpu_shares.shares(folder, UUID)) == [("a", 30.0), ("b", 40.0)]
    first.release()
    third = share(folder, 20.0, test="c")
    assert third is not None and len(gpu_shares.shares(folder, UUID)) == 2
    for lock in (second, third):
        lock.release()
    assert gpu_shares.shares(folder, UUID) == [] and gpu_locks.holder(folder, UUID) is None


def test_shares_and_an_exclusive_lease_never_hold_a_gpu_together(folder):
    shared = share(folder, 10.0)
    exclusive = GpuLock(folder, UUID)
    assert not exclusive.take(Holder(os.getpid(), "whole", time.time()))
    shared.release()
    assert exclusive.take(Holder(os.getpid(), "whole", time.time()))
    assert share(folder, 10.0) is None
    exclusive.release()
    assert share(folder, 10.0) is not None


# A process that takes a share, says so, and waits to be killed.
HOLDER = """
import os, sys, time
from pytest_gputopo.runtime import gpu_shares
from pytest_gputopo.runtime.gpu_locks import Holder
lock = gpu_shares.SharedLock(sys.argv[1], sys.argv[2], 60.0)
assert lock.take(Holder(os.getpid(), "other", time.time()), lambda held: sum(held) + 60.0 <= 80.0)
print("held", flush=True)
time.sleep(120)
"""


def test_a_dead_holders_share_counts_for_nothing_and_its_record_goes(folder):
    other = subprocess.Popen([sys.executable, "-c", HOLDER, folder, UUID], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        assert [s.holder.pid for s in gpu_shares.shares(folder, UUID)] == [other.pid]
        assert share(folder, 30.0) is None  # 60 + 30 > 80
    finally:
        other.kill()
        other.wait()
        other.stdout.close()
    mine = share(folder, 30.0)
    assert mine is not None and [s.holder.pid for s in gpu_shares.shares(folder, UUID)] == [os.getpid()]
    assert len([n for n in os.listdir(folder) if n.endswith(".share")]) == 1  # the dead one's removed
    mine.release()


def test_a_share_handed_on_is_held_by_the_process_it_went_to(folder):
    """As a lease's keeper holds its descriptors: released here, the share holds while they live."""
    lock = share(folder, 50.0)
    kept = [os.dup(fd) for fd in lock.fds]
    lock.release(handed_on=True)
    assert share(folder, 50.0) is None  # 50 + 50 > 80: the share still holds
    for fd in kept:
        os.close(fd)
    assert share(folder, 50.0) is not None


def test_a_fifo_at_the_mutex_or_a_record_that_is_not_one_is_never_waited_on(folder):
    os.mkfifo(os.path.join(folder, f"{UUID}.mutex"))
    began = time.monotonic()
    assert share(folder, 10.0) is None  # refused at once, not blocked on the FIFO's open
    assert time.monotonic() - began < 30  # (a hang guard)
    os.unlink(os.path.join(folder, f"{UUID}.mutex"))
    odd = os.path.join(folder, f"{UUID}.odd{gpu_shares.SHARE}")
    with open(odd, "w") as handle:
        handle.write('{"pid": true, "budget_gib": 1e400}')
    assert gpu_shares.shares(folder, UUID) == []  # not held: nobody's, and not read as one
    assert share(folder, 10.0) is not None and not os.path.exists(odd)  # removed under the mutex
