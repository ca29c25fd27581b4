"""A warm pool of ranks (``ranks(n, pool=True)``, ``--gputopo-ranks-pool``): the ranks of one kind kept
between tests, each test's body sent by its id and number, the pool started afresh after a test that
failed, skipped on some ranks only, hung, or did not meet the barrier after it; for real on gloo.

Behaviour the pool rests on (installed torch 2.13): ``Work.wait(timeout)`` of a gloo barrier raises
``RuntimeError: Operation timed out!`` at its deadline (tried here: a rank waiting for one that never
comes); ``multiprocessing`` passes a ``Pipe``'s ends to spawned children (their descriptors, by
``reduction.DupFd``); the torch anchors' failures the pool is built against: PyTorch's
``MultiProcContinuousTest`` (torch/testing/_internal/common_distributed.py) reads a queued result of
an earlier test (PR #176259), DeepSpeed's ``reuse_dist_env`` hangs in ``destroy_process_group``
(#7334) -- so each result carries its test and number, and a pool is ended by signals, not by trust.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci_endings import alive
from pytest_gputopo.runtime.rank_messages import BodyJob, BodyResult
from pytest_gputopo.runtime.rank_pool import _taken

POOLED = """
import os
import time

import pytest
import torch
import torch.distributed as dist

NOTES = os.environ["POOL_NOTES"]


def note(name, rank):
    with open(NOTES, "a") as f:
        f.write(f"{name} {rank} {os.getpid()} {os.getppid()}\\n")


@pytest.mark.ranks(2, pool=True)
@pytest.mark.parametrize("i", range(3))
def test_reduce(gputopo_rank, i):
    note(f"reduce{i}", gputopo_rank.rank)
    t = torch.ones(1) * (i + 1)
    dist.all_reduce(t)
    print(f"rank {gputopo_rank.rank} says {i}")
    assert t.item() == 2 * (i + 1)


@pytest.mark.ranks(2, pool=True)
def test_fails(gputopo_rank):
    note("fails", gputopo_rank.rank)
    assert gputopo_rank.rank == 0, "rank 1 says no"


@pytest.mark.ranks(2, pool=True)
def test_after_a_failure(gputopo_rank):
    note("after_a_failure", gputopo_rank.rank)
    dist.barrier()


@pytest.mark.ranks(2, pool=True)
def test_skip_on_one(gputopo_rank):
    note("skip_on_one", gputopo_rank.rank)
    if gputopo_rank.rank == 1:
        pytest.skip("not on rank 1")


@pytest.mark.ranks(2, pool=True, timeout=8)
def test_hangs(gputopo_rank):
    note("hangs", gputopo_rank.rank)
    if gputopo_rank.rank == 1:
        time.sleep(600)
    dist.barrier()


@pytest.mark.ranks(2, pool=True)
def test_skip_on_all(gputopo_rank):
    note("skip_on_all", gputopo_rank.rank)
    pytest.skip("nowhere")


@pytest.mark.ranks(2, pool=True)
def test_after_skips(gputopo_rank):
    note("after_skips", gputopo_rank.rank)


@pytest.mark.ranks(2, pool=True)
def test_destroys_the_group(gputopo_rank):
    note("destroys_the_group", gputopo_rank.rank)
    dist.destroy_process_group()


@pytest.mark.ranks(2, pool=True)
def test_after_the_group_went(gputopo_rank):
    note("after_the_group_went", gputopo_rank.rank)
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2


@pytest.mark.ranks(3, pool=True)
def test_other_size(gputopo_rank):
    note("other_size", gputopo_rank.rank)


@pytest.mark.ranks(2)
def test_own_ranks(gputopo_rank):
    note("own_ranks", gputopo_rank.rank)
"""


def pools(notes: Path) -> dict[str, tuple[int, ...]]:
    """Each test's rank processes (their pids, by rank)."""
    found: dict[str, dict[int, int]] = {}
    for line in notes.read_text().splitlines():
        name, rank, pid, _ = line.split()
        found.setdefault(name, {})[int(rank)] = int(pid)
    return {name: tuple(pids[r] for r in sorted(pids)) for name, pids in found.items()}


@pytest.mark.slow
def test_a_pool_serves_test_after_test_and_is_started_afresh_after_one_that_leaves_it_unfit(
    pytester, tmp_path, monkeypatch
):
    pytest.importorskip("torch")
    notes = tmp_path / "notes"
    pytester.makepyfile(test_pooled=POOLED)
    monkeypatch.setenv("POOL_NOTES", str(notes))
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0", "-rA", "-v")
    text = result.stdout.str()
    result.assert_outcomes(passed=9, failed=3, skipped=1)
    ran = pools(notes)
    # the three reductions and the failing test share one pool; its failure ends it
    assert ran["reduce0"] == ran["reduce1"] == ran["reduce2"] == ran["fails"], ran
    assert ran["after_a_failure"] != ran["fails"] and set(ran["after_a_failure"]).isdisjoint(ran["fails"])
    # a skip on one rank only: a fresh pool after it
    assert ran["skip_on_one"] == ran["after_a_failure"] and ran["hangs"] != ran["skip_on_one"]
    # a hang: its ranks' stacks, then a fresh pool; a skip on every rank keeps the pool
    assert ran["skip_on_all"] != ran["hangs"] and ran["after_skips"] == ran["skip_on_all"]
    # a test that destroyed the group passes, and the next test has a pool of its own
    assert ran["destroys_the_group"] == ran["after_skips"] and ran["after_the_group_went"] != ran["after_skips"]
    assert len(set(ran["other_size"])) == 3 and set(ran["other_size"]).isdisjoint(ran["after_the_group_went"])
    assert set(ran["own_ranks"]).isdisjoint(ran["other_size"])
    assert "ranks(2, pool=True): rank 1 failed: AssertionError: rank 1 says no" in text, text
    assert "rank 1 skipped: skipped while other ranks ran: not on rank 1" in text, text
    hang = text.split("_ test_hangs _")[1].split("\n_")[0]
    assert "rank 1 stuck: still running 3 s after rank 0 failed" in hang, hang
    assert "where it stopped: rank 1 never entered barrier #1, which rank 0 waits in" in hang, hang
    # each test's report has its own output, not an earlier test's
    passes = text.split("PASSES")[1]
    reduce1 = passes.split("_ test_reduce[1] _")[1].split("\n_")[0]
    assert "rank 0 says 1" in reduce1 and "says 0" not in reduce1 and "says 2" not in reduce1, reduce1
    every = {pid for pids in ran.values() for pid in pids}
    assert not [pid for pid in every if alive(pid)]


def test_a_result_is_taken_only_for_its_own_test_and_number():
    """A rank's result of an earlier test (a stale one: torch's MultiProcContinuousTest read such, PR
    #176259) or of another test is never this test's; nor is anything that is not a result."""
    job = BodyJob(seq=4, test="t.py::test_b", module="t", path="t.py", qualname="test_b", instance=None)
    mine = BodyResult(4, "t.py::test_b", "passed", ended_at=1.0)
    assert _taken(mine, job) == mine
    assert _taken(BodyResult(3, "t.py::test_b", "passed", ended_at=1.0), job) is None
    assert _taken(BodyResult(4, "t.py::test_a", "passed", ended_at=1.0), job) is None
    assert _taken(BodyResult(4, "t.py::test_b", "maybe", ended_at=1.0), job) is None
    assert _taken({"seq": 4, "test": "t.py::test_b", "outcome": "passed"}, job) is None
    assert _taken(None, job) is None


@pytest.mark.slow
def test_the_runs_option_pools_every_ranks_test_and_a_marker_says_otherwise(pytester, tmp_path, monkeypatch):
    """``--gputopo-ranks-pool`` pools each ``ranks`` test; ``pool=False`` on one keeps it on ranks of its
    own; a world-size list pools each size apart; under xdist each worker has its own pool."""
    pytest.importorskip("torch")
    notes = tmp_path / "notes"
    pytester.makepyfile(
        test_option="""
import os

import pytest

def note(name, rank):
    with open(os.environ["POOL_NOTES"], "a") as f:
        f.write(f"{name} {rank} {os.getpid()} {os.getppid()}\\n")

@pytest.mark.ranks([1, 2])
@pytest.mark.parametrize("i", [0, 1])
def test_sized(gputopo_rank, i):
    note(f"sized{gputopo_rank.world_size}-{i}", gputopo_rank.rank)

@pytest.mark.ranks(2, pool=False)
def test_alone(gputopo_rank):
    note("alone", gputopo_rank.rank)
"""
    )
    monkeypatch.setenv("POOL_NOTES", str(notes))
    args = ("-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0", "--gputopo-ranks-pool")
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=5)
    ran = pools(notes)
    assert ran["sized1-0"] == ran["sized1-1"] and ran["sized2-0"] == ran["sized2-1"], ran
    assert set(ran["alone"]).isdisjoint(ran["sized2-1"])


def test_pool_must_be_true_false_or_none(pytester):
    pytester.makepyfile(test_bad="import pytest\n@pytest.mark.ranks(2, pool='yes')\ndef test_x(gputopo_rank): pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-n", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_bad.py::test_x: @pytest.mark.ranks: pool must be True, False or None, got 'yes'" in result.stderr.str()


@pytest.mark.slow
def test_the_documented_pool_example_runs_as_written(pytester):
    """docs/markers.md's pool example, as written (its module's ``pytestmark``), on a machine without a
    GPU: its four tests pass."""
    pytest.importorskip("torch")
    from doc_examples import blocks

    [example] = [b for b in blocks() if b.path == "docs/markers.md" and "def test_pooled_all_reduce(" in b.text]
    pytester.makepyfile(test_pooled=example.text)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0", "-v")
    result.assert_outcomes(passed=4)


@pytest.mark.slow
def test_a_fresh_pools_start_is_not_the_first_tests_time(pytester):
    """A test's timeout is its body's: the ranks' start (spawned, torch imported, the group formed, 4 s
    and more on this 2-CPU machine) is not taken from the first test of a fresh pool, which timed out
    where its start ate its 2 s (seen under load with ``timeout=8``: its barrier never got its group
    timeout's turn). ``rank_messages.Opened`` starts its clock."""
    pytest.importorskip("torch")
    pytester.makepyfile(
        test_quick="""
import pytest
import torch
import torch.distributed as dist

@pytest.mark.ranks(2, pool=True, timeout=2)
def test_quick(gputopo_rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
