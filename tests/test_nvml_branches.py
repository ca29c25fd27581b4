"""The plugin on every NVIDIA driver branch it can meet, entered as a user's run enters a GPU host
(``tests/emulated.py``: a subprocess whose library path holds ``libnvidia-ml.so.1`` and whose
``pynvml`` serves a bundled machine; nothing of the plugin patched), with each branch's NVML
personality from ``tests/emulated_host/nvml_drivers.py``:

- What a branch lacks: a function is in a branch's libnvidia-ml from the first ``nvml.h`` that
  declares it (NVIDIA's header as vendored in NVIDIA/go-nvml ``gen/nvml/nvml.h``, history from
  56658d6 "API 11" to 8b8585b "CUDA 13.3"; a CUDA 11.x/12.x/13.x header is its driver branch's, by the
  CUDA release notes' toolkit/driver table). Of the 25 functions the probe calls, 24 are in the oldest
  vendored header (R450/R455); ``nvmlDeviceGetNvLinkRemoteDeviceType`` first appears in the CUDA
  11.4 header (go-nvml 15056a1; absent at c8ecfcd "11.2.2" and a2a452c "11.3"), i.e. R470. So 470, 535,
  550, 570 and 580 lack none of them, and 460 (played here as the branch just before) lacks that one:
  nvidia-ml-py then raises ``NVMLError_FunctionNotFound`` (``_nvmlGetFunctionPointer``).
- What a branch reports: driver and CUDA versions of a real driver of the branch (public nvidia-smi
  banners and the bundled recordings; each cited in the table).
- Which GPUs a branch drives: Ada/Hopper from CUDA 11.8 (R520), Blackwell from CUDA 12.8 (R570);
  the host refuses older branches with them (no source shows such a pair).
- Past a GPU's last NVLink the driver answers ``NVML_ERROR_INVALID_ARGUMENT`` (GB200: 18 links, indices
  18..35 rejected so, NVIDIA/TensorRT-LLM PR 17060), which the probe takes as the end of the links.
- In a VM with the GPUs passed through, ``nvidia-smi topo -p2p r`` shows CNS between GPUs without an
  NVLink unless the hypervisor injects NVIDIA's P2P clique capability (noonghunna/club-3090 PR 884,
  lxc/incus#3962, cloud-hypervisor PR 6235), while an HGX board passed whole keeps NV18 (the corpus's
  topo/024, a RHEL AI VM with 8x H100).

On each branch NVML's GPUs are all kept; a fact the branch lacks is unknown (a marker needing it skips
saying so, no crash, no traceback in a reason); the facts it has are judged as on any other branch.
"""

import pytest

from conftest import marked_module
from emulated import emulated_host, emulated_libs, make_host, nvml_drivers  # noqa: F401  (fixtures)

BRANCHES = tuple(nvml_drivers.BRANCHES)
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"

MARKED = (
    marked_module(
        test_gpus="requires_gpus(8)",
        test_nvlink="requires_nvlink",
        test_p2p="requires_p2p",
        test_driver='requires_versions(driver=">=535")',
    )
    + """
def test_facts(gputopo):
    import json, os
    with open(os.path.join(os.path.dirname(__file__), "facts.json"), "w") as f:
        json.dump({"driver": gputopo.driver_version, "cuda": gputopo.cuda_driver_version,
                   "gpus": [[g.name, g.pci_bus_id, len(g.nvlinks), sorted({l.version for l in g.nvlinks})]
                            for g in gputopo.gpus],
                   "nvlinks": sorted({str(l.nvlinks) for l in gputopo.links}),
                   "p2p": sorted({str(l.p2p_works) for l in gputopo.links}),
                   "source": str(gputopo.source), "warnings": list(gputopo.warnings)}, f)
"""
)


def _run(pytester):
    import json

    pytester.makepyfile(test_x=MARKED)
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    return result, json.loads((pytester.path / "facts.json").read_text())


CASES = [
    (machine, branch)
    for machine in ("dgx-a100", "hgx-h100")
    for branch in BRANCHES
    if machine != "hgx-h100" or nvml_drivers.drives(branch, "9.0")
]


@pytest.mark.parametrize("machine, branch", CASES, ids=[f"{m}-{b}" for m, b in CASES])
@pytest.mark.slow
def test_each_branch_keeps_nvmls_gpus_and_judges_what_it_knows(pytester, emulated_host, machine, branch):
    emulated_host(machine, driver=branch)
    played = nvml_drivers.BRANCHES[branch]
    name, links, version = (A100, 12, "3.1") if machine == "dgx-a100" else (H100, 18, "4.0")
    old = int(branch) < 535
    lacks_type = "nvmlDeviceGetNvLinkRemoteDeviceType" in nvml_drivers.lacks(branch)
    result, facts = _run(pytester)

    result.stdout.fnmatch_lines([f"gputopo: 8x {name}, *source NVML*"])
    # NVML's 8 GPUs with their bus ids, and the branch's own versions, on every branch
    assert len(facts["gpus"]) == 8 and all(g[0] == name and g[1] for g in facts["gpus"])
    assert (facts["driver"], facts["cuda"], facts["source"]) == (played.driver, played.cuda, "NVML")
    # each GPU's NVLinks are seen on every branch; their version is the encoded one NVML gives
    assert all(g[2] == links and g[3] == [version] for g in facts["gpus"])
    assert facts["p2p"] == ["True"]
    assert facts["warnings"] == []  # a function the driver lacks is no failure

    skipped = ["test_driver"] if old else []
    if lacks_type:
        # Without the remote device type, an NVLink to a bus id that is no GPU's may lead to a
        # switch or anywhere else: the pair counts are unknown, and requires_nvlink says so.
        assert facts["nvlinks"] == ["None"]
        skipped.append("test_nvlink")
        result.stdout.fnmatch_lines(["SKIPPED*requires_nvlink: GPU0-GPU1 has an unknown number of NVLinks*"])
    else:
        assert facts["nvlinks"] == [str(links)]
    if old:
        result.stdout.fnmatch_lines(
            [f"SKIPPED*requires_versions(driver='>=535'): the NVIDIA driver (driver) is {played.driver}, needs >=535*"]
        )
    result.assert_outcomes(passed=5 - len(skipped), skipped=len(skipped))


@pytest.mark.parametrize("branch", [b for b in BRANCHES if nvml_drivers.drives(b, "10.0")])
def test_gb200_on_the_branches_that_drive_it(pytester, emulated_host, branch):
    emulated_host("gb200-tray", driver=branch)
    marked = marked_module(
        test_gpus="requires_gpus(4)", test_nvlink="requires_nvlink(min_links=18)", test_p2p="requires_p2p"
    )
    pytester.makepyfile(
        test_x=marked
        + """
def test_facts(gputopo):
    assert [len(g.nvlinks) for g in gputopo.gpus] == [18] * 4  # links 18.. answer InvalidArgument: the end
    assert {l.version for g in gputopo.gpus for l in g.nvlinks} == {"5.0"}
    assert {l.nvlinks for l in gputopo.links} == {18}
"""
    )
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["gputopo: 4x NVIDIA GB200, *source NVML*"])


def test_the_host_plays_no_branch_older_than_its_gpus(tmp_path, emulated_libs):
    for machine, branch in (("hgx-h100", "470"), ("gb200-tray", "550"), ("dgx-a100", "999")):
        with pytest.raises(ValueError):
            make_host(tmp_path / f"{machine}-{branch}", emulated_libs, machine, driver=branch)
    assert nvml_drivers.lacks("470") == () and nvml_drivers.lacks("580") == ()
    assert nvml_drivers.lacks("460") == ("nvmlDeviceGetNvLinkRemoteDeviceType",)


def test_in_a_vm_pcie_pairs_refuse_p2p_and_nvlink_pairs_keep_it(pytester, emulated_host):
    emulated_host("8x-l40s", driver="550", vm=True)
    pytester.makepyfile(test_x=marked_module(test_gpus="requires_gpus(8)", test_p2p="requires_p2p(gpus=2)"))
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*requires_p2p(gpus=2): GPU0-GPU1 cannot do P2P (read chipset not supported)*"])
    assert "Traceback" not in result.stdout.str()


def test_an_hgx_board_passed_whole_to_a_vm_keeps_its_nvlinks(pytester, emulated_host):
    emulated_host("hgx-h100", driver="570", vm=True)
    pytester.makepyfile(test_x=marked_module(test_nvlink="requires_nvlink(min_links=18)", test_p2p="requires_p2p"))
    pytester.runpytest_subprocess("-rs").assert_outcomes(passed=2)


@pytest.mark.parametrize("branch", ["460", "470"])
def test_nvlinks_straight_to_gpus_are_counted_without_the_remote_device_type(pytester, emulated_host, branch):
    """DGX-1 (V100): each NVLink leads to another GPU, whose bus id NVML knows, so the counts need
    no remote device type and are the same on the branch that lacks it."""
    emulated_host("dgx1-v100", driver=branch)
    pytester.makepyfile(
        test_x="""
from pytest_gputopo.probe.recorded import load_profile
def test_counts(gputopo):
    recorded = load_profile("dgx1-v100").topology
    def by_bus(t):
        bus = {g.index: g.pci_bus_id for g in t.gpus}
        return {frozenset((bus[l.a], bus[l.b])): l.nvlinks for l in t.links}
    assert by_bus(gputopo) == by_bus(recorded) and set(by_bus(gputopo).values()) == {0, 1, 2}
"""
    )
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_unknown_nvlink_counts_are_never_shown_as_a_pcie_link(pytester, emulated_host):
    """On 460 (no nvmlDeviceGetNvLinkRemoteDeviceType) a DGX A100's pair counts are unknown; the
    header and requires_link must not then claim the pairs are PCIe links (the machine is NV12)."""
    emulated_host("dgx-a100", driver="460")
    pytester.makepyfile(test_x=marked_module(test_nv='requires_link("NV")'))
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=1)
    out = result.stdout.str()
    assert "worst link SYS" not in out and "are linked by PXB" not in out, out
