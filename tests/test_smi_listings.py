"""What nvidia-smi prints about each GPU -- ``nvidia-smi nvlink -s``'s headers, ``--query-gpu=...
--format=csv`` and ``-L`` -- reaches a machine recorded from ``nvidia-smi topo -m`` text: names, UUIDs,
bus ids, memory, compute capability, PCIe and the driver version, each fact filled once, a
disagreement said, another machine's output refused.

The texts below are written in the exact forms nvidia-smi prints, as documented: ``nvlink -s`` as the
corpus capture nvlink-status/001 (``GPU 0: <name> (UUID: GPU-...)``, then ``\\t Link <n>: 25 GB/s``);
``--query-gpu`` as NVIDIA's nvidia-smi manual page (``nvidia-smi --help-query-gpu``) describes
``--format=csv``: a header of the canonical field names, units in brackets (``memory.total [MiB]``),
cells separated by ``", "``, values with their unit unless ``nounits``, ``[N/A]`` where not said;
``-L`` as the manual page's ``--list-gpus`` and the MIG user guide show it (``GPU 0: <name> (UUID:
GPU-...)``, ``  MIG 1g.10gb     Device  0: (UUID: MIG-...)``)."""

from __future__ import annotations

import json

import pytest

from conftest import record_node, run_cli as run, source_files
from pytest_gputopo.core import gpu_requirements
from pytest_gputopo.parse.smi_xml import parse_smi_xml
from pytest_gputopo.probe import probe
from pytest_gputopo.render.smi_topo import render_topo_matrix

UUIDS = [f"GPU-{i:08x}-1111-2222-3333-44445555{i:04x}" for i in range(8)]
BUSES = [
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
]
H100 = "NVIDIA H100 80GB HBM3"


def nvlink_s(uuids=UUIDS, name=H100) -> str:
    """``nvidia-smi nvlink -s`` of 8 H100s: 18 links of 26.562 GB/s each."""
    return "".join(
        f"GPU {i}: {name} (UUID: {u})\n" + "".join(f"\t Link {k}: 26.562 GB/s\n" for k in range(18))
        for i, u in enumerate(uuids)
    )


def query_csv(
    fields="index,name,uuid,pci.bus_id,memory.total,compute_cap,driver_version,pcie.link.gen.current,"
    "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
    nounits=False,
    n=8,
    uuids=UUIDS,
) -> str:
    """``nvidia-smi --query-gpu=<fields> --format=csv[,nounits]`` of 8 H100 SXM5 on driver 550.90.07."""
    units = {"memory.total": "MiB"}
    values = {
        "index": lambda i: str(i),
        "name": lambda i: H100,
        "uuid": lambda i: uuids[i],
        "pci.bus_id": lambda i: BUSES[i],
        "memory.total": lambda i: "81559" + ("" if nounits else " MiB"),
        "compute_cap": lambda i: "9.0",
        "driver_version": lambda i: "550.90.07",
        "pcie.link.gen.current": lambda i: "5",
        "pcie.link.gen.max": lambda i: "5",
        "pcie.link.width.current": lambda i: "16",
        "pcie.link.width.max": lambda i: "16",
        "power.limit": lambda i: "[N/A]",
    }
    names = fields.split(",")
    header = ", ".join(f"{f} [{units[f]}]" if f in units else f for f in names)
    return header + "\n" + "".join(", ".join(values[f](i) for f in names) + "\n" for i in range(n))


def smi_list(uuids=UUIDS, name=H100) -> str:
    """``nvidia-smi -L`` of 8 H100s."""
    return "".join(f"GPU {i}: {name} (UUID: {u})\n" for i, u in enumerate(uuids))


def recorded(tmp_path):
    return probe(str(tmp_path / "node.json"))


# ------------------------------------------------------------------------------ nvlink -s headers


def test_nvlink_status_names_the_gpus_of_a_text_machine(tmp_path, h100_topo, capsys):
    """A profile recorded from topo -m text with nvlink -s knows each GPU's name and UUID (it said
    '8x unknown GPU'), so a test gated on the model is judged on it."""
    (tmp_path / "nvl.txt").write_text(nvlink_s())
    code, out, err = record_node(capsys, tmp_path, h100_topo, "--nvlink-status", tmp_path / "nvl.txt")
    assert code == 0, err
    assert f"8x {H100}" in out and "unknown GPU" not in out
    seen = recorded(tmp_path)
    assert [g.uuid for g in seen.gpus] == UUIDS and {g.name for g in seen.gpus} == {H100}
    assert gpu_requirements.GpuRequirement(model="H100").evaluate(seen).ok


def test_nvlink_status_of_another_machine_is_refused(tmp_path, h100_topo, capsys):
    """Two nvlink -s captures whose GPU0 has two UUIDs are two machines: the second is refused,
    naming both UUIDs, and nothing is written."""
    (tmp_path / "a.txt").write_text(nvlink_s())
    (tmp_path / "b.txt").write_text(nvlink_s(uuids=[u.replace("GPU-0", "GPU-f") for u in UUIDS]))
    code, out, err = record_node(
        capsys, tmp_path, h100_topo, "--nvlink-status", tmp_path / "a.txt", "--nvlink-status", tmp_path / "b.txt"
    )
    assert code == 2 and not (tmp_path / "node.json").exists()
    assert "b.txt: nvidia-smi nvlink -s's GPU 0 has UUID GPU-f" in err and "another machine's output" in err


# ------------------------------------------------------------------------------ --query-gpu and -L


def test_query_gpu_csv_gives_each_gpu_its_facts(tmp_path, h100_topo, capsys):
    """--smi-query with --query-gpu CSV: each GPU's name, UUID, bus id, memory (MiB x 2^20), compute
    capability and PCIe, and the driver version, so that memory and capability gates are judged."""
    (tmp_path / "q.csv").write_text(query_csv())
    code, out, err = record_node(capsys, tmp_path, h100_topo, "--smi-query", tmp_path / "q.csv")
    assert code == 0, err
    seen = recorded(tmp_path)
    gpu = seen.gpus[5]
    assert (gpu.name, gpu.uuid, gpu.pci_bus_id, gpu.memory_total_bytes, gpu.compute_capability) == (
        H100,
        UUIDS[5],
        BUSES[5],
        81559 * 2**20,
        "9.0",
    )
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert seen.driver_version == "550.90.07"
    assert gpu_requirements.GpuRequirement(min_memory_gb=80, compute_capability=">=9.0").evaluate(seen).ok
    assert not gpu_requirements.GpuRequirement(min_memory_gb=90).evaluate(seen).ok


@pytest.mark.parametrize(
    "fields, nounits",
    [
        ("uuid,memory.total,index", False),  # any order, any subset
        ("index,memory.total,power.limit,name", True),  # a field gputopo does not read; nounits
    ],
)
def test_query_gpu_csv_is_read_by_its_header(fields, nounits):
    """Whatever fields were asked, in whatever order, with or without units, each column is read by
    the field its header names."""
    from pytest_gputopo.parse.smi_query import parse_smi_query

    listing = parse_smi_query(query_csv(fields, nounits=nounits))
    assert [g.index for g in listing.gpus] == list(range(8)) and listing.attached == 8
    assert {g.memory_total_bytes for g in listing.gpus} == {81559 * 2**20} and not listing.warnings


def test_query_gpu_aliases_print_canonical_names():
    """``--query-gpu=gpu_uuid,gpu_name,gpu_bus_id`` prints ``uuid, name, pci.bus_id`` (as published
    captures show); either is read."""
    from pytest_gputopo.parse.smi_query import parse_smi_query

    text = (
        "uuid, name, pci.bus_id, memory.total [MiB], compute_mode\n"
        "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400, Tesla P40, 00000000:00:06.0, 23040 MiB, Exclusive_Process\n"
    )
    gpu = parse_smi_query(text).gpus[0]
    assert (gpu.name, gpu.pci_bus_id, gpu.memory_total_bytes, gpu.compute_mode) == (
        "Tesla P40",
        "00000000:00:06.0",
        23040 * 2**20,
        "Exclusive_Process",
    )


def test_query_gpu_not_said_stays_unknown():
    """``[N/A]`` / ``[Not Supported]`` are no value: the fact stays unknown, never 0."""
    from pytest_gputopo.parse.smi_query import parse_smi_query

    text = "index, memory.total [MiB], compute_cap, pcie.link.gen.max\n0, [N/A], [Not Supported], [N/A]\n"
    gpu = parse_smi_query(text).gpus[0]
    assert (gpu.memory_total_bytes, gpu.compute_capability, gpu.pcie_gen_max) == (None, None, None)


@pytest.mark.parametrize(
    "text, says",
    [
        ("0, NVIDIA H100 80GB HBM3, 81559 MiB\n", "noheader"),
        ("temperature.gpu, power.draw [W]\n40, 70.00 W\n", "names none of the fields gputopo reads"),
        ("index, name\n", "no GPU row"),
        ("index, name\n0, A\n0, B\n", "GPU 0 is listed twice"),
    ],
)
def test_query_gpu_text_that_cannot_be_read_is_refused(tmp_path, capsys, text, says):
    """Without its header (``noheader``), which column is which is unknown: refused, saying how to
    print it; so is a listing of no GPU or of one GPU twice."""
    (tmp_path / "q.csv").write_text(text)
    code, out, err = run(capsys, "parse", "smi-query", tmp_path / "q.csv")
    assert code == 2 and says in err, err


def test_smi_list_gives_names_and_uuids_and_mig(tmp_path, capsys):
    """``nvidia-smi -L``: each GPU's name and UUID; a MIG device listed under a GPU says its MIG mode is on."""
    (tmp_path / "l.txt").write_text(
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-6d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
    )
    code, out, err = run(capsys, "parse", "smi-list", tmp_path / "l.txt", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["attached_gpus"] == 2 and data["gpus"][0]["mig"] is True and "mig" not in data["gpus"][1]
    assert data["gpus"][1] == {
        "index": 1,
        "name": "NVIDIA A100-SXM4-40GB",
        "uuid": "GPU-6d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
    }


def test_nvlink_status_is_not_taken_for_smi_list(tmp_path, capsys):
    """nvlink -s prints -L's GPU lines with its links under them: as -L it is refused, naming it and
    the command that reads it."""
    (tmp_path / "nvl.txt").write_text(nvlink_s())
    code, out, err = run(capsys, "parse", "smi-list", tmp_path / "nvl.txt")
    assert code == 2 and "this is nvidia-smi nvlink -s output" in err and "gputopo parse nvlink-status" in err, err


def test_smi_list_and_query_join_one_machine(tmp_path, h100_topo, capsys):
    """-L and --query-gpu of one machine both join it, the format told by the text; nvlink -s then
    agrees with the UUIDs they gave."""
    (tmp_path / "l.txt").write_text(smi_list())
    (tmp_path / "q.csv").write_text(query_csv("index,pci.bus_id,memory.total"))
    (tmp_path / "nvl.txt").write_text(nvlink_s())
    code, out, err = record_node(
        capsys,
        tmp_path,
        h100_topo,
        "--smi-query",
        tmp_path / "l.txt",
        "--smi-query",
        tmp_path / "q.csv",
        "--nvlink-status",
        tmp_path / "nvl.txt",
    )
    assert code == 0, err
    gpu = recorded(tmp_path).gpus[7]
    assert (gpu.name, gpu.uuid, gpu.pci_bus_id, gpu.memory_total_bytes) == (H100, UUIDS[7], BUSES[7], 81559 * 2**20)


@pytest.mark.parametrize(
    "files, says",
    [
        ({"q.csv": query_csv(n=4)}, "nvidia-smi --query-gpu saw 4 GPUs and the machine has 8"),
        ({"l.txt": smi_list(uuids=UUIDS[:2])}, "nvidia-smi -L saw 2 GPUs and the machine has 8"),
        (
            {"l.txt": smi_list(), "q.csv": query_csv(uuids=UUIDS[::-1])},
            "q.csv: nvidia-smi --query-gpu's GPU 0 (GPU-00000007",
        ),
        (
            {"l.txt": smi_list(), "q.csv": query_csv(uuids=[u.replace("GPU-0", "GPU-e") for u in UUIDS])},
            "another machine's output",
        ),
    ],
)
def test_another_machines_listing_is_refused(tmp_path, h100_topo, capsys, files, says):
    """A listing of another GPU count, or whose UUIDs are other GPUs' or no GPU's of the machine, is
    refused naming the file, and no profile is written."""
    queries = [("--smi-query", name, text) for name, text in files.items()]
    code, out, err = record_node(capsys, tmp_path, h100_topo, *source_files(tmp_path, *queries))
    assert code == 2 and says in err, err
    assert not (tmp_path / "node.json").exists()


def test_smi_query_needs_text_of_another_machine(capsys, tmp_path):
    """--smi-query goes with --from-smi: on this host NVML gives those facts itself."""
    code, out, err = run(capsys, "record", "--smi-query", "q.csv", "-o", tmp_path / "node.json")
    assert code == 2 and "--smi-query goes with --from-smi" in err


# ------------------------------------------------------------------------------ docs/cli.md


def test_the_documented_recording_of_listings(tmp_path):
    """docs/cli.md's recording with -L and --query-gpu, run as written on the files those captures
    write (an 8x H100 node's): record and show print what the doc shows; the other node's listing is
    refused with the line the doc quotes."""
    from doc_examples import Block, assert_shows, blocks, run_shell
    from test_doc_examples import shell_env

    [block] = [
        b
        for b in blocks()
        if b.path == "docs/cli.md" and b.info == "" and "--smi-query gpus.txt --smi-query gpus.csv" in b.text
    ]
    [refusal] = [b for b in blocks() if b.path == "docs/cli.md" and "gputopo: gpus.csv:" in b.text]
    (tmp_path / "matrix.txt").write_text(render_topo_matrix(probe("hgx-h100")))
    (tmp_path / "gpus.txt").write_text(smi_list())
    (tmp_path / "gpus.csv").write_text(query_csv())
    steps = run_shell(block, tmp_path, shell_env())
    assert [s.command.split()[:2] for s in steps] == [["gputopo", "record"], ["gputopo", "show"]]
    for step in steps:
        assert step.status == 0, step.printed
        assert_shows(step.shown, step.printed)
    (tmp_path / "gpus.csv").write_text(query_csv(uuids=[u.replace("GPU-0", "GPU-e") for u in UUIDS]))
    [step] = run_shell(Block(refusal.path, refusal.line, "", refusal.text, None), tmp_path, shell_env())
    assert step.status == 2, step.printed
    assert_shows(step.shown, step.printed)


# ------------------------------------------------------------------------------ nvidia-smi -q -x


def smi_xml(n=8, uuids=UUIDS, only=None, doctype='<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">') -> str:
    """``nvidia-smi -q -x`` of 8 H100s on driver 550.90.07 / CUDA 12.4, in the shape nvidia-smi writes
    (nvsmi_device_v12.dtd; NVIDIA's sample gpuopenanalytics/pynvml nvidia_smi.py @ 41dbc20a, XmlDeviceQuery):
    GPU5's link trained down to Gen4 x8, the elements gputopo does not read kept (a part of them)."""

    def gpu(i):
        gen, width = ("4", "8x") if i == 5 else ("5", "16x")
        return f"""	<gpu id="{BUSES[i]}">
		<product_name>{H100}</product_name>
		<product_brand>NVIDIA</product_brand>
		<product_architecture>Hopper</product_architecture>
		<mig_mode>
			<current_mig>Disabled</current_mig>
			<pending_mig>Disabled</pending_mig>
		</mig_mode>
		<mig_devices>
			None
		</mig_devices>
		<serial>165232400{i}</serial>
		<uuid>{uuids[i]}</uuid>
		<minor_number>{i}</minor_number>
		<pci>
			<pci_bus>{BUSES[i][9:11]}</pci_bus>
			<pci_device>00</pci_device>
			<pci_domain>0000</pci_domain>
			<pci_device_id>233010DE</pci_device_id>
			<pci_bus_id>{BUSES[i]}</pci_bus_id>
			<pci_gpu_link_info>
				<pcie_gen>
					<max_link_gen>5</max_link_gen>
					<current_link_gen>{gen}</current_link_gen>
				</pcie_gen>
				<link_widths>
					<max_link_width>16x</max_link_width>
					<current_link_width>{width}</current_link_width>
				</link_widths>
			</pci_gpu_link_info>
		</pci>
		<fb_memory_usage>
			<total>81559 MiB</total>
			<reserved>328 MiB</reserved>
			<used>1 MiB</used>
			<free>81230 MiB</free>
		</fb_memory_usage>
		<compute_mode>Default</compute_mode>
	</gpu>
"""

    listed = range(n) if only is None else only
    return (
        f'<?xml version="1.0" ?>\n{doctype}\n<nvidia_smi_log>\n\t<timestamp>Tue Jun  4 10:00:00 2024</timestamp>\n'
        f"\t<driver_version>550.90.07</driver_version>\n\t<cuda_version>12.4</cuda_version>\n"
        f"\t<attached_gpus>{n}</attached_gpus>\n" + "".join(gpu(i) for i in listed) + "</nvidia_smi_log>\n"
    )


def test_smi_xml_gives_each_gpu_its_facts_and_the_versions(tmp_path, h100_topo, capsys):
    """--smi-query with nvidia-smi -q -x: names, UUIDs, bus ids, memory, PCIe current and max, MIG and
    compute mode, and the driver's and its CUDA's versions; GPU5's link trained down is seen."""
    (tmp_path / "q.xml").write_text(smi_xml())
    code, out, err = record_node(capsys, tmp_path, h100_topo, "--smi-query", tmp_path / "q.xml")
    assert code == 0, err
    seen = recorded(tmp_path)
    assert (seen.driver_version, seen.cuda_driver_version) == ("550.90.07", "12.4")
    gpu = seen.gpus[5]
    assert (gpu.name, gpu.uuid, gpu.pci_bus_id, gpu.memory_total_bytes, gpu.mig, gpu.compute_mode) == (
        H100,
        UUIDS[5],
        BUSES[5],
        81559 * 2**20,
        False,
        "Default",
    )
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (4, 5, 8, 16)
    assert seen.gpus[0].pcie_width_current == 16


def test_smi_xml_of_some_gpus_joins_by_uuid(tmp_path, h100_topo, capsys):
    """-q -x -i 6 lists GPU6 only (attached_gpus still 8): it is told by its UUID, never by its place."""
    (tmp_path / "l.txt").write_text(smi_list())
    (tmp_path / "q.xml").write_text(smi_xml(only=[6]))
    code, out, err = record_node(
        capsys, tmp_path, h100_topo, "--smi-query", tmp_path / "l.txt", "--smi-query", tmp_path / "q.xml"
    )
    assert code == 0, err
    seen = recorded(tmp_path)  # as a process sees it: GPUs in NVML's order where some bus ids are unknown
    assert [g.uuid for g in seen.gpus] == UUIDS
    assert seen.gpus[6].pci_bus_id == BUSES[6] and seen.gpus[0].pci_bus_id is None
    (tmp_path / "l.txt").write_text(smi_list(uuids=UUIDS[:1] + [u.replace("GPU-0", "GPU-d") for u in UUIDS[1:]]))
    code, out, err = run(
        capsys, "record", "--from-smi", h100_topo, "--smi-query", tmp_path / "q.xml", "-o", tmp_path / "other.json"
    )
    assert code == 2 and "lists some GPUs only: which GPU it is is unknown" in err, err


def test_smi_xml_listing_fewer_gpus_than_attached_warns():
    """Issue 32: attached_gpus 4 and one <gpu> (-i, or a capture cut and closed again) was read with no
    warning; the GPUs it leaves out are unknown, and said so. Every GPU listed: no such warning."""
    some = parse_smi_xml(smi_xml(n=4, only=[1]))
    assert some.attached == 4 and len(some.gpus) == 1 and some.gpus[0].index is None
    assert any("attached_gpus 4 and 1 <gpu> element: some GPUs only" in w for w in some.warnings), some.warnings
    assert not any("attached_gpus" in w for w in parse_smi_xml(smi_xml(n=4)).warnings)


ENTITY = '<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'


@pytest.mark.parametrize(
    "text, says",
    [
        (smi_xml(doctype=ENTITY), "a DOCTYPE with declarations of its own"),
        (
            smi_xml(doctype='<!DOCTYPE nvidia_smi_log SYSTEM "file:///etc/passwd">').replace(
                "<product_name>", "<product_name>&xxe;", 1
            ),
            "an entity reference: refused",
        ),
        ("<system version='1'><gpu dev='0'/></system>", "this is NCCL's topology dump (NCCL_TOPO_DUMP_FILE), not"),
        ("<topology><gpu dev='0'/></topology>", "the root element is <topology>, not <nvidia_smi_log>"),
        ("<nvidia_smi_log><gpu>", "not well-formed XML"),
        ("<a>" * 40 + "</a>" * 40, "nested deeper than 32"),
    ],
)
def test_hostile_or_foreign_xml_is_refused(tmp_path, capsys, text, says):
    """nvidia-smi's own DOCTYPE (an external DTD, never fetched) is read; an internal DTD, an entity,
    XML nested without bound, NCCL's topology XML or broken XML is refused in one line, exit status 2."""
    (tmp_path / "q.xml").write_text(text)
    code, out, err = run(capsys, "parse", "smi-xml", tmp_path / "q.xml")
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) == 1


def test_parse_smi_xml_prints_what_it_read(tmp_path, capsys):
    (tmp_path / "q.xml").write_text(smi_xml(n=2))
    code, out, err = run(capsys, "parse", "smi-xml", tmp_path / "q.xml")
    assert code == 0, err
    assert out.splitlines() == [
        f"GPU0: {H100} ({UUIDS[0]}), bus {BUSES[0]}, 81559 MiB, compute capability ?, PCIe Gen5/5 x16/16",
        f"GPU1: {H100} ({UUIDS[1]}), bus {BUSES[1]}, 81559 MiB, compute capability ?, PCIe Gen5/5 x16/16",
        "driver 550.90.07, CUDA 12.4",
    ]


# ------------------------------------------------------------------------------ any text


def test_windows_line_endings_are_read():
    """nvidia-smi on Windows ends lines with CRLF: the same facts are read."""
    from pytest_gputopo.parse.smi_list import parse_smi_list
    from pytest_gputopo.parse.smi_query import parse_smi_query

    assert parse_smi_query(query_csv().replace("\n", "\r\n")) == parse_smi_query(query_csv())
    assert parse_smi_list(smi_list().replace("\n", "\r\n")) == parse_smi_list(smi_list())


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["csv", "list", "xml"]), st.data())
def test_any_text_is_read_or_refused_in_one_line(kind, data):
    """Cut, spliced or garbled listings give what can be read or the format's own refusal, never
    another exception (a bug the CLI would call internal)."""
    from pytest_gputopo.parse.smi_list import SmiListParseError, parse_smi_list
    from pytest_gputopo.parse.smi_query import SmiQueryParseError, parse_smi_query
    from pytest_gputopo.parse.smi_xml import SmiXmlParseError, parse_smi_xml

    parse, error, text = {
        "csv": (parse_smi_query, SmiQueryParseError, query_csv()),
        "list": (parse_smi_list, SmiListParseError, smi_list()),
        "xml": (parse_smi_xml, SmiXmlParseError, smi_xml(n=2)),
    }[kind]
    cut = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.text(max_size=30))
    at = data.draw(st.integers(0, cut))
    try:
        listing = parse(text[:at] + junk + text[at:cut])
    except error:
        return
    assert all(g.memory_total_bytes is None or g.memory_total_bytes > 0 for g in listing.gpus)
