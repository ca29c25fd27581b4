"""CUDA's view joined to NVML's facts (issue 32 G2-G5): a device NVML cannot place is unknown, never
a reason to renumber the GPUs after it; a CUDA that cannot start is named by the driver's own words
and makes P2P unknown; a boot record is read only when it is this user's and agrees with NVML.

Sources: cuda.h (CUDA 12.x/13.x) declares ``CUresult cuGetErrorName(CUresult error, const char **pStr)``
and ``cuGetErrorString`` alike ("CUDA_ERROR_INVALID_VALUE" and ``*pStr = NULL`` for an unknown code),
``CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)`` with ``CUuuid { char bytes[16]; }``;
``cuDeviceGet(ordinal)`` is the ordinal every CUDA process uses, so a GPU's number is its position in
CUDA's list, whatever NVML can say of the devices before it.
"""

from __future__ import annotations

import dataclasses

import pytest

from emulated import emulated_host, emulated_libs  # noqa: F401  (fixtures)
from pytest_gputopo.probe.cuda_driver import CudaView
from pytest_gputopo.probe.cuda_numbering import as_cuda_sees_it
from pytest_gputopo.probe.recorded import load_profile


def _bus_order(topology):
    return sorted(topology.gpus, key=lambda g: g.pci_bus_id)


def test_a_device_nvml_cannot_place_keeps_its_number_and_shifts_no_other(monkeypatch):
    """NVML could not read GPU 2 (no handle: no bus id, no UUID), CUDA lists all eight: cuda:3 is
    still the GPU at CUDA's fourth bus id, not the one after it; cuda:2 is a GPU of unknown facts."""
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    nvml = load_profile("hgx-h100").topology
    cuda_order = _bus_order(nvml)
    lost = cuda_order[2].index
    nvml = dataclasses.replace(nvml, gpus=tuple(dataclasses.replace(g, pci_bus_id=None, uuid=None, name=None)
                                                if g.index == lost else g for g in nvml.gpus))
    view = CudaView(tuple(g.pci_bus_id for g in cuda_order), {}, {})
    seen = as_cuda_sees_it(nvml, view)
    assert len(seen.gpus) == 8
    assert [g.pci_bus_id for g in seen.gpus] == [g.pci_bus_id for g in cuda_order]  # each at its own ordinal
    assert seen.gpus[3].uuid == cuda_order[3].uuid and seen.gpus[2].name is None
    assert seen.link(2, 3).label is None and seen.link(3, 4).label == nvml.link(cuda_order[3].index,
                                                                               cuda_order[4].index).label
    assert any("CUDA device 2 (PCI " in w and "not renumbered" in w for w in seen.warnings)


def test_cuda_and_nvml_are_joined_by_uuid_before_bus_id(monkeypatch):
    """A GPU whose bus id NVML did not give is still placed by its UUID."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = load_profile("hgx-h100").topology
    cuda_order = _bus_order(nvml)
    nvml = dataclasses.replace(nvml, gpus=tuple(dataclasses.replace(g, pci_bus_id=None) if g is cuda_order[5] else g
                                                for g in nvml.gpus))
    view = CudaView(tuple(g.pci_bus_id for g in cuda_order), {}, {}, tuple(g.uuid for g in cuda_order))
    seen = as_cuda_sees_it(nvml, view)
    assert [g.uuid for g in seen.gpus] == [g.uuid for g in cuda_order] and not seen.warnings


def test_a_view_with_uuids_round_trips_and_a_bad_uuid_is_refused():
    good = CudaView(("00000000:18:00.0", "00000000:2A:00.0"), {(0, 1): True}, {},
                    ("GPU-0123abcd-0000-1111-2222-333344445555", None))
    assert CudaView.from_json(good.to_json()) == good
    with pytest.raises(ValueError):
        CudaView.from_json({**good.to_json(), "uuids": ["GPU-x", None]})


def test_the_probe_child_reads_uuids_and_names_cudas_error_as_the_driver_does(emulated_host, monkeypatch):
    """The emulated libcuda.so.1 (tests/emulated_host/libcuda.c) answers as cuda.h declares."""
    import ctypes
    import os

    from pytest_gputopo.probe.cuda_driver import cuda_view

    emulated_host("dgx-a100")
    lib = ctypes.CDLL(os.path.join(os.environ["LD_LIBRARY_PATH"].split(os.pathsep)[0], "libcuda.so.1"))
    view = cuda_view(lib)
    assert list(view.uuids) == [g.uuid for g in _bus_order(load_profile("dgx-a100").topology)]
    from pytest_gputopo.probe.cuda_driver import error_text

    assert error_text(lib, 802) == "CUDA_ERROR_SYSTEM_NOT_READY (802): system not yet initialized"
    assert error_text(lib, 12345) == "CUresult 12345"  # a code the driver does not know


P2P_TEST = "import pytest\n@pytest.mark.requires_p2p(gpus=2)\ndef test_pair(): pass\n"


def test_where_cuda_cannot_start_p2p_is_unknown_and_the_check_names_the_error(pytester, emulated_host):
    """An NVSwitch node whose fabric manager is down: cuInit answers CUDA_ERROR_SYSTEM_NOT_READY (802)
    while NVML reports every pair's P2P OK. requires_p2p is unknown, not met (no CUDA program can do
    P2P there); the quick check's cuda item fails naming the error in the driver's words."""
    host = emulated_host("dgx-a100")
    host.cuda(init_result=802)
    pytester.makepyfile(test_x=P2P_TEST)
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    said = "cuInit returned CUDA_ERROR_SYSTEM_NOT_READY (802): system not yet initialized"
    result.stdout.fnmatch_lines([f"gputopo warning: *{said}", f"*requires_p2p*P2P unknown: CUDA cannot start here ({said})*"])
    check = pytester.runpytest_subprocess("--gputopo-check", "quick", "-p", "no:cacheprovider", "-v")
    check.stdout.fnmatch_lines([f"*gputopo-check::cuda FAILED*", f"FAILED cuda (*): CUDA cannot start: {said}"])
    assert "topology FAILED" not in check.stdout.str()  # the one cause said once, by the cuda item


def test_where_cuda_starts_the_check_says_how_many_devices_it_lists(pytester, emulated_host):
    emulated_host("dgx-a100")
    result = pytester.runpytest_subprocess("--gputopo-check", "quick", "-p", "no:cacheprovider", "-v")
    result.stdout.fnmatch_lines(["*gputopo-check::cuda PASSED (CUDA starts and lists 8 devices)*"])
