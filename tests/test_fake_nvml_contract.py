"""The fake pynvml behaves like the real nvidia-ml-py where the reference (nvml-nccl-torch.md §0, §1) says how.

Where the real module can run here (no GPU, no libnvidia-ml), both are asserted side by side.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses

import pynvml
import pytest

from fake_nvml import make_fake_pynvml
from pytest_gputopo.core import model

BUS = "00000000:19:00.0"


def _topology() -> model.Topology:
    gpus = (
        model.Gpu(
            0,
            name="NVIDIA H100 80GB HBM3",
            uuid="GPU-11111111-2222-3333-4444-555555555555",
            pci_bus_id=BUS,
            nvml_index=0,
            numa_node=1,
            cpu_affinity="0-23,48-71",
            memory_total_bytes=85520809984,
            compute_capability="9.0",
            nvlinks=(
                model.NvLink(0, True, "00000000:3B:00.0", "GPU", "4.0"),
                model.NvLink(1, False, "00000000:3B:00.0", "GPU", "4.0"),
            ),
        ),
        model.Gpu(1, pci_bus_id="00000000:3B:00.0", nvml_index=1, nvlinks=(model.NvLink(0, True, BUS, "GPU", "4.0"),)),
        model.Gpu(2, pci_bus_id="00000000:5E:00.0", nvml_index=2),  # no NVLink
    )
    ok, tns = model.P2PStatus.OK, model.P2PStatus.TOPOLOGY_NOT_SUPPORTED
    links = (
        model.Link(0, 1, pcie=model.LinkClass.PIX, nvlinks=1, p2p=model.P2P(ok, ok, ok, ok)),
        model.Link(0, 2, pcie=model.LinkClass.SYS, p2p=model.P2P(tns, tns, tns, tns)),
        model.Link(1, 2, pcie=None),
    )
    return model.Topology(gpus=gpus, links=links, driver_version="550.54.15", cuda_driver_version="12.4")


@pytest.fixture
def fake():
    nvml = make_fake_pynvml(_topology())
    nvml.nvmlInit()
    yield nvml
    while True:  # leave no init behind
        try:
            nvml.nvmlShutdown()
        except pynvml.NVMLError_Uninitialized:
            break


def _real_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# -- module surface ------------------------------------------------------------------------------


def test_constants_equal_the_real_modules():
    nvml = make_fake_pynvml(_topology())
    names = [n for n in dir(nvml) if n.startswith("NVML_")]
    assert len(names) > 100
    shared = [n for n in names if hasattr(pynvml, n)]
    assert shared == names  # the fake invents no constant
    assert {n: getattr(nvml, n) for n in shared} == {n: getattr(pynvml, n) for n in shared}
    for name in (
        "NVML_P2P_CAPS_INDEX_WRITE",
        "NVML_TOPOLOGY_SYSTEM",
        "NVML_NVLINK_MAX_LINKS",
        "NVML_P2P_STATUS_OK",
        "NVML_NVLINK_DEVICE_TYPE_SWITCH",
        "NVML_NVLINK_VERSION_4_0",
        "NVML_FEATURE_ENABLED",
        "NVML_AFFINITY_SCOPE_NODE",
        "NVML_ERROR_NOT_SUPPORTED",
    ):
        assert name in names


def test_trailing_comma_read_index_is_a_tuple_in_both():
    assert pynvml.NVML_P2P_CAPS_INDEX_READ == (0,)
    assert make_fake_pynvml(_topology()).NVML_P2P_CAPS_INDEX_READ == (0,)


def test_old_binding_constants_and_functions():
    old = make_fake_pynvml(_topology(), binding_version="11.495.46")
    assert old.NVML_NVLINK_MAX_LINKS == 12  # 18 in 12.x, 36 in 13.x (pynvml.py)
    assert old.NVML_P2P_CAPS_INDEX_UNKNOWN == 6  # the binding bug; 5 from 12.575
    assert not hasattr(old, "nvmlDeviceGetNumaNodeId")
    assert not hasattr(old, "nvmlDeviceGetGpuMaxPcieLinkGeneration")
    assert not hasattr(make_fake_pynvml(_topology(), binding_version="12.535.161"), "nvmlDeviceGetNumaNodeId")
    assert hasattr(make_fake_pynvml(_topology(), binding_version="12.575.51"), "nvmlDeviceGetNumaNodeId")


# -- errors --------------------------------------------------------------------------------------


def test_error_classes_are_the_real_ones():
    nvml = make_fake_pynvml(_topology())
    assert nvml.NVMLError is pynvml.NVMLError
    assert nvml.NVMLError_NotSupported is pynvml.NVMLError_NotSupported
    err = nvml.NVMLError(3)  # the factory picks the per-code subclass
    assert type(err).__name__ == "NVMLError_NotSupported"
    assert isinstance(err, pynvml.NVMLError_NotSupported)
    assert err.value == 3 and str(err) == "Not Supported"
    assert err == nvml.NVMLError_NotSupported()  # __eq__ compares .value
    assert str(nvml.NVMLError_LibraryNotFound()) == "NVML Shared Library Not Found"
    assert type(nvml.NVMLError(12345)) is pynvml.NVMLError  # unknown codes stay plain
    assert nvml.nvmlExceptionClass(9) is pynvml.NVMLError_DriverNotLoaded


@pytest.mark.parametrize("which", ["real", "fake"])
def test_calls_before_init_raise_uninitialized(which):
    nvml = pynvml if which == "real" else make_fake_pynvml(_topology())
    with pytest.raises(pynvml.NVMLError_Uninitialized) as info:
        nvml.nvmlDeviceGetCount()
    assert str(info.value) == "Uninitialized"
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlSystemGetDriverVersion()


def test_real_init_without_library_raises_library_not_found():
    if _real_library_present():
        pytest.skip("libnvidia-ml.so.1 is installed here: the real nvmlInit would succeed")
    with pytest.raises(pynvml.NVMLError_LibraryNotFound) as real:
        pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_LibraryNotFound) as fake:
        make_fake_pynvml(_topology(), init_error="LibraryNotFound").nvmlInit()
    assert real.value == fake.value and str(real.value) == str(fake.value) == "NVML Shared Library Not Found"
    assert real.value.value == 12


@pytest.mark.parametrize("name, code", [("LibraryNotFound", 12), ("DriverNotLoaded", 9), ("NoPermission", 4)])
def test_init_error(name, code):
    nvml = make_fake_pynvml(_topology(), init_error=name)
    with pytest.raises(getattr(pynvml, "NVMLError_" + name)) as info:
        nvml.nvmlInit()
    assert info.value.value == code
    with pytest.raises(pynvml.NVMLError_Uninitialized):  # nothing was initialised
        nvml.nvmlDeviceGetCount()


def test_unknown_init_error_is_refused():
    with pytest.raises(ValueError, match="NoSuchThing"):
        make_fake_pynvml(_topology(), init_error="NoSuchThing")


def test_init_is_reference_counted():
    nvml = make_fake_pynvml(_topology())
    nvml.nvmlInit()
    nvml.nvmlInit()
    nvml.nvmlShutdown()
    assert nvml.nvmlDeviceGetCount() == 3  # one init still holds
    nvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


# -- handles and structs -------------------------------------------------------------------------


def test_handles_are_ctypes_pointers_that_never_compare_equal(fake):
    h1, h2 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(0)
    assert type(h1).__name__ == "LP_struct_c_nvmlDevice_t"
    assert type(h1) is pynvml.c_nvmlDevice_t
    assert h1 != h2  # ctypes pointers compare by identity
    assert fake.nvmlDeviceGetIndex(h1) == fake.nvmlDeviceGetIndex(h2) == 0
    assert h1 and not pynvml.c_nvmlDevice_t()  # a NULL handle is falsy, a real one is not
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetName(pynvml.c_nvmlDevice_t())
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(3)
    assert fake.nvmlDeviceGetIndex(fake.nvmlDeviceGetHandleByPciBusId("00000000:3b:00.0")) == 1
    assert fake.nvmlDeviceGetIndex(fake.nvmlDeviceGetHandleByUUID("GPU-11111111-2222-3333-4444-555555555555")) == 0
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetHandleByPciBusId("00000000:99:00.0")


def test_pci_info_is_the_real_struct_and_prints_like_it(fake):
    info = fake.nvmlDeviceGetPciInfo(fake.nvmlDeviceGetHandleByIndex(0))
    assert type(info) is pynvml.nvmlPciInfo_t
    assert info.busId == BUS and isinstance(info.busId, str)  # decoded since 11.515.48
    assert (info.domain, info.bus, info.device) == (0, 0x19, 0)
    # the reference's verified str() of a hand-filled real struct (§1.6), with the ids unknown (0)
    assert str(info) == (
        "nvmlPciInfo_t(busIdLegacy: 0000:19:00.0, domain: 0x00000000, bus: 0x19, device: 0x00, "
        "pciDeviceId: 0x00000000, pciSubSystemId: 0x00000000, busId: 00000000:19:00.0)"
    )
    real = pynvml.nvmlPciInfo_t()
    real.busIdLegacy, real.busId, real.bus = "0000:19:00.0", BUS, 0x19
    assert str(real) == str(info)


def test_other_return_types(fake):
    h = fake.nvmlDeviceGetHandleByIndex(0)
    memory = fake.nvmlDeviceGetMemoryInfo(h)
    assert type(memory) is pynvml.c_nvmlMemory_t and memory.total == 85520809984
    assert str(memory).startswith("c_nvmlMemory_t(total: 85520809984 B, ")
    assert fake.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
    cpus = fake.nvmlDeviceGetCpuAffinity(h, 4)
    assert isinstance(cpus, ctypes.Array) and cpus._type_ is ctypes.c_ulonglong and len(cpus) == 4
    assert cpus[0] == (1 << 24) - 1 | ((1 << 16) - 1) << 48 and cpus[1] == (1 << 8) - 1 and cpus[2] == 0
    assert list(fake.nvmlDeviceGetMemoryAffinity(h, 1, 0)) == [0b10]
    assert isinstance(fake.nvmlDeviceGetName(h), str) and isinstance(fake.nvmlDeviceGetUUID(h), str)
    assert fake.nvmlSystemGetDriverVersion() == "550.54.15"
    assert fake.nvmlSystemGetCudaDriverVersion() == 12040
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNumaNodeId(h)  # x86: the GPU is no NUMA node
    with pytest.raises(pynvml.NVMLError_NotSupported):  # not recorded
        fake.nvmlDeviceGetName(fake.nvmlDeviceGetHandleByIndex(1))


def test_old_binding_returns_bytes():
    nvml = make_fake_pynvml(_topology(), binding_version="11.495.46")
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetName(h) == b"NVIDIA H100 80GB HBM3"
    assert nvml.nvmlSystemGetDriverVersion() == b"550.54.15"
    assert nvml.nvmlDeviceGetPciInfo(h).busId == BUS.encode()  # verified on the 11.495.46 wheel (§1.2)
    with pytest.raises(TypeError):
        nvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)  # no version kwarg before 11.515


# -- topology, P2P, NVLink -----------------------------------------------------------------------


def test_p2p_read_tuple_raises_argument_error_like_ctypes(fake):
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ctypes.ArgumentError) as from_fake:
        fake.nvmlDeviceGetP2PStatus(h0, h1, fake.NVML_P2P_CAPS_INDEX_READ)
    # The real wrapper passes p2pIndex to an untyped ctypes function; the same conversion in libc:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    with pytest.raises(ctypes.ArgumentError) as from_ctypes:
        libc.labs(0, 0, pynvml.NVML_P2P_CAPS_INDEX_READ)
    assert str(from_fake.value) == str(from_ctypes.value)
    assert fake.nvmlDeviceGetP2PStatus(h0, h1, 0) == pynvml.NVML_P2P_STATUS_OK
    h2 = fake.nvmlDeviceGetHandleByIndex(2)
    assert (
        fake.nvmlDeviceGetP2PStatus(h2, h0, fake.NVML_P2P_CAPS_INDEX_WRITE)
        == pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
    )
    assert fake.nvmlDeviceGetP2PStatus(h1, h2, 0) == pynvml.NVML_P2P_STATUS_UNKNOWN  # not recorded
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetP2PStatus(h0, h1, 9)


def test_common_ancestor(fake):
    h = [fake.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    assert fake.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]) == pynvml.NVML_TOPOLOGY_SINGLE
    assert fake.nvmlDeviceGetTopologyCommonAncestor(h[2], h[0]) == pynvml.NVML_TOPOLOGY_SYSTEM
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetTopologyCommonAncestor(h[1], h[2])  # unknown in the recording


def test_nvlink_getters(fake):
    h0, h2 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(2)
    assert fake.nvmlDeviceGetNvLinkState(h0, 0) == pynvml.NVML_FEATURE_ENABLED
    assert fake.nvmlDeviceGetNvLinkState(h0, 1) == pynvml.NVML_FEATURE_DISABLED
    assert fake.nvmlDeviceGetNvLinkVersion(h0, 0) == pynvml.NVML_NVLINK_VERSION_4_0 == 6  # encoded
    remote = fake.nvmlDeviceGetNvLinkRemotePciInfo(h0, 0)
    assert type(remote) is pynvml.nvmlPciInfo_t and remote.busId == "00000000:3B:00.0"
    assert fake.nvmlDeviceGetNvLinkRemoteDeviceType(h0, 0) == pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetNvLinkState(h0, 2)  # past the GPU's last link: where DCGM stops
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(h2, 0)  # a GPU without NVLink
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetNvLinkState(h2, fake.NVML_NVLINK_MAX_LINKS)


# -- MIG and compute mode ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nvmlDeviceGetMigMode", "nvmlDeviceGetComputeMode"])
def test_mode_getters_take_what_the_real_ones_take(name):
    """pynvml 13.615.71: ``def nvmlDeviceGetMigMode(device)`` (l.6089), ``def nvmlDeviceGetComputeMode(handle)``
    (l.4012); both exist in every binding since 11.495."""
    import inspect

    fake = make_fake_pynvml(_topology(), binding_version="11.495.46")
    assert list(inspect.signature(getattr(fake, name)).parameters) == list(
        inspect.signature(getattr(pynvml, name)).parameters
    )
    for nvml in (pynvml, fake):  # before init, as every call
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            getattr(nvml, name)(pynvml.c_nvmlDevice_t())


def test_mig_mode_is_current_and_pending_and_not_supported_where_unrecorded():
    """``nvmlDeviceGetMigMode`` returns ``[c_currentMode.value, c_pendingMode.value]`` of
    NVML_DEVICE_MIG_DISABLE/ENABLE (l.6089-6095, l.2794-2795); a GPU without MIG answers NOT_SUPPORTED."""
    t = _topology()
    gpus = (
        dataclasses.replace(t.gpus[0], mig=True, compute_mode="Exclusive_Process"),
        dataclasses.replace(t.gpus[1], mig=False, compute_mode="Prohibited"),
        t.gpus[2],
    )
    nvml = make_fake_pynvml(dataclasses.replace(t, gpus=gpus))
    nvml.nvmlInit()
    h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    assert nvml.nvmlDeviceGetMigMode(h[0]) == [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
    assert nvml.nvmlDeviceGetMigMode(h[1]) == [pynvml.NVML_DEVICE_MIG_DISABLE] * 2
    assert type(nvml.nvmlDeviceGetMigMode(h[1])) is list
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetMigMode(h[2])
    # ``nvmlDeviceGetComputeMode`` returns ``c_mode.value``, an NVML_COMPUTEMODE_* int (l.88-91, l.4012-4017)
    assert nvml.nvmlDeviceGetComputeMode(h[0]) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS == 3
    assert nvml.nvmlDeviceGetComputeMode(h[1]) == pynvml.NVML_COMPUTEMODE_PROHIBITED == 2
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetComputeMode(h[2])
