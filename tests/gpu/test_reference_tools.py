"""On a real GPU host: NVIDIA's own tools, run through the project's engines, against gputopo's figures.

``all_reduce_perf`` (nccl-tests) runs through ``bench.nccl_tests.run_all_reduce_perf`` -- its table
read by ``parse.nccl_tests``, its exit status judged by that engine's rule (a finished run that
nccl-tests itself failed exits 1 or 7 after a FAILED summary: a result, not an error) -- and
``nvbandwidth`` through ``parse.nvbandwidth``; each figure is set beside what gputopo measures of the
same thing (the sweep's all-reduce at the same size; the host -> device and GPU -> GPU copies).

The binaries are looked for on ``PATH``, then in the folder ``$GPUTOPO_TOOLS`` names (docs/benchmarks.md,
"On a real GPU host"). Where one is absent its tests skip, naming it and where to put it; where there is
no GPU every test here skips saying so (this project's CI).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import gputopo_process
from pytest_gputopo.probe import probe

HOST = probe(None, needs={"nvml"})
pytestmark = pytest.mark.skipif(not HOST.gpus, reason=f"no GPU on this host: {HOST.problem or 'NVML lists none'}")
TOOLS_ENV = "GPUTOPO_TOOLS"
SIZE = 64 * 2**20  # one size both engines run: large enough that the link, not the launch, sets the figure
# Two engines timing one collective (or one copy) on one link: the same figure within this factor, or
# one of them measures something else (a wrong size, a wrong count of ranks, a staged copy).
AGREE = 3.0


def tool(name: str) -> str:
    """The binary's path, or skip naming it and where to put it."""
    folder = os.environ.get(TOOLS_ENV)
    found = shutil.which(name) or (shutil.which(name, path=folder) if folder else None)
    if found is None:
        where = f"${TOOLS_ENV}={folder} has none; " if folder else ""
        pytest.skip(
            f"{name} is not installed: {where}put it on PATH or in a folder named by ${TOOLS_ENV} "
            f"(build it from NVIDIA/{'nccl-tests' if name == 'all_reduce_perf' else 'nvbandwidth'})"
        )
    return found


def agree(theirs: float, ours: float, what: str) -> None:
    print(f"{what}: theirs {theirs:.2f} GB/s, gputopo {ours:.2f} GB/s")
    assert theirs > 0 and ours > 0, what
    assert 1 / AGREE <= ours / theirs <= AGREE, f"{what}: gputopo {ours:.2f} GB/s, the tool {theirs:.2f} GB/s"


def test_all_reduce_perf_runs_through_the_engine_and_agrees_with_the_sweep(tmp_path):
    from pytest_gputopo.bench.nccl_tests import run_all_reduce_perf
    from pytest_gputopo.parse.nccl_tests import parse_nccl_tests

    binary = tool("all_reduce_perf")
    result = run_all_reduce_perf(binary, len(HOST.gpus), SIZE, timeout_s=300)
    assert result.collective == "all_reduce" and result.data_ok is True and result.wrong_data() is None
    assert [row.size_bytes for row in result.rows] == [SIZE]
    if len(HOST.gpus) < 2:
        pytest.skip("one GPU: the all-reduce crosses no link (busbw 0 by nccl-tests' formula), nothing to compare")
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_nccl_available():
        pytest.skip("torch was built without NCCL: gputopo's all-reduce cannot run on it")
    out = gputopo_process("bench", "allreduce", "--backend", "nccl", "-b", SIZE, "-e", SIZE, "--budget", 1)
    assert out.returncode == 0, out.stderr[-3000:]
    ours = parse_nccl_tests(out.stdout)
    assert ours.data_ok is True and [row.size_bytes for row in ours.rows] == [SIZE]
    agree(
        result.rows[0].out_of_place.busbw_gbps,
        ours.rows[0].out_of_place.busbw_gbps,
        f"all-reduce busbw, {len(HOST.gpus)} GPUs, {SIZE} B",
    )


def test_a_run_nccl_tests_fails_itself_is_a_result_not_an_error():
    """The engine's exit-status rule on the real binary: NCCL_TESTS_MIN_BW above any link makes
    nccl-tests fail its own average and exit 1 (<= v2.17.2) or 7 (testNumResults, later) after its
    summary; the engine returns the table with a warning saying so, its data still checked."""
    from pytest_gputopo.bench.nccl_tests import NcclTestsRunError, run_all_reduce_perf

    binary = tool("all_reduce_perf")
    try:
        result = run_all_reduce_perf(
            binary, len(HOST.gpus), 2**20, timeout_s=300, env={**os.environ, "NCCL_TESTS_MIN_BW": "1000000"}
        )
    except NcclTestsRunError as exc:  # a build before NCCL_TESTS_MIN_BW ends 0 with an OK summary
        pytest.fail(f"the engine refused nccl-tests' own verdict: {exc}")
    if result.ok is not False:
        pytest.skip("this all_reduce_perf does not read NCCL_TESTS_MIN_BW (it came back OK)")
    assert any("exited with status" in w for w in result.warnings), result.warnings
    assert result.data_ok is True  # the figure failed, not the data


def _nvbandwidth(testcase: str):
    from pytest_gputopo.parse.nvbandwidth import parse_nvbandwidth

    out = subprocess.run([tool("nvbandwidth"), "-t", testcase], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    parsed = parse_nvbandwidth(out.stdout)
    (case,) = [t for t in parsed.testcases if t.name == testcase]
    assert case.status == "ran", case.message
    return parsed, case.matrices[0]


def test_nvbandwidth_host_to_device_agrees_with_gputopos_copy():
    from pytest_gputopo.bench.copies import host_device_copy

    parsed, matrix = _nvbandwidth("host_to_device_memcpy_ce")
    assert len(matrix.columns) == len(HOST.gpus) and matrix.unit == "GB/s"
    ours = host_device_copy(0, pinned=True, cpu_affinity=HOST.gpus[0].cpu_affinity, budget_s=2.0)
    assert ours.verified
    agree(matrix.cells[0][0], ours.bw_gbps, "host -> GPU0 copy, pinned")


@pytest.mark.skipif(len(HOST.gpus) < 2, reason="needs 2 GPUs")
def test_nvbandwidth_device_to_device_agrees_with_gputopos_p2p_copy():
    from pytest_gputopo.bench.copies import p2p_copy

    if HOST.link(0, 1).p2p_works is not True:
        pytest.skip("GPU0-GPU1: NVML does not report P2P OK; nvbandwidth measures no peer copy there")
    parsed, matrix = _nvbandwidth("device_to_device_memcpy_read_ce")
    ours = p2p_copy(1, 0, budget_s=2.0)  # a read by GPU0 of GPU1's memory: GPU1 -> GPU0 (nvbandwidth's row 0, column 1)
    assert ours.verified
    agree(matrix.cells[0][1], ours.bw_gbps, "GPU1 -> GPU0 copy (read)")
