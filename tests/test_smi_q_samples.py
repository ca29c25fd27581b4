"""``nvidia-smi -q`` reports of the kinds issue 32 names, each a real output (tests/smi_q, its source
and what it must yield in tests/smi_q/SOURCES.md): the facts below were read off each text by hand,
not by the reader. A whole HGX H100 node, an A10 and eight RTX 4090 idling at Gen1, a V100 block of
``-i 1`` joined to its 8-GPU host by the host's own ``-L``, and an elided TITAN V paste."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import node_profile, record_node, run_cli as run
from pytest_gputopo.core import schema
from pytest_gputopo.parse.smi_q import SmiQParseError, parse_smi_q

HERE = Path(__file__).parent / "smi_q"
MIB = 2**20


def sample(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def facts(gpu) -> tuple:
    return (
        gpu.index,
        gpu.name,
        gpu.uuid,
        gpu.pci_bus_id,
        gpu.memory_total_bytes,
        gpu.pcie_gen_current,
        gpu.pcie_gen_max,
        gpu.pcie_width_current,
        gpu.pcie_width_max,
        gpu.mig,
        gpu.compute_mode,
    )


# (file, driver, CUDA, Attached GPUs, [(bus, UUID)], name, MiB, gen current/max, width current/max, MIG)
WHOLE = [
    (
        "hgx-h100-x8-565.txt",
        "565.57.01",
        "12.7",
        8,
        [
            ("18", "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"),
            ("2A", "GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd"),
            ("3A", "GPU-2d50cdf6-dd67-9f2e-855e-0d4d6d395a2f"),
            ("5D", "GPU-d1838e76-90e6-4408-711d-aeeaa2e1fd14"),
            ("9A", "GPU-72be6e5d-3c1b-0d37-98ac-d3ef159f2589"),
            ("AB", "GPU-52378fbc-3124-3895-13b6-1dd179563e0f"),
            ("BA", "GPU-83a5aebb-b71c-c570-aa83-185e1233fe97"),
            ("DB", "GPU-33135771-a848-ece1-b61e-489e221d663c"),
        ],
        "NVIDIA H100 80GB HBM3",
        81559,
        (5, 5),
        (16, 16),
        False,
    ),
    (
        "a10-550-passthrough.txt",
        "550.90.12",
        "12.4",
        1,
        [("08", "GPU-14705cc6-2e5b-ae28-e00a-0f87622e4299")],
        "NVIDIA A10",
        23028,
        (1, 4),
        (16, 16),
        None,
    ),
    (
        "rtx4090-x8-550.txt",
        "550.127.05",
        "12.4",
        8,
        [
            ("01", "GPU-8ee5f1e0-e705-aac5-6d6e-b97ad59601ef"),
            ("25", "GPU-a4ac0a07-7668-e715-6e6d-d0dea1c5738b"),
            ("41", "GPU-6a54aeb0-27c1-e4c3-33fd-394674fbf918"),
            ("61", "GPU-28895719-adab-e2f7-9416-5b9321ff04aa"),
            ("81", "GPU-74e37e99-e298-2478-8866-46035fa6b0cc"),
            ("A1", "GPU-0097a8d1-9b40-0267-a960-13fb288944bd"),
            ("C1", "GPU-13f50fdd-d36e-2c8e-57ac-68634232e19e"),
            ("E1", "GPU-78ae265e-d539-389c-f1b8-41b35aa0adb6"),
        ],
        "NVIDIA GeForce RTX 4090",
        24564,
        (1, 4),
        (16, 16),
        None,
    ),
]


@pytest.mark.parametrize(
    "name, driver, cuda, attached, gpus, model, mib, gen, width, mig", WHOLE, ids=[w[0] for w in WHOLE]
)
def test_a_whole_report_gives_every_gpu_in_index_order(name, driver, cuda, attached, gpus, model, mib, gen, width, mig):
    """Every GPU listed (``Attached GPUs`` equals the sections): each section's place is its NVML index.
    The PCIe maximum is ``Max`` (NVML's max link generation), not the ``Device Max``/``Host Max`` lines of
    drivers 550+; an idle link's Gen1 is read as printed (A10, RTX 4090), never as the maximum."""
    listing = parse_smi_q(sample(name))
    assert (listing.driver_version, listing.cuda_driver_version, listing.attached) == (driver, cuda, attached)
    assert [facts(g) for g in listing.gpus] == [
        (i, model, uuid, f"00000000:{bus}:00.0", mib * MIB, *gen, *width, mig, "Default")
        for i, (bus, uuid) in enumerate(gpus)
    ]
    assert listing.warnings == () and all(g.mig_devices == () for g in listing.gpus)


def test_a_v100_block_of_i_1_is_one_gpu_of_eight_with_no_index():
    """``nvidia-smi -q -i 1`` on an 8-GPU host: ``Attached GPUs : 8`` over one section. Which index it has
    the report does not say (``Minor Number`` is the /dev/nvidia node, not NVML's index): unknown, warned."""
    listing = parse_smi_q(sample("v100-pcie-470-i1.txt"))
    (gpu,) = listing.gpus
    assert (listing.driver_version, listing.cuda_driver_version, listing.attached) == ("470.129.06", "11.4", 8)
    assert facts(gpu) == (
        None,
        "Tesla V100-PCIE-32GB",
        "GPU-06e3d8e6-3f54-374a-8142-9752ca1f2316",
        "00000000:1C:00.0",
        32510 * MIB,
        3,
        3,
        16,
        16,
        None,
        "Default",
    )
    assert listing.warnings == (
        "Attached GPUs 8 and 1 GPU section: some GPUs only (nvidia-smi -i, or a cut "
        "paste); which index each has, and the others, are unknown",
    )


def eight_gpu_topo() -> str:
    """A ``topo -m`` of eight PCIe GPUs as nvidia-smi lays it out (the post gives none of that host)."""
    rows = ["\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tCPU Affinity\tNUMA Affinity"]
    for i in range(8):
        cells = ["X" if i == j else ("NODE" if i // 4 == j // 4 else "SYS") for j in range(8)]
        rows.append(f"GPU{i}\t" + "\t".join(f" {c} " if c == "X" else c for c in cells) + f"\t0-15\t{i // 4}")
    return "\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n"


def record_on_eight_gpus(capsys, tmp_path, *queries) -> tuple[int, str, str]:
    """``gputopo record`` of eight_gpu_topo() joined by each of ``queries`` (``--smi-query``)."""
    (tmp_path / "topo.txt").write_text(eight_gpu_topo())
    return record_node(capsys, tmp_path, tmp_path / "topo.txt", *(a for q in queries for a in ("--smi-query", q)))


def test_the_i_1_block_joins_its_host_at_gpu1_by_the_hosts_own_l(tmp_path, capsys):
    """The same post's ``nvidia-smi -L`` places the ``-i 1`` block: its UUID is GPU 1's. Its facts land on
    GPU1 only, the others stay unknown, and the warning is in the output and the profile's sources."""
    code, out, err = record_on_eight_gpus(capsys, tmp_path, HERE / "v100-pcie-470-L.txt", HERE / "v100-pcie-470-i1.txt")
    assert code == 0, err
    data = node_profile(tmp_path)
    machine = schema.from_dict(data["topology"])
    assert [g.pci_bus_id for g in machine.gpus] == [None, "00000000:1C:00.0"] + [None] * 6
    assert (machine.gpus[1].memory_total_bytes, machine.gpus[1].pcie_gen_max) == (32510 * MIB, 3)
    assert all(g.memory_total_bytes is None for i, g in enumerate(machine.gpus) if i != 1)
    assert (machine.driver_version, machine.cuda_driver_version) == ("470.129.06", "11.4")
    assert "some GPUs only" in out and any("some GPUs only" in n for s in data["sources"] for n in s.get("notes", []))


def test_the_i_1_block_alone_cannot_be_placed_on_an_eight_gpu_machine(tmp_path, capsys):
    """Without a source giving GPU1's UUID or bus id, the block's index is unknown: refused, never put on
    GPU0 by its position."""
    code, out, err = record_on_eight_gpus(capsys, tmp_path, HERE / "v100-pcie-470-i1.txt")
    assert code == 2 and "which GPU it is is unknown" in err, err
    assert not (tmp_path / "node.json").exists()


def test_an_elided_titan_v_paste_gives_what_is_before_each_cut():
    """A TITAN RTX + TITAN V report pasted indented, the first GPU elided with ``...``: both GPUs by
    name, UUID and bus id, in index order (two sections of ``Attached GPUs : 2``); nothing after the
    elision is read, and the warning names its line."""
    listing = parse_smi_q(sample("titan-rtx-titan-v-418-elided.txt"))
    assert (listing.driver_version, listing.cuda_driver_version, listing.attached) == ("418.56", "10.1", 2)
    assert [(g.index, g.name, g.uuid, g.pci_bus_id) for g in listing.gpus] == [
        (0, "TITAN RTX", "GPU-9b4994a5-1105-10a5-079a-57a494c351bc", "00000000:73:00.0"),
        (1, "TITAN V", "GPU-50208d32-6612-fcb5-ea38-28ef96349934", "00000000:A6:00.0"),
    ]
    assert all(g.memory_total_bytes is None and g.pcie_gen_max is None for g in listing.gpus)
    assert listing.warnings == (
        "line 22: '...': the paste leaves lines out here; the rest of GPU 00000000:73:00.0 is not read (unknown)",
    )


@pytest.mark.parametrize("mark", ["...", "[...]", "\u2026", "    ..."])
def test_no_fact_after_an_elision_lands_on_the_gpu_before_it(mark):
    """What an elision left out may be the next GPU's header: a UUID after it could be another GPU's.
    Until the next ``GPU <bus id>`` line nothing is read; that GPU's own facts are."""
    text = sample("titan-rtx-titan-v-418-elided.txt").replace(
        "        Minor Number                    : 0\n    ...\n",
        f"        Minor Number                    : 0\n{mark}\n        FB Memory Usage\n"
        "            Total                       : 12066 MiB\n",
    )
    text = text.replace("        GPU UUID                        : GPU-9b4994a5-1105-10a5-079a-57a494c351bc\n", "")
    first, second = parse_smi_q(text).gpus
    assert first.uuid is None and first.memory_total_bytes is None
    assert second.uuid == "GPU-50208d32-6612-fcb5-ea38-28ef96349934"


def test_gputopo_parse_smi_q_on_eight_4090s_at_gen1(capsys):
    code, out, err = run(capsys, "parse", "smi-q", HERE / "rtx4090-x8-550.txt", "--json")
    data = json.loads(out)
    assert code == 0, err
    gens = [(g["index"], g["pcie_gen_current"], g["pcie_gen_max"]) for g in data["gpus"]]
    assert gens == [(i, 1, 4) for i in range(8)]
    code, out, err = run(capsys, "parse", "smi-q", HERE / "titan-rtx-titan-v-418-elided.txt")
    assert code == 0 and "GPU1: TITAN V (GPU-50208d32-6612-fcb5-ea38-28ef96349934)" in out
    assert "warning: line 22: '...'" in out


def test_the_code_block_as_published_prompt_line_included_is_read_as_q(tmp_path, capsys):
    """The post's code block opens with its prompt line, ``$ nvidia-smi -q -i 1``: ``record --smi-query``
    tells the format by the NVSMI LOG banner below it, not by the first line (it took it for CSV)."""
    (tmp_path / "q.txt").write_text("$ nvidia-smi -q -i 1\n" + sample("v100-pcie-470-i1.txt"))
    code, out, err = record_on_eight_gpus(capsys, tmp_path, HERE / "v100-pcie-470-L.txt", tmp_path / "q.txt")
    assert code == 0, err
    gpu = node_profile(tmp_path)["topology"]["gpus"][1]
    assert (gpu["pci_bus_id"], gpu["pcie_width_max"]) == ("00000000:1C:00.0", 16)


def test_a_paste_without_the_header_gives_no_index_and_says_why():
    """Pasted from its ``GPU <bus id>`` line, a report has no ``Attached GPUs``: whether it lists every
    GPU is unknown, so no section's place is taken for its index."""
    text = sample("hgx-h100-545.txt")
    listing = parse_smi_q(text[text.index("GPU 00000000:19:00.0") :])
    (gpu,) = listing.gpus
    assert (gpu.index, gpu.uuid, listing.attached, listing.driver_version) == (
        None,
        "GPU-10f35015-e921-bfab-2eb8-4e9b6664d5f1",
        None,
        None,
    )
    assert any(w.startswith("no 'Attached GPUs' line") for w in listing.warnings)


def test_the_fabric_section_of_q_is_read_and_recorded_as_q_x_s():
    """``Fabric`` (``State``, ``Status``, ``CliqueId``, ``ClusterUUID``) is the text form of ``-q -x``'s
    ``<fabric>``: read alike, so a ``-q`` recording holds what a ``-q -x`` one does. Driver 545 prints
    State and Status only; 565 the clique and the all-zero cluster of a single-node fabric (none once
    recorded, as NVML's answer is held); an A10's all-N/A section says nothing."""
    h545 = parse_smi_q(sample("hgx-h100-545.txt")).gpus[0].fabric
    h565 = parse_smi_q(sample("hgx-h100-x8-565.txt")).gpus
    assert (h545.state, h545.status, h545.clique_id, h545.cluster_uuid) == ("Completed", "Success", None, None)
    assert {(f.state, f.status, f.clique_id, f.cluster_uuid) for f in (g.fabric for g in h565)} == {
        ("Completed", "Success", 0, "00000000-0000-0000-0000-000000000000")
    }
    assert parse_smi_q(sample("a10-550-passthrough.txt")).gpus[0].fabric is None
    text = sample("hgx-h100-545.txt").replace(
        "State                             : Completed", "State                             : Registered"
    )
    listing = parse_smi_q(text)
    assert listing.gpus[0].fabric.state is None and any(
        "Fabric/State 'Registered' is not one of" in w for w in listing.warnings
    )


def test_a_q_recording_of_an_hgx_node_keeps_each_gpus_fabric(tmp_path, capsys):
    topo = ["\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tCPU Affinity\tNUMA Affinity"]
    topo += [
        f"GPU{i}\t" + "\t".join(" X " if i == j else "NV18" for j in range(8)) + f"\t0-15\t{i // 4}" for i in range(8)
    ]
    (tmp_path / "topo.txt").write_text("\n".join(topo) + "\n\nLegend:\n\n  X    = Self\n")
    code, out, err = record_node(capsys, tmp_path, tmp_path / "topo.txt", "--smi-query", HERE / "hgx-h100-x8-565.txt")
    assert code == 0, err
    gpus = node_profile(tmp_path)["topology"]["gpus"]
    assert [g["fabric"] for g in gpus] == [
        {"state": "Completed", "status": "Success", "clique_id": 0, "cluster_uuid": None}
    ] * 8
    assert [g["pci_bus_id"][9:11] for g in gpus] == ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]


def test_a_gpu_nvidia_smi_cannot_reach_is_refused_saying_so_not_as_another_tool():
    """``nvidia-smi -a -i 0`` on a GPU NVML cannot reach prints one line and no report (NVIDIA/nvidia-docker
    #1553): refused naming the GPU and what the line means, not as text of no known kind."""
    with pytest.raises(
        SmiQParseError,
        match=r"line 1: nvidia-smi printed no report, only 'Unable to determine the "
        r"device handle for GPU 0000:09:00.0: Unknown Error': a GPU NVML cannot",
    ):
        parse_smi_q(sample("lost-gpu-a-i0.txt"))


def test_record_says_what_a_lost_gpus_line_means(tmp_path, capsys):
    code, out, err = record_on_eight_gpus(capsys, tmp_path, HERE / "lost-gpu-a-i0.txt")
    assert code == 2 and "nvidia-smi printed no report" in err and "GPU 0000:09:00.0" in err, err


def h100_node_with_a_lost_gpu() -> str:
    """The real 8x H100 report with GPU 00000000:5D:00.0's section replaced by the line nvidia-smi prints
    (on stderr, so in place in a ``2>&1`` capture) for a GPU it cannot reach."""
    text = sample("hgx-h100-x8-565.txt")
    start, end = text.index("GPU 00000000:5D:00.0\n"), text.index("GPU 00000000:9A:00.0\n")
    return text[:start] + "Unable to determine the device handle for GPU 00000000:5D:00.0: Unknown Error\n" + text[end:]


def test_a_report_with_a_lost_gpu_gives_the_others_with_no_index():
    """Seven sections and a lost GPU's line: the seven are read, none given an index by its place (is the
    lost one counted in Attached GPUs? which place is which index?), and the line is a warning."""
    listing = parse_smi_q(h100_node_with_a_lost_gpu())
    assert [g.pci_bus_id[9:11] for g in listing.gpus] == ["18", "2A", "3A", "9A", "AB", "BA", "DB"]
    assert all(g.index is None for g in listing.gpus) and listing.attached is None
    assert any(
        "nvidia-smi says 'Unable to determine the device handle for GPU 00000000:5D:00.0" in w for w in listing.warnings
    )
    text = h100_node_with_a_lost_gpu().replace(
        "Attached GPUs                             : 8", "Attached GPUs                             : 7"
    )
    assert all(g.index is None for g in parse_smi_q(text).gpus)


def test_a_lost_gpus_line_above_another_listing_does_not_hide_its_format(tmp_path, capsys):
    """The line comes on stderr, so first in a ``2>&1`` capture of ``-L``: the listing is still told
    by its own lines."""
    (tmp_path / "l.txt").write_text(
        "Unable to determine the device handle for GPU 0000:1B:00.0: Unknown Error\n" + sample("v100-pcie-470-L.txt")
    )
    code, out, err = record_on_eight_gpus(capsys, tmp_path, tmp_path / "l.txt")
    assert code == 0, err
    assert node_profile(tmp_path)["topology"]["gpus"][1]["uuid"] == "GPU-06e3d8e6-3f54-374a-8142-9752ca1f2316"
