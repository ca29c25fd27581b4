"""On a real GPU host: NVML through nvidia-ml-py agrees with nvidia-smi and with CUDA.

Skipped with a reason where there is no NVIDIA driver or GPU (this project's CI).
"""

import shutil
import subprocess

import pytest

from pytest_gputopo.parse import smi_topo as smi_text
from pytest_gputopo.probe import probe

HOST = probe(None, needs={"nvml"})
pytestmark = pytest.mark.skipif(not HOST.gpus, reason=f"no GPU on this host: {HOST.problem or 'NVML lists none'}")


def test_nvml_facts_are_complete():
    for gpu in HOST.gpus:
        assert gpu.name and gpu.uuid and gpu.pci_bus_id
        assert gpu.pcie_gen_max and gpu.pcie_width_max and gpu.memory_total_bytes
    for link in HOST.links:
        assert link.label is not None, f"{link.name}: NVML gave no link class"


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="nvidia-smi is not installed")
def test_link_classes_match_nvidia_smi():
    text = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True).stdout
    smi = smi_text.parse_topo_matrix(text)
    nvml_order = probe(None, needs={"nvml"})  # NVML order == nvidia-smi order without CUDA_VISIBLE_DEVICES
    if len(smi.gpus) != len(nvml_order.gpus):
        pytest.skip("CUDA_VISIBLE_DEVICES hides GPUs that nvidia-smi shows")
    for link in nvml_order.links:
        assert smi.matrix[link.a][link.b] == str(link.label), link.name


def test_cuda_agrees_with_nvml():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    joined = probe(None)
    assert len(joined.gpus) == torch.cuda.device_count()
    for link in joined.links:
        assert link.cuda_peer is not None
    assert not [w for w in joined.warnings if "NVML says P2P" in w], joined.warnings


def test_the_probe_child_gives_cudas_multicast_and_torchs_versions():
    """Multicast from libcuda's CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED and torch's CUDA/NCCL
    versions, asked in the probe child, are what this process would read itself (asked here only in
    this GPU-only test, after the plugin's facts were taken)."""
    import ctypes

    from pytest_gputopo.probe.cuda_driver import cuda_view

    full = probe(None)  # with the CUDA child
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pytest.skip("libcuda.so.1 cannot be loaded here")
    assert all(g.multicast is not None for g in full.gpus), [g.multicast for g in full.gpus]
    assert {(g.pci_bus_id or "").upper(): g.multicast for g in full.gpus}.items() <= cuda_view().multicast.items()
    torch = pytest.importorskip("torch")
    assert full.cuda_runtime_version == torch.version.cuda
    if torch.cuda.is_available() and hasattr(torch._C, "_nccl_version"):
        assert full.nccl_version == ".".join(map(str, torch.cuda.nccl.version()[:3]))


def test_libcudas_order_and_peer_access_are_torchs():
    """CUDA's view comes from the driver API (cuDeviceGet, cuDeviceGetPCIBusId, cuDeviceCanAccessPeer);
    the runtime, and so torch, numbers devices and answers peer access the same way."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    from pytest_gputopo.probe.cuda_driver import cuda_view

    view = cuda_view()  # starts CUDA in this test process: GPU-only tests may
    assert len(view.bus_ids) == torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    if hasattr(props, "pci_bus_id"):
        assert [int(b.split(":")[1], 16) for b in view.bus_ids] == [
            torch.cuda.get_device_properties(i).pci_bus_id for i in range(len(view.bus_ids))
        ]
    for (a, b), ok in view.peer.items():
        assert ok == (torch.cuda.can_device_access_peer(a, b) and torch.cuda.can_device_access_peer(b, a))
