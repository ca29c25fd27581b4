"""The bandwidth table, its sources, and the threshold rules (pytest_gputopo.core.spec)."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from pytest_gputopo.core import collectives, spec, spec_table, thresholds
from pytest_gputopo.core.judgement import BELOW, MET, UNKNOWN, Judgement, Measured, Threshold
from pytest_gputopo.core.model import Gpu, Link, LinkClass, NvLink, Topology
from pytest_gputopo.core.spec import Figure
from pytest_gputopo.probe.recorded import load_profile

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30


def judged(measured: float, expected: Figure | None, floor: float, absolute: Figure | None = None) -> Judgement:
    """A measured figure against a threshold as ``core.judgement.threshold`` makes one."""
    return Judgement(Measured(measured, "measured"), Threshold(expected, "", floor, absolute))


def passes(measured: float, expected: Figure | None, floor: float, absolute: Figure | None = None) -> bool | None:
    """Met (True), below (False), or nothing to judge by (None)."""
    return {MET: True, BELOW: False, UNKNOWN: None}[judged(measured, expected, floor, absolute).state]


def machine(name: str) -> Topology:
    return load_profile(name).topology


# ---------------------------------------------------------------------------------------------
# PCIe


@pytest.mark.parametrize("gen, gbps", [(1, 4.0), (2, 8.0), (3, 15.754), (4, 31.508), (5, 63.015), (6, 121.0)])
def test_pcie_x16_per_direction(gen, gbps):
    fig = spec.pcie_gbps(gen, 16)
    assert fig.gbps == pytest.approx(gbps, abs=0.001)
    assert fig.label == f"PCIe Gen{gen} x16"


@pytest.mark.parametrize(
    "gen, per_direction, bidirectional",
    [
        (3, 16, 32),  # the rounded figures vendor tables and articles print, per direction and both ways
        (4, 32, 64),
        (5, 64, 128),
        (6, 128, 256),
    ],
)
def test_pcie_reconciles_the_rounded_figures_articles_quote(gen, per_direction, bidirectional):
    """Articles quote the raw rate (before encoding) or both directions added; the table is per
    direction after encoding, at most 6% under those rounded figures, and its source says which."""
    fig = spec.pcie_gbps(gen)
    assert 0.94 * per_direction <= fig.gbps <= per_direction
    assert 0.94 * bidirectional <= 2 * fig.gbps <= bidirectional
    assert str(per_direction) in fig.source or str(bidirectional) in fig.source


@pytest.mark.parametrize("gen", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("width", [1, 2, 4, 8, 12, 16, 32])
def test_pcie_scales_linearly_with_width(gen, width):
    fig = spec.pcie_gbps(gen, width)
    assert fig.gbps == pytest.approx(spec.pcie_gbps(gen, 16).gbps * width / 16)
    assert fig.label == f"PCIe Gen{gen} x{width}"
    assert fig.source.startswith(spec.pcie_gbps(gen, 16).source)


def test_pcie_gen3_x8_is_a_quarter_of_gen5_x16():
    assert spec.pcie_gbps(3, 8).gbps == pytest.approx(7.877, abs=0.001)
    assert spec.pcie_gbps(3, 8).gbps == pytest.approx(spec.pcie_gbps(5, 16).gbps / 8)


@pytest.mark.parametrize("gen, width", [(0, 16), (7, 16), (True, 16), ("4", 16), (4, 3), (4, 0), (4, 64)])
def test_pcie_rejects_unknown_generation_or_width(gen, width):
    with pytest.raises(ValueError, match="PCIe"):
        spec.pcie_gbps(gen, width)


# ---------------------------------------------------------------------------------------------
# NVLink


@pytest.mark.parametrize(
    "version, per_link",
    [("1.0", 20.0), ("2.0", 25.0), ("2.2", 25.0), ("3.0", 25.0), ("3.1", 25.0), ("4.0", 25.0), ("5.0", 50.0)],
)
def test_nvlink_per_link_per_direction(version, per_link):
    assert spec.nvlink_per_link(version).gbps == per_link
    assert spec.nvlink_gbps(version, 1).gbps == per_link


@pytest.mark.parametrize(
    "version, links, per_gpu, nvidia_bidirectional",
    [
        ("1.0", 4, 80, 160),  # P100: 4 links, 160 GB/s both ways (NVIDIA's P100 whitepaper)
        ("2.0", 6, 150, 300),  # V100: 6 links, 300 GB/s
        ("3.0", 12, 300, 600),  # A100: 12 links, 600 GB/s
        ("3.1", 12, 300, 600),  # A100 as NVML encodes it
        ("4.0", 18, 450, 900),  # H100: 18 links, 900 GB/s
        ("5.0", 18, 900, 1800),  # Blackwell: 18 x 100 GB/s = 1.8 TB/s
    ],
)
def test_nvlink_per_gpu_is_half_nvidias_bidirectional_aggregate(version, links, per_gpu, nvidia_bidirectional):
    fig = spec.nvlink_gbps(version, links)
    assert fig.gbps == per_gpu == nvidia_bidirectional / 2
    assert fig.label == f"NV{links} NVLink {version}"
    assert f"x {links} links" in fig.source


def test_nvlink_3x_on_ga102_uses_the_bridge_rate():
    one = spec.nvlink_per_link("3.1", compute_capability="8.6")
    assert one.gbps == pytest.approx(14.0625)
    bridge = spec.nvlink_gbps("3.1", 4, compute_capability="8.6")
    assert bridge.gbps == pytest.approx(56.25)
    assert 2 * bridge.gbps == pytest.approx(112.5)  # the datasheet's bidirectional figure
    assert "112.5" in bridge.source
    # compute capability only matters for 3.x
    assert spec.nvlink_per_link("4.0", compute_capability="8.6").gbps == 25.0
    assert spec.nvlink_per_link("3.1", compute_capability="8.0").gbps == 25.0


@pytest.mark.parametrize("version", ["6.0", "9.9", "", "NV"])
def test_nvlink_unknown_version_has_no_figure(version):
    with pytest.raises(ValueError, match="no bandwidth figure for NVLink version"):
        spec.nvlink_per_link(version)


@pytest.mark.parametrize("links", [0, -1, True, 1.5])
def test_nvlink_needs_a_positive_link_count(links):
    with pytest.raises(ValueError, match="at least one link"):
        spec.nvlink_gbps("4.0", links)


# ---------------------------------------------------------------------------------------------
# Sources


def _all_figures():
    figs = [fig for _, _, fig in spec_table.table_rows()]
    for name in (
        "dgx-a100",
        "dgx1-v100",
        "hgx-h100",
        "hgx-h100-nvlink-down",
        "hgx-h100-pcie-x8",
        "2x-rtx3090-nvlink",
        "4x-a100-40gb",
        "4x-rtx4090",
        "8x-l40s",
        "2x-rtx-pro-6000",
    ):
        topo = machine(name)
        figs += [spec.p2p_expected(topo, ln.a, ln.b) for ln in topo.pairs()]
        figs += [spec.h2d_expected(g, pinned) for g in topo.gpus for pinned in (True, False)]
        figs += [collectives.allreduce_expected_busbw(topo, n) for n in range(2, len(topo.gpus) + 1)]
    return figs


def test_every_figure_has_a_source_and_a_label():
    figs = _all_figures()
    assert len(figs) > 100
    for fig in figs:
        assert isinstance(fig, Figure)
        assert fig.source.strip() and fig.label.strip(), fig
        assert "|" not in fig.source and "\n" not in fig.source, fig  # one markdown table cell


def test_figure_refuses_missing_source_or_bad_bandwidth():
    with pytest.raises(ValueError, match="source"):
        Figure(1.0, "")
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="bandwidth"):
            Figure(bad, "somewhere")


def _norm(text: str) -> str:
    text = text.lower().replace("×", "x").replace("’", "'")
    for dash in "–—−":
        text = text.replace(dash, "-")
    return re.sub(r"[\s|*`]", "", text)


def _quoted_fragments(source: str):
    for quote in re.findall(r'"([^"]+)"', source):
        for fragment in quote.split("..."):
            if fragment.strip():
                yield fragment


def test_every_quote_is_verbatim_in_docs_sources():
    """A phrase a figure quotes must appear in docs/sources.md, under the document it comes from, so a
    reader can follow it (whitespace, table bars, x/× and dash styles aside)."""
    corpus = _norm((ROOT / "docs" / "sources.md").read_text(encoding="utf-8"))
    checked = 0
    for fig in _all_figures():
        for fragment in _quoted_fragments(fig.source):
            assert _norm(fragment) in corpus, f"not in docs/sources.md: {fragment!r} (in {fig.source!r})"
            checked += 1
    assert checked > 20


def test_sources_name_public_documents_only():
    """Every figure names a public document or thread, never a file outside the repository, and each
    thread it cites (``nccl-tests#212``) has its address in docs/sources.md."""
    listed = (ROOT / "docs" / "sources.md").read_text(encoding="utf-8").lower()
    for fig in _all_figures():
        text = fig.source.lower()
        assert not re.search(r"\bseeds?\b|\.\./shared|\breference\b", text), fig.source
        for repo, number in re.findall(r"([\w.-]+)#(\d+)", text):
            assert re.search(rf"/{re.escape(repo)}/(issues|pull)/{number}\b", listed), (
                f"{repo}#{number} not in docs/sources.md"
            )


def test_table_covers_every_figure_the_rules_use():
    rows = spec_table.table_rows()
    items = {(cat.split(",")[0], item) for cat, item, _ in rows}
    for gen in range(1, 7):
        assert ("PCIe", f"Gen{gen}") in items
    for version in ("1.0", "2.0", "2.2", "3.0", "3.1", "4.0", "5.0"):
        assert ("NVLink", version) in items
    assert any("GA102" in item for _, item, _ in rows)
    assert any(item == "pageable staging ceiling" for _, item, _ in rows)
    floors = {fig.gbps for cat, _, fig in rows if cat.startswith("All-reduce")}
    assert floors == {110.0, 185.0, 440.0, 431.0, 800.0}
    assert len({(cat, item) for cat, item, _ in rows}) == len(rows)  # no duplicate rows


# ---------------------------------------------------------------------------------------------
# All-reduce arithmetic (nccl-tests' definitions)


@pytest.mark.parametrize("n, factor", [(1, 0.0), (2, 1.0), (3, 4 / 3), (4, 1.5), (8, 1.75)])
def test_allreduce_bus_factor(n, factor):
    assert collectives.allreduce_factor(n) == pytest.approx(factor)


def test_busbw_definition_two_and_three_ranks():
    nbytes, seconds = 4 * 10**9, 0.1
    assert collectives.algbw(nbytes, seconds) == pytest.approx(40.0)
    assert collectives.busbw_from_time(nbytes, 2, seconds) == pytest.approx(40.0)  # x 2(1)/2 = 1
    assert collectives.busbw_from_time(nbytes, 3, seconds) == pytest.approx(40.0 * 4 / 3)  # x 2(2)/3
    assert collectives.busbw_from_algbw(40.0, 3) == pytest.approx(160 / 3)


def test_busbw_of_one_rank_is_zero():
    """nccl-tests#249/#294: one rank has nothing to exchange, so busbw (and the average) is 0."""
    assert collectives.busbw_from_time(2**30, 1, 0.5) == 0.0
    assert collectives.busbw_from_time(2**30, 1, 0.0) == 0.0
    assert collectives.busbw_from_algbw(123.0, 1) == 0.0
    assert collectives.allreduce_expected_time_s(2**30, 1, 100.0) == 0.0


@pytest.mark.parametrize("bad", [0, -2, True, 2.0])
def test_allreduce_factor_rejects_non_rank_counts(bad):
    with pytest.raises(ValueError, match="rank"):
        collectives.allreduce_factor(bad)


def test_algbw_rejects_zero_time_and_negative_size():
    with pytest.raises(ValueError, match="time"):
        collectives.algbw(10, 0)
    with pytest.raises(ValueError, match="size"):
        collectives.algbw(-1, 1)
    with pytest.raises(ValueError, match="link bandwidth"):
        collectives.allreduce_expected_time_s(10, 4, 0)


def test_allreduce_time_matches_published_worked_examples():
    """EngineersOfAI's worked example: 8 GPUs, 1 GB over PCIe 4.0 at 32 GB/s takes 54.7 ms; with
    NVLink 4.0's W = 900 GB/s, 1.94 ms."""
    assert collectives.allreduce_expected_time_s(1e9, 8, 32) * 1e3 == pytest.approx(54.7, abs=0.05)
    assert collectives.allreduce_expected_time_s(1e9, 8, 900) * 1e3 == pytest.approx(1.94, abs=0.005)


@given(nbytes=st.integers(1, 2**40), n=st.integers(2, 1024), w=st.floats(0.01, 10_000))
def test_formula_round_trip(nbytes, n, w):
    """Time from W (nccl-tests' best all-reduce time), then busbw from that time, gives W back."""
    t = collectives.allreduce_expected_time_s(nbytes, n, w)
    assert collectives.busbw_from_time(nbytes, n, t) == pytest.approx(w, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Expectations on the bundled machines


def test_p2p_dgx_a100_is_nvlink3_times_12_links():
    fig = spec.p2p_expected(machine("dgx-a100"), 0, 1)
    assert fig.gbps == 300.0
    assert fig.label == "NV12 NVLink 3.1"
    assert "NVSwitch" in fig.source


def test_p2p_is_symmetric_and_the_same_for_every_nvswitch_pair():
    topo = machine("hgx-h100")
    values = {spec.p2p_expected(topo, a, b).gbps for a, b in itertools.permutations(range(8), 2)}
    assert values == {450.0}


def test_p2p_rtx3090_bridge():
    fig = spec.p2p_expected(machine("2x-rtx3090-nvlink"), 1, 0)
    assert fig.gbps == pytest.approx(56.25)
    assert fig.label == "NV4 NVLink 3.x (GA102 bridge)"


def test_p2p_dgx1_v100_counts_the_pair_links():
    topo = machine("dgx1-v100")
    by_links = {}
    for ln in topo.pairs():
        fig = spec.p2p_expected(topo, ln.a, ln.b)
        by_links.setdefault(ln.nvlinks, set()).add(round(fig.gbps, 3))
    assert by_links[2] == {50.0} and by_links[1] == {25.0}
    assert by_links[0] == {round(spec.pcie_gbps(3).gbps / 2, 3)}  # NODE: PCIe Gen3 through the CPU


def test_p2p_rtx4090_pair_is_pcie_gen4_through_the_cpu():
    topo = machine("4x-rtx4090")
    assert topo.link(0, 1).pcie is LinkClass.NODE
    fig = spec.p2p_expected(topo, 0, 1)
    line = spec.pcie_line_rate(topo.gpus[0])
    assert line.gbps == pytest.approx(31.5, abs=0.05)
    assert fig.gbps == pytest.approx(line.gbps * spec.PCIE_VIA_CPU_FACTOR)
    assert fig.label == "PCIe Gen4 x16 via CPU (NODE)"
    assert "50% of PCIe bandwidth" in fig.source


def test_p2p_behind_a_pcie_switch_is_the_line_rate():
    topo = machine("8x-l40s")
    pix = next(ln for ln in topo.pairs() if ln.pcie is LinkClass.PIX)
    fig = spec.p2p_expected(topo, pix.a, pix.b)
    assert fig.gbps == pytest.approx(31.5, abs=0.05)
    assert fig.label == "PCIe Gen4 x16 (PIX)"


def test_p2p_pcie_pair_takes_the_slower_gpu():
    topo = machine("4x-rtx4090")
    slow = dataclasses.replace(topo.gpus[1], pcie_gen_max=3, pcie_width_max=8)  # a slot that allows no more
    topo = dataclasses.replace(topo, gpus=(topo.gpus[0], slow, *topo.gpus[2:]))
    assert spec.p2p_expected(topo, 0, 1).gbps == pytest.approx(spec.pcie_gbps(3, 8).gbps / 2)


def test_p2p_after_an_nvswitch_gpu_lost_its_links():
    topo = machine("hgx-h100-nvlink-down")
    assert spec.p2p_expected(topo, 0, 1).gbps == 450.0
    fig = spec.p2p_expected(topo, 0, 5)
    assert fig.label.startswith("PCIe Gen5 x16 via CPU")
    assert fig.gbps == pytest.approx(31.5, abs=0.05)


def _two_gpus(link: Link, **gpu_fields) -> Topology:
    gpus = tuple(Gpu(index=i, **gpu_fields) for i in range(2))
    return Topology(gpus=gpus, links=(link,))


@pytest.mark.parametrize(
    "link, fields",
    [
        (Link(0, 1, pcie=LinkClass.PIX, nvlinks=None), dict(pcie_gen_current=4, pcie_width_current=16)),
        (Link(0, 1, pcie=None, nvlinks=0), dict(pcie_gen_current=4, pcie_width_current=16)),
        (Link(0, 1, pcie=LinkClass.PIX, nvlinks=0), dict(pcie_gen_current=None, pcie_width_current=16)),
        (Link(0, 1, pcie=LinkClass.PIX, nvlinks=0), dict(pcie_gen_current=4, pcie_width_current=None)),
        # NVLink with no version and no compute capability
        (Link(0, 1, nvlinks=4), dict()),
        # NVLink 3.1 on an unknown chip: A100 and RTX 3090 both report 3.1, at different rates
        (Link(0, 1, nvlinks=4), dict(nvlinks=tuple(NvLink(i, True, version="3.1") for i in range(4)))),
        # a version no source gives a figure for
        (Link(0, 1, nvlinks=18), dict(nvlinks=tuple(NvLink(i, True, version="6.0") for i in range(18)))),
    ],
)
def test_p2p_unknown_facts_give_no_expectation(link, fields):
    assert spec.p2p_expected(_two_gpus(link, **fields), 0, 1) is None


def test_p2p_nvlink_version_falls_back_to_compute_capability_and_name():
    link = Link(0, 1, nvlinks=12)
    assert spec.p2p_expected(_two_gpus(link, compute_capability="8.0"), 0, 1).gbps == 300.0
    assert spec.p2p_expected(_two_gpus(link, compute_capability="9.0"), 0, 1).gbps == 300.0  # 12 x 4.0
    bridge = Link(0, 1, nvlinks=4)
    links = tuple(NvLink(i, True, version="3.1") for i in range(4))
    named = spec.p2p_expected(_two_gpus(bridge, nvlinks=links, name="NVIDIA RTX A6000"), 0, 1)
    assert named.gbps == pytest.approx(56.25)
    named = spec.p2p_expected(_two_gpus(bridge, nvlinks=links, name="NVIDIA A100 80GB PCIe"), 0, 1)
    assert named.gbps == 100.0


def _said(topo: Topology, version: str) -> Topology:
    """``topo`` with every NVLink's version as NVML would have said ``version``."""
    return dataclasses.replace(
        topo,
        gpus=tuple(
            dataclasses.replace(g, nvlinks=tuple(dataclasses.replace(ln, version=version) for ln in g.nvlinks))
            for g in topo.gpus
        ),
    )


def test_nvml_nvlink_version_is_cross_checked_with_the_compute_capability():
    """The version NVML gives (nvmlDeviceGetNvLinkVersion) is taken only where the GPU's
    architecture can have it. Public code does not trust the raw answer on H100: NVIDIA/TensorRT-LLM
    tensorrt_llm/auto_parallel/cluster_info.py (commit 16d2467), ``nvlink_version``, reads 7
    (NVML_NVLINK_VERSION_5_0 in nvml.h) as NVLink 4 and 6 as 3, its
    ``nvlink_bandwidth(4)`` being H100-SXM's 450 GB/s; open-mpi/hwloc#658: "A100 returns 5 which is not
    NVLink 5". Taken as 5.0, an HGX H100's 18 links would expect 900 GB/s and fail a healthy node."""
    h100 = machine("hgx-h100")
    healthy = spec.p2p_expected(h100, 0, 1)
    said_5 = _said(h100, "5.0")
    fig = spec.p2p_expected(said_5, 0, 1)
    assert fig.gbps == healthy.gbps == 450.0
    assert fig.label.startswith("NV18 NVLink 4.0") and "NVML" in fig.label
    note = spec.nvlink_version_note(said_5.gpus[0])
    assert note == "NVML says NVLink 5.0, compute capability 9.0 has 4.0: 4.0 taken"
    assert note in fig.source
    assert collectives.allreduce_expected_busbw(said_5).gbps == collectives.allreduce_expected_busbw(h100).gbps
    assert spec.gpu_nvlink_version(_said(h100, "6.0").gpus[0]) == "4.0"  # a version with no figure, too
    # Where NVML's answer is one the architecture has, it is taken, without a note.
    assert spec.nvlink_version_note(h100.gpus[0]) is None and healthy.label == "NV18 NVLink 4.0"
    a100 = machine("dgx-a100")
    assert spec.gpu_nvlink_version(a100.gpus[0]) == "3.1" and spec.nvlink_version_note(a100.gpus[0]) is None
    assert spec.gpu_nvlink_version(_said(a100, "3.0").gpus[0]) == "3.0"
    assert spec.gpu_nvlink_version(_said(a100, "4.0").gpus[0]) == "3.0"  # TensorRT-LLM's 6 -> 3
    # A compute capability with no NVLink generation known here: NVML's answer stands.
    future = _said(h100, "5.0")
    future = dataclasses.replace(
        future, gpus=tuple(dataclasses.replace(g, compute_capability="11.0") for g in future.gpus)
    )
    assert spec.gpu_nvlink_version(future.gpus[0]) == "5.0" and spec.nvlink_version_note(future.gpus[0]) is None


def test_h2d_of_a_link_trained_down_expects_what_the_link_can_carry():
    """The expectation is the link's maximum for this device and system, not the current
    (trained-down or idle) link: a copy over Gen3 x8 on a Gen5 x16 link then fails its floor."""
    gpu = machine("hgx-h100-pcie-x8").gpus[2]
    assert (gpu.pcie_gen_current, gpu.pcie_width_current) == (3, 8)
    pinned = spec.h2d_expected(gpu, pinned=True)
    assert pinned.label == "pinned, PCIe Gen5 x16 line rate"
    assert passes(7.0, pinned, thresholds.DEFAULT_FLOORS["h2d_pinned"]) is False
    slot = spec.h2d_expected(dataclasses.replace(gpu, pcie_gen_max=3, pcie_width_max=8), pinned=True)
    assert slot.gbps == pytest.approx(7.9, abs=0.05)  # a slot that allows no more: Gen3 x8 is what it can carry
    pageable = spec.h2d_expected(gpu, pinned=False)
    assert pageable.gbps == pytest.approx(min(pinned.gbps / 2, spec.PAGEABLE_CEILING.gbps))


def test_h2d_healthy_gen5_and_gen4():
    h100 = machine("hgx-h100-pcie-x8").gpus[0]
    assert spec.h2d_expected(h100).gbps == pytest.approx(63.0, abs=0.05)
    # pageable is bound by the staging memcpy, not the link: min(line / 2, 12 GB/s)
    assert spec.h2d_expected(h100, pinned=False).gbps == spec.PAGEABLE_CEILING.gbps == 12.0
    a100 = machine("dgx-a100").gpus[0]
    assert spec.h2d_expected(a100).gbps == pytest.approx(31.5, abs=0.05)
    assert spec.h2d_expected(a100, pinned=False).gbps == 12.0
    v100 = machine("dgx1-v100").gpus[0]
    assert spec.h2d_expected(v100, pinned=False).gbps == pytest.approx(7.88, abs=0.01)


def test_h2d_public_measurements_pass_the_default_floors():
    """Healthy public host<->device figures (gengwg/gpu's DGX A100, gearshifft's P100) pass; NUMA-remote
    copies fail."""
    a100 = machine("dgx-a100").gpus[0]
    floors = thresholds.DEFAULT_FLOORS
    for measured in (25.7, 25.8):  # DGX A100 pinned, bandwidthTest
        assert passes(measured, spec.h2d_expected(a100), floors["h2d_pinned"])
    for measured in (10.0, 10.8):  # DGX A100 pageable
        assert passes(measured, spec.h2d_expected(a100, False), floors["h2d_pageable"])
    p100 = Gpu(0, pcie_gen_max=3, pcie_width_max=16)
    assert passes(12.15, spec.h2d_expected(p100), floors["h2d_pinned"])
    assert passes(3.78, spec.h2d_expected(p100), floors["h2d_pinned"]) is False  # NUMA-remote


def test_h2d_unknown_link_gives_none():
    assert spec.h2d_expected(Gpu(0, pcie_gen_current=None, pcie_width_current=16)) is None
    assert spec.h2d_expected(Gpu(0, pcie_gen_current=4, pcie_width_current=None), pinned=False) is None
    assert spec.h2d_expected(Gpu(0, pcie_gen_current=9, pcie_width_current=16)) is None


def test_allreduce_expected_nvswitch():
    for name, gbps in (("hgx-h100", 450.0), ("dgx-a100", 300.0), ("hgx-h100-pcie-x8", 450.0)):
        topo = machine(name)
        for n in range(2, 9):
            fig = collectives.allreduce_expected_busbw(topo, n)
            assert fig.gbps == gbps
            assert "every pair" in fig.label
    assert collectives.allreduce_expected_busbw(machine("hgx-h100")).gbps == 450.0  # n=None: all GPUs


def test_allreduce_expected_is_bound_by_a_gpu_that_lost_its_nvlinks():
    topo = machine("hgx-h100-nvlink-down")
    assert collectives.allreduce_expected_busbw(topo, 5).gbps == 450.0  # GPUs 0-4 still switched
    fig = collectives.allreduce_expected_busbw(topo, 8)
    assert fig.gbps == pytest.approx(31.5, abs=0.05)
    assert "GPU5" in fig.label
    assert "CPU and memory" in fig.source  # the PCIe caveat


def test_allreduce_expected_dgx1_uses_the_best_ring():
    """DGX-1's hybrid cube mesh: the NV2 pairs close a ring through all 8 GPUs, so the slowest
    pair (PCIe) is not the bottleneck; NCCL's extra rings make this a lower bound."""
    topo = machine("dgx1-v100")
    fig = collectives.allreduce_expected_busbw(topo, 8)
    assert fig.gbps == 50.0
    assert "lower bound" in fig.source
    slowest = min(spec.p2p_expected(topo, ln.a, ln.b).gbps for ln in topo.pairs(8))
    assert fig.gbps > slowest


def test_allreduce_expected_pcie_only():
    topo = machine("8x-l40s")
    assert collectives.allreduce_expected_busbw(topo, 2).gbps == pytest.approx(31.5, abs=0.05)  # PIX pair
    fig = collectives.allreduce_expected_busbw(topo, 8)
    assert fig.gbps == pytest.approx(15.75, abs=0.01)
    assert "nccl#1639" in fig.source
    fig4090 = collectives.allreduce_expected_busbw(machine("4x-rtx4090"), 4)
    assert fig4090.gbps == pytest.approx(15.75, abs=0.01)


def test_allreduce_expected_none_cases():
    assert collectives.allreduce_expected_busbw(machine("single-gpu"), 1) is None
    assert collectives.allreduce_expected_busbw(machine("single-gpu")) is None
    assert collectives.allreduce_expected_busbw(machine("no-gpu")) is None
    assert collectives.allreduce_expected_busbw(machine("hgx-h100"), 9) is None
    unknown = _two_gpus(Link(0, 1, pcie=LinkClass.PIX, nvlinks=0))  # no PCIe state
    assert collectives.allreduce_expected_busbw(unknown, 2) is None
    with pytest.raises(ValueError):
        collectives.allreduce_expected_busbw(machine("hgx-h100"), 2.0)


def _brute_force_ring(n, ok):
    if n < 3:
        return False
    for order in itertools.permutations(range(1, n)):
        cycle = (0, *order, 0)
        if all((min(a, b), max(a, b)) in ok for a, b in zip(cycle, cycle[1:], strict=False)):
            return True
    return False


@given(
    st.integers(3, 7).flatmap(
        lambda n: st.tuples(st.just(n), st.sets(st.sampled_from([(a, b) for a in range(n) for b in range(a + 1, n)])))
    )
)
def test_ring_search_matches_brute_force(case):
    n, ok = case
    assert collectives._has_ring(n, ok) == _brute_force_ring(n, ok)


# ---------------------------------------------------------------------------------------------
# Published per-SKU floors


@pytest.mark.parametrize(
    "name, gbps",
    [
        ("Tesla V100-SXM2-32GB", 110.0),
        ("NVIDIA A100-SXM4-80GB", 185.0),
        ("NVIDIA A100-SXM4-40GB", 185.0),
        ("NVIDIA H100 80GB HBM3", 440.0),
        ("NVIDIA H200", 431.0),
        ("NVIDIA B200", 440.0),
        ("NVIDIA B300 SXM6 AC", 800.0),
    ],
)
def test_sku_floor(name, gbps):
    fig = collectives.sku_allreduce_floor(name, 8)
    assert fig.gbps == gbps
    assert fig.source and fig.label


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA A100 80GB PCIe",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL",
        "NVIDIA H200 NVL",
        "NVIDIA GB200",
        "NVIDIA GB300",
        "NVIDIA A800-SXM4-80GB",
        "NVIDIA H800",
        "Tesla V100-PCIE-32GB",
        "NVIDIA L40S",
        "NVIDIA GeForce RTX 4090",
        "",
        None,
    ],
)
def test_no_sku_floor_for_other_parts(name):
    assert collectives.sku_allreduce_floor(name, 8) is None


def test_sku_floor_only_for_8_gpus_at_a_large_size():
    name = "NVIDIA H100 80GB HBM3"
    assert collectives.sku_allreduce_floor(name, 4) is None
    assert collectives.sku_allreduce_floor(name, 16) is None
    assert collectives.sku_allreduce_floor(name, 8, size_bytes=GiB) is None
    assert collectives.sku_allreduce_floor(name, 8, size_bytes=8 * GiB).gbps == 440.0
    assert collectives.sku_allreduce_floor(name, 8, size_bytes=16 * GiB).gbps == 440.0


def test_sku_floor_above_ring_speed_needs_nvls():
    assert collectives.sku_allreduce_floor("NVIDIA H100 80GB HBM3", 8, nvls=False) is None
    assert collectives.sku_allreduce_floor("NVIDIA H200", 8, nvls=False) is None
    assert collectives.sku_allreduce_floor("NVIDIA H100 80GB HBM3", 8, nvls=True).gbps == 440.0
    assert collectives.sku_allreduce_floor("NVIDIA A100-SXM4-80GB", 8, nvls=False).gbps == 185.0
    assert collectives.sku_allreduce_floor("NVIDIA B200", 8, nvls=False).gbps == 440.0
    # the NVLS floors really are above what a ring reaches on the same links
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        assert collectives.sku_allreduce_floor(name, 8).gbps > 0.82 * spec.nvlink_gbps("4.0", 18).gbps


def test_sku_floor_keeps_the_more_lenient_operator_and_says_so():
    a100 = collectives.sku_allreduce_floor("NVIDIA A100-SXM4-80GB", 8)
    assert "OCI" in a100.source and "228" in a100.source and "200" in a100.source
    h200 = collectives.sku_allreduce_floor("NVIDIA H200", 8)
    assert "Azure" in h200.source and "440" in h200.source


# ---------------------------------------------------------------------------------------------
# A figure against its threshold (core.judgement)


def test_a_figure_against_a_relative_floor():
    expected = Figure(225.0, "test", "NV12 NVLink 3.0")
    judgement = judged(231.4, expected, 0.8)
    assert judgement.needed_gbps == pytest.approx(180.0)
    assert judgement.state == MET
    assert judgement.ratio() == pytest.approx(231.4 / 225.0)
    assert judgement.describe() == (
        "measured 231.4 GB/s, needed 180.0 (0.80 x expected 225.0 GB/s from NV12 NVLink 3.0), ratio 1.03"
    )
    low = judged(150.0, expected, 0.8)
    assert low.state == BELOW
    assert low.describe().endswith("ratio 0.67")


def test_a_figure_exactly_at_the_floor_meets_it():
    assert passes(180.0, Figure(225.0, "t"), 0.8) is True


def test_an_absolute_floor_wins_both_ways():
    h100 = collectives.sku_allreduce_floor("NVIDIA H100 80GB HBM3", 8)
    expected = spec.nvlink_gbps("4.0", 18)
    ring_only = judged(370.0, expected, thresholds.DEFAULT_FLOORS["allreduce"], h100)
    assert 370.0 >= thresholds.DEFAULT_FLOORS["allreduce"] * expected.gbps  # the relative floor alone would pass
    assert ring_only.needed_gbps == 440.0 and ring_only.state == BELOW
    text = ring_only.describe()
    assert text.startswith("measured 370.0 GB/s, needed 440.0 (published H100 SXM 8-GPU all-reduce floor)")
    assert "expected 450.0 GB/s from NV18 NVLink 4.0, ratio 0.82" in text
    a100 = collectives.sku_allreduce_floor("NVIDIA A100-SXM4-80GB", 8)
    assert 200.0 < 0.75 * 300  # the relative floor alone would fail
    assert passes(200.0, spec.nvlink_gbps("3.1", 12), 0.75, a100) is True


def test_a_figure_without_any_threshold_is_unknown():
    judgement = judged(12.3, None, 0.7)
    assert judgement.needed_gbps is None and judgement.state == UNKNOWN and judgement.ratio() is None
    assert judgement.describe() == "measured 12.3 GB/s, no expected figure for this link (not judged)"
    only_floor = judged(500.0, None, 0.7, collectives.sku_allreduce_floor("NVIDIA B200", 8))
    assert only_floor.state == MET and only_floor.ratio() is None
    assert only_floor.describe() == "measured 500.0 GB/s, needed 440.0 (published B200 8-GPU all-reduce floor)"


@pytest.mark.parametrize(
    "measured, floor",
    [(-1.0, 0.7), (math.nan, 0.7), (True, 0.7), (10.0, 0.0), (10.0, -0.5), (10.0, 2.5), (10.0, math.nan)],
)
def test_a_judgement_rejects_bad_values(measured, floor):
    """A floor out of (0, 2] is no threshold; a figure that is no bandwidth cannot be judged."""
    with pytest.raises(ValueError):
        judged(measured, Figure(10.0, "t"), floor).state  # noqa: B018 (the property judges)


def test_public_measurements_against_the_default_floors():
    """Healthy public figures pass; the failures the floors exist for fail."""
    f = thresholds.DEFAULT_FLOORS
    nv4, nv3 = spec.nvlink_gbps("4.0", 18), spec.nvlink_gbps("3.1", 12)
    for measured in (364, 376, 393, 396.4):  # H100/H200 unidirectional P2P
        assert passes(measured, nv4, f["p2p"])
    for measured in (272, 277):  # A100 P2P
        assert passes(measured, nv3, f["p2p"])
    assert passes(335, nv4, f["p2p"])  # Azure's H100 floor passes here too
    assert passes(spec.pcie_gbps(5).gbps, nv4, f["p2p"]) is False  # NVLink pair copying at PCIe speed
    for measured in (220, 230, 235):  # A100 8-GPU ring all-reduce
        assert passes(measured, nv3, f["allreduce"])
    for measured in (367.61, 370):  # H100/H200 ring
        assert passes(measured, nv4, f["allreduce"])
    assert passes(682.2, spec.nvlink_gbps("5.0", 18), f["allreduce"])  # B200 ring
    assert passes(20, nv3, f["allreduce"]) is False  # A100 falling back to SYS (nccl-tests#178)


# ---------------------------------------------------------------------------------------------
# Floors and overrides


def test_default_floors():
    assert set(thresholds.DEFAULT_FLOORS) == {"p2p", "h2d_pinned", "h2d_pageable", "allreduce"}
    assert thresholds.FLOOR_KEYS == tuple(thresholds.DEFAULT_FLOORS)
    for value in thresholds.DEFAULT_FLOORS.values():
        assert 0 < value < 1


@pytest.mark.parametrize("value, ratio", [("0.8", 0.8), (" 0.75 ", 0.75), (0.9, 0.9), (1, 1.0), ("1.05", 1.05)])
def test_parse_floor_ratio(value, ratio):
    assert thresholds.parse_floor_ratio(value, "ini gputopo_floor_p2p") == ratio


@pytest.mark.parametrize("value", ["", "fast", "80%", "0", "-0.1", "2.5", "nan", "inf", None, True])
def test_parse_floor_ratio_errors_name_the_origin(value):
    with pytest.raises(ValueError, match=r"^env PYTEST_GPUTOPO_FLOOR_P2P: "):
        thresholds.parse_floor_ratio(value, "env PYTEST_GPUTOPO_FLOOR_P2P")


def test_merged_floors():
    assert thresholds.merged_floors() == thresholds.DEFAULT_FLOORS
    merged = thresholds.merged_floors({"p2p": "0.9"}, "marker min_p2p_bw on test_x")
    assert merged["p2p"] == 0.9 and merged["allreduce"] == thresholds.DEFAULT_FLOORS["allreduce"]
    assert thresholds.DEFAULT_FLOORS["p2p"] != 0.9  # the defaults are untouched
    with pytest.raises(ValueError, match="unknown floor 'copy'"):
        thresholds.merged_floors({"copy": 0.5}, "ini")
    with pytest.raises(ValueError, match="ini: allreduce"):
        thresholds.merged_floors({"allreduce": "x"}, "ini")


# ---------------------------------------------------------------------------------------------
# Documentation and purity


def test_docs_table_matches_table_rows():
    text = (ROOT / "docs" / "thresholds.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- table:start -->\n(.*?)\n<!-- table:end -->", text, re.S)
    assert m, "docs/thresholds.md lost its table markers"
    assert m.group(1).strip() == spec_table.markdown_table().strip(), (
        "docs/thresholds.md is out of date; regenerate the table with "
        "`python -c 'from pytest_gputopo.core import spec_table; print(spec_table.markdown_table())'`"
    )


def test_docs_state_the_default_floors():
    text = (ROOT / "docs" / "thresholds.md").read_text(encoding="utf-8")
    for key, value in thresholds.DEFAULT_FLOORS.items():
        assert re.search(rf"\| `{key}` \| {value:.2f} \|", text), key
    assert "options.md" in text and "NVLS" in text


STDLIB = getattr(sys, "stdlib_module_names", None)


@pytest.mark.skipif(STDLIB is None, reason="sys.stdlib_module_names needs Python 3.10")
def test_spec_imports_only_the_standard_library_and_model():
    tree = ast.parse((ROOT / "pytest_gputopo" / "core" / "spec.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] in STDLIB, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                assert node.module == "model", node.module
            else:
                assert node.module.split(".")[0] in STDLIB | {"__future__"}, node.module


def test_importing_spec_loads_nothing_heavy():
    code = (
        "import sys, pytest_gputopo.core.spec; "
        "print(sorted(m for m in ('torch', 'pynvml', 'numpy', 'pytest') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    heavy = set(eval(out))  # noqa: S307 - our own printed list
    assert not heavy & {"torch", "pynvml", "numpy"}
