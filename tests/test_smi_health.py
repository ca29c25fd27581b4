"""A GPU's health at rest as nvidia-smi's reports print it (issue 44): ``-q`` (``parse.smi_q``) and
``-q -x`` (``parse.smi_xml``) read into ``GpuHealth`` as the NVML reader holds it
and judged by ``core.health``. The facts each real sample must yield were read off its text by hand
(tests/smi_q/SOURCES.md names each sample's source; tests/captured/h200-driver-580/README.md the H200's):
the three shapes of ECC counters drivers print (V100 470's Double Bit totals, A16 470's and H100 545's
SRAM/DRAM Uncorrectable, H100 565's and A10 550's SRAM Parity/SEC-DED split), the A100-and-later row
remapper, the V100's page retirement, Clocks Event and its older name Clocks Throttle Reasons. A changed
sample (a counter, a flag, a malformed value) is the real text with that one line changed."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from conftest import node_profile, record_node, run_cli as run
from pytest_gputopo.core import faults, health, model, schema
from pytest_gputopo.parse.smi_q import parse_smi_q
from pytest_gputopo.parse.smi_topo import parse_topo_matrix
from pytest_gputopo.parse.smi_xml import parse_smi_xml
from pytest_gputopo.parse.text_machine import TextMachine
from pytest_gputopo.probe import probe
from test_text_machine import joined

HERE = Path(__file__).parent
SMI_Q = HERE / "smi_q"
H200 = HERE / "captured" / "h200-driver-580"


def sample(name: str) -> str:
    return (SMI_Q / name).read_text(encoding="utf-8")


def h200_xml() -> str:
    return (H200 / "query.xml").read_text(encoding="utf-8")


def changed(text: str, old: str, new: str, *after: str) -> str:
    """``text`` with its first ``old`` made ``new``: the first after each of ``after`` in turn (a GPU's
    header, then a section's title: that GPU's line in that section)."""
    start = 0
    for mark in after:
        start = text.index(mark, start)
    at = text.index(old, start)
    return text[:at] + new + text[at + len(old) :]


def pad(key: str, value: str, indent: int = 8) -> str:
    """A ``-q`` line as nvidia-smi pads it: the key to column 42, then ``: value``."""
    return " " * indent + key.ljust(38 - indent + 4) + ": " + value


# (ECC volatile, aggregate, remap pending, failed, retirement pending, clocks mask, persistence, VBIOS, InfoROM)
H100_565 = (0, 0, False, False, None, 0x1, True, "96.00.74.00.01", "G520.0200.00.05")
SAMPLES = [
    # 550+ split SRAM counters, summed with DRAM's; Retired Pages N/A (Hopper remaps rows instead); idle.
    ("hgx-h100-x8-565.txt", [H100_565] * 8),
    # 545 on Hopper: SRAM Uncorrectable + DRAM Uncorrectable.
    ("hgx-h100-545.txt", [(0, 0, False, False, None, 0x1, True, "96.00.74.00.0D", "G520.0200.00.05")]),
    # An A10 at P8 with SW Power Cap Active (0x4), the split counters of 550.
    ("a10-550-passthrough.txt", [(0, 0, False, False, None, 0x4, True, "94.02.5C.00.04", "G133.0215.00.06")]),
    # 470 on Ampere: SRAM/DRAM Uncorrectable, and the older name "Clocks Throttle Reasons".
    ("a16-vgpu-host-470-i0.txt", [(0, 0, False, False, None, 0x1, True, "94.07.54.00.01", "G171.0200.00.04")]),
    # Volta: Double Bit totals (0; the aggregate's 3 single-bit errors are corrected ones, not counted),
    # no row remapper ("Remapped Rows : N/A"), page retirement No.
    ("v100-pcie-470-i1.txt", [(0, 0, None, None, False, 0x1, True, "88.00.7E.00.03", "G500.0202.00.02")]),
    # ECC disabled on GeForce: every counter N/A, so both sums unknown; the row remapper still answers.
    ("rtx4090-x8-550.txt", [(None, None, False, False, None, 0x1, True, "95.02.3C.00.EB", "G002.0000.00.03")] * 8),
    # A vGPU guest cut after its licence: persistence and the VBIOS a vGPU reports, InfoROM N/A.
    ("grid-a100-4c-vgpu-guest-510-cut.txt", [(None,) * 6 + (True, "00.00.00.00.00", None)]),
    # Elided after Minor Number, and cut there: persistence only (Disabled).
    ("titan-rtx-titan-v-418-elided.txt", [(None,) * 6 + (False, None, None)] * 2),
]


def facts(h: model.GpuHealth | None) -> tuple:
    return tuple(getattr(h, f.name) for f in dataclasses.fields(model.GpuHealth))


@pytest.mark.parametrize("name, expected", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_each_real_q_sample_yields_its_health_facts(name, expected):
    listing = parse_smi_q(sample(name))
    assert [facts(g.health) for g in listing.gpus] == expected
    assert not [w for w in listing.warnings if "not read" in w and "paste" not in w]


def test_the_real_h200_q_x_yields_its_health_facts():
    """Driver 580's -q -x: the split counters, <pending_blacklist> and <pending_retirement> both N/A,
    <clocks_event_reasons> with GPU idle Active."""
    listing = parse_smi_xml(h200_xml())
    assert [facts(g.health) for g in listing.gpus] == [
        (0, 0, False, False, None, 0x1, True, "96.00.A5.00.1A", "G520.0282.02.02")
    ]
    assert listing.warnings == ()


# ------------------------------------------------------------------------------ each shape's counters


def test_volta_counts_double_bit_totals_and_not_single_bit_ones():
    text = sample("v100-pcie-470-i1.txt")
    text = changed(text, pad("Total", "0", 16), pad("Total", "4", 16), "Double Bit")
    h = parse_smi_q(text).gpus[0].health
    assert (h.ecc_uncorrected_volatile, h.ecc_uncorrected_aggregate) == (4, 0)


def test_split_sram_counters_are_summed_with_dram_and_the_sources_breakdown_is_not():
    """GPU3's volatile Parity 1 + SEC-DED 5 + DRAM 2; its aggregate's sources breakdown (SRAM L2 5) is a
    breakdown of the aggregate SRAM counters (still 0 here), not more errors."""
    text = sample("hgx-h100-x8-565.txt")
    gpu3 = "GPU 00000000:5D:00.0"
    for key, value in (
        ("SRAM Uncorrectable Parity", "1"),
        ("SRAM Uncorrectable SEC-DED", "5"),
        ("DRAM Uncorrectable", "2"),
    ):
        text = changed(text, pad(key, "0", 12), pad(key, value, 12), gpu3, "Volatile")
    text = changed(text, pad("SRAM L2", "0", 12), pad("SRAM L2", "5", 12), gpu3, "Aggregate Uncorrectable SRAM Sources")
    gpus = parse_smi_q(text).gpus
    assert (gpus[3].health.ecc_uncorrected_volatile, gpus[3].health.ecc_uncorrected_aggregate) == (8, 0)
    assert all(facts(g.health) == H100_565 for i, g in enumerate(gpus) if i != 3)


def test_sram_and_dram_uncorrectable_of_470_545_are_summed():
    text = changed(sample("hgx-h100-545.txt"), pad("DRAM Uncorrectable", "0", 12), pad("DRAM Uncorrectable", "3", 12))
    h = parse_smi_q(text).gpus[0].health
    assert (h.ecc_uncorrected_volatile, h.ecc_uncorrected_aggregate) == (3, 0)


def test_one_counter_n_a_or_missing_leaves_the_sum_unknown_never_a_partial_one():
    line = pad("SRAM Uncorrectable Parity", "0", 12)
    na = parse_smi_q(changed(sample("hgx-h100-x8-565.txt"), line, pad("SRAM Uncorrectable Parity", "N/A", 12)))
    assert (na.gpus[0].health.ecc_uncorrected_volatile, na.gpus[0].health.ecc_uncorrected_aggregate) == (None, 0)
    gone = parse_smi_q(changed(sample("hgx-h100-545.txt"), pad("DRAM Uncorrectable", "0", 12) + "\n", ""))
    assert gone.gpus[0].health.ecc_uncorrected_volatile is None


# ------------------------------------------------------------------------------ the flags


def test_a_row_remapping_pending_or_failed_is_read_on_its_gpu_and_judged_a_fault():
    text = sample("hgx-h100-x8-565.txt")
    gpu3 = "GPU 00000000:5D:00.0"
    text = changed(text, pad("Pending", "No"), pad("Pending", "Yes"), gpu3)
    text = changed(text, pad("Remapping Failure Occurred", "No"), pad("Remapping Failure Occurred", "Yes"), gpu3)
    gpus = parse_smi_q(text).gpus
    assert (gpus[3].health.remapped_rows_pending, gpus[3].health.remapping_failed) == (True, True)
    assert all(not g.health.remapped_rows_pending for i, g in enumerate(gpus) if i != 3)


def test_the_v100s_pending_page_blacklist_is_pages_pending_retirement():
    line = pad("Pending Page Blacklist", "No")
    text = changed(sample("v100-pcie-470-i1.txt"), line, pad("Pending Page Blacklist", "Yes"))
    assert parse_smi_q(text).gpus[0].health.retired_pages_pending is True
    older = text.replace(pad("Pending Page Blacklist", "Yes"), pad("Pending", "Yes"))  # the oldest drivers' name
    assert parse_smi_q(older).gpus[0].health.retired_pages_pending is True


def test_q_x_pending_retirement_and_pending_blacklist_are_one_fact():
    both = (
        h200_xml()
        .replace("<pending_blacklist>N/A<", "<pending_blacklist>Yes<")
        .replace("<pending_retirement>N/A<", "<pending_retirement>Yes<")
    )
    assert parse_smi_xml(both).gpus[0].health.retired_pages_pending is True
    one = h200_xml().replace("<pending_retirement>N/A<", "<pending_retirement>No<")
    assert parse_smi_xml(one).gpus[0].health.retired_pages_pending is False
    odd = parse_smi_xml(both.replace("<pending_blacklist>Yes<", "<pending_blacklist>No<"))
    assert odd.gpus[0].health.retired_pages_pending is None
    assert any("disagree on pages pending retirement" in w for w in odd.warnings)


def test_clocks_reasons_nested_under_hw_slowdown_are_read_as_nvmls_bits():
    """HW Thermal Slowdown is printed indented under HW Slowdown (a fact): read as its own line."""
    text = changed(sample("a10-550-passthrough.txt"), pad("HW Slowdown", "Not Active"), pad("HW Slowdown", "Active"))
    text = changed(text, pad("HW Thermal Slowdown", "Not Active", 12), pad("HW Thermal Slowdown", "Active", 12))
    h = parse_smi_q(text).gpus[0].health
    assert h.clocks_event_reasons == 0x4 | 0x8 | 0x40
    t = model.Topology(gpus=(model.Gpu(index=0, name="NVIDIA A10", health=h),))
    assert [(f.code, f.severity) for f in health.findings(t, t.gpus[0])] == [("clocks_hw_thermal", "fault")]


def test_the_older_clocks_throttle_reasons_of_q_x_read_alike():
    """Drivers before 535 name the section and its elements clocks_throttle_reason(s) (nvidia-ml-py's
    nvidia_smi.py writes them so): the H200's, renamed, with SW Thermal Slowdown Active."""
    older = h200_xml().replace("clocks_event_reason", "clocks_throttle_reason")
    tag = "clocks_throttle_reason_sw_thermal_slowdown"
    older = older.replace(f"<{tag}>Not Active<", f"<{tag}>Active<")
    assert parse_smi_xml(older).gpus[0].health.clocks_event_reasons == 0x1 | 0x20


@pytest.mark.parametrize(
    "old, new",
    [
        (pad("Display Clock Setting", "Not Active") + "\n", ""),  # a reason not printed: its bit unknown
        (pad("Sync Boost", "Not Active"), pad("Sync Boost", "N/A")),
        (pad("SW Power Cap", "Not Active"), pad("SW Power Cap", "[Not Supported]")),
    ],
)
def test_a_clocks_mask_is_known_only_where_every_reason_is_read(old, new):
    listing = parse_smi_q(changed(sample("v100-pcie-470-i1.txt"), old, new))
    assert listing.gpus[0].health.clocks_event_reasons is None
    assert not any("Clocks" in w for w in listing.warnings)  # unknown, not malformed


# ------------------------------------------------------------------------------ unknown and malformed


@pytest.mark.parametrize("word", ["N/A", "[N/A]", "[Not Supported]", "Unknown Error", "[Insufficient Permissions]"])
def test_nvidia_smis_words_for_no_value_are_unknown_without_a_note(word):
    text = changed(sample("hgx-h100-545.txt"), pad("Persistence Mode", "Enabled", 4), pad("Persistence Mode", word, 4))
    listing = parse_smi_q(text)
    assert listing.gpus[0].health.persistence_mode is None and listing.warnings == ()
    xml = parse_smi_xml(h200_xml().replace("<persistence_mode>Enabled<", f"<persistence_mode>{word}<"))
    assert xml.gpus[0].health.persistence_mode is None and xml.warnings == ()


@pytest.mark.parametrize(
    "old, new, field, note",
    [
        (
            pad("Persistence Mode", "Enabled", 4),
            pad("Persistence Mode", "Maybe", 4),
            "persistence_mode",
            "line 13: Persistence Mode 'Maybe' is not Enabled or Disabled; not read",
        ),
        (
            pad("DRAM Uncorrectable", "0", 12),
            pad("DRAM Uncorrectable", "-1", 12),
            "ecc_uncorrected_volatile",
            "line 129: ECC Errors/Volatile/DRAM Uncorrectable '-1' is not a count of errors; not read",
        ),
        (
            pad("Pending", "No"),
            pad("Pending", "Soon"),
            "remapped_rows_pending",
            "line 142: Remapped Rows/Pending 'Soon' is not Yes or No; not read",
        ),
        (
            pad("Idle", "Active"),
            pad("Idle", "Resting"),
            "clocks_event_reasons",
            "line 83: Clocks Event Reasons/Idle 'Resting' is not Active or Not Active; not read",
        ),
        (
            pad("VBIOS Version", "96.00.74.00.0D", 4),
            pad("VBIOS Version", "9" * 65, 4),
            "vbios_version",
            "line 26: VBIOS Version '" + "9" * 48 + "' is not a version (1 to 64 printable characters); not read",
        ),
        (
            pad("Image Version", "G520.0200.00.05"),
            pad("Image Version", "G520\x07"),
            "inforom_version",
            "line 34: Inforom Version/Image Version 'G520\\x07' is not a version (1 to 64 printable "
            "characters); not read",
        ),
    ],
)
def test_a_malformed_value_is_a_note_naming_its_line_and_the_fact_unknown(old, new, field, note):
    listing = parse_smi_q(changed(sample("hgx-h100-545.txt"), old, new))
    before = parse_smi_q(sample("hgx-h100-545.txt")).gpus[0].health
    assert listing.gpus[0].health == dataclasses.replace(before, **{field: None})  # that fact only
    assert listing.warnings == (note,)


def test_a_malformed_q_x_value_is_a_note_naming_its_element():
    text = h200_xml().replace("<remapped_row_failure>No<", "<remapped_row_failure>Sometimes<")
    text = text.replace("<dram_uncorrectable>0<", "<dram_uncorrectable>0x10<", 1)
    listing = parse_smi_xml(text)
    h = listing.gpus[0].health
    assert (h.remapping_failed, h.ecc_uncorrected_volatile, h.ecc_uncorrected_aggregate) == (None, None, 0)
    where = "<gpu id='00000000:00:06.0'>"
    assert listing.warnings == (
        f"{where}: ecc_errors/volatile/dram_uncorrectable '0x10' is not a count of errors; not read",
        f"{where}: remapped_rows/remapped_row_failure 'Sometimes' is not Yes or No; not read",
    )


def test_a_report_that_says_nothing_of_health_has_none():
    text = re.sub(r"<persistence_mode>.*?</persistence_mode>", "", h200_xml())
    for tag in ("ecc_errors", "retired_pages", "remapped_rows", "clocks_event_reasons", "inforom_version"):
        text = re.sub(rf"<{tag}>.*?</{tag}>", "", text, flags=re.S)
    text = text.replace("<vbios_version>96.00.A5.00.1A</vbios_version>", "")
    assert parse_smi_xml(text).gpus[0].health is None


def test_parse_prints_and_serialises_the_health_it_read(capsys):
    code, out, err = run(capsys, "parse", "smi-q", SMI_Q / "v100-pcie-470-i1.txt")
    assert code == 0, err
    assert (
        "health: ECC uncorrectable 0 volatile/0 aggregate, row remap pending ? failed ?, page retirement pending "
        "no, clocks events 0x1, persistence on, VBIOS 88.00.7E.00.03, InfoROM G500.0202.00.02"
    ) in out
    code, out, err = run(capsys, "parse", "smi-xml", H200 / "query.xml", "--json")
    assert json.loads(out)["gpus"][0]["health"]["vbios_version"] == "96.00.A5.00.1A"


# ------------------------------------------------------------------------------ recorded and judged


def eight_gpus(tmp_path, link: str = "NV18") -> Path:
    """``topo -m`` of eight GPUs, each pair ``link`` (NV18: an HGX H100; SYS: the V100s' PCIe host)."""
    rows = ["\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tCPU Affinity\tNUMA Affinity"]
    rows += [
        f"GPU{i}\t" + "\t".join(" X " if i == j else link for j in range(8)) + f"\t0-15\t{i // 4}" for i in range(8)
    ]
    (tmp_path / "topo.txt").write_text("\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n")
    return tmp_path / "topo.txt"


def record(capsys, tmp_path, topo, *queries) -> tuple[dict, model.Topology]:
    args = [a for q in queries for a in ("--smi-query", q)]
    code, out, err = record_node(capsys, tmp_path, topo, *args)
    assert code == 0, err
    return node_profile(tmp_path), probe(str(tmp_path / "node.json"))


HEALTHY_565 = {
    "ecc_uncorrected_volatile": 0,
    "ecc_uncorrected_aggregate": 0,
    "remapped_rows_pending": False,
    "remapping_failed": False,
    "clocks_event_reasons": 1,
    "persistence_mode": True,
    "vbios_version": "96.00.74.00.01",
    "inforom_version": "G520.0200.00.05",
}


def test_a_q_recording_of_a_healthy_hgx_node_keeps_each_gpus_health_and_finds_nothing(tmp_path, capsys):
    data, seen = record(capsys, tmp_path, eight_gpus(tmp_path), SMI_Q / "hgx-h100-x8-565.txt")
    assert [g["health"] for g in data["topology"]["gpus"]] == [HEALTHY_565] * 8  # retirement N/A: left out
    assert [g.health for g in seen.gpus] == [model.GpuHealth(**HEALTHY_565)] * 8
    assert schema.from_dict(data["topology"]).gpus[0].health == seen.gpus[0].health
    assert all(health.findings(seen, g) == [] for g in seen.gpus) and faults.health_faults(seen) == []


def test_a_q_recording_of_a_sick_gpu_is_the_fleets_fault(tmp_path, capsys):
    text = changed(sample("hgx-h100-x8-565.txt"), pad("Pending", "No"), pad("Pending", "Yes"), "GPU 00000000:5D:00.0")
    (tmp_path / "q.txt").write_text(text)
    data, seen = record(capsys, tmp_path, eight_gpus(tmp_path), tmp_path / "q.txt")
    assert data["topology"]["gpus"][3]["health"]["remapped_rows_pending"] is True
    assert [(f.gpu, f.code, f.severity) for f in health.findings(seen, seen.gpus[3])] == [
        (3, "row_remap_pending", "fault")
    ]
    assert [f.name for f in faults.health_faults(seen)] == ["health[GPU3]"]


def test_the_real_h200_q_x_recorded_is_healthy(tmp_path, capsys):
    data, seen = record(capsys, tmp_path, H200 / "topo-m.txt", H200 / "query.xml")
    assert data["topology"]["gpus"][0]["health"] == {
        **HEALTHY_565,
        "vbios_version": "96.00.A5.00.1A",
        "inforom_version": "G520.0282.02.02",
    }
    assert health.findings(seen, seen.gpus[0]) == [] and faults.health_faults(seen) == []


def test_the_v100_block_lands_its_health_on_gpu1_only(tmp_path, capsys):
    """Joined to its host by the host's -L: GPU1 has the V100's facts, the others none (unknown)."""
    topo = eight_gpus(tmp_path, "SYS")
    data, seen = record(capsys, tmp_path, topo, SMI_Q / "v100-pcie-470-L.txt", SMI_Q / "v100-pcie-470-i1.txt")
    assert [g.health is not None for g in seen.gpus] == [False, True] + [False] * 6
    assert facts(seen.gpus[1].health) == SAMPLES[4][1][0]
    assert "health" not in data["topology"]["gpus"][0]
    assert health.findings(seen, seen.gpus[1]) == []


def h200_machine() -> TextMachine:
    return TextMachine(parse_topo_matrix((H200 / "topo-m.txt").read_text()), name="topo-m.txt")


def test_a_later_report_fills_what_an_earlier_left_unknown_and_keeps_the_first_moment():
    """Two reports are two moments: the first clocks reading is kept, the other said; a fact the first
    did not give (its persistence N/A) comes from the second."""
    first = h200_xml().replace("<persistence_mode>Enabled<", "<persistence_mode>N/A<")
    later = h200_xml().replace("<clocks_event_reason_gpu_idle>Active<", "<clocks_event_reason_gpu_idle>Not Active<")
    seen = joined(h200_machine(), (first, "a.xml"), (later, "b.xml"))
    assert (seen.gpus[0].health.clocks_event_reasons, seen.gpus[0].health.persistence_mode) == (0x1, True)
    assert (
        "GPU0: nvidia-smi -q -x (b.xml) says clocks-event reasons 0x0, an earlier source 0x1, from "
        "nvidia-smi -q -x (a.xml); the earlier is kept"
    ) in seen.warnings


def test_a_listing_without_health_leaves_the_reports_health_as_it_was():
    seen = joined(h200_machine(), (h200_xml(), "q.xml"), ((H200 / "query.csv").read_text(), "q.csv"))
    assert seen.gpus[0].health.vbios_version == "96.00.A5.00.1A"
    assert not [w for w in seen.warnings if "health" in w or "VBIOS" in w]
