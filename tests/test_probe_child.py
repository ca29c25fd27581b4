"""The probe never initialises CUDA in the pytest process, and a hung driver never hangs pytest.

torch's ``torch.cuda.get_device_properties`` and ``can_device_access_peer`` both call
``torch.cuda._lazy_init()`` (torch 2.13: ``torch/cuda/__init__.py``, ``get_device_properties`` ->
``_lazy_init()``; ``can_device_access_peer`` -> ``_lazy_init()``), after which a test that forks and
uses CUDA fails with "Cannot re-initialize CUDA in forked subprocess" (``_lazy_init`` raises it when
``_is_in_bad_fork()``). So CUDA's view is taken in a child process (``probe.host``).

No GPU here: a stub directory on PYTHONPATH holds ``pynvml`` (the project's fake NVML serving a
recorded machine, built on the real module) and ``torch`` (whose ``torch.cuda`` records every call
with the calling process's pid). A conftest lets the probe believe a driver is installed.
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

STUB_TORCH_CUDA = """
import os
from types import SimpleNamespace
from pytest_gputopo.probe.recorded import load_profile

_GPUS = load_profile(os.environ["GPUTOPO_TEST_MACHINE"]).topology.gpus

def _record(name):
    with open(os.environ["GPUTOPO_TEST_CALLS"], "a") as f:
        f.write(f"{os.getpid()} {name}\\n")

def _lazy_init():
    _record("_lazy_init")

def init():
    _record("init")

def is_available():
    _record("is_available")  # torch's is_available asks the driver without initialising CUDA
    return True

def device_count():
    _record("device_count")
    return len(_GPUS)

def get_device_properties(i):
    _lazy_init()
    _record("get_device_properties")
    dom, bus, rest = _GPUS[i].pci_bus_id.split(":")
    return SimpleNamespace(pci_domain_id=int(dom, 16), pci_bus_id=int(bus, 16), pci_device_id=int(rest.split(".")[0], 16))

def can_device_access_peer(a, b):
    _lazy_init()
    _record("can_device_access_peer")
    return {a, b} != {0, 1}  # CUDA refuses one pair NVML calls OK: the join must say so
"""


@pytest.fixture
def gpu_stubs(tmp_path, monkeypatch):
    stubs = tmp_path / "stubs"
    (stubs / "torch").mkdir(parents=True)
    (stubs / "pynvml.py").write_text(STUB_PYNVML)
    (stubs / "torch" / "__init__.py").write_text("from . import cuda, version\n")
    (stubs / "torch" / "version.py").write_text("cuda = '12.8'\n")  # a CUDA build; its cuda module has no nccl
    (stubs / "torch" / "cuda.py").write_text(STUB_TORCH_CUDA)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(stubs), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("GPUTOPO_TEST_REAL_PYNVML", real_pynvml.__file__)
    monkeypatch.setenv("GPUTOPO_TEST_MACHINE", "dgx-a100")
    monkeypatch.setenv("GPUTOPO_TEST_CALLS", str(tmp_path / "calls.log"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


def test_the_pytest_process_never_calls_a_cuda_initialising_function(pytester, gpu_stubs):
    pytester.makeconftest("""
import os
import pytest_gputopo.probe as probe

probe._nvml_library_missing = lambda: False  # a driver is installed, as far as the probe can tell

def pytest_configure(config):
    open(os.environ["GPUTOPO_TEST_CALLS"] + ".pytest-pid", "w").write(str(os.getpid()))
""")
    pytester.makepyfile(test_x="import pytest\n@pytest.mark.requires_p2p(gpus=2)\ndef test_pair(): pass\n"
                                "@pytest.mark.requires_versions(cuda_runtime='>=12.1')\ndef test_built(): pass\n"
                                "@pytest.mark.requires_versions(nccl='>=2.18')\ndef test_nccl(): pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.stdout.fnmatch_lines([
        "gputopo: 8x NVIDIA A100-SXM4-80GB, worst link NV12*, source NVML",
        "gputopo warning: GPU0-GPU1: NVML says P2P is OK, CUDA says peer access is impossible",
        "*requires_p2p(gpus=2): GPU0-GPU1 cannot do P2P (CUDA reports no peer access)*",
        "*requires_versions(nccl='>=2.18'): the NCCL torch loads (nccl) is unknown*",
    ])
    result.assert_outcomes(passed=1, skipped=2)  # torch.version.cuda came from the child
    pytest_pid = (gpu_stubs / "calls.log.pytest-pid").read_text()
    calls = [line.split() for line in (gpu_stubs / "calls.log").read_text().splitlines()]
    assert {"get_device_properties", "can_device_access_peer", "_lazy_init"} <= {name for _, name in calls}
    assert [name for pid, name in calls if pid == pytest_pid] == []  # CUDA was asked by the child only


def test_a_hung_driver_ends_at_the_deadline_with_a_reason_and_no_orphan(gpu_stubs, monkeypatch):
    from pytest_gputopo.probe.host import probe_in_child

    hang = gpu_stubs / "hung.pid"
    monkeypatch.setenv("GPUTOPO_TEST_HANG", str(hang))
    topology, view = probe_in_child(timeout_s=3)
    assert view is None and not topology.gpus and topology.is_this_host
    assert "did not finish within 3 s; its process group was killed" in topology.problem
    with pytest.raises(ProcessLookupError):
        os.kill(int(hang.read_text()), 0)


def test_without_torch_the_child_answers_from_nvml_alone(gpu_stubs):
    from pytest_gputopo.probe.host import probe_in_child

    topology, view = probe_in_child(use_torch=False)
    assert view is None and len(topology.gpus) == 8 and topology.source.kind == "nvml"
    assert not (gpu_stubs / "calls.log").exists()


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

    def cuDeviceGetAttribute(self, value, attribute, device):
        assert attribute == 132  # CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED in cuda.h, as NCCL's nvls.cc asks it
        if device.value == 1:
            return 101  # CUDA_ERROR_INVALID_DEVICE
        value.contents.value = 1
        return 0


def test_multicast_comes_from_cudas_attribute_joined_by_bus_id():
    from pytest_gputopo.probe.cuda_driver import multicast_by_bus
    from pytest_gputopo.probe.host import with_cuda_facts
    from pytest_gputopo.probe import probe

    assert multicast_by_bus(FakeLibcuda()) == {"00000000:18:00.0": True}  # device 1 unanswered: unknown
    # NCCL's rule: a driver without cuMulticastCreate has no multicast (src/transport/nvls.cc)
    assert multicast_by_bus(FakeLibcuda(create=False)) == {"00000000:18:00.0": False, "00000000:2A:00.0": False}
    bare = dataclasses.replace(probe("hgx-h100"), gpus=tuple(dataclasses.replace(g, multicast=None)
                                                             for g in probe("hgx-h100").gpus))
    joined = with_cuda_facts(bare, multicast_by_bus(FakeLibcuda()), {"nccl_version": "2.21.5"})
    assert [g.multicast for g in joined.gpus] == [True] + [None] * 7 and joined.nccl_version == "2.21.5"


@needs_torch
def test_a_cpu_build_of_torch_has_no_cuda_or_nccl_version():
    from pytest_gputopo.probe.torch_cuda import torch_versions

    assert torch_versions() == {"cuda_runtime_version": None, "nccl_version": None}
