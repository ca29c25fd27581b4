"""The probe's child: a hung driver never hangs pytest, each fact is asked only when wanted, and
CUDA's view comes from libcuda's driver API (``probe.cuda_driver``), read as ``cuda.h`` writes it.

A run on an emulated GPU host, where libcuda and torch are asked in children only, is in
``test_gpu_host.py``. Here a stub directory on PYTHONPATH holds ``pynvml`` (the project's fake NVML
serving a recorded machine, built on the real module).
"""

import dataclasses
import os

import pytest

import pynvml as real_pynvml
from conftest import needs_torch

STUB_PYNVML = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("pynvml", os.environ["GPUTOPO_TEST_REAL_PYNVML"])
real = importlib.util.module_from_spec(spec)
sys.modules["pynvml"] = real
spec.loader.exec_module(real)
if os.environ.get("GPUTOPO_TEST_HANG"):
    open(os.environ["GPUTOPO_TEST_HANG"], "w").write(str(os.getpid()))
    time.sleep(600)  # a driver that never answers
from pytest_gputopo.probe.fake_nvml import make_fake_pynvml
from pytest_gputopo.probe.recorded import load_profile
sys.modules["pynvml"] = make_fake_pynvml(load_profile(os.environ["GPUTOPO_TEST_MACHINE"]).topology)
"""

@pytest.fixture
def gpu_stubs(tmp_path, monkeypatch):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "pynvml.py").write_text(STUB_PYNVML)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(stubs), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("GPUTOPO_TEST_REAL_PYNVML", real_pynvml.__file__)
    monkeypatch.setenv("GPUTOPO_TEST_MACHINE", "dgx-a100")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


@pytest.mark.slow
def test_a_hung_driver_ends_at_the_deadline_with_a_reason_and_no_orphan(gpu_stubs, monkeypatch):
    from pytest_gputopo.probe.host import ask_child

    hang = gpu_stubs / "hung.pid"
    monkeypatch.setenv("GPUTOPO_TEST_HANG", str(hang))
    answer = ask_child({"nvml", "cuda"}, timeout_s=3)
    topology = answer.topology
    assert answer.cuda is None and not topology.gpus and topology.is_this_host
    assert "did not finish within 3 s; its process group was killed" in topology.problem
    with pytest.raises(ProcessLookupError):
        os.kill(int(hang.read_text()), 0)


def test_asked_for_nvml_alone_the_child_starts_neither_cuda_nor_torch(gpu_stubs):
    from pytest_gputopo.probe.host import ask_child

    answer = ask_child({"nvml"})
    assert answer.cuda is None and answer.torch is None
    assert len(answer.topology.gpus) == 8 and answer.topology.source.kind == "nvml"


class FakeLibcuda:
    """libcuda's driver API as ``cuda_driver`` calls it (pointers in, CUresult out), for two devices:
    NVSwitch-attached (multicast 1) and one whose attribute query fails (unknown)."""

    BUSES = (b"0000:18:00.0", b"0000:2a:00.0")

    def __init__(self, create=True):
        if create:
            self.cuMulticastCreate = lambda *a: 0

    def cuInit(self, flags):
        return 0

    def cuDeviceGetCount(self, count):
        count.contents.value = len(self.BUSES)
        return 0

    def cuDeviceGet(self, device, ordinal):
        device.contents.value = ordinal
        return 0

    def cuDeviceGetPCIBusId(self, buf, length, device):
        buf.value = self.BUSES[device.value]
        return 0

    def cuDeviceCanAccessPeer(self, can, device, peer):
        can.contents.value = 1
        return 0

    def cuDeviceGetAttribute(self, value, attribute, device):
        assert attribute == 132  # CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED in cuda.h, as NCCL's nvls.cc asks it
        if device.value == 1:
            return 101  # CUDA_ERROR_INVALID_DEVICE
        value.contents.value = 1
        return 0


def test_multicast_comes_from_cudas_attribute_joined_by_bus_id():
    from pytest_gputopo.probe import probe
    from pytest_gputopo.probe.this_host import with_cuda_facts
    from pytest_gputopo.probe.cuda_driver import cuda_view

    view = cuda_view(FakeLibcuda())
    assert view.bus_ids == ("00000000:18:00.0", "00000000:2A:00.0") and view.peer == {(0, 1): True}
    assert view.multicast == {"00000000:18:00.0": True}  # device 1 unanswered: unknown
    # NCCL's rule: a driver without cuMulticastCreate has no multicast (src/transport/nvls.cc)
    assert cuda_view(FakeLibcuda(create=False)).multicast == {"00000000:18:00.0": False, "00000000:2A:00.0": False}
    bare = dataclasses.replace(probe("hgx-h100"), gpus=tuple(dataclasses.replace(g, multicast=None)
                                                             for g in probe("hgx-h100").gpus))
    joined = with_cuda_facts(bare, view, {"nccl_version": "2.21.5"})
    assert [g.multicast for g in joined.gpus] == [True] + [None] * 7 and joined.nccl_version == "2.21.5"


def test_a_view_kept_in_pytests_cache_is_read_only_if_it_is_one():
    """A boot record is a file anyone could have written: what is not a view is asked again."""
    from pytest_gputopo.probe.cuda_driver import CudaView

    good = CudaView(("00000000:18:00.0", "00000000:2A:00.0"), {(0, 1): False}, {"00000000:18:00.0": True})
    assert CudaView.from_json(good.to_json()) == good
    for bad in ({}, {"bus_ids": ["18:00.0"], "peer": [], "multicast": {}},
                {**good.to_json(), "peer": [[0, 5, True]]}, {**good.to_json(), "peer": [[0, 1, 1]]},
                {**good.to_json(), "multicast": {"00000000:99:00.0": True}}, {**good.to_json(), "bus_ids": 7}):
        with pytest.raises(ValueError):
            CudaView.from_json(bad)


def test_torch_versions_read_every_shape_of_nccls_version():
    """torch.cuda.nccl.version(): a tuple in 2.0, with NCCL's suffix appended in later releases
    (torch/cuda/nccl.py, 2.13); NCCL's own integer code in old releases (nccl.h NCCL_VERSION_CODE)."""
    from pytest_gputopo.probe.torch_cuda import nccl_version_text

    assert nccl_version_text((2, 14, 3)) == "2.14.3"
    assert nccl_version_text((2, 27, 7, "+cuda12.9")) == "2.27.7"
    assert nccl_version_text(21803) == "2.18.3" and nccl_version_text(2708) == "2.7.8"
    assert nccl_version_text("2.18") is None and nccl_version_text((2, "x", 1)) is None


@needs_torch
def test_a_cpu_build_of_torch_has_no_cuda_or_nccl_version():
    from pytest_gputopo.probe.torch_cuda import torch_versions

    assert torch_versions() == {"cuda_runtime_version": None, "nccl_version": None}
