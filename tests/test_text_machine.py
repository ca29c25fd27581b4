"""A machine recorded from nvidia-smi text (``gputopo record --from-smi``) fills each fact once, from
the first output that gives it, says where two outputs disagree (naming both, and both values), knows a
GPU's compute capability from its name where no output gives one (``-q -x`` has no such field) and
leaves a name NVIDIA's CUDA GPU list does not give unknown. ``-q -x``'s fabric registration (NVSwitch,
GB200) is read, shown by ``gputopo parse smi-xml`` and recorded as NVML's answer would be held.

The outputs are written in nvidia-smi's forms by the helpers of tests/test_smi_listings.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import node_profile, record_node, run_cli as run, source_files
from pytest_gputopo.core import gpu_requirements
from pytest_gputopo.core.hardware import capability_of_name
from pytest_gputopo.core.model import Topology
from pytest_gputopo.parse.nvlink_status import parse_nvlink_status
from pytest_gputopo.parse.smi_topo import parse_topo_matrix
from pytest_gputopo.parse.smi_xml import parse_smi_xml
from pytest_gputopo.parse.text_machine import TextMachine, TextMachineError, read_listing
from pytest_gputopo.probe import probe
from pytest_gputopo.probe.recorded import bundled_names
from pytest_gputopo.render.smi_topo import render_topo_matrix
from test_smi_listings import BUSES, H100, UUIDS, nvlink_s, query_csv, recorded, smi_list, smi_xml

H200_CAPTURE = Path(__file__).parent / "captured" / "h200-driver-580"


def machine(name: str = "hgx-h100") -> TextMachine:
    return TextMachine(parse_topo_matrix(render_topo_matrix(probe(name))), None, "topo.txt")


def joined(m: TextMachine, *listings: tuple[str, str]) -> Topology:
    """``m`` joined by each (text, file name) of ``listings`` in order, and finished."""
    for text, name in listings:
        m.add_listing(read_listing(text), name)
    return m.finish()


# ------------------------------------------------------------------------------ capability from the name


def test_a_machine_from_q_x_knows_its_capability_by_name(tmp_path, h100_topo, capsys):
    """-q -x has no compute capability field: the GPUs' name (H100) gives 9.0 from NVIDIA's list, the
    profile says so in ``inferred``, and a capability or architecture gate is judged, not unknown."""
    (tmp_path / "q.xml").write_text(smi_xml())
    code, out, err = record_node(capsys, tmp_path, h100_topo, "--smi-query", tmp_path / "q.xml")
    assert code == 0, err
    seen = recorded(tmp_path)
    assert {g.compute_capability for g in seen.gpus} == {"9.0"}
    inferred = node_profile(tmp_path)["inferred"]
    assert any(
        f"GPU0-GPU7: compute capability 9.0, from the name {H100} in NVIDIA's CUDA GPU list" in line
        for line in inferred
    ), inferred
    assert gpu_requirements.GpuRequirement(compute_capability=">=9.0", arch="hopper").evaluate(seen).ok


def test_a_name_the_list_does_not_give_stays_unknown():
    """A10G (AWS) is not on NVIDIA's list: its capability stays unknown, so a capability gate is
    unknown (skipped), never judged on a guess."""
    m = machine()
    seen = joined(m, (smi_list(name="NVIDIA A10G"), "l.txt"))
    assert {g.compute_capability for g in seen.gpus} == {None}
    assert not any("compute capability" in line for line in m.inferred)
    verdict = gpu_requirements.GpuRequirement(compute_capability=">=8.0").evaluate(seen)
    assert not verdict.ok and "unknown" in verdict.reason


def test_a_capability_an_output_gives_wins_over_the_name_and_a_disagreement_is_said():
    """--query-gpu's compute_cap is what the GPU reported: kept, even given after -q -x, and where the
    name's capability differs a warning names both."""
    m = machine()
    seen = joined(m, (smi_xml(), "q.xml"), (query_csv("index,compute_cap").replace(", 9.0", ", 8.0"), "q.csv"))
    assert {g.compute_capability for g in seen.gpus} == {"8.0"}
    assert not any("compute capability" in line for line in m.inferred)
    assert (
        f"GPU3: nvidia-smi --query-gpu (q.csv) says compute capability 8.0, NVIDIA's CUDA GPU list "
        f"(developer.nvidia.com/cuda-gpus) gives 9.0 for {H100}; the source's is kept"
    ) in seen.warnings


@pytest.mark.parametrize(
    "name, cc",
    [
        ("NVIDIA H200", "9.0"),
        ("NVIDIA GH200 480GB", "9.0"),
        ("NVIDIA A100-PCIE-40GB", "8.0"),
        ("NVIDIA A10", "8.6"),
        ("NVIDIA L4", "8.9"),
        ("NVIDIA L40S", "8.9"),
        ("Tesla T4", "7.5"),
        ("Quadro RTX 6000", "7.5"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("NVIDIA RTX A6000", "8.6"),
        ("NVIDIA B200", "10.0"),
        ("NVIDIA GB300", "10.3"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
        # other chips whose names start like listed ones, and names the list does not give
        ("NVIDIA A10G", None),
        ("Tesla V100S-PCIE-32GB", None),
        ("NVIDIA T400 4GB", None),
        ("NVIDIA H20", None),
        ("NVIDIA A100X", None),
        ("Quadro RTX 6000 Ada", None),
        ("", None),
        (None, None),
    ],
)
def test_names_nvidia_smi_prints_give_the_listed_capability_only(name, cc):
    """A model that begins another chip's name (RTX 6000: Turing; RTX 6000 Ada Generation: Ada; A10
    and A10G) is told apart; a name not on the list is unknown."""
    assert capability_of_name(name) == cc


def test_the_name_table_agrees_with_every_bundled_machine():
    """Each bundled machine's GPUs were recorded with NVML's capability: the name table gives the same
    (or nothing), so a text machine of the same GPUs is judged as the NVML one."""
    for name in bundled_names():
        for gpu in probe(name).gpus:
            assert capability_of_name(gpu.name) in (None, gpu.compute_capability), (name, gpu.name)


@pytest.mark.skipif(not (H200_CAPTURE / "query.xml").exists(), reason="tests/captured/h200-driver-580 is absent")
def test_the_captured_h200_q_x_gives_a_machine_of_capability_9_0(tmp_path, capsys):
    """A real H200 host's topo -m and -q -x (driver 580) record an H200 of capability 9.0 (Hopper)."""
    code, out, err = record_node(
        capsys, tmp_path, H200_CAPTURE / "topo-m.txt", "--smi-query", H200_CAPTURE / "query.xml"
    )
    assert code == 0, err
    (gpu,) = recorded(tmp_path).gpus
    assert (gpu.name, gpu.compute_capability) == ("NVIDIA H200", "9.0")


# ------------------------------------------------------------------------------ each fact once, disagreements said


# (first source, second source) as (option, file, text), what the warning says, and the fact kept: (GPU, name, value)
DISAGREEING = [
    pytest.param(
        ("--smi-query", "q.xml", smi_xml()),
        ("--smi-query", "q.csv", query_csv("index,memory.total").replace("81559", "40960")),
        "GPU0: nvidia-smi --query-gpu ({second}) says memory 40960 MiB, an earlier source 81559 MiB, "
        "from nvidia-smi -q -x ({first}); the earlier is kept",
        (0, "memory_total_bytes", 81559 * 2**20),
        id="memory-q-x-then-query-gpu",
    ),
    pytest.param(
        ("--smi-query", "l.txt", smi_list()),
        ("--nvlink-status", "nvl.txt", nvlink_s(name="NVIDIA H100 PCIe")),
        "GPU7: nvidia-smi nvlink -s ({second}) says name NVIDIA H100 PCIe, an earlier source "
        f"{H100}, from nvidia-smi -L ({{first}}); the earlier is kept",
        (7, "name", H100),
        id="name-L-then-nvlink-s",
    ),
    pytest.param(
        ("--nvlink-status", "a.txt", nvlink_s()),
        ("--nvlink-status", "b.txt", nvlink_s(name="NVIDIA H100 PCIe")),
        f"GPU0: nvidia-smi nvlink -s ({{second}}) says name NVIDIA H100 PCIe, an earlier source {H100}",
        (0, "name", H100),
        id="name-two-nvlink-s",
    ),
]


@pytest.mark.parametrize("first, second, says, kept", DISAGREEING)
def test_two_sources_disagreeing_are_said_naming_both(tmp_path, h100_topo, capsys, first, second, says, kept):
    """A fact two outputs give otherwise: the first is kept, and the warning names both files and both
    values (memory in MiB, as nvidia-smi prints it)."""
    code, out, err = record_node(capsys, tmp_path, h100_topo, *source_files(tmp_path, first, second))
    assert code == 0, err
    assert says.format(first=tmp_path / first[1], second=tmp_path / second[1]) in err
    gpu, fact, value = kept
    assert getattr(recorded(tmp_path).gpus[gpu], fact) == value


def test_driver_versions_disagreeing_are_said_naming_both():
    other_driver = query_csv("index,driver_version").replace("550.90.07", "535.54.03")
    seen = joined(machine(), (smi_xml(), "q.xml"), (other_driver, "q.csv"))
    assert seen.driver_version == "550.90.07"
    assert (
        "nvidia-smi --query-gpu (q.csv) says driver version 535.54.03, an earlier source 550.90.07, from "
        "nvidia-smi -q -x (q.xml); the earlier is kept"
    ) in seen.warnings


def test_each_file_is_a_source_with_what_it_said():
    """The profile's sources list topo -m and each file joined, in order, each with its warnings."""
    m = machine()
    m.add_listing(read_listing(smi_list()), "l.txt")
    m.add_nvlink_status(parse_nvlink_status(nvlink_s(name="NVIDIA H100 PCIe")), "nvl.txt")
    assert [(s["what"], s["file"]) for s in m.sources] == [
        ("nvidia-smi topo -m", "topo.txt"),
        ("nvidia-smi -L", "l.txt"),
        ("nvidia-smi nvlink -s", "nvl.txt"),
    ]
    assert m.sources[1]["notes"] == [] and len(m.sources[2]["notes"]) == 8


def test_another_machines_output_is_refused_whole():
    """A listing naming one GPU by another machine's UUID is refused, and none of its facts (not even
    those of GPUs it names rightly, read before) is kept."""
    m = machine()
    m.add_listing(read_listing(smi_list()), "l.txt")
    other = query_csv("index,uuid,pci.bus_id", uuids=[u.replace("GPU-0", "GPU-e") for u in UUIDS])
    other = other.replace(UUIDS[3].replace("GPU-0", "GPU-e"), UUIDS[3])  # GPU3's is right: refused whole
    lines = other.splitlines()
    lines.insert(1, lines.pop(4))  # GPU3 first, so its bus id would be filled before GPU0 is refused
    with pytest.raises(
        TextMachineError, match="q.csv: nvidia-smi --query-gpu's GPU 0 has UUID GPU-e.*another machine's output"
    ):
        m.add_listing(read_listing("\n".join(lines) + "\n"), "q.csv")
    assert {g.pci_bus_id for g in m.topology.gpus} == {None}  # nothing of the refused listing kept
    assert [s["file"] for s in m.sources] == ["topo.txt", "l.txt"]


# ------------------------------------------------------------------------------ GB200 fabric in -q -x


FABRIC = """<fabric>
			<state>Completed</state>
			<status>Success</status>
			<cliqueId>4026</cliqueId>
			<clusterUuid>9c6f5af3-53bf-49b5-a436-b66766c413c3</clusterUuid>
			<health>
				<bandwidth>Full</bandwidth>
			</health>
		</fabric>
		<compute_mode>"""


def test_q_x_fabric_registration_is_read_and_shown(tmp_path, capsys):
    """A GB200's <fabric> (NVML's fabric info): state, status, clique and cluster, in parse's text and
    JSON; a GPU whose fabric is all N/A (no multi-node NVLink) has none."""
    text = smi_xml(n=2).replace("<compute_mode>", FABRIC, 1)
    (tmp_path / "q.xml").write_text(text)
    code, out, err = run(capsys, "parse", "smi-xml", tmp_path / "q.xml")
    assert code == 0, err
    assert out.splitlines()[0].endswith(
        ", fabric Completed, Success, clique 4026 of cluster 9c6f5af3-53bf-49b5-a436-b66766c413c3"
    )
    assert "fabric" not in out.splitlines()[1]
    code, out, err = run(capsys, "parse", "smi-xml", tmp_path / "q.xml", "--json")
    gpus = json.loads(out)["gpus"]
    assert gpus[0]["fabric"] == {
        "state": "Completed",
        "status": "Success",
        "clique_id": 4026,
        "cluster_uuid": "9c6f5af3-53bf-49b5-a436-b66766c413c3",
    }
    assert "fabric" not in gpus[1]


@pytest.mark.parametrize(
    "state, status, says",
    [
        ("Not Supported", "N/A", "fabric Not Supported"),  # a fact, though nvidia-smi's "Not ..." is no value elsewhere
        ("In Progress", "N/A", "fabric In Progress"),
        ("Completed", "Insufficient Resources", "fabric Completed, Insufficient Resources"),
    ],
)
def test_q_x_fabric_states_are_read_as_printed(state, status, says):
    text = smi_xml(n=1).replace(
        "<compute_mode>",
        f"<fabric><state>{state}</state><status>{status}</status>"
        f"<cliqueId>N/A</cliqueId><clusterUuid>N/A</clusterUuid></fabric>"
        f"<compute_mode>",
        1,
    )
    listing = parse_smi_xml(text)
    assert listing.lines()[0].endswith(says) and not listing.warnings


def test_q_x_fabric_of_no_known_form_is_a_warning_not_a_fact():
    text = smi_xml(n=1).replace(
        "<compute_mode>", "<fabric><state>Sideways</state><cliqueId>-1</cliqueId></fabric><compute_mode>", 1
    )
    listing = parse_smi_xml(text)
    assert listing.gpus[0].fabric is None
    assert any("fabric state 'Sideways' is not one of" in w for w in listing.warnings)
    assert any("fabric cliqueId '-1' is not a number" in w for w in listing.warnings)


# The values a real HGX H100's nvidia-smi (driver 565) prints under -q's "Fabric" title for each of its
# eight GPUs (tests/smi_q/hgx-h100-x8-565.txt, l.221-225: State Completed, Status Success, CliqueId 0,
# ClusterUUID 00000000-0000-0000-0000-000000000000), put in the <fabric> element of the real H200's
# -q -x (tests/captured/h200-driver-580/query.xml l.298-302, whose driver prints the same four fields,
# all N/A in its VM): no real -q -x of a GPU with a fabric state is at hand here or in the shared corpus.
HGX_FABRIC = {
    "state": "Completed",
    "status": "Success",
    "cliqueId": "0",
    "clusterUuid": "00000000-0000-0000-0000-000000000000",
}


def _h200_with_fabric(tmp_path, fields: dict) -> Path:
    import re

    text = (H200_CAPTURE / "query.xml").read_text()
    block = re.search(r"<fabric>.*?</fabric>", text, re.S).group(0)
    for tag, value in fields.items():
        block = re.sub(rf"<{tag}>N/A</{tag}>", f"<{tag}>{value}</{tag}>", block, count=1)
    (tmp_path / "query.xml").write_text(text.replace(re.search(r"<fabric>.*?</fabric>", text, re.S).group(0), block))
    return tmp_path / "query.xml"


def _record(capsys, tmp_path, query) -> dict:
    code, out, err = record_node(capsys, tmp_path, H200_CAPTURE / "topo-m.txt", "--smi-query", query)
    assert code == 0, err
    return node_profile(tmp_path)["topology"]


@pytest.mark.skipif(not (H200_CAPTURE / "query.xml").exists(), reason="tests/captured/h200-driver-580 is absent")
def test_a_fabric_all_n_a_in_a_real_q_x_records_none(tmp_path, capsys):
    """The real H200's -q -x prints <fabric> with every field N/A (NVML gave none): the profile has no
    fabric, as a probe of that host would have none, and no fabric item or fault comes of it."""
    from pytest_gputopo.core.faults import topology_faults

    profile = _record(capsys, tmp_path, H200_CAPTURE / "query.xml")
    assert "fabric" not in profile["gpus"][0]
    assert recorded(tmp_path).gpus[0].fabric is None and not topology_faults(recorded(tmp_path))


@pytest.mark.skipif(not (H200_CAPTURE / "query.xml").exists(), reason="tests/captured/h200-driver-580 is absent")
def test_a_q_x_fabric_is_recorded_as_nvml_gives_it(tmp_path, capsys):
    """Registered (HGX_FABRIC): recorded as the NVML reader holds it (Completed, Success, clique 0, the
    all-zero cluster none) and read back so: the GPU's fabric is up, no fault."""
    from pytest_gputopo.core import model
    from pytest_gputopo.core.faults import topology_faults

    profile = _record(capsys, tmp_path, _h200_with_fabric(tmp_path, HGX_FABRIC))
    assert profile["gpus"][0]["fabric"] == {
        "state": "Completed",
        "status": "Success",
        "clique_id": 0,
        "cluster_uuid": None,
    }
    (gpu,) = recorded(tmp_path).gpus
    assert gpu.fabric == model.Fabric("Completed", "Success", 0, None) and gpu.fabric.up is True
    assert not topology_faults(recorded(tmp_path))


@pytest.mark.skipif(not (H200_CAPTURE / "query.xml").exists(), reason="tests/captured/h200-driver-580 is absent")
@pytest.mark.parametrize(
    "fields, problem",
    [
        (
            {"state": "Not Started"},
            "NVLink fabric not up (state Not Started: the fabric manager has not registered it)",
        ),
        (
            {"state": "In Progress"},
            "NVLink fabric not up (state In Progress: the fabric manager has not registered it)",
        ),
        (
            {**HGX_FABRIC, "status": "Insufficient Resources"},
            "NVLink fabric registration failed (Insufficient Resources)",
        ),
    ],
)
def test_a_fabric_not_up_in_q_x_is_the_same_fault_from_a_recording(tmp_path, capsys, fields, problem):
    """A -q -x whose GPU the fabric manager has not registered (or failed to): the recording holds it,
    so the fleet's fault and the health check's fabric item say what a probe of that host would."""
    from pytest_gputopo.core.faults import topology_faults

    profile = _record(capsys, tmp_path, _h200_with_fabric(tmp_path, fields))
    assert profile["gpus"][0]["fabric"]["state"] == fields["state"]
    seen = recorded(tmp_path)
    assert [(f.name, f.line) for f in topology_faults(seen)] == [("fabric[GPU0]", f"GPU0: {problem}")]


def test_a_fabric_not_up_in_q_x_leaves_nvlink_unknown_on_the_recording(tmp_path, h100_topo, capsys):
    """requires_nvlink on a machine recorded from topo -m (NV18 every pair) and a -q -x whose GPU0 the
    fabric manager has not registered: unknown on GPU0's pairs, naming the fabric, as on a probed host;
    met elsewhere, and met on GPU0's pairs where the -q -x says it registered."""
    from pytest_gputopo.core.requirements import NvLinkRequirement

    def record(state: str):
        (tmp_path / "q.xml").write_text(smi_xml().replace("<compute_mode>", FABRIC.replace("Completed", state), 1))
        code, out, err = record_node(capsys, tmp_path, h100_topo, "--smi-query", tmp_path / "q.xml")
        assert code == 0, err
        return recorded(tmp_path)

    seen = record("Not Started")
    verdict = NvLinkRequirement(gpus=(0, 1)).evaluate(seen)
    assert not verdict.ok and "NVLink fabric not up" in verdict.reason and "GPU0" in verdict.reason
    assert NvLinkRequirement(gpus=(2, 3)).evaluate(seen).ok
    assert NvLinkRequirement(gpus=(0, 1)).evaluate(record("Completed")).ok


def test_a_completed_fabric_of_no_readable_status_is_not_recorded():
    """Completed with its status unreadable: NVML's struct always has a status, and a recording would
    read a missing one as Success, so none is recorded (unknown, not up); Not Supported is a state."""
    from pytest_gputopo.parse.smi_gpus import SmiFabric

    assert SmiFabric("Completed", None, 4, None).fact() is None
    assert SmiFabric("Not Supported").fact().state == "Not Supported"
    assert SmiFabric(None, "Success").fact() is None
    assert SmiFabric("Completed", "Success", 4026, "9C6F5AF3-53BF-49B5-A436-B66766C413C3").fact().cluster_uuid == (
        "9c6f5af3-53bf-49b5-a436-b66766c413c3"
    )  # NVML's reader writes the 16 bytes so


def test_a_later_listing_disagreeing_on_the_fabric_is_said():
    first = smi_xml().replace("<compute_mode>", FABRIC, 1)
    later = smi_xml().replace("<compute_mode>", FABRIC.replace("Completed", "Not Started"), 1)
    seen = joined(machine(), (first, "a.xml"), (later, "b.xml"))
    assert seen.gpus[0].fabric.state == "Completed"
    assert (
        "GPU0: nvidia-smi -q -x (b.xml) says NVLink fabric Not Started, an earlier source Completed, Success, "
        "from nvidia-smi -q -x (a.xml); the earlier is kept"
    ) in seen.warnings


# ------------------------------------------------------------------------------ any listing


from hypothesis import given, settings, strategies as st  # noqa: E402

from pytest_gputopo.parse.smi_gpus import SmiGpu, SmiGpus  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(0, 9)),
            st.sampled_from(UUIDS + ["GPU-ffffffff-0000", None]),
            st.sampled_from(BUSES + ["00000000:01:00.0", None]),
            st.sampled_from([H100, "NVIDIA A10G", None]),
        ),
        max_size=10,
    ),
    st.one_of(st.none(), st.integers(1, 10)),
)
def test_any_listing_joins_or_is_refused_by_name(rows, attached):
    """Whatever GPUs a listing names, by whatever index, UUID and bus id, it joins the machine (each
    GPU keeping the UUID and bus id it was found by) or is refused as another machine's, never
    another exception."""
    m = machine()
    m.add_listing(read_listing(smi_list()), "l.txt")  # the machine knows every GPU's UUID
    listing = SmiGpus(
        "nvidia-smi --query-gpu",
        tuple(SmiGpu(index=i, uuid=u, pci_bus_id=b, name=n) for i, u, b, n in rows),
        attached=attached,
    )
    try:
        m.add_listing(listing, "q.csv")
    except TextMachineError:
        return
    seen = m.finish()
    assert [g.uuid for g in seen.gpus] == UUIDS
    assert all(g.compute_capability in (None, "9.0") for g in seen.gpus)
