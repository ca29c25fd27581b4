"""The health check's ``cuda`` item (issue 39 item 3): "The cuda item passes from this boot's record
without asking CUDA (under pytest's cache), so it passes while the fabric manager is down on HGX A100
(no fabric info there). A GPU NVML lists but CUDA does not enumerate -- among the GPUs
CUDA_VISIBLE_DEVICES leaves visible, MIG apart -- disappears without a word (8 GPUs become 7) and the
check passes."

Now a check asks CUDA anew (this boot's record keeps torch's versions), and a GPU NVML lists, the
environment leaves visible and CUDA does not enumerate fails the cuda item naming it (NVML's index, UUID,
PCI bus id), is warned in the header, and is the fleet's fault (``core.faults``) too.

Sources: the CUDA C++ Programming Guide, "CUDA Environment Variables": CUDA_VISIBLE_DEVICES takes
indices (into CUDA's own order of the devices it finds) or GPU UUIDs, and CUDA numbers what it leaves
0..k-1 -- so an index names another GPU once one is lost, while a UUID names one GPU whatever CUDA
finds; cuda.h's ``cuDeviceGetCount`` counts the devices CUDA enumerates (the emulated libcuda.so.1,
tests/emulated_host/libcuda.c, leaves out the ones ``Host.cuda(unlisted=...)`` names).
"""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

from emulated import emulated_host, emulated_libs  # noqa: F401  (fixtures)
from pytest_gputopo.core import faults, model, schema
from pytest_gputopo.plugin import checks
from pytest_gputopo.probe.recorded import load_profile

NOT_READY = "cuInit returned CUDA_ERROR_SYSTEM_NOT_READY (802): system not yet initialized"
P2P_TEST = "import pytest\n@pytest.mark.requires_p2p(gpus=2)\ndef test_pair(): pass\n"


def _gpu(machine: str, index: int) -> model.Gpu:
    return load_profile(machine).topology.gpus[index]


def _checks(result_json) -> dict:
    return {c["check"]: c for c in json.loads(result_json.read_text())["checks"]}


# -- a check asks CUDA, not this boot's record -----------------------------------------------------


@pytest.mark.slow
def test_a_check_asks_cuda_even_where_this_boots_record_has_its_view(pytester, emulated_host):
    """Issue 39 item 3: the fabric manager of an HGX A100 (no NVML fabric info there) goes down after a
    run kept CUDA's view in this boot's record: cuInit now answers CUDA_ERROR_SYSTEM_NOT_READY (802). A
    check run with pytest's cache fails its cuda item in the driver's words; it passed from the record."""
    host = emulated_host("dgx-a100")
    pytester.makepyfile(test_x=P2P_TEST)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)  # the record now holds CUDA's view
    host.cuda(init_result=802)
    host.forget_calls()
    check = pytester.runpytest_subprocess("--gputopo-check", "quick", "-v")
    check.stdout.fnmatch_lines(["*gputopo-check::cuda FAILED*", f"FAILED cuda (*): CUDA cannot start: {NOT_READY}"])
    assert "cuInit" in {call for _, call in host.calls()}
    # the record's view, found wrong, is dropped: the next run asks CUDA too, and is unknown, not met
    again = pytester.runpytest_subprocess("-rs")
    again.assert_outcomes(skipped=1)
    again.stdout.fnmatch_lines(["*(NVML probed; CUDA's view probed)"])


@pytest.mark.slow
def test_a_check_on_a_healthy_host_asks_cuda_and_keeps_torchs_versions_from_the_record(pytester, emulated_host):
    emulated_host("dgx-a100")
    pytester.makepyfile(test_x="import pytest\n\ndef test_gputopo(gputopo): pass\n")
    pytester.runpytest_subprocess().assert_outcomes(passed=1)  # every fact, kept in the record
    check = pytester.runpytest_subprocess("--gputopo-check", "quick", "-v")
    check.stdout.fnmatch_lines(
        [
            "*NVML probed; CUDA's view probed; torch's versions from this boot's record*",
            "*gputopo-check::cuda PASSED (CUDA starts and lists 8 devices, every visible GPU NVML lists)*",
        ]
    )


def test_a_view_from_this_boots_record_is_said_so_and_not_judged():
    """Where the answer came only from this boot's record (a check asks CUDA, so only a source that
    did not: another plugin's probe, say), the item skips saying so, never passes on it."""
    topology = load_profile("dgx-a100").topology
    topology = model.Topology(gpus=topology.gpus, source=model.Source("nvml"), cuda_devices=8, cuda_unlisted=())
    run = types.SimpleNamespace(machine=types.SimpleNamespace(notes=("NVML probed", checks.FROM_RECORD)))
    outcome, message, props = checks._cuda_check(run, topology)()
    assert (outcome, props[checks.WHY_PROPERTY]) == ("skipped", "from this boot's record, not re-checked")
    run.machine.notes = ("NVML probed", "CUDA's view probed")
    assert checks._cuda_check(run, topology)()[0] == "passed"
    outcome, message, _ = checks._cuda_check(run, dataclasses.replace(topology, cuda_unlisted=None))()
    assert outcome == "skipped" and checks.NOT_COMPARED in message


# -- a GPU NVML lists and CUDA does not enumerate ---------------------------------------------------


@pytest.mark.slow
def test_a_gpu_cuda_does_not_enumerate_fails_the_cuda_item_naming_it(pytester, emulated_host):
    """Issue 39 item 3: 8 GPUs become 7 without a word. The DGX A100's NVML GPU3 is not among CUDA's
    devices: the cuda item fails naming it (NVML's index, model, UUID, PCI bus id), the header warns
    it, the topology item does not say it twice, and the node's document gives the fleet its fault."""
    host = emulated_host("dgx-a100")
    host.cuda(unlisted=(3,))
    lost = _gpu("dgx-a100", 3)
    named = f"NVML's GPU3 ({lost.name}, {lost.uuid}, PCI {lost.pci_bus_id})"
    report = pytester.path / "node.json"
    result = pytester.runpytest_subprocess("--gputopo-check", "quick", "-v", "--gputopo-json", str(report))
    said = f"CUDA does not enumerate 1 GPU NVML lists: {named}"
    result.stdout.fnmatch_lines(
        [
            f"*warning: {said}: no CUDA process can use it",
            "*gputopo-check::topology PASSED*",
            "*gputopo-check::cuda FAILED*",
            f"FAILED cuda (*): CUDA starts and lists 7 devices; {said}: no CUDA process can use it",
        ]
    )
    document = json.loads(report.read_text())
    topology = schema.from_dict(document["topology"])
    assert topology.cuda_unlisted == (model.UnlistedGpu(3, lost.uuid, lost.pci_bus_id, lost.name),)
    (fault,) = [f for f in faults.topology_faults(topology) if f.name == "cuda"]
    assert fault.line == said and "GPUs" in fault.explains  # the fleet: named for it, not for "7 GPUs"


@pytest.mark.slow
def test_only_the_gpus_cuda_visible_devices_leaves_are_judged(pytester, emulated_host, monkeypatch):
    """By UUID, CUDA_VISIBLE_DEVICES names one GPU whatever CUDA finds: leaving the lost GPU3 out is
    no fault (CUDA lists all it was given); leaving it in is."""
    host = emulated_host("dgx-a100")
    host.cuda(unlisted=(3,))
    uuids = [g.uuid for g in load_profile("dgx-a100").topology.gpus]
    json_path = pytester.path / "run.json"
    args = ("--gputopo-check", "quick", "-p", "no:cacheprovider", "--gputopo-json", str(json_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(uuids[:3]))
    pytester.runpytest_subprocess(*args)
    assert _checks(json_path)["cuda"]["outcome"] == "passed"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(uuids[2:5]))
    pytester.runpytest_subprocess(*args)
    cuda = _checks(json_path)["cuda"]
    assert cuda["outcome"] == "failed" and f"NVML's GPU3 (NVIDIA A100-SXM4-80GB, {uuids[3]}" in cuda["message"]


# -- the rule, as a table ----------------------------------------------------------------------------


def _gpus(n: int, mig=()) -> tuple[model.Gpu, ...]:
    return tuple(
        model.Gpu(i, "G", f"GPU-{i:08x}-0000-0000-0000-000000000000", f"00000000:{i + 1:02X}:00.0", i, mig=i in mig)
        for i in range(n)
    )


@pytest.mark.parametrize(
    "gpus, visible, placed, by_index, lost",
    [
        (_gpus(8), range(8), range(8), False, ()),  # every GPU: none lost
        (_gpus(8), range(8), [0, 1, 2, 4, 5, 6, 7], False, (3,)),  # 8 GPUs become 7
        (_gpus(8), [2, 3, 4], [2, 4], False, (3,)),  # by UUID: GPU3 left visible
        (_gpus(8), [0, 1, 2], [0, 1, 2], False, ()),  # by UUID: GPU3 not left visible
        (_gpus(8), range(8), [0, 1, 2, None, 4, 5, 6], False, None),  # a device NVML cannot place: unknown
        (_gpus(8), [0, 1], [0, 2], True, None),  # indices CUDA maps elsewhere: unknown, not a guess
        (_gpus(8), range(8), [0, 1, 2, 3, 4, 5, 7], True, (6,)),  # "0,...,7", 7 devices: GPU6 lost
        (_gpus(4, mig=(1,)), range(4), [0, 2, 3], False, ()),  # MIG apart
        (_gpus(4, mig=(1,)), range(4), [0, 2], False, (3,)),
        (_gpus(4, mig=(1,)), range(4), [0, 2], True, None),  # indices with a MIG GPU: unknown
    ],
)
def test_which_gpus_cuda_does_not_enumerate(gpus, visible, placed, by_index, lost):
    got = model.cuda_unlisted(gpus, visible, placed, by_index)
    assert (None if got is None else tuple(g.nvml_index for g in got)) == lost


def test_the_fleet_fault_and_the_profile():
    topology = load_profile("dgx-a100").topology
    lost = model.UnlistedGpu(3, "GPU-x", "00000000:47:00.0", "NVIDIA A100-SXM4-80GB")
    t = dataclasses.replace(topology, cuda_unlisted=(lost,))
    (fault,) = [f for f in faults.topology_faults(t) if f.name == "cuda"]
    assert (fault.line, fault.gpus) == (
        "CUDA does not enumerate 1 GPU NVML lists: NVML's GPU3 (NVIDIA A100-SXM4-80GB, GPU-x, PCI 00000000:47:00.0)",
        (),
    )
    assert schema.from_dict(schema.to_dict(t)) == t
    assert "cuda_unlisted" not in schema.to_dict(topology)  # not compared: profiles stay as they were
    for unknown_or_none in (None, ()):
        assert not [
            f
            for f in faults.topology_faults(dataclasses.replace(topology, cuda_unlisted=unknown_or_none))
            if f.name == "cuda"
        ]
