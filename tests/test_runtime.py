"""CUDA numbering from NVML's list: CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES."""

import pytest

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


@pytest.mark.parametrize("value,order", [("0,7,1", (0,)), ("-1", ()), ("", ()), ("0,0", (0,)),
                                         ("MIG-12345678-aaaa,0", ())])
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
