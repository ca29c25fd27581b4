"""On a real GPU host: a leased test that is not ``ranks(n)`` (issue 44: the lease process had never met
a real GPU). ``requires_gpus(1)`` under ``--gputopo-lease`` runs in a process of its own whose
``CUDA_VISIBLE_DEVICES`` names the leased GPU by UUID: CUDA sees that GPU alone as ``cuda:0``, a kernel
runs on it, ``gputopo_gpus`` names it, and the pytest process never starts CUDA. Skipped with a reason
where there is no GPU (this project's CI); ``dev/gpu-check`` runs it when a device is lent."""

import pytest

from lease_comparison import lease_args
from pytest_gputopo.probe import probe

HOST = probe(None, needs={"nvml"})
pytestmark = pytest.mark.skipif(not HOST.gpus, reason=f"no GPU on this host: {HOST.problem or 'NVML lists none'}")

SUITE = """
import os, pytest, torch


@pytest.mark.requires_gpus(1)
def test_on_its_leased_gpu(gputopo_gpus):
    (gpu,) = gputopo_gpus
    assert os.environ["CUDA_VISIBLE_DEVICES"] == gpu.uuid and gpu.index == 0
    assert torch.cuda.device_count() == 1
    x = torch.arange(1 << 20, device="cuda:0", dtype=torch.float32)
    assert x.sum().item() == (1 << 20) * ((1 << 20) - 1) / 2
    print(f"leased {gpu.uuid} ({gpu.name}) as cuda:0; CUDA calls it {torch.cuda.get_device_name(0)}")


def test_last_this_process_never_started_cuda():
    import torch

    assert not torch.cuda.is_initialized()
"""


def test_a_leased_test_runs_on_its_gpu_alone(pytester, tmp_path):
    pytester.makepyfile(test_leased=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-v", "-rs", "-s", *lease_args(tmp_path / "locks")
    )
    print(result.stdout.str())
    result.assert_outcomes(passed=2)
