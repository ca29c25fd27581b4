"""Ten ways two gloo ranks hang (tests/test_rank_hangs.py runs them as a test module): each test's docstring is
its culprit, "rank | what the line names"."""

import threading
import time

import pytest
import torch
import torch.distributed as dist


def stuck_in_user_code():
    time.sleep(600)


@pytest.mark.ranks(2, timeout=10)
def test_mismatched_collectives(gputopo_rank):
    """1 | broadcast #1"""
    t = torch.ones(4)
    if gputopo_rank.rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=0)
    dist.barrier()


@pytest.mark.ranks(2, timeout=10)
def test_missing_barrier(gputopo_rank):
    """1 | barrier #1"""
    if gputopo_rank.rank == 0:
        dist.barrier()


@pytest.mark.ranks(2, timeout=10)
def test_one_rank_raised(gputopo_rank):
    """1 | all_reduce #2"""
    t = torch.ones(4)
    dist.all_reduce(t)
    if gputopo_rank.rank == 1:
        raise ValueError("rank 1 gives up")
    dist.all_reduce(t)


@pytest.mark.ranks(2, timeout=10)
def test_skip_on_one_rank(gputopo_rank):
    """1 | all_reduce #1"""
    if gputopo_rank.rank == 1:
        pytest.skip("not on rank 1")
    dist.all_reduce(torch.ones(4))


@pytest.mark.ranks(2, timeout=10)
def test_mismatched_shapes(gputopo_rank):
    """1 | all_reduce #1"""
    dist.all_reduce(torch.ones(4 if gputopo_rank.rank == 0 else 8))
    dist.barrier()


@pytest.mark.ranks(2, timeout=10)
def test_send_without_recv(gputopo_rank):
    """1 | send #1 to rank 1"""
    if gputopo_rank.rank == 0:
        dist.send(torch.ones(1 << 20), dst=1)
    dist.barrier()


@pytest.mark.ranks(2, timeout=10)
def test_stuck_in_user_code(gputopo_rank):
    """1 | all_reduce #1"""
    if gputopo_rank.rank == 1:
        stuck_in_user_code()
    dist.all_reduce(torch.ones(4))


@pytest.mark.ranks(2, timeout=10)
def test_stuck_in_exit(gputopo_rank):
    """1 | hung in exit"""
    dist.all_reduce(torch.ones(4))
    if gputopo_rank.rank == 1:
        threading.Thread(target=stuck_in_user_code).start()  # not a daemon: the process waits for it
        raise AssertionError("rank 1 failed, then cannot exit")


@pytest.mark.ranks(2, timeout=10)
def test_deadlocked_store_read(gputopo_rank):
    """0 | never-set"""
    if gputopo_rank.rank == 0:
        dist.distributed_c10d._get_default_store().get("never-set")


@pytest.mark.ranks(2, timeout=10)
def test_subgroup_one_rank_never_joined(gputopo_rank):
    """1 | new_group #1"""
    if gputopo_rank.rank == 0:
        group = dist.new_group([0, 1])
        dist.all_reduce(torch.ones(4), group=group)
