"""On a real GPU host: the plugin learns the GPUs' facts without starting CUDA in the user's pytest
process, and leaves its environment as it found it. The CUDA facts (peer access, multicast, torch's
versions) come from a child process (``probe/cuda_child.py``); NVML (``nvmlInit``) starts no CUDA
context. Skipped with a reason where there is no GPU (this project's CI)."""

import pytest

from pytest_gputopo.probe import probe

HOST = probe(None, needs={"nvml"})
pytestmark = pytest.mark.skipif(not HOST.gpus, reason=f"no GPU on this host: {HOST.problem or 'NVML lists none'}")

# Each test body asks torch itself, after the plugin took the facts its marker needs.
USER_SUITE = """
import os, pytest, torch

# pytest itself sets PYTEST_CURRENT_TEST around each test; everything else is the user's.
def users(environ):
    return {k: v for k, v in environ.items() if k != "PYTEST_CURRENT_TEST"}

ENV = users(os.environ)

@pytest.mark.requires_gpus(1)
def test_nvml_facts():
    assert not torch.cuda.is_initialized()

@pytest.mark.requires_versions(cuda=">=11", cuda_runtime=">=11", nccl=">=2")
def test_cuda_and_torch_versions():
    assert not torch.cuda.is_initialized()

@pytest.mark.requires_p2p(gpus=1)
def test_peer_facts():
    assert not torch.cuda.is_initialized()

def test_last_the_environment_is_the_users():
    assert users(os.environ) == ENV
    assert not torch.cuda.is_initialized()
"""


def test_the_plugin_starts_no_cuda_in_the_users_process(pytester):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    pytester.makepyfile(test_user=USER_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-rs", "--gputopo-reprobe")
    result.assert_outcomes(passed=4)
