"""CUDA numbering from NVML's list: CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES."""

import pytest

from conftest import clear_launch
from pytest_gputopo.core.model import Gpu
from pytest_gputopo.runtime.environ import visible_gpus

# NVML order is not CUDA order: a mixed box listed by NVML with the slower GPU first.
GPUS = (
    Gpu(0, name="RTX A4000", uuid="GPU-aaaa1111-0000", pci_bus_id="00000000:17:00.0", compute_capability="8.6"),
    Gpu(1, name="H100", uuid="GPU-bbbb2222-0000", pci_bus_id="00000000:65:00.0", compute_capability="9.0"),
    Gpu(2, name="H100", uuid="GPU-bbbb3333-0000", pci_bus_id="00000000:31:00.0", compute_capability="9.0"),
)


def test_pci_bus_id_order():
    assert visible_gpus(GPUS, None, "PCI_BUS_ID").order == (0, 2, 1)


def test_fastest_first_is_the_default():
    vis = visible_gpus(GPUS, None, "FASTEST_FIRST")
    assert vis.order == (2, 1, 0)  # the two H100s by bus id, then the A4000


def test_indices_refer_to_cuda_order():
    assert visible_gpus(GPUS, "1,0", "PCI_BUS_ID").order == (2, 0)


def test_uuids_and_unique_prefixes():
    assert visible_gpus(GPUS, "GPU-bbbb3333-0000,GPU-aaaa", "PCI_BUS_ID").order == (2, 0)
    vis = visible_gpus(GPUS, "GPU-bbbb", "PCI_BUS_ID")
    assert vis.order == () and "more than one" in vis.warnings[0]


@pytest.mark.parametrize(
    "value,order", [("0,7,1", (0,)), ("-1", ()), ("", ()), ("0,0", (0,)), ("MIG-12345678-aaaa,0", ())]
)
def test_the_list_stops_at_the_first_bad_entry(value, order):
    vis = visible_gpus(GPUS, value, "PCI_BUS_ID")
    assert vis.order == order
    if value:
        assert vis.warnings


def test_unknown_device_order_warns():
    vis = visible_gpus(GPUS, None, "SLOWEST_FIRST")
    assert "CUDA_DEVICE_ORDER" in vis.warnings[0]


def test_environment_is_read(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert visible_gpus(GPUS).order == (1,)


# ---------------------------------------------------------------------------------------------
# Launchers: torchrun, or srun starting every rank itself

SRUN_TASK_1_OF_4 = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_NTASKS": "4",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29600",
}


def _launch_with(monkeypatch, env):
    from pytest_gputopo.runtime import environ

    clear_launch(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return environ.launch()


def test_srun_starting_every_rank_is_a_launch(monkeypatch):
    launch = _launch_with(monkeypatch, SRUN_TASK_1_OF_4)
    assert (launch.rank, launch.world_size, launch.local_rank, launch.node_rank) == (1, 4, 1, 0)
    assert (launch.master_addr, launch.master_port, launch.agent_store) == ("10.0.0.1", 29600, False)
    assert launch.run_id == "slurm-77.0"


@pytest.mark.parametrize("drop", ["SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "MASTER_ADDR"])
def test_a_batch_script_or_a_step_without_master_addr_is_one_process(monkeypatch, drop):
    """A batch script runs with SLURM_PROCID=0 and SLURM_NTASKS=N but no job step (a published
    ``env | grep SLURM`` of one shows it): a pytest started there is one process, not rank 0 of N
    waiting for ranks that never come. Without MASTER_ADDR no rank can find the others (torch's
    env:// needs it too): each decides alone, as before."""
    assert _launch_with(monkeypatch, {k: v for k, v in SRUN_TASK_1_OF_4.items() if k != drop}) is None


def test_torchrun_under_srun_takes_torchruns_ranks(monkeypatch):
    launch = _launch_with(monkeypatch, {**SRUN_TASK_1_OF_4, "RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "5"})
    assert (launch.rank, launch.world_size, launch.local_rank) == (5, 16, 5)


def test_a_malformed_srun_variable_names_itself(monkeypatch):
    with pytest.raises(ValueError, match="SLURM_PROCID='7' SLURM_STEP_NUM_TASKS='4' do not describe a rank"):
        _launch_with(monkeypatch, {**SRUN_TASK_1_OF_4, "SLURM_PROCID": "7"})
