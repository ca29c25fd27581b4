"""The ``nvidia-smi topo -m`` / ``topo -p2p`` text parser: real outputs, damaged text, round trips."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import CORPUS, NO_CORPUS
from pytest_gputopo.core import model
from pytest_gputopo.parse.smi_machine import parse_p2p_matrix, to_topology
from pytest_gputopo.parse.smi_table import SmiParseError
from pytest_gputopo.parse.smi_topo import SmiTopo, parse_topo_matrix
from pytest_gputopo.render.smi_topo import render_p2p_matrix, render_topo_matrix

TOPO = CORPUS / "topo"
SAMPLES = sorted(TOPO.glob("*.txt"))

# nvidia-smi topo -p2p rw, verbatim from https://github.com/noonghunna/club-3090/issues/1229
P2P_SAMPLE = (
    " \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n\nLegend:\n\n  X    = Self\n"
    "  OK   = Status Ok\n  CNS  = Chipset not supported\n  GNS  = GPU not supported\n"
    "  TNS  = Topology not supported\n  NS   = Not supported\n  DR   = Disabled by regkey\n"
    "  U    = Unknown\n"
)

FOUR = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV4\tSYS\tSYS\tSYS\t0-23,48-71\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\tSYS\tSYS\t0-23,48-71\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV4\tPXB\t24-47,72-95\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNV4\t X \tPIX\t24-47,72-95\t1\t\tN/A\n"
    "NIC0\tSYS\tSYS\tPXB\tPIX\t X \n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
)


def _sample_id(path: Path | None) -> str:
    return path.stem if path else "no-corpus"


def _expand(names: list) -> list:
    """The meta may abbreviate a run of names as "mlx5_0..mlx5_17"."""
    out = []
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)\.\.(.*?)(\d+)", name)
        if m and m.group(1) == m.group(3):
            out += [f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(4)) + 1)]
        else:
            out.append(name)
    return out


def _sys(label: str) -> str:
    return "SYS" if label == "SOC" else label


def _pair_labels(smi: SmiTopo) -> dict:
    n = len(smi.gpus)
    return {f"GPU{a}-GPU{b}": smi.matrix[a][b] for a in range(n) for b in range(a + 1, n)}


# ---------------------------------------------------------------------------------------------
# Every real sample meets its expected facts


@pytest.mark.parametrize(
    "path", SAMPLES or [pytest.param(None, marks=pytest.mark.skip(reason=NO_CORPUS))], ids=_sample_id
)
def test_corpus_sample(path):
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    exp = meta["expected"]
    smi = parse_topo_matrix(path.read_text(encoding="utf-8", errors="replace"))
    pairs = _pair_labels(smi)
    labels = set(pairs.values())
    nv = {k: v for k, v in pairs.items() if v.startswith("NV")}
    checks = {
        "n_gpus": lambda v: len(smi.gpus) == v,
        "gpu_pair_labels": lambda v: labels == {_sys(x) for x in v},
        "any_gpu_pair_sys": lambda v: ("SYS" in labels) == v,
        "any_gpu_pair_nv": lambda v: bool(nv) == v,
        "nv_count_max": lambda v: max(int(x[2:]) for x in nv.values()) == v,
        "nv_pairs": lambda v: nv == v,
        "nv_pairs_per_gpu": lambda v: all(sum(x.startswith("NV") for x in row) == v for row in smi.matrix),
        "nv_neighbours_per_gpu": lambda v: all(sum(x.startswith("NV") for x in row) == v for row in smi.matrix),
        "n_nics": lambda v: len(smi.nics) == v,
        "nic_names": lambda v: list(smi.nics) == _expand(v),
        "gpu_nic_labels": lambda v: {x for row in smi.gpu_nic for x in row} == {_sys(x) for x in v},
        "gpu_nic_label": lambda v: {x for row in smi.gpu_nic for x in row} == {_sys(v)},
        "numa_affinity_per_gpu": lambda v: [g.numa_affinity for g in smi.gpus] == [str(x) for x in v],
        "numa_affinity_gpu0": lambda v: smi.gpus[0].numa_affinity == v,
        "cpu_affinity_per_gpu": lambda v: [g.cpu_affinity for g in smi.gpus] == [x or None for x in v],
        "cpu_affinity_all_gpus": lambda v: {g.cpu_affinity for g in smi.gpus} == {v},
        "has_cpu_affinity": lambda v: ("CPU Affinity" in smi.columns) == v,
        "has_numa_affinity": lambda v: ("NUMA Affinity" in smi.columns) == v,
        "has_gpu_numa_id": lambda v: ("GPU NUMA ID" in smi.columns) == v,
    }
    failed = [f"{key}: expected {exp[key]!r}" for key, check in checks.items() if key in exp and not check(exp[key])]
    assert not failed, f"{path.name}: {failed}\nparsed: {smi.to_json()}"
    # A cell the parser could not read is always explained; a complete, unmangled sample has no warnings.
    if any("?" in row for row in smi.matrix + smi.gpu_nic) or not (meta.get("truncated") or meta.get("mangled")):
        assert bool(smi.warnings) == any("?" in row for row in smi.matrix + smi.gpu_nic), smi.warnings
    topo = to_topology(smi, name=path.name)
    assert len(topo.links) == len(smi.gpus) * (len(smi.gpus) - 1) // 2


# ---------------------------------------------------------------------------------------------
# Hand-written cases


def test_tab_separated_with_nics_and_gpu_numa_id():
    smi = parse_topo_matrix(FOUR)
    assert smi.matrix[0] == ("X", "NV4", "SYS", "SYS")
    assert smi.gpu_nic == (("SYS",), ("SYS",), ("PXB",), ("PIX",))
    assert smi.nics == ("mlx5_0",)
    assert smi.gpus[2].cpu_affinity == "24-47,72-95" and smi.gpus[2].numa_affinity == "1"
    assert smi.gpus[2].gpu_numa_id == "N/A"
    assert smi.columns == ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
    assert smi.warnings == ()
    assert smi.to_json()["gpus"][0] == {
        "name": "GPU0",
        "cpu_affinity": "0-23,48-71",
        "numa_affinity": "0",
        "gpu_numa_id": "N/A",
    }


def test_to_topology_keeps_unknowns_unknown():
    topo = to_topology(parse_topo_matrix(FOUR), name="four.txt")
    assert topo.link(0, 1) == model.Link(0, 1, pcie=None, nvlinks=4)  # PCIe path hidden behind NV4
    assert topo.link(0, 2) == model.Link(0, 2, pcie=model.LinkClass.SYS, nvlinks=0)
    assert topo.gpus[3] == model.Gpu(index=3, nvml_index=3, cpu_affinity="24-47,72-95", numa_node=1)
    assert topo.source == model.Source("smi-text", "four.txt") and topo.nics == ("mlx5_0",)
    assert topo.link(0, 1).p2p == model.P2P()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "Legend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe\n"
        "  NV#  = Connection traversing a bonded set of # NVLinks\n",
        "No devices were found\n",
        "GPU1\tNV4\t X \n",
    ],
)
def test_unreadable_text_is_an_smi_parse_error(text):
    with pytest.raises(SmiParseError, match="no nvidia-smi topology matrix"):
        parse_topo_matrix(text)
    with pytest.raises(SmiParseError):
        parse_p2p_matrix(text)


def test_single_gpu():
    smi = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\t0\t\tN/A\n")
    assert smi.matrix == (("X",),) and smi.gpus[0].cpu_affinity == "0-7" and smi.warnings == ()
    assert to_topology(smi).links == ()


def test_zero_gpu_header_is_refused():
    """A header naming no GPU is a usage error, as options.md promises, never a 0-GPU machine (exit 0)."""
    for parse in (parse_topo_matrix, parse_p2p_matrix):
        with pytest.raises(SmiParseError, match="line 1: no nvidia-smi .* matrix: the header names no GPU"):
            parse("\tCPU Affinity\tNUMA Affinity\n\nLegend:\n")


def test_sixteen_gpus():
    n = 16
    rows = ["\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity"]
    rows += [
        f"GPU{a}\t" + "\t".join(" X " if a == b else "NV6" for b in range(n)) + f"\t0-47\t{a // 8}" for a in range(n)
    ]
    smi = parse_topo_matrix("\n".join(rows))
    assert len(smi.gpus) == 16 and smi.warnings == ()
    assert {x for row in smi.matrix for x in row} == {"X", "NV6"}
    assert smi.gpus[15].name == "GPU15" and smi.gpus[15].numa_affinity == "1"


def test_crlf_line_endings():
    assert parse_topo_matrix(FOUR.replace("\n", "\r\n")) == parse_topo_matrix(FOUR)


def test_soc_is_sys_and_old_style_nic_rows():
    text = (
        "\tGPU0\tGPU1\tmlx4_0\tCPU Affinity\nGPU0\t X \tSOC\tPHB\t0-5\nGPU1\tSOC\t X \tSOC\t6-11\n"
        "mlx4_0\tPHB\tSOC\t X\n"
    )
    smi = parse_topo_matrix(text)
    assert smi.matrix == (("X", "SYS"), ("SYS", "X")) and smi.nics == ("mlx4_0",)
    assert smi.gpu_nic == (("PHB",), ("SYS",))


def test_text_around_the_matrix_is_ignored():
    text = "GPU Topology:\nubuntu@GPU-87:~$ nvidia-smi topo -m\n" + FOUR + "\nubuntu@GPU-87:~$ \n"
    assert parse_topo_matrix(text) == parse_topo_matrix(FOUR)


def test_truncated_rows_and_missing_row():
    lines = FOUR.splitlines()
    text = "\n".join([lines[0], lines[1], lines[2], lines[4][:13]])  # no GPU2 row, GPU3 cut mid-row
    smi = parse_topo_matrix(text)
    assert "no row for GPU2" in smi.warnings and "GPU3 row has 2 of 5 cells" in smi.warnings
    assert not any("unreadable" in w for w in smi.warnings)  # the empty field left by the cut is just missing
    assert (
        "no row for NIC0" in smi.warnings
        and "no NIC Legend entry for NIC0; the row label is used as its name" in smi.warnings
    )
    assert smi.matrix[2] == ("SYS", "SYS", "X", "?")  # read back from the GPU0/GPU1 rows
    assert smi.matrix[3][2] == "?" and smi.gpus[3] == smi.gpus[3].__class__("GPU3")
    assert to_topology(smi).link(2, 3) == model.Link(2, 3, pcie=None, nvlinks=None)


def test_unknown_label_is_a_warning():
    smi = parse_topo_matrix("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tFOO\tSYS\nGPU1\tFOO\t X \tSYS\nGPU2\tSYS\tSYS\t X \n")
    assert smi.matrix[0][1] == "?" and "GPU0-GPU1: unreadable cell 'FOO'" in smi.warnings


def test_a_matrix_without_one_readable_link_is_refused():
    """Text of the matrix's shape whose cells are no nvidia-smi link (rocm-smi's `?` grid) is refused,
    not read as GPUs with unknown links for tests to run on."""
    with pytest.raises(SmiParseError, match="not one GPU pair's cell is a link nvidia-smi prints"):
        parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n")


@pytest.mark.skipif(not (CORPUS / "rocm").is_dir(), reason=NO_CORPUS)
@pytest.mark.parametrize("sample", ["001.txt", "004.txt"])
def test_rocm_smi_output_is_refused_as_amd(sample, pytester):
    """rocm-smi --showtopo output is refused as AMD's, not taken for nvidia-smi text (8 unknown GPUs)."""
    path = CORPUS / "rocm" / sample
    with pytest.raises(SmiParseError, match="this is rocm-smi output \\(AMD GPUs\\)"):
        parse_topo_matrix(path.read_text())
    pytester.makepyfile(test_x="def test_x(): pass\n")
    copy = pytester.path / "amd.txt"
    copy.write_text(path.read_text())
    result = pytester.runpytest("--gputopo-machine", str(copy))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*amd.txt: this is rocm-smi output (AMD GPUs)*"])


def test_asymmetric_cells_warn_and_take_the_worse():
    smi = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tPHB\t X \n")
    assert "GPU0-GPU1 reads NV4 one way and PHB the other" in smi.warnings
    assert to_topology(smi).link(0, 1).pcie is model.LinkClass.PHB


def test_mangled_headers():
    glued = (
        "\t    GPU0GPU1mlx5_0mlx5_1\tCPU Affinity\nGPU0\t X \tNV1\tPIX\tSOC\t0-1\nGPU1\tNV1\t X \tSOC\tPIX\t2-3\n"
        "mlx5_0\tPIX\tSOC\t X \tSOC\nmlx5_1\tSOC\tPIX\tSOC\t X\n"
    )
    smi = parse_topo_matrix(glued)
    assert smi.nics == ("mlx5_0", "mlx5_1") and smi.gpu_nic == (("PIX", "SYS"), ("SYS", "PIX"))
    assert smi.gpus[1].cpu_affinity == "2-3" and smi.warnings == ()
    lost_spaces = parse_topo_matrix(FOUR.replace("CPU Affinity", "CPUAffinity").replace("GPU NUMA ID", "gpu numa id"))
    assert lost_spaces.gpus == parse_topo_matrix(FOUR).gpus and lost_spaces.warnings == ()
    headless = parse_topo_matrix("\n".join(FOUR.splitlines()[1:]))
    assert headless.matrix == parse_topo_matrix(FOUR).matrix and headless.gpus[0].cpu_affinity is None
    assert headless.warnings[0].startswith("no header line")


def test_duplicate_rows_and_headers_are_ignored():
    lines = FOUR.splitlines()
    smi = parse_topo_matrix("\n".join([lines[0], lines[1], lines[0], lines[1].replace("NV4", "PIX")] + lines[2:]))
    assert smi.matrix == parse_topo_matrix(FOUR).matrix
    assert "duplicate row for GPU0 ignored" in smi.warnings


def test_a_blank_affinity_in_pasted_text_is_found_at_its_tab_stop():
    """A Slurm job's cpuset leaves some GPUs' CPU Affinity empty; pasted from a
    terminal (tabs expanded), the empty cell vanishes, yet every row's NUMA value sits at the same
    tab stop. Read by tab stops: the same facts as the tab-separated text."""
    tabbed = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV4\tNODE\t0-7\t0\t\tN/A\nGPU1\tNV4\t X \tSYS\t\t1\t\tN/A\n"
        "NIC0\tNODE\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    for text in (tabbed, tabbed.expandtabs(), "".join("    " + ln for ln in tabbed.expandtabs().splitlines(True))):
        smi = parse_topo_matrix(text)
        assert smi.gpus[0] == smi.gpus[0].__class__("GPU0", "0-7", "0", "N/A")
        assert smi.gpus[1] == smi.gpus[1].__class__("GPU1", None, "1", "N/A")
        assert smi.gpu_nic == (("NODE",), ("SYS",)) and smi.warnings == ()


def _wide(nics: int = 40) -> str:
    """Two GPUs and ``nics`` NICs as nvidia-smi writes them: GPU0 near NIC0..19, GPU1 near the rest."""
    near = lambda g, j: "PIX" if (j < nics // 2) == (g == 0) else "SYS"  # noqa: E731
    head = (
        "\t"
        + "\t".join(["GPU0", "GPU1"] + [f"NIC{j}" for j in range(nics)])
        + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    )
    rows = [
        f"GPU{g}\t"
        + "\t".join([" X " if g == 0 else "NV18", "NV18" if g == 0 else " X "] + [near(g, j) for j in range(nics)])
        + f"\t{g * 32}-{g * 32 + 31}\t{g}\t\tN/A"
        for g in (0, 1)
    ]
    rows += [
        f"NIC{j}\t{near(0, j)}\t{near(1, j)}\t" + "\t".join(" X " if i == j else "NODE" for i in range(nics))
        for j in range(nics)
    ]
    return "\n".join([head] + rows) + "\n\nNIC Legend:\n\n" + "".join(f"  NIC{j}: mlx5_{j}\n" for j in range(nics))


def test_cells_nvidia_smi_ran_together_are_split_where_they_read_one_way():
    """Past about 32 NICs nvidia-smi's own column overflow runs cells together
    (``NODENODE``, ``SYSSYS``, an affinity fused to the last NIC cell). Each reads one way only:
    the facts are those of the clean text, none shifted by a column."""
    clean = parse_topo_matrix(_wide())
    text = _wide().replace("SYS\tSYS\t", "SYSSYS\t", 1).replace("NODE\tNODE", "NODENODE", 3)
    text = text.replace("PIX\t32-63", "PIX32-63")  # GPU1's last NIC cell run into its CPU Affinity
    smi = parse_topo_matrix(text)
    assert text.count("NODENODE") == 3 and "SYSSYS" in text and "PIX32-63" in text
    assert (smi.matrix, smi.gpu_nic, smi.gpus, smi.nics) == (clean.matrix, clean.gpu_nic, clean.gpus, clean.nics)
    assert smi.warnings == ()


def test_a_run_together_cell_that_reads_two_ways_leaves_the_rest_of_its_row_unknown():
    """``NV120-23`` is NV12 then 0-23, or NV1 then 20-23: neither is taken. The other way round the
    matrix (GPU1's row) still says GPU0-GPU1 is NV12."""
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV120-23\t0\t\tN/A\nGPU1\tNV12\t X \t24-47\t1\t\tN/A\n"
    )
    smi = parse_topo_matrix(text)
    assert smi.matrix == (("X", "NV12"), ("NV12", "X"))
    assert smi.gpus[0] == smi.gpus[0].__class__("GPU0") and smi.gpus[1].numa_affinity == "1"
    assert any("reads as cells run together in 2 ways" in w for w in smi.warnings)


def test_a_blank_affinity_run_into_its_neighbour_is_unknown_never_moved():
    """A Slurm job's blank CPU Affinity whose tab was lost: the NUMA value would read as the CPU
    Affinity. The row has a field fewer than nvidia-smi writes, so its values are unknown."""
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV4\t0-7\t0\t\tN/A\nGPU1\tNV4\t X \t1\t\tN/A\n"
    )
    for t in (text, text.expandtabs()):
        smi = parse_topo_matrix(t)
        assert smi.gpus[0] == smi.gpus[0].__class__("GPU0", "0-7", "0", "N/A")
        assert smi.gpus[1] == smi.gpus[1].__class__("GPU1") and smi.matrix[0][1] == "NV4"
        assert any(w.startswith("GPU1: its values after the matrix cannot be placed") for w in smi.warnings)


def test_a_corrupted_nic_legend_names_no_nic_wrongly():
    """Past about 40 NICs nvidia-smi's NIC Legend is corrupted: entries run together, a label given
    twice. A contradicted entry is dropped (the NIC keeps its label), with a warning; entries that
    run together are still read."""
    text = (
        _wide(42).split("NIC Legend:")[0]
        + "NIC Legend:\n\n"
        + "".join(f"  NIC{j}: mlx5_{j}\n" for j in range(40))
        + "  NIC40: mlx5_40NIC41: mlx5_41\n  NIC7: mlx5_77\n  NIC50: mlx5_50\n"
    )
    smi = parse_topo_matrix(text)
    assert smi.nics[:7] == tuple(f"mlx5_{j}" for j in range(7)) and smi.nics[7] == "NIC7"
    assert smi.nics[40:] == ("mlx5_40", "mlx5_41")
    assert "NIC Legend names NIC7 mlx5_7 and mlx5_77; its name is unknown" in smi.warnings
    assert "NIC Legend names NIC50, which the matrix does not have" in smi.warnings


def test_an_nvlink_count_no_gpu_has_is_no_fact():
    """A GPU has at most NVML_NVLINK_MAX_LINKS (36 in nvidia-ml-py 13's pynvml.py) NVLinks, so no
    pair has more: ``NV99999999999999999999`` is an unreadable cell, not a fact."""
    text = FOUR.replace("GPU0\t X \tNV4", "GPU0\t X \tNV99999999999999999999")
    smi = parse_topo_matrix(text)
    assert smi.matrix[0][1] == "NV4"  # from GPU1's row
    assert any("unreadable cell 'NV99999999999999999999'" in w for w in smi.warnings)
    assert parse_topo_matrix(FOUR.replace("NV4", "NV37")).matrix[0][1] == "?"


def test_space_aligned_rows_off_the_tab_stops_leave_a_blank_affinity_unknown():
    text = "GPU0 GPU1 CPU Affinity NUMA Affinity GPU NUMA ID\nGPU0 X NV4 0-7 0 N/A\nGPU1 NV4 X 1 N/A\n"
    smi = parse_topo_matrix(text)
    assert smi.gpus[0] == smi.gpus[0].__class__("GPU0", "0-7", "0", "N/A")
    assert smi.gpus[1] == smi.gpus[1].__class__("GPU1")
    assert any(w.startswith("GPU1: its values after the matrix cannot be placed") for w in smi.warnings)


# ---------------------------------------------------------------------------------------------
# topo -p2p


def test_p2p_reference_sample():
    assert parse_p2p_matrix(P2P_SAMPLE) == (("X", "GNS"), ("GNS", "X"))


def test_p2p_into_the_topology_takes_the_worse_direction():
    smi = parse_topo_matrix(FOUR)
    read = ((" X", "OK", "OK", "OK"), ("CNS", "X", "OK", "OK"), ("OK", "OK", "X", "U"), ("OK", "OK", "OK", "X"))
    topo = to_topology(smi, {"read": read, "write": ((),)})
    assert topo.link(0, 1).p2p.read is model.P2PStatus.CHIPSET_NOT_SUPPORTED
    assert topo.link(0, 2).p2p.read is model.P2PStatus.OK
    assert topo.link(2, 3).p2p.read is model.P2PStatus.UNKNOWN
    assert topo.link(0, 1).p2p.write is model.P2PStatus.UNKNOWN and "P2P write matrix has no GPU1" in topo.warnings
    assert topo.link(0, 1).p2p.atomics is model.P2PStatus.UNKNOWN
    with pytest.raises(ValueError, match="unknown P2P capability"):
        to_topology(smi, {"prop": read})


def test_p2p_parser_refuses_a_topo_matrix():
    with pytest.raises(SmiParseError, match="this is an nvidia-smi topo -m matrix, not nvidia-smi topo -p2p"):
        parse_p2p_matrix(FOUR)


def test_p2p_missing_cells_are_unknown():
    assert parse_p2p_matrix(" \tGPU0\tGPU1\tGPU2\t\n GPU0\tX\tOK\tOK\t\n GPU1\tOK\tX\t\n") == (
        ("X", "OK", "OK"),
        ("OK", "X", "U"),
        ("U", "U", "X"),
    )


# ---------------------------------------------------------------------------------------------
# Text that is not what it claims is refused, naming its line


def _header_only(text: str) -> str:
    """A capture cut after its header line (the first line naming GPU0)."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[: next(i for i, ln in enumerate(lines) if "GPU0" in ln) + 1])


@pytest.mark.parametrize("text", ["GPU0 GPU0\n", "GPU0\tGPU0\n", "\tGPU0\tGPU0\tCPU Affinity\n"])
def test_a_header_naming_a_gpu_twice_is_no_machine(text):
    """The single line `GPU0 GPU0` is no machine (it was read as one GPU, by topo -m with warnings, by
    topo -p2p without). nvidia-smi names each device once in its header, and cells are placed by their
    column, so a second name would put every cell after it one column off."""
    for parse in (parse_topo_matrix, parse_p2p_matrix):
        with pytest.raises(SmiParseError, match="line 1: the header names GPU0 twice"):
            parse(text)


@pytest.mark.parametrize(
    "text", [_header_only(FOUR), _header_only(P2P_SAMPLE), " \tGPU0\t\n", "\tGPU0\tCPU Affinity\n"]
)
def test_a_capture_cut_after_its_header_is_refused(text):
    """The header alone of a real capture (topo -p2p rw of club-3090#1229; the topo -m shape of
    nccl#1505) is a usage error, as docs/options.md promises, not a machine of unknown links (exit 0)."""
    for parse in (parse_topo_matrix, parse_p2p_matrix):
        with pytest.raises(
            SmiParseError, match="line 1: no nvidia-smi .* matrix: the header names GPU0.* and no GPU row follows it"
        ):
            parse(text)


@pytest.mark.skipif(not TOPO.is_dir(), reason=NO_CORPUS)
@pytest.mark.parametrize("path", SAMPLES, ids=_sample_id)
def test_corpus_captures_cut_after_their_header_are_refused(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    with pytest.raises(SmiParseError, match="no nvidia-smi topology matrix"):
        parse_topo_matrix(_header_only(text))


def _rocm_one_gpu(title: bool) -> str:
    """rocm-smi --showtopo's "Link Type" section (corpus rocm/001) of a one-GPU machine: its title, the
    GPU0 column of its header and GPU0's row, `0` on the diagonal as rocm-smi prints it."""
    if (CORPUS / "rocm" / "001.txt").is_file():
        lines = (CORPUS / "rocm" / "001.txt").read_text().splitlines()
        at = next(i for i, ln in enumerate(lines) if "Link Type between two GPUs" in ln)
        section = [lines[at], lines[at + 1][:20], lines[at + 2][:20]]
    else:  # the same lines, as corpus rocm/001 prints them
        section = ["=" * 31 + " Link Type between two GPUs " + "=" * 31, "       GPU0         ", "GPU0   0            "]
    return "\n".join(section[0 if title else 1 :]) + "\n"


@pytest.mark.parametrize("title", [True, False], ids=["with-title", "section-only"])
def test_rocm_smi_one_gpu_link_type_is_no_nvidia_matrix(title):
    """rocm-smi's one-GPU Link Type section is no NVIDIA matrix for smi-p2p (it says 0 where nvidia-smi says X)."""
    text = _rocm_one_gpu(title)
    for parse in (parse_topo_matrix, parse_p2p_matrix):
        with pytest.raises(SmiParseError, match="rocm-smi output" if title else "line 2: .*GPU0's .*own.* is '0'"):
            parse(text)


def test_rocm_smi_diagonal_under_a_gpu_row_is_no_nvidia_matrix():
    """A one-GPU matrix says it is nvidia-smi's only by its own cell: X (nvidia-smi prints X there in
    topo -m and topo -p2p), where rocm-smi prints 0 (corpus rocm/001)."""
    for parse, header in ((parse_topo_matrix, "\tGPU0\tCPU Affinity\n"), (parse_p2p_matrix, " \tGPU0\t\n")):
        with pytest.raises(SmiParseError, match="line 2: .*GPU0's .*own"):
            parse(header + "GPU0\t0\t0-7\n")
    # nvidia-smi's own one-GPU outputs (topo -p2p, topo -m) still read
    assert parse_p2p_matrix(" \tGPU0\t\n GPU0\tX\t\n\nLegend:\n\n  X    = Self\n") == (("X",),)
    assert parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t0\n").matrix == (("X",),)


@pytest.mark.parametrize(
    "row, line, says",
    [
        (
            " GPU1\tX\tGNS\t",
            3,
            "GPU1's cell in column GPU0 is X, which nvidia-smi topo -p2p prints only on the diagonal",
        ),
        (
            " GPU1\tGNS\tOK\t",
            3,
            "GPU1's cell in column GPU1 \\(its own\\) is 'OK', where nvidia-smi topo -p2p prints X",
        ),
    ],
)
def test_p2p_x_off_the_diagonal_or_a_status_on_it_is_refused(row, line, says):
    """OK on the diagonal or X off it is refused, not read without a word. nvidia-smi prints X on the
    diagonal and only there (club-3090#1229; corpus p2pmatrix/001): a row that breaks it has its cells
    out of their columns (a lost tab)."""
    text = P2P_SAMPLE.replace(" GPU1\tGNS\tX\t", row)
    with pytest.raises(SmiParseError, match=f"line {line}: {says}"):
        parse_p2p_matrix(text)


def test_p2p_two_rows_for_one_gpu_are_refused():
    """Two rows for one GPU are refused (the first was kept silently). nvidia-smi writes one row per GPU."""
    text = P2P_SAMPLE.replace(" GPU1\tGNS\tX\t\n", " GPU1\tGNS\tX\t\n GPU1\tOK\tX\t\n")
    with pytest.raises(SmiParseError, match="line 4: a second row for GPU1 \\(the first is line 3\\)"):
        parse_p2p_matrix(text)


# ---------------------------------------------------------------------------------------------
# Property tests

LABELS = ["NV1", "NV2", "NV4", "NV6", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "?"]
AFFINITY = st.one_of(
    st.just(""),
    st.just("N/A"),
    st.from_regex(r"[0-9]{1,3}(-[0-9]{1,3})?(,[0-9]{1,3}(-[0-9]{1,3})?){0,3}", fullmatch=True),
)


@st.composite
def smi_texts(draw):
    """nvidia-smi-style text for a random machine, and the facts it states."""
    n = draw(st.integers(0, 10))
    labels = {(a, b): draw(st.sampled_from(LABELS)) for a in range(n) for b in range(a + 1, n)}
    cpu = [draw(AFFINITY) for _ in range(n)]
    numa = [draw(st.one_of(st.just(""), st.just("N/A"), st.integers(0, 255).map(str), AFFINITY)) for _ in range(n)]
    gpu_numa_id = draw(st.booleans())
    header = "\t" + "".join(f"GPU{i}\t" for i in range(n)) + "CPU Affinity\tNUMA Affinity"
    lines = [header + ("\tGPU NUMA ID" if gpu_numa_id else "")]
    for a in range(n):
        cells = [" X " if a == b else labels[min(a, b), max(a, b)] for b in range(n)]
        lines.append("\t".join([f"GPU{a}", *cells, cpu[a], numa[a]] + (["", "N/A"] if gpu_numa_id else [])))
    text = "\n".join(lines) + "\n"
    return (text.expandtabs() if draw(st.booleans()) else text), labels, cpu, numa


@settings(max_examples=150, deadline=None)
@given(smi_texts())
def test_parse_reads_what_was_written_and_render_round_trips(case):
    text, labels, cpu, numa = case
    if cpu == []:  # a header naming no GPU: no machine
        with pytest.raises(SmiParseError, match="the header names no GPU"):
            parse_topo_matrix(text)
        return
    if labels and all(label == "?" for label in labels.values()):  # not one link: no topology
        with pytest.raises(SmiParseError, match="not one GPU pair's cell is a link"):
            parse_topo_matrix(text)
        return
    topo = to_topology(parse_topo_matrix(text))
    for (a, b), label in labels.items():
        assert topo.link(a, b) == (
            model.Link(a, b, None, None)
            if label == "?"
            else model.Link(a, b, None, int(label[2:]))
            if label.startswith("NV")
            else model.Link(a, b, model.LinkClass.from_name(label), 0)
        )
    cpu_read, numa_read = [g.cpu_affinity for g in topo.gpus], [g.numa_node for g in topo.gpus]
    cpu_written, numa_written = [c or None for c in cpu], [int(x) if x.isdigit() else None for x in numa]
    if "\t" in text or "GPU NUMA ID" in text or all(numa):
        assert (cpu_read, numa_read) == (cpu_written, numa_written)
    else:  # pasted, and a row's last values blank: where the others belong is unknown, never guessed
        assert all(r in (w, None) for r, w in zip(cpu_read + numa_read, cpu_written + numa_written, strict=True))
    again = to_topology(parse_topo_matrix(render_topo_matrix(topo)))
    assert again.gpus == topo.gpus and again.links == topo.links


LINKS = ["NV1", "NV2", "NV4", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]
PCIE = ["PIX", "PXB", "PHB", "NODE", "SYS"]


@st.composite
def damaged_smi_texts(draw):
    """A machine with NICs as nvidia-smi writes it (tab-separated, GPU NUMA ID after an empty field,
    NIC Legend), some CPU Affinity cells blank as in a Slurm job; then damaged as nvidia-smi's column
    overflow and pasting damage it: tabs lost between cells (``NODENODE``, an affinity run into a NIC
    cell), tabs expanded to spaces, the block indented."""
    n, k = draw(st.integers(1, 6)), draw(st.integers(0, 5))
    devs = [f"GPU{i}" for i in range(n)] + [f"NIC{j}" for j in range(k)]
    label = {}
    for a in range(len(devs)):
        for b in range(a + 1, len(devs)):
            label[devs[a], devs[b]] = label[devs[b], devs[a]] = draw(st.sampled_from(LINKS if b < n else PCIE))
    cpu = [draw(AFFINITY) for _ in range(n)]
    numa = [draw(st.one_of(st.just("N/A"), st.integers(0, 7).map(str))) for _ in range(n)]
    rows = [["", *devs, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]]
    for i, d in enumerate(devs):
        cells = [" X " if d == e else label[d, e] for e in devs]
        rows.append([d, *cells] + ([cpu[i], numa[i], "", "N/A"] if i < n else []))
    lines = ["\t".join(r) for r in rows]
    for _ in range(draw(st.integers(0, 3))):  # a tab lost between two fields of a row
        i = draw(st.integers(1, len(lines) - 1))
        tabs = [m.start() for m in re.finditer("\t", lines[i])][1:]  # never the one after the label
        if tabs:
            t = draw(st.sampled_from(tabs))
            lines[i] = lines[i][:t] + lines[i][t + 1 :]
    text = "\n".join(lines) + "\n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n"
    text += "".join(f"  NIC{j}: mlx5_{j}\n" for j in range(k))
    if draw(st.booleans()):
        text = text.expandtabs()
        if draw(st.booleans()):
            text = "".join("    " + line for line in text.splitlines(True))
    return text, n, k, label, cpu, numa


@settings(max_examples=400, deadline=None)
@given(damaged_smi_texts())
def test_cells_run_together_or_blank_read_as_the_same_facts_or_unknown(case):
    """Whatever the damage, every fact read is the fact written, or unknown."""
    text, n, k, label, cpu, numa = case
    try:
        smi = parse_topo_matrix(text)
    except SmiParseError as exc:  # every GPU pair's cell lost: no topology, said so
        assert "not one GPU pair's cell is a link" in str(exc)
        return
    assert len(smi.gpus) == n and len(smi.nics) == k
    for a in range(n):
        for b in range(n):
            if a != b:
                assert smi.matrix[a][b] in (label[f"GPU{a}", f"GPU{b}"], "?"), (a, b, smi.warnings)
        for j in range(k):
            assert smi.gpu_nic[a][j] in (label[f"GPU{a}", f"NIC{j}"], "?"), (a, j, smi.warnings)
        g = smi.gpus[a]
        assert g.cpu_affinity in (cpu[a] or None, None) and g.numa_affinity in (numa[a], None), (g, smi.warnings)
        assert g.gpu_numa_id in ("N/A", None)
    assert all(name in (f"mlx5_{j}", f"NIC{j}") for j, name in enumerate(smi.nics))
    if "?" in {x for row in smi.matrix + smi.gpu_nic for x in row}:
        assert smi.warnings


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 10).flatmap(
        lambda n: st.lists(
            st.lists(st.sampled_from([s.value for s in model.P2PStatus]), min_size=n, max_size=n),
            min_size=n,
            max_size=n,
        )
    )
)
def test_p2p_render_round_trip(cells):
    n = len(cells)
    matrix = tuple(tuple("X" if a == b else cells[a][b] for b in range(n)) for a in range(n))
    smi = parse_topo_matrix(
        "\t"
        + "\t".join(f"GPU{i}" for i in range(n))
        + "\n"
        + "\n".join(f"GPU{a}\t" + "\t".join(" X " if a == b else "SYS" for b in range(n)) for a in range(n))
    )
    topo = to_topology(smi, {"write": matrix})
    assert parse_p2p_matrix(render_p2p_matrix(topo, "write")) == tuple(
        tuple("X" if a == b else topo.link(a, b).p2p.write.value for b in range(n)) for a in range(n)
    )
    text = (
        " \t"
        + "".join(f"GPU{i}\t" for i in range(n))
        + "\n"
        + "\n".join(f" GPU{a}\t" + "".join(f"{c}\t" for c in matrix[a]) for a in range(n))
    )
    assert parse_p2p_matrix(text) == matrix


def _check_shape(smi: SmiTopo) -> None:
    n = len(smi.gpus)
    assert len(smi.matrix) == n and all(len(row) == n for row in smi.matrix)
    assert all(smi.matrix[i][i] == "X" for i in range(n))
    assert len(smi.gpu_nic) == n and all(len(row) == len(smi.nics) for row in smi.gpu_nic)
    render_topo_matrix(to_topology(smi))


def _parse_or_refuse(text: str) -> None:
    try:
        _check_shape(parse_topo_matrix(text))
    except SmiParseError as exc:
        assert "\n" not in str(exc)
    try:
        matrix = parse_p2p_matrix(text)
        assert all(len(row) == len(matrix) for row in matrix)
    except SmiParseError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises_anything_else(text):
    _parse_or_refuse(text)


SEEDS = [p.read_text(encoding="utf-8", errors="replace") for p in SAMPLES] + [FOUR, P2P_SAMPLE]


@st.composite
def damaged(draw):
    lines = draw(st.sampled_from(SEEDS)).splitlines(keepends=True)
    for _ in range(draw(st.integers(0, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "replace", "cut"]))
        if action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(draw(st.integers(0, len(lines))), lines[i])
        elif action == "replace" and lines[i]:
            j = draw(st.integers(0, len(lines[i]) - 1))
            lines[i] = (
                lines[i][:j] + draw(st.sampled_from(["\t", " ", "\n", "X", "N", "0", "G", "", "é"])) + lines[i][j + 1 :]
            )
        elif action == "cut":
            lines = lines[:i] + [lines[i][: draw(st.integers(0, len(lines[i])))]]
    return "".join(lines)


@settings(max_examples=300, deadline=None)
@given(damaged())
def test_damaged_real_samples_never_raise_anything_else(text):
    _parse_or_refuse(text)
