"""A recorded profile is read straight into the model (``probe/named_machine.as_nvml_reads``), as the
machine NVML would report of it: the same machine the NVML code path reads from the fake ``pynvml``
serving the profile (the path that read profiles before issue 33), on every bundled machine, on
profiles recorded from nvidia-smi text, and on the corners a profile can hold. And reading one needs
no ``pynvml``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import CORPUS, NO_CORPUS, hide_module
from fake_nvml import make_fake_pynvml
from pytest_gputopo.core import model
from pytest_gputopo.parse import smi_table, smi_topo
from pytest_gputopo.parse.text_machine import TextMachine
from pytest_gputopo.probe import nvml, probe_recorded
from pytest_gputopo.probe.named_machine import as_nvml_reads
from pytest_gputopo.probe.recorded import bundled_names, load_profile, profile_dict

CAPTURED = Path(__file__).resolve().parent / "captured"
SOURCE = model.Source("recorded", "box", "box.json")


def through_fake_nvml(recorded: model.Topology, source: model.Source = SOURCE) -> model.Topology:
    """What reading a profile gave before issue 33: NVML's code path over the fake ``pynvml`` serving
    it, then the recording's own facts where NVML has none (the former ``named_machine.probe_recorded``)."""
    order = sorted(
        range(len(recorded.gpus)),
        key=lambda p: (
            recorded.gpus[p].nvml_index if recorded.gpus[p].nvml_index is not None else recorded.gpus[p].index,
            p,
        ),
    )
    nvml_of = {recorded.gpus[p].index: k for k, p in enumerate(order)}
    init_error = None
    if not recorded.gpus and recorded.problem:
        import pynvml

        init_error = next(
            (
                name
                for name in ("LibraryNotFound", "DriverNotLoaded", "NoPermission")
                if nvml.unavailable_reason(getattr(pynvml, "NVMLError_" + name)()) == recorded.problem
            ),
            "Unknown",
        )
    fake = make_fake_pynvml(recorded, init_error=init_error)
    try:
        probed = nvml.probe(fake, source=source)
    except fake.NVMLError as exc:
        probed = model.Topology(source=source, problem=nvml.unavailable_reason(exc))
    else:
        at = {k: p for p, k in nvml_of.items()}
        gpus = tuple(
            dataclasses.replace(
                g, multicast=recorded.gpus[at[k]].multicast, nvlinks=g.nvlinks if recorded.gpus[at[k]].nvlinks else ()
            )
            for k, g in enumerate(probed.gpus)
        )
        was = {tuple(sorted((nvml_of[ln.a], nvml_of[ln.b]))): ln for ln in recorded.links}
        links = []
        for ln in probed.links:
            before = was.get((ln.a, ln.b))
            count = ln.nvlinks if ln.nvlinks is not None or before is None else before.nvlinks
            links.append(dataclasses.replace(ln, cuda_peer=before.cuda_peer if before else None, nvlinks=count))
        probed = dataclasses.replace(probed, gpus=gpus, links=tuple(links))
    return dataclasses.replace(
        probed,
        hostname=recorded.hostname,
        nics=recorded.nics,
        published=model.renumber_figures(recorded.published, nvml_of),
        driver_version=recorded.driver_version,
        cuda_driver_version=recorded.cuda_driver_version,
        cuda_runtime_version=recorded.cuda_runtime_version,
        nccl_version=recorded.nccl_version,
    )


def _reversed_nvml_order(t: model.Topology) -> model.Topology:
    """The same machine recorded with NVML numbering its GPUs backwards (a CUDA_DEVICE_ORDER box)."""
    n = len(t.gpus)
    return dataclasses.replace(t, gpus=tuple(dataclasses.replace(g, nvml_index=n - 1 - g.index) for g in t.gpus))


@pytest.mark.parametrize("name", bundled_names())
def test_every_bundled_machine_is_the_machine_nvml_reads_of_it(name):
    profile = load_profile(name)
    source = model.Source("recorded", profile.name, profile.path)
    straight = probe_recorded(name)
    assert straight == through_fake_nvml(profile.topology, source)
    assert straight.source == source and str(straight.source) == f"recorded:{name}"
    flipped = _reversed_nvml_order(profile.topology)
    assert as_nvml_reads(flipped, source) == through_fake_nvml(flipped, source)


def test_the_nvml_order_numbers_the_gpus_and_the_figures():
    """GPUs come in NVML's order, numbered 0..n-1 with ``index == nvml_index``, and a published figure
    names the GPUs it was measured on by their new numbers."""
    t = load_profile("hgx-h100").topology
    fig = {"kind": "p2p", "gbps": 300.0, "source": "a paper", "src": 0, "dst": 7}
    t = dataclasses.replace(_reversed_nvml_order(t), published=(fig,))
    got = as_nvml_reads(t, SOURCE)
    assert [g.uuid for g in got.gpus] == [g.uuid for g in reversed(t.gpus)]
    assert [(g.index, g.nvml_index) for g in got.gpus] == [(k, k) for k in range(8)]
    assert got.published == ({**fig, "src": 7, "dst": 0},)
    assert got == through_fake_nvml(t)


def _text_profiles() -> list[Path]:
    found = [CAPTURED / "h200-driver-580" / "topo-m.txt"]
    if CORPUS.is_dir():
        found += sorted((CORPUS / "topo").glob("*.txt"))
    return found


@pytest.mark.parametrize("path", _text_profiles(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_profile_recorded_from_smi_text_reads_as_through_nvml(path):
    """Profiles recorded from ``nvidia-smi topo -m`` text: pair counts without per-link facts, unknown
    counts, GPUs without bus ids. The same machine as through NVML's code path, except the warnings
    the fake's stand-in links made ("nvmlDeviceGetNvLinkState failed": no NVML failed on a recording)."""
    if not path.is_file():
        pytest.skip(NO_CORPUS)
    try:
        smi = smi_topo.parse_topo_matrix(path.read_text())
    except smi_table.SmiParseError as exc:
        pytest.skip(f"not a matrix the parser takes: {exc}")
    recorded = TextMachine(smi, name=str(path)).finish()
    recorded = dataclasses.replace(recorded, source=model.Source("none"), warnings=())
    before = through_fake_nvml(recorded)
    assert all("nvmlDeviceGetNvLinkState failed" in w for w in before.warnings)
    got = as_nvml_reads(recorded, SOURCE)
    assert got.warnings == ()
    assert got == dataclasses.replace(before, warnings=())
    assert [str(ln.label) for ln in got.links] == [str(ln.label) for ln in recorded.links]


def _corners() -> model.Topology:
    """A recording with what NVML reads otherwise than it is written."""
    ok = model.P2PStatus.OK
    gpus = (
        model.Gpu(
            0,
            name="A",
            uuid="GPU-0",
            pci_bus_id="00000000:19:00.0",
            nvml_index=1,
            numa_node=3,
            cpu_affinity="0-3,4-7,64",
            compute_capability="08.0",
            mig=False,
            compute_mode="Default",
            nvlinks=(
                model.NvLink(2, True, "00000000:3B:00.0", "GPU", "4.0"),
                model.NvLink(0, False, "00000000:3B:00.0", "GPU", "4.0"),
                model.NvLink(1, True, "00000000:3b:00.0", "weird", "9.9"),
                model.NvLink(5, True, "00000000:99:00.0", "SWITCH", "4.0"),
            ),
            fabric=model.Fabric("Completed"),
        ),
        model.Gpu(
            1,
            name="B",
            pci_bus_id="00000000:3B:00.0",
            nvml_index=0,
            compute_capability="9.0 beta",
            cpu_affinity="N/A",
            memory_total_bytes=2**40,
            nvlinks=(model.NvLink(0, True, "00000000:19:00.0", "GPU", "4.0"),),
            fabric=model.Fabric("Completed", "Success", 7, "6B1C2E3A-0000-4000-8000-00000000000A"),
        ),
        model.Gpu(2, pci_bus_id=None, fabric=model.Fabric("In Progress", "Success", 3, "x")),
    )
    links = (
        model.Link(0, 1, pcie=model.LinkClass.NV, nvlinks=9, p2p=model.P2P(ok, ok, ok, ok), cuda_peer=True),
        model.Link(0, 2, pcie=model.LinkClass.SYS, nvlinks=None),
        model.Link(1, 2, pcie=model.LinkClass.PIX, nvlinks=0, cuda_peer=False),
    )
    return model.Topology(
        gpus=gpus,
        links=links,
        driver_version="550.54.15",
        cuda_driver_version="12.4",
        hostname="node7",
        nics=("mlx5_0",),
        nccl_version="2.21.5",
        warnings=("the recording host's own warning",),
        cuda_devices=3,
    )


def test_the_corners_read_as_nvml_reads_them():
    """NVML's order; links sorted, a link that is down says nothing more, a device type or version NVML has
    no code for is unknown, a switch's bus id is not asked; the pair count NVML counts from the links
    (1, from the first GPU's side, where the recording says 9); NV is no PCIe level; a CPU list as
    NVML's mask writes it; a compute capability NVML cannot hold is unknown; a fabric's facts as NVML's
    struct carries them; the recording host's warnings and CUDA count are not the machine's."""
    t = _corners()
    got = as_nvml_reads(t, SOURCE)
    before = through_fake_nvml(t)  # GPU2, bare in a pair of unknown count, got a stand-in link that failed
    assert before.warnings == ("nvmlDeviceGetNvLinkState failed for GPU2 NVLink 0: Unknown Error",)
    assert got == dataclasses.replace(before, warnings=())
    first, second = got.gpus[:2]  # NVML's order: the recording's GPU1 (B) comes first
    assert (second.name, second.nvml_index, second.index) == ("A", 1, 1)
    assert second.nvlinks == (
        model.NvLink(0, False),
        model.NvLink(1, True, "00000000:3b:00.0", "unknown", None),
        model.NvLink(2, True, "00000000:3B:00.0", "GPU", "4.0"),
        model.NvLink(5, True, None, "SWITCH", "4.0"),
    )
    assert (second.cpu_affinity, second.compute_capability) == ("0-7,64", "8.0")
    assert second.fabric == model.Fabric("Completed", model.FABRIC_SUCCESS, 0, None)
    assert first.compute_capability is None and first.cpu_affinity is None
    assert first.fabric.cluster_uuid == "6b1c2e3a-0000-4000-8000-00000000000a"
    assert got.gpus[2].fabric == model.Fabric("In Progress")
    assert got.link(0, 1).nvlinks == 1 and got.link(0, 1).pcie is None and got.link(0, 1).cuda_peer is True
    assert got.link(1, 2).nvlinks is None and got.link(0, 2).cuda_peer is False  # renumbered pairs
    assert (got.warnings, got.cuda_devices, got.hostname, got.nics) == ((), None, "node7", ("mlx5_0",))


def test_what_the_straight_reading_keeps_that_the_fake_lost():
    """Where the two differ, on purpose: a GPU's MIG devices (listed by ``nvidia-smi -L``; NVML's code
    path does not read them) are the recording's, as when its text is named; a machine without GPUs
    keeps its recorded reason word for word."""
    t = load_profile("hgx-h100").topology
    mig = model.MigDevice(index=0, uuid="MIG-1", profile="1g.10gb")
    t = dataclasses.replace(t, gpus=(dataclasses.replace(t.gpus[0], mig=True, mig_devices=(mig,)),) + t.gpus[1:])
    got = as_nvml_reads(t, SOURCE)
    assert got.gpus[0].mig_devices == (mig,)
    assert dataclasses.replace(
        got, gpus=(dataclasses.replace(got.gpus[0], mig_devices=()),) + got.gpus[1:]
    ) == through_fake_nvml(t)
    none = model.Topology(problem="the node was drained", driver_version="550.54.15")
    assert as_nvml_reads(none, SOURCE).problem == "the node was drained"
    assert through_fake_nvml(none).problem == "NVML error: Unknown Error"
    no_driver = model.Topology(problem=nvml.unavailable_reason(type("E", (Exception,), {"value": 12})()))
    assert as_nvml_reads(no_driver, SOURCE) == through_fake_nvml(no_driver)


MARKED = """
import pytest

@pytest.mark.requires_nvlink
def test_nvlink():
    pass

@pytest.mark.requires_gpus(16)
def test_sixteen():
    pass

def test_pynvml_is_not_there():
    import importlib.util
    assert importlib.util.find_spec("pynvml") is None
"""


@pytest.mark.parametrize("machine", ["hgx-h100", "profile", "no-gpu"])
def test_a_profile_is_read_without_pynvml(pytester, monkeypatch, machine):
    """Without nvidia-ml-py installed, a named machine (a bundled name, a JSON profile, one without
    GPUs) is read and judged, with no INTERNALERROR; the header says it is a recorded machine."""
    hide_module(pytester, monkeypatch, "pynvml")
    if machine == "profile":
        (pytester.path / "node.json").write_text(json.dumps(profile_dict("node", load_profile("dgx-a100").topology)))
        machine, name = "node.json", "node"
    else:
        name = machine
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest_subprocess(f"--gputopo-machine={machine}", "-rs")
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    result.stdout.fnmatch_lines([f"gputopo: *source recorded:{name} (a recorded machine, not this host)*"])
    if name == "no-gpu":
        result.assert_outcomes(passed=1, skipped=2)
    else:
        result.assert_outcomes(passed=2, skipped=1)
        result.stdout.fnmatch_lines(
            ["SKIPPED * requires_gpus(16): 8 visible [[]recorded:* (a recorded machine, not this host)[]]"]
        )
