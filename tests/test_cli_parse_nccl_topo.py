"""``gputopo parse nccl-topo``: the XML NCCL writes where ``NCCL_TOPO_DUMP_FILE`` points, printed as
what NCCL detected, as JSON, escaped for the terminal, and another tool's text refused in one line.

How NCCL writes and reads the file (NVIDIA/nccl, src/graph/xml.cc and topo.cc): ``ncclTopoDumpXmlRec``
writes each element on its own line, two spaces deeper per level, attributes in the order they were set
(``<cpu host_hash numaid affinity arch vendor familyid modelid>``, ``<pci busid class vendor device
subsystem_vendor subsystem_device link_speed link_width>``, ``<gpu dev sm rank gdr>``, ``<net name dev
speed port latency guid maxconn gdr>``); ``ncclTopoTrimXml`` keeps only the communicator's GPUs and
the switches and NICs above them; ``ncclTopoGetXmlFromGpu`` writes one ``<nvlink>`` per peer NVML
names, ``count`` the links to it, ``tclass`` its PCI class (``fffffff:ffff:ff`` a peer NVML could not
see, assumed an NVSwitch); ``ncclTopoAddNvLinks`` takes ``0x03...`` as a GPU, ``0x068001`` as the CPU
and every other class as an NVSwitch (``kvDictPciClass``); ``ncclTopoAddNet`` reads ``speed`` in Mb/s.

``H100_PAIR`` has the form of the dumps users published from HGX H100 nodes (aliyun/SimAI issue 128:
each H100 with four ``<nvlink>`` to NVSwitches, counts 4, 5, 5, 4: its 18 links) and A100 ones
(NVIDIA/nccl issues 1125 and 1505: ``host_hash`` first on ``<cpu>``, a NIC under the GPU's PCIe
switch), for a two-GPU run; its values (bus ids, hashes, GUIDs) are written here, not copied.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_cli as run
from doc_examples import assert_shows, blocks, run_shell
from pytest_gputopo.parse.nccl_topo_xml import NcclTopoXmlError, nvlink_peer, parse_topo_xml
from pytest_gputopo.render.escape import terminal_lines
from pytest_gputopo.render.tables import nccl_topo_lines
from test_doc_examples import shell_env

HERE = Path(__file__).parent

# Each H100's 18 NVLinks, to the node's four NVSwitches, as ncclTopoGetXmlFromGpu writes them.
H100_NVSWITCH_LINKS = """\
          <nvlink target="0000:05:00.0" count="4" tclass="0x068000"/>
          <nvlink target="0000:06:00.0" count="5" tclass="0x068000"/>
          <nvlink target="0000:07:00.0" count="5" tclass="0x068000"/>
          <nvlink target="0000:08:00.0" count="4" tclass="0x068000"/>
"""


def h100(bus: str, dev: int, rank: int) -> str:
    """An H100 SXM (PCI device 0x2330) under its PCIe switch, as ncclTopoDumpXmlRec writes it: device
    ``dev`` of rank ``rank``, with its NVSwitch links."""
    return (
        f'      <pci busid="{bus}" class="0x030200" vendor="0x10de" device="0x2330" subsystem_vendor="0x10de" '
        'subsystem_device="0x16c1" link_speed="32.0 GT/s PCIe" link_width="16">\n'
        f'        <gpu dev="{dev}" sm="90" rank="{rank}" gdr="1">\n{H100_NVSWITCH_LINKS}        </gpu>\n'
        "      </pci>\n"
    )


H100_PAIR = f"""\
<system version="1">
  <cpu host_hash="0x5b1e9cf27a3d4410" numaid="0" affinity="00000000,ffffffff,00000000,ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:15:00.0" class="0x060400" vendor="0x1000" device="0xc030" subsystem_vendor="0x1000" subsystem_device="0x100b" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:17:00.0" class="0x020700" vendor="0x15b3" device="0x1021" subsystem_vendor="0x15b3" subsystem_device="0x0023" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0.000000" guid="0x8c2ba10003f0e1c2" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
{h100("0000:18:00.0", dev=0, rank=0)}    </pci>
  </cpu>
  <cpu host_hash="0x5b1e9cf27a3d4410" numaid="1" affinity="ffffffff,00000000,ffffffff,00000000" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:9a:00.0" class="0x060400" vendor="0x1000" device="0xc030" subsystem_vendor="0x1000" subsystem_device="0x100b" link_speed="32.0 GT/s PCIe" link_width="16">
{h100("0000:9d:00.0", dev=4, rank=1)}    </pci>
  </cpu>
</system>
"""  # noqa: E501 (NCCL's lines, as it writes them)

H100_PAIR_LINES = [
    "NCCL topology (version 1): 2 GPUs, 1 NIC, 2 CPUs",
    "CPU NUMA 0: x86_64 GenuineIntel, affinity 00000000,ffffffff,00000000,ffffffff",
    "CPU NUMA 1: x86_64 GenuineIntel, affinity ffffffff,00000000,ffffffff,00000000",
    "GPU dev 0, rank 0: bus 0000:18:00.0, sm 90, NUMA 0, PCIe 32.0 GT/s PCIe x16, GPUDirect RDMA",
    "  NVLink x4 to NVSwitch 0000:05:00.0",
    "  NVLink x5 to NVSwitch 0000:06:00.0",
    "  NVLink x5 to NVSwitch 0000:07:00.0",
    "  NVLink x4 to NVSwitch 0000:08:00.0",
    "GPU dev 4, rank 1: bus 0000:9d:00.0, sm 90, NUMA 1, PCIe 32.0 GT/s PCIe x16, GPUDirect RDMA",
    "  NVLink x4 to NVSwitch 0000:05:00.0",
    "  NVLink x5 to NVSwitch 0000:06:00.0",
    "  NVLink x5 to NVSwitch 0000:07:00.0",
    "  NVLink x4 to NVSwitch 0000:08:00.0",
    "NIC mlx5_0 dev 0: 400000 Mb/s (50 GB/s), port 1, bus 0000:17:00.0, NUMA 0, GPUDirect RDMA",
]


def write(tmp_path: Path, text: str, name: str = "topo.xml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_text_says_what_nccl_detected(tmp_path, capsys):
    code, out, err = run(capsys, "parse", "nccl-topo", write(tmp_path, H100_PAIR))
    assert (code, err) == (0, "")
    assert out.splitlines() == H100_PAIR_LINES


def test_json_is_what_the_parser_read(tmp_path, capsys):
    code, out, err = run(capsys, "parse", "nccl-topo", write(tmp_path, H100_PAIR), "--json")
    assert (code, err) == (0, "")
    topo = json.loads(out)
    assert topo == parse_topo_xml(H100_PAIR)
    assert [(g["dev"], g["rank"], g["busid"], g["numaid"]) for g in topo["gpus"]] == [
        (0, 0, "0000:18:00.0", 0),
        (4, 1, "0000:9d:00.0", 1),
    ]
    assert [sum(link["count"] for link in g["nvlinks"]) for g in topo["gpus"]] == [18, 18]
    assert {link["peer"] for g in topo["gpus"] for link in g["nvlinks"]} == {"nvswitch"}
    assert [(n["name"], n["speed"], n["gdr"]) for n in topo["nics"]] == [("mlx5_0", 400000, True)]
    assert topo["warnings"] == []


def test_links_to_a_gpu_the_cpu_an_unseen_switch_and_c2c(tmp_path, capsys):
    """A GPU peer is named by its dev where the file has it (bus ids compared as NCCL does: hex digits);
    NCCL's sentinel target is an NVSwitch NVML could not see (NVIDIA/nccl issue 1182); a class NCCL's
    table does not know is an NVSwitch to NCCL; <c2c> is a GPU's link to its CPU (GH200)."""
    text = """<system version="1">
  <cpu numaid="0" arch="aarch64">
    <pci busid="0009:01:00.0" class="0x030200" link_speed="" link_width="">
      <gpu dev="0" sm="90" rank="0" gdr="1">
        <nvlink target="00000009:02:00.0" count="6" tclass="0x030200"/>
        <nvlink target="0000:0f:00.0" count="2" tclass="0x030200"/>
        <nvlink target="fffffff:ffff:ff" count="2" tclass="0x068000"/>
        <nvlink target="0000:40:00.0" count="1" tclass="0x068001"/>
        <nvlink target="0000:41:00.0" count="1" tclass="0x060400"/>
        <c2c bw="45000" count="10"/>
      </gpu>
    </pci>
    <pci busid="0009:02:00.0" class="0x030200">
      <gpu dev="1" sm="90" gdr="0"/>
    </pci>
  </cpu>
</system>
"""
    code, out, err = run(capsys, "parse", "nccl-topo", write(tmp_path, text))
    assert code == 0, err
    assert out.splitlines()[1:] == [
        "CPU NUMA 0: aarch64",
        "GPU dev 0, rank 0: bus 0009:01:00.0, sm 90, NUMA 0, PCIe ?, GPUDirect RDMA",
        "  NVLink x6 to GPU dev 1 (00000009:02:00.0)",
        "  NVLink x2 to a GPU not in the file (0000:0f:00.0)",
        "  NVLink x2 to an NVSwitch NVML could not see (fffffff:ffff:ff)",
        "  NVLink x1 to the CPU (0000:40:00.0)",
        "  NVLink x1 to NVSwitch 0000:41:00.0 (tclass 0x060400)",
        "  C2C x10 to the CPU, 45000 MB/s each",
        "GPU dev 1, no rank (NCCL leaves it out): bus 0009:02:00.0, sm 90, NUMA 0, PCIe ?, no GPUDirect RDMA",
        "  no NVLink",
        "warning: <gpu dev='1'>: no rank attribute",
    ]


@pytest.mark.parametrize(
    "tclass, peer",
    [("0x030200", "gpu"), ("0x030000", "gpu"), ("0x068001", "cpu"), ("0x068000", "nvswitch"), ("0x060400", "nvswitch"),
     ("0x020700", "nvswitch"), (None, None)],
)  # fmt: skip
def test_a_links_peer_is_what_ncclTopoAddNvLinks_takes_it_for(tclass, peer):
    assert nvlink_peer(tclass) == peer


def test_strings_from_the_file_are_escaped_for_the_terminal(tmp_path, capsys):
    """A NIC name holding a line break, a workflow command, a C1 control and a bidi override, and an
    affinity with a tab, each stay on their line, shown escaped; the JSON keeps them as read."""
    name = "mlx5_0&#10;::error::owned&#x9b;31m&#x202e;"
    text = H100_PAIR.replace('name="mlx5_0"', f'name="{name}"').replace(
        'affinity="00000000,ffffffff,00000000,ffffffff"', 'affinity="&#9;##[group]x"'
    )
    code, out, err = run(capsys, "parse", "nccl-topo", write(tmp_path, text))
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == len(H100_PAIR_LINES)
    assert "NIC mlx5_0\\n::error::owned\\x9b31m\\u202e dev 0: 400000 Mb/s" in out
    assert "CPU NUMA 0: x86_64 GenuineIntel, affinity \\t##\\x5bgroup]x" in lines
    assert all(line.isprintable() and not line.lstrip().startswith("::") for line in lines)
    code, out, err = run(capsys, "parse", "nccl-topo", write(tmp_path, text), "--json")
    assert json.loads(out)["nics"][0]["name"] == "mlx5_0\n::error::owned\x9b31m\u202e"


@pytest.mark.parametrize(
    "name, source, says",
    [
        ("topo.txt", "captured/h200-driver-580/topo-m.txt", "read it with gputopo parse smi-topo"),
        ("gpus.txt", "captured/h200-driver-580/list.txt", "read it with gputopo parse smi-list"),
        ("query.xml", "captured/h200-driver-580/query.xml", "read it with gputopo parse smi-xml"),
        ("nccl.log", "nccl_logs/2.21.5-nvlink-2gpu.log", "read it with gputopo parse nccl-log"),
    ],
)
def test_another_tools_text_is_refused_in_one_line(tmp_path, capsys, name, source, says):
    path = tmp_path / name
    shutil.copy(HERE / source, path)
    code, out, err = run(capsys, "parse", "nccl-topo", path)
    assert (code, out) == (2, "")
    assert err.startswith(f"gputopo: {path}: ") and err.rstrip().endswith(says) and len(err.splitlines()) == 1, err


def test_nccl_topo_xml_is_refused_by_the_other_formats(tmp_path, capsys):
    path = write(tmp_path, H100_PAIR)
    for fmt in ("smi-xml", "smi-q", "nccl-log", "smi-topo"):
        code, out, err = run(capsys, "parse", fmt, path)
        assert code == 2 and len(err.splitlines()) == 1, (fmt, err)


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "empty text: no <system> element of NCCL's topology dump"),
        (
            '<?xml version="1.0"?><!DOCTYPE system [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
            '<system version="1"><cpu numaid="&b;"/></system>',
            "a <!DOCTYPE> (NCCL writes none, and its entities are not read): not NCCL's topology dump",
        ),
        ("<nvidia_smi_log/>", "this is nvidia-smi -q -x output (XML), not NCCL's topology dump"),
        ("<topology/>", "root element is <topology>, expected <system>: not NCCL's topology dump"),
    ],
)
def test_what_is_not_the_dump_says_why(text, says):
    with pytest.raises(NcclTopoXmlError) as info:
        parse_topo_xml(text)
    assert str(info.value).startswith(says) and "\n" not in str(info.value)


def test_the_documented_transcript(tmp_path):
    """docs/cli.md's `gputopo parse nccl-topo` transcript, run as written on the dump above and an NCCL
    log: the lines it shows, and the log refused naming the command that reads it."""
    [block] = [b for b in blocks() if b.path == "docs/cli.md" and "$ gputopo parse nccl-topo topo.xml" in b.text]
    write(tmp_path, H100_PAIR)
    shutil.copy(HERE / "nccl_logs" / "2.21.5-nvlink-2gpu.log", tmp_path / "nccl.log")
    steps = run_shell(block, tmp_path, shell_env())
    assert [s.status for s in steps] == [0, 2], [s.printed for s in steps]
    for step in steps:
        assert_shows(step.shown, step.printed)


ATTRIBUTE = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs", "Cc", "Cn")), max_size=12),
    st.sampled_from(["", "-1", "7", "x16", "0x068000", "0x030200", "fffffff:ffff:ff", "\n::x", "\t##[", "\x85\u202e"]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(ATTRIBUTE, min_size=12, max_size=12))
def test_any_attribute_values_are_read_and_shown_one_line_each(values):
    """Whatever NCCL (or a hand) wrote in the attributes, the dump is read and each line printed is one
    terminal line: numbers that are not numbers are warnings, never a crash."""
    (numaid, arch, busid, dev, sm, rank, target, count, tclass, name, speed, width) = (
        xml_escape(v, {'"': "&quot;", "\n": "&#10;", "\t": "&#9;", "\r": "&#13;"}) for v in values
    )
    text = f"""<system version="1"><cpu numaid="{numaid}" arch="{arch}">
<pci busid="{busid}" link_width="{width}"><gpu dev="{dev}" sm="{sm}" rank="{rank}" gdr="1">
<nvlink target="{target}" count="{count}" tclass="{tclass}"/><c2c bw="{speed}" count="{count}"/></gpu></pci>
<nic><net name="{name}" dev="{dev}" speed="{speed}" port="{count}"/></nic></cpu></system>"""
    topo = parse_topo_xml(text)
    lines = terminal_lines(nccl_topo_lines(topo))
    assert lines[0].startswith("NCCL topology (version 1): 1 GPU, 1 NIC, 1 CPU")
    assert all(line.isprintable() for line in lines)
    json.dumps(topo)
