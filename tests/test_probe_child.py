"""The probe's child: a hung driver never hangs pytest, each fact is asked only when wanted, and
CUDA's view comes from libcuda's driver API (``probe.cuda_driver``), read as ``cuda.h`` writes it.

A run on an emulated GPU host, where libcuda and torch are asked in children only, is in
``test_gpu_host.py``. Here a stub directory on PYTHONPATH holds ``pynvml`` (the project's fake NVML
serving a recorded machine, built on the real module).
"""

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pynvml as real_pynvml
import pytest

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
from fake_nvml import make_fake_pynvml
from pytest_gputopo.probe.recorded import load_profile
sys.modules["pynvml"] = make_fake_pynvml(load_profile(os.environ["GPUTOPO_TEST_MACHINE"]).topology)
"""


def _parent_finds_pynvml_in(folder, monkeypatch):
    """This process (the probe's parent) imports ``pynvml`` from ``folder`` from now on, as a run whose
    environment put it there would: the NVML child takes its pynvml from where the parent finds it."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.syspath_prepend(str(folder))


@pytest.fixture
def gpu_stubs(tmp_path, monkeypatch):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "pynvml.py").write_text(STUB_PYNVML)
    shutil.copy(Path(__file__).with_name("fake_nvml.py"), stubs)  # the stub's double, beside it
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(stubs), *filter(None, [os.environ.get("PYTHONPATH")])]))
    _parent_finds_pynvml_in(stubs, monkeypatch)
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


# A pynvml whose nvmlInit says the driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED, 9): what the child
# imports besides it is then the plugin's alone.
BARE_PYNVML = "class NVMLError(Exception):\n    value = 9\ndef nvmlInit():\n    raise NVMLError()\n"


def test_the_nvml_child_starts_without_site_and_imports_only_what_it_asks(tmp_path, monkeypatch):
    """Issue 32: the child every marked run starts must be lean. ``-X importtime`` lists each module the
    child imports: neither ``site`` (its scan of site-packages and .pth files was most of Python's 69 ms
    start on the H200) nor the plugin's modules it does not use (the named-machine readers, CUDA's
    numbering, the boot record, CUDA's and torch's probes), and pynvml comes from where this process
    finds it (a folder on this process's path only, not on PYTHONPATH)."""
    from pytest_gputopo.probe.host import _argv

    (tmp_path / "pynvml.py").write_text(BARE_PYNVML)
    _parent_finds_pynvml_in(tmp_path, monkeypatch)
    argv = _argv(["nvml"])
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, timeout=60)
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert '"problem": "NVIDIA driver not loaded"' in done.stdout  # this pynvml, not the environment's
    assert {"pynvml", "pytest_gputopo.probe.nvml", "pytest_gputopo.core.model"} <= imported
    assert "site" not in imported
    unused = {
        f"pytest_gputopo.probe.{m}"
        for m in ("named_machine", "recorded", "cuda_numbering", "learned", "this_host", "cuda_driver", "torch_cuda")
    }
    assert not unused & imported and not any(m == "torch" or m.startswith("pytest_gputopo.plugin") for m in imported)


def test_where_this_process_finds_no_pynvml_the_child_looks_as_python_does(gpu_stubs, monkeypatch):
    """A pynvml this process cannot place (a module without a spec, as a test's stand-in is) leaves the
    search to the child's own Python, with its site-packages and PYTHONPATH: NVML's facts still come."""
    import types

    from pytest_gputopo.probe.host import ask_child

    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml"))
    assert len(ask_child({"nvml"}).topology.gpus) == 8


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
    from pytest_gputopo.probe.cuda_driver import cuda_view
    from pytest_gputopo.probe.this_host import with_cuda_facts

    view = cuda_view(FakeLibcuda())
    assert view.bus_ids == ("00000000:18:00.0", "00000000:2A:00.0") and view.peer == {(0, 1): True}
    assert view.multicast == {"00000000:18:00.0": True}  # device 1 unanswered: unknown
    # NCCL's rule: a driver without cuMulticastCreate has no multicast (src/transport/nvls.cc)
    assert cuda_view(FakeLibcuda(create=False)).multicast == {"00000000:18:00.0": False, "00000000:2A:00.0": False}
    bare = dataclasses.replace(
        probe("hgx-h100"), gpus=tuple(dataclasses.replace(g, multicast=None) for g in probe("hgx-h100").gpus)
    )
    joined = with_cuda_facts(bare, view, {"nccl_version": "2.21.5"})
    assert [g.multicast for g in joined.gpus] == [True] + [None] * 7 and joined.nccl_version == "2.21.5"


def test_a_view_kept_in_pytests_cache_is_read_only_if_it_is_one():
    """A boot record is a file anyone could have written: what is not a view is asked again."""
    from pytest_gputopo.probe.cuda_driver import CudaView

    good = CudaView(("00000000:18:00.0", "00000000:2A:00.0"), {(0, 1): False}, {"00000000:18:00.0": True})
    assert CudaView.from_json(good.to_json()) == good
    for bad in (
        {},
        {"bus_ids": ["18:00.0"], "peer": [], "multicast": {}},
        {**good.to_json(), "peer": [[0, 5, True]]},
        {**good.to_json(), "peer": [[0, 1, 1]]},
        {**good.to_json(), "multicast": {"00000000:99:00.0": True}},
        {**good.to_json(), "bus_ids": 7},
    ):
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
