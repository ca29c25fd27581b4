"""On a real GPU host: the copy and NCCL all-reduce benchmarks run, verify their data, and land in
the range the documents' table expects. Skipped with a reason where there is no GPU."""

import pytest

from pytest_gputopo.core import collectives, keys, spec
from pytest_gputopo.probe import probe

HOST = probe(None, needs={"nvml"})
pytestmark = pytest.mark.skipif(not HOST.gpus, reason=f"no GPU on this host: {HOST.problem or 'NVML lists none'}")


def test_host_to_device_copy_is_verified_and_plausible():
    from pytest_gputopo.bench.copies import host_device_copy

    m = host_device_copy(0, pinned=True, cpu_affinity=HOST.gpus[0].cpu_affinity, budget_s=2.0)
    assert m.verified and m.error is None
    back = host_device_copy(0, to_device=False, pinned=True, budget_s=2.0)
    pageable = host_device_copy(0, pinned=False, budget_s=2.0)
    assert back.verified and pageable.verified
    line = spec.pcie_line_rate(HOST.gpus[0])
    if line is not None:
        assert m.bw_gbps <= 1.1 * line.gbps, f"{m.bw_gbps} GB/s above the PCIe line rate {line.gbps}"


@pytest.mark.skipif(len(HOST.gpus) < 2, reason="needs 2 GPUs")
def test_p2p_and_staged_copies_are_verified():
    from pytest_gputopo.bench.copies import p2p_copy

    peer = p2p_copy(0, 1, budget_s=2.0)
    staged = p2p_copy(0, 1, peer=False, budget_s=2.0)
    both = p2p_copy(0, 1, bidirectional=True, budget_s=2.0)
    assert peer.verified and staged.verified and both.verified
    assert both.bytes_per_iteration == 2 * peer.bytes_per_iteration


@pytest.mark.skipif(len(HOST.gpus) < 2, reason="needs 2 GPUs")
def test_nccl_allreduce_runs_and_verifies():
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_nccl_available():
        pytest.skip("torch was built without NCCL")
    from pytest_gputopo.bench.allreduce import run_allreduce

    res = run_allreduce(2, [2**26], backend="nccl", timeout_s=120, budget_s_per_size=5)
    assert res.ok and res.judged.busbw_gbps > 0
    expected = collectives.allreduce_expected_busbw(HOST, 2)
    if expected is not None and not res.nvls:
        assert res.judged.busbw_gbps <= 1.2 * expected.gbps


def test_copy_benchmark_in_a_child_process_under_a_deadline():
    from pytest_gputopo.bench import subproc

    data = subproc.run_copy_benchmark(keys.HostCopy("h2d", 0, True), HOST, budget_s=1.0, timeout_s=120)
    assert data["verified"] and data["bw_gbps"] > 0


@pytest.mark.skipif(len(HOST.gpus) < 2, reason="needs 2 GPUs")
def test_nccl_gives_its_own_account_of_the_transports():
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_nccl_available():
        pytest.skip("torch was built without NCCL")
    from pytest_gputopo.bench.suite import nccl_account
    from pytest_gputopo.nccl.expect import expected_transports

    account = nccl_account(2, timeout_s=120)
    assert account["wrong"] == 0 and account["log"]["nccl_version"]
    seen = account["pairs"].get("0-1")
    assert seen, "NCCL's log named no transport between rank 0 and rank 1"
    (expected,) = [e for e in expected_transports(HOST.restrict([0, 1])) if (e.a, e.b) == (0, 1)]
    assert any(t.startswith(expected.transport) for t in seen), (expected, seen)
