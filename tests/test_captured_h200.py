"""nvidia-smi's own outputs from a real H200 host (tests/captured/h200-driver-580, captured verbatim by
dev/gpu-check): each parser reads them as that host is, and a machine recorded from them is that host.

Facts of the format seen there and nowhere in published samples: nvidia-smi 580 underlines the topo
header with terminal codes even when writing to a file; one GPU's row has no pair cell; ``nvlink -s``
prints nothing on a GPU without NVLink; ``-q -x`` has no compute capability."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli
from pytest_gputopo.parse.nvlink_status import NvlinkStatusParseError, parse_nvlink_status
from pytest_gputopo.parse.smi_list import parse_smi_list
from pytest_gputopo.parse.smi_machine import parse_p2p_matrix
from pytest_gputopo.parse.smi_query import SmiQueryParseError, parse_smi_query
from pytest_gputopo.parse.smi_topo import parse_topo_matrix
from pytest_gputopo.parse.smi_xml import parse_smi_xml

HERE = Path(__file__).parent / "captured" / "h200-driver-580"
UUID = "GPU-aba6f9c0-61d7-d4a0-4f12-e8367d00f3f9"


def text(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def test_the_underlined_header_of_topo_m_is_read_as_a_terminal_shows_it():
    assert "\x1b[4m" in text("topo-m.txt")
    topo = parse_topo_matrix(text("topo-m.txt"))
    assert [g.name for g in topo.gpus] == ["GPU0"] and topo.matrix == (("X",),)
    assert (topo.gpus[0].cpu_affinity, topo.gpus[0].numa_affinity) == ("0-15", "0")
    assert parse_p2p_matrix(text("topo-p2p-r.txt")) == (("X",),) == parse_p2p_matrix(text("topo-p2p-w.txt"))


def test_the_listings_name_the_same_gpu():
    xml, query, listed = (
        parse_smi_xml(text("query.xml")),
        parse_smi_query(text("query.csv")),
        parse_smi_list(text("list.txt")),
    )
    for listing in (xml, query, listed):
        (gpu,) = listing.gpus
        assert (gpu.index, gpu.name, gpu.uuid) == (0, "NVIDIA H200", UUID)
    for listing in (xml, query):
        (gpu,) = listing.gpus
        assert gpu.pci_bus_id == "00000000:00:06.0" and gpu.memory_total_bytes == 143771 * 2**20
        assert (gpu.pcie_gen_max, gpu.pcie_width_max) == (5, 16)
    assert (xml.driver_version, xml.cuda_driver_version, xml.attached) == ("580.159.04", "13.0", 1)
    assert query.gpus[0].compute_capability == "9.0" and query.driver_version == "580.159.04"


def test_noheader_csv_is_refused_with_the_flag_to_use():
    with pytest.raises(SmiQueryParseError, match=r"--format=csv,noheader.*run it with --format=csv"):
        parse_smi_query(text("query-noheader.csv"))


def test_an_empty_nvlink_status_says_why_it_has_nothing_to_read():
    with pytest.raises(NvlinkStatusParseError, match=r"empty: nvidia-smi nvlink -s prints nothing where no GPU"):
        parse_nvlink_status("")


def test_a_machine_recorded_from_the_captures_is_that_host(tmp_path, capsys):
    profile = tmp_path / "h200.json"
    code, out, err = run_cli(
        capsys, "record", "-o", profile, "--from-smi", HERE / "topo-m.txt", "--smi-query", HERE / "query.xml"
    )
    assert code == 0, err
    code, out, err = run_cli(capsys, "show", "--machine", profile)
    assert code == 0, err
    assert "1x NVIDIA H200" in out and "150.8 GB" in out and "PCIe Gen5 x16" in out


def test_what_the_docs_call_that_machine_is_what_its_own_capture_says():
    """Issue 32: it was called "an H200 on PCIe"; its -q -x says PCI device 10de:2335 (the PCI ID
    Repository's "GH100 [H200 SXM 141GB]", pci-ids.ucw.cz/read/PC/10de/2335) passed through to a VM."""
    xml = text("query.xml")
    assert "<pci_device_id>233510DE</pci_device_id>" in xml
    assert "<virtualization_mode>Pass-Through</virtualization_mode>" in xml
    performance = (HERE.parents[2] / "docs" / "performance.md").read_text(encoding="utf-8")
    for doc in (text("README.md"), performance):
        flat = " ".join(doc.split())
        assert "H200 on PCIe" not in flat and "H200 (PCIe" not in flat
        assert "H200 SXM 141GB" in flat and "10de:2335" in flat and "virtual machine" in flat
