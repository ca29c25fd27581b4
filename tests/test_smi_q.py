"""``nvidia-smi -q``, the text report people paste most (issue 32): real outputs (tests/smi_q, each with
its source in tests/smi_q/SOURCES.md) read by the format's own rules, ``-i`` blocks joined to a larger
machine with a warning, another tool's text refused by name, MIG devices kept from ``-q``, ``-q -x``
and ``-L``, and any text read or refused, never a crash."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import node_profile, record_node, run_cli as run
from pytest_gputopo.core import schema
from pytest_gputopo.parse.smi_list import parse_smi_list
from pytest_gputopo.parse.smi_q import SmiQParseError, parse_smi_q
from pytest_gputopo.parse.smi_xml import parse_smi_xml

HERE = Path(__file__).parent / "smi_q"


def sample(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def test_an_hgx_h100_gpu_is_read_as_its_report_says():
    """One GPU of an 8x H100 SXM node, driver 545 (`nvidia-smi -a`): every fact the model keeps."""
    listing = parse_smi_q(sample("hgx-h100-545.txt"))
    (gpu,) = listing.gpus
    assert (listing.attached, listing.driver_version, listing.cuda_driver_version) == (1, "545.23.08", "12.3")
    assert (gpu.index, gpu.name, gpu.uuid, gpu.pci_bus_id) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-10f35015-e921-bfab-2eb8-4e9b6664d5f1",
        "00000000:19:00.0",
    )
    assert (gpu.memory_total_bytes, gpu.mig, gpu.compute_mode) == (81559 * 2**20, False, "Default")
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert listing.warnings == () and gpu.mig_devices == ()


def test_an_a16_on_a_vgpu_host_r470_with_i_is_one_gpu_of_four_cuda_unknown():
    """`nvidia-smi -i 0 -q` on an A16 vGPU host (470.129.04): `CUDA Version : Not Found` is unknown, not an
    error; `Attached GPUs : 4` over one section is some GPUs only (warned, no index given); the idle link
    at Gen1 x4 of Gen4 x16 is read as printed."""
    listing = parse_smi_q(sample("a16-vgpu-host-470-i0.txt"))
    (gpu,) = listing.gpus
    assert (listing.attached, listing.driver_version, listing.cuda_driver_version) == (4, "470.129.04", None)
    assert gpu.index is None and gpu.uuid == "GPU-2039ae9a-7b32-009f-d7dc-b5acf0e7aaba"
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (1, 4, 4, 16)
    assert gpu.memory_total_bytes == 15105 * 2**20 and gpu.mig is None  # MIG Mode Current: N/A
    assert any("Attached GPUs 4 and 1 GPU section: some GPUs only" in w for w in listing.warnings)


def test_a_vgpu_guest_paste_cut_short_gives_what_it_holds_and_never_a_nested_name():
    """A GRID A100-4C vGPU guest (510.47.03), pasted up to its licence: the name is the GPU's Product
    Name, never `vGPU Software Licensed Product/Product Name`; what the cut left out is unknown."""
    listing = parse_smi_q(sample("grid-a100-4c-vgpu-guest-510-cut.txt"))
    (gpu,) = listing.gpus
    assert (gpu.index, gpu.name, gpu.pci_bus_id, gpu.mig) == (0, "GRID A100-4C", "00000000:02:01.0", False)
    assert gpu.memory_total_bytes is None and gpu.pcie_gen_max is None
    assert (listing.driver_version, listing.cuda_driver_version) == ("510.47.03", "11.6")


def four_gpu_topo() -> str:
    """`nvidia-smi topo -m` of four PCIe GPUs, as nvidia-smi writes it (tab-separated, Legend after)."""
    rows = ["\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity"]
    for i in range(4):
        cells = ["X" if i == j else ("PIX" if i // 2 == j // 2 else "SYS") for j in range(4)]
        rows.append(f"GPU{i}\t" + "\t".join(f" {c} " if c == "X" else c for c in cells) + f"\t0-15\t{i // 2}")
    return "\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n"


def test_an_i_block_joins_a_larger_machine_by_its_uuid_with_a_warning(tmp_path, capsys):
    """The A16's `-i 0` report joins the machine's GPU0 (told by UUID, from `-L`); the CUDA version stays
    unknown; the warning is in the profile's sources."""
    a16_list = "".join(
        f"GPU {i}: NVIDIA A16 (UUID: {u})\n"
        for i, u in enumerate(
            [
                "GPU-2039ae9a-7b32-009f-d7dc-b5acf0e7aaba",
                "GPU-4c81fa10-f611-4d5d-4f95-cf57270afbfa",
                "GPU-6d96ca7e-db97-dd7b-d18b-821c40747583",
                "GPU-b952c9a5-0ac8-26fb-a02d-60bcf9d0fe83",
            ]
        )
    )
    (tmp_path / "topo.txt").write_text(four_gpu_topo())
    (tmp_path / "list.txt").write_text(a16_list)
    code, out, err = record_node(
        capsys,
        tmp_path,
        tmp_path / "topo.txt",
        "--smi-query",
        tmp_path / "list.txt",
        "--smi-query",
        HERE / "a16-vgpu-host-470-i0.txt",
    )
    assert code == 0, err
    machine = schema.from_dict(node_profile(tmp_path)["topology"])
    assert machine.gpus[0].pcie_width_current == 4 and machine.gpus[1].pcie_width_current is None
    assert (machine.driver_version, machine.cuda_driver_version) == ("470.129.04", None)
    assert "some GPUs only" in out


@pytest.mark.parametrize(
    "text, says",
    [
        ('<?xml version="1.0" ?>\n<nvidia_smi_log></nvidia_smi_log>\n', "smi-xml"),
        ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-10f35015-e921-bfab-2eb8-4e9b6664d5f1)\n", "smi-list"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-15\n", "smi-topo"),
        ("| NVIDIA-SMI 545.23.08              Driver Version: 545.23.08    CUDA Version: 12.3     |\n", "-q"),
        ("name, memory.total [MiB]\nNVIDIA H100, 81559 MiB\n", "smi-query"),
        ("hello\nworld\n", "not nvidia-smi -q output"),
    ],
)
def test_another_tools_text_is_refused_by_name(tmp_path, capsys, text, says):
    (tmp_path / "out.txt").write_text(text)
    code, out, err = run(capsys, "parse", "smi-q", tmp_path / "out.txt")
    assert code == 2 and str(tmp_path / "out.txt") in err and says in err, err


def test_gputopo_parse_smi_q_prints_each_gpu_and_its_json(capsys):
    code, out, err = run(capsys, "parse", "smi-q", HERE / "a16-vgpu-host-470-i0.txt")
    assert code == 0, err
    assert "GPU?: NVIDIA A16 (GPU-2039ae9a-7b32-009f-d7dc-b5acf0e7aaba), bus 00000000:13:00.0" in out
    assert "PCIe Gen1/4 x4/16" in out and "warning: Attached GPUs 4" in out
    code, out, err = run(capsys, "parse", "smi-q", HERE / "hgx-h100-545.txt", "--json")
    data = json.loads(out)
    assert code == 0 and data["tool"] == "nvidia-smi -q" and data["gpus"][0]["pcie_gen_max"] == 5


# MIG devices as nvidia-smi -q prints them under a GPU in MIG mode: the text form of -q -x's <mig_devices>
# (index, gpu_instance_id, compute_instance_id, fb_memory_usage) with -q's titles. Constructed, no
# public -q paste of a MIG GPU having been found; its -q -x form is in test_mig_devices_of_q_x.
MIG_Q = """==============NVSMI LOG==============

Timestamp                                 : Tue Jun  4 10:00:00 2024
Driver Version                            : 550.90.07
CUDA Version                              : 12.4

Attached GPUs                             : 1
GPU 00000000:07:00.0
    Product Name                          : NVIDIA A100-SXM4-40GB
    MIG Mode
        Current                           : Enabled
        Pending                           : Enabled
    MIG Devices
        MIG Device
            Index                         : 0
            GPU Instance ID               : 1
            Compute Instance ID           : 0
            FB Memory Usage
                Total                     : 9856 MiB
        MIG Device
            Index                         : 1
            GPU Instance ID               : 5
            Compute Instance ID           : 0
            FB Memory Usage
                Total                     : 4864 MiB
    GPU UUID                              : GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77
    Compute Mode                          : Default
"""
MIG_L = """GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 2g.10gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 1g.5gb      Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)
"""


def test_mig_devices_of_q_and_l_are_one_set_in_the_profile(tmp_path, capsys):
    """Issue 32: `-L` and `-q` listed MIG devices and the JSON said `mig: true` only. Now each device is
    in the profile, -L's profile and UUID joined by index with -q's instance ids and memory."""
    listing = parse_smi_q(MIG_Q)
    assert [(d.index, d.gpu_instance_id, d.memory_total_bytes) for d in listing.gpus[0].mig_devices] == [
        (0, 1, 9856 * 2**20),
        (1, 5, 4864 * 2**20),
    ]
    (tmp_path / "topo.txt").write_text("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\t0\n\nLegend:\n")
    (tmp_path / "l.txt").write_text(MIG_L)
    (tmp_path / "q.txt").write_text(MIG_Q)
    code, out, err = record_node(
        capsys, tmp_path, tmp_path / "topo.txt", "--smi-query", tmp_path / "l.txt", "--smi-query", tmp_path / "q.txt"
    )
    assert code == 0, err
    gpu = node_profile(tmp_path)["topology"]["gpus"][0]
    assert gpu["mig"] is True and gpu["mig_devices"] == [
        {
            "index": 0,
            "uuid": "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f",
            "profile": "2g.10gb",
            "gpu_instance_id": 1,
            "compute_instance_id": 0,
            "memory_total_bytes": 9856 * 2**20,
        },
        {
            "index": 1,
            "uuid": "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb",
            "profile": "1g.5gb",
            "gpu_instance_id": 5,
            "compute_instance_id": 0,
            "memory_total_bytes": 4864 * 2**20,
        },
    ]
    assert schema.from_dict(node_profile(tmp_path)["topology"]).gpus[0].mig_devices[1].profile == "1g.5gb"


def test_mig_devices_of_q_x():
    """-q -x's <mig_devices> (the shape NVIDIA's nvidia-ml-py sample nvidia_smi.py writes, and public
    captures show: <index>, <gpu_instance_id>, <compute_instance_id>, <fb_memory_usage><total>)."""
    xml = (
        '<?xml version="1.0" ?>\n<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu id="00000000:00:09.0">'
        "<mig_mode><current_mig>Enabled</current_mig></mig_mode><mig_devices><mig_device><index>0</index>"
        "<gpu_instance_id>1</gpu_instance_id><compute_instance_id>0</compute_instance_id>"
        "<fb_memory_usage><total>40448 MiB</total></fb_memory_usage></mig_device></mig_devices>"
        "</gpu></nvidia_smi_log>"
    )
    (gpu,) = parse_smi_xml(xml).gpus
    assert gpu.mig and [
        (d.index, d.gpu_instance_id, d.compute_instance_id, d.memory_total_bytes) for d in gpu.mig_devices
    ] == [(0, 1, 0, 40448 * 2**20)]
    early = parse_smi_list(
        "GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0)\n"
    )
    assert [(d.index, d.gpu_instance_id, d.compute_instance_id) for d in early.gpus[0].mig_devices] == [(0, 1, 0)]


def test_a_profile_with_too_many_mig_devices_is_refused_naming_the_field():
    data = {"gpus": [{"index": 0, "mig_devices": [{"index": 0}] * 65}], "links": []}
    with pytest.raises(schema.SchemaError, match=r"gpus\[0\]\.mig_devices: 65 MIG devices"):
        schema.from_dict(data)


def test_a_bad_value_is_a_note_naming_its_line_and_a_joined_report_is_refused():
    text = sample("hgx-h100-545.txt").replace("Max                       : 16x", "Max                       : 99x")
    listing = parse_smi_q(text)
    assert listing.gpus[0].pcie_width_max is None
    assert any(w.startswith("line ") and "Link Width/Max '99x' is not from 1 to 32x" in w for w in listing.warnings)
    with pytest.raises(SmiQParseError, match="at the left margin after a GPU section"):
        parse_smi_q(sample("hgx-h100-545.txt") + sample("hgx-h100-545.txt"))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(p.name for p in HERE.glob("*.txt"))), st.data())
def test_any_text_is_read_or_refused_never_a_crash(name, data):
    """Cut, spliced or garbled reports give what can be read or the reader's own refusal."""
    text = sample(name)
    cut = data.draw(st.integers(0, len(text)))
    at = data.draw(st.integers(0, cut))
    junk = data.draw(st.text(max_size=40))
    try:
        listing = parse_smi_q(text[:at] + junk + text[at:cut])
    except SmiQParseError:
        return
    assert all(g.memory_total_bytes is None or g.memory_total_bytes > 0 for g in listing.gpus)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes_it(text):
    with contextlib.suppress(SmiQParseError):
        parse_smi_q(text)
