"""On a real GPU host: this host's own ``nvidia-smi nvlink -s`` and ``topo -p2p r`` read as NVML says
they should, and ``gputopo bench allreduce`` sweeps with NCCL, one rank per GPU, data verified.
Skipped with a reason where there is no GPU (this project's CI)."""

import json
import shutil
import subprocess

import pytest

from conftest import gputopo_process
from pytest_gputopo.core.model import P2PStatus
from pytest_gputopo.parse.nccl_tests import parse_nccl_tests
from pytest_gputopo.parse.nvlink_status import parse_nvlink_status
from pytest_gputopo.parse.smi_machine import parse_p2p_matrix
from pytest_gputopo.probe import probe

HOST = probe(None, needs={"nvml"})
pytestmark = pytest.mark.skipif(not HOST.gpus, reason=f"no GPU on this host: {HOST.problem or 'NVML lists none'}")
needs_smi = pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="nvidia-smi is not installed")


def smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True).stdout


@needs_smi
def test_nvlink_status_agrees_with_nvml():
    if not any(g.nvlinks for g in HOST.gpus):
        pytest.skip("NVML lists no NVLink on this host")
    status = parse_nvlink_status(smi("nvlink", "-s"))
    by_uuid = {g.uuid: g for g in HOST.gpus}
    for listed in status.gpus:
        gpu = by_uuid.get(listed.uuid)
        if gpu is None or listed.all_inactive:
            continue
        assert listed.active_links == gpu.active_nvlinks, f"GPU{gpu.index}: nvlink -s vs NVML"


@needs_smi
@pytest.mark.skipif(len(HOST.gpus) < 2, reason="needs 2 GPUs")
def test_topo_p2p_read_agrees_with_nvml():
    matrix = parse_p2p_matrix(smi("topo", "-p2p", "r"))
    if len(matrix) != len(HOST.gpus):
        pytest.skip("CUDA_VISIBLE_DEVICES hides GPUs that nvidia-smi shows")
    for link in HOST.links:  # nvidia-smi numbers GPUs as NVML does; the pair's status is its worse direction
        a, b = HOST.gpus[link.a].nvml_index, HOST.gpus[link.b].nvml_index
        assert link.p2p.read in (P2PStatus(matrix[a][b]), P2PStatus(matrix[b][a])), link.name


def test_the_sweep_runs_on_nccl_with_one_rank_per_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_nccl_available():
        pytest.skip("torch was built without NCCL")
    sweep_args = ("-b", "1M", "-e", "16M", "-f", "4", "--budget", 0.5, "--json", tmp_path / "s.json")
    out = gputopo_process("bench", "allreduce", "--backend", "nccl", *sweep_args)
    assert out.returncode == 0, out.stderr[-3000:]
    table = parse_nccl_tests(out.stdout)
    assert table.nranks == len(HOST.gpus) and table.data_ok is True and len(table.rows) == 3
    sweep = json.loads((tmp_path / "s.json").read_text())["sweeps"][0]
    assert sweep["devices"] == list(range(len(HOST.gpus))) and sweep["origin"] == "measured"
