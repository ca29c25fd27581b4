"""On a real GPU host: a leased ``ranks(n)`` test (issue 31) on the real GPUs. ``ranks(1)`` on NCCL
under ``--gputopo-lease`` runs on one leased GPU: its rank sees that GPU alone (``CUDA_VISIBLE_DEVICES``
names it by UUID, ``cuda:0``), the all-reduce runs on it, and the pytest process never starts CUDA.
A two-rank NCCL test runs on two GPUs where there are two, and on a one-GPU host skips with its
marker's reason, spawning nothing. Skipped with a reason where there is no GPU (this project's CI);
``dev/gpu-check`` runs it when a device is lent."""

import pytest

from lease_comparison import lease_args
from pytest_gputopo.probe import probe

HOST = probe(None, needs={"nvml"})
pytestmark = pytest.mark.skipif(not HOST.gpus, reason=f"no GPU on this host: {HOST.problem or 'NVML lists none'}")

SUITE = """
import os, pytest, torch
import torch.distributed as dist


def check(info, n):
    assert info.device == f"cuda:{info.rank}" and len(info.gpus) == 1
    assert os.environ["CUDA_VISIBLE_DEVICES"].split(",")[info.rank] == info.gpus[0].uuid
    assert torch.cuda.device_count() == n  # the lease alone
    t = torch.full((4,), float(info.rank + 1), device=info.device)
    dist.all_reduce(t)
    assert t.tolist() == [n * (n + 1) / 2] * 4 and dist.get_backend() == "nccl"
    print(f"rank {info.rank}: {info.device} = {info.gpus[0].uuid} of CUDA_VISIBLE_DEVICES "
          f"{os.environ['CUDA_VISIBLE_DEVICES']}")


@pytest.mark.ranks(1, backend="nccl")
def test_one_rank(gputopo_rank):
    check(gputopo_rank, 1)


@pytest.mark.ranks(2, backend="nccl")
def test_two_ranks(gputopo_rank):
    check(gputopo_rank, 2)


def test_last_this_process_never_started_cuda():
    assert not torch.cuda.is_initialized()
"""


def test_leased_ranks_on_the_real_gpus(pytester, tmp_path):
    pytester.makepyfile(test_leased_ranks=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-v", "-rs", *lease_args(tmp_path / "locks")
    )
    print(result.stdout.str())
    if len(HOST.gpus) >= 2:
        result.assert_outcomes(passed=3)
    else:
        result.assert_outcomes(passed=2, skipped=1)
        result.stdout.fnmatch_lines(["*SKIPPED*ranks(2, backend='nccl')*needs 2 GPUs*"])
