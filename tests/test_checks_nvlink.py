"""The ``nvlink[GPUn]`` health check judges each GPU on its own: no link up is a GPU without NVLink
unless something says it had links; some up and some down is a fault."""

import dataclasses

from conftest import checks_of
from pytest_gputopo.core import model
from pytest_gputopo.plugin.checks import nvlink_lost
from pytest_gputopo.probe import recorded

A6000 = "NVIDIA RTX A6000"


def _bus(i: int) -> str:
    return f"00000000:{0x17 + 0x20 * i:02X}:00.0"


def _mixed_box(gpus: int = 4) -> model.Topology:
    """RTX A6000 cards (4 NVLinks each, NVLink 3.1): GPU0-GPU1 joined by a bridge; the others
    without one, so NVML lists their 4 links, all down (nvtop#469: an RTX 3090 bridge, 4 links;
    corpus topo/019: an A6000 without a working bridge reads 'all links are inActive')."""

    def links(i):
        if i > 1:
            return tuple(model.NvLink(k, False) for k in range(4))
        return tuple(
            model.NvLink(k, True, remote_bus_id=_bus(1 - i), remote_type="GPU", version="3.1") for k in range(4)
        )

    cards = tuple(
        model.Gpu(i, name=A6000, pci_bus_id=_bus(i), nvml_index=i, compute_capability="8.6", nvlinks=links(i))
        for i in range(gpus)
    )
    pairs = tuple(
        model.Link(a, b, pcie=model.LinkClass.NODE, nvlinks=4 if (a, b) == (0, 1) else 0)
        for a in range(gpus)
        for b in range(a + 1, gpus)
    )
    return model.Topology(gpus=cards, links=pairs)


def test_a_card_without_a_bridge_beside_a_bridged_pair_is_not_a_fault(pytester):
    """GPU2 and GPU3 (no bridge, links present and down) pass though GPU0-GPU1 have a bridge: each GPU
    is judged on its own, not failed "0/4 up" by its neighbours' bridge."""
    checks = checks_of(pytester, _mixed_box())
    assert checks["nvlink[GPU0]"]["outcome"] == checks["nvlink[GPU1]"]["outcome"] == "passed"
    for i in (2, 3):
        assert checks[f"nvlink[GPU{i}]"]["outcome"] == "skipped", checks[f"nvlink[GPU{i}]"]
        assert "a GPU without NVLink" in checks[f"nvlink[GPU{i}]"]["message"]


def test_a_gpu_that_lost_every_link_in_an_nvswitch_box_still_fails(pytester):
    """The opposite wrong verdict: GPU5 of an HGX H100 with all 18 links down is a fault, told by its
    peers of the same model, whose links reach an NVSwitch."""
    checks = checks_of(pytester, recorded.load_profile("hgx-h100-nvlink-down").topology)
    assert checks["nvlink[GPU5]"]["outcome"] == "failed"
    assert "(0/18 up)" in checks["nvlink[GPU5]"]["message"]
    assert checks["nvlink[GPU0]"]["outcome"] == "passed"


def test_some_links_down_is_a_fault():
    t = _mixed_box()
    half = (t.gpus[0].nvlinks[0], dataclasses.replace(t.gpus[0].nvlinks[1], active=False)) + t.gpus[0].nvlinks[2:]
    t = dataclasses.replace(t, gpus=(dataclasses.replace(t.gpus[0], nvlinks=half),) + t.gpus[1:])
    assert nvlink_lost(t, t.gpus[0]) == "NVLinks [1] are down (3/4 up)"


def test_what_tells_a_lost_gpu_from_one_without_nvlink():
    # No evidence: a bridge joins two cards, so a bridged pair says nothing of a third card.
    t = _mixed_box(3)
    assert nvlink_lost(t, t.gpus[2]) is None
    # A pair of the GPU shows NV# in the matrix (nvidia-smi topo -m counted links now down).
    t2 = dataclasses.replace(
        t, links=tuple(dataclasses.replace(ln, nvlinks=4) if (ln.a, ln.b) == (0, 2) else ln for ln in t.links)
    )
    assert nvlink_lost(t2, t2.gpus[2]) == "NVLinks [0, 1, 2, 3] are down (0/4 up)"
    # Peers of its model reach an NVSwitch (their link ends), or, where no source said where the links
    # lead, more than one GPU over NVLink in the matrix: a board or fabric, not a bridge.
    h100 = recorded.load_profile("hgx-h100-nvlink-down").topology
    assert nvlink_lost(h100, h100.gpus[5]) is not None
    blind = dataclasses.replace(
        h100,
        gpus=tuple(
            dataclasses.replace(
                g, nvlinks=tuple(dataclasses.replace(ln, remote_type="unknown", remote_bus_id=None) for ln in g.nvlinks)
            )
            for g in h100.gpus
        ),
    )
    assert nvlink_lost(blind, blind.gpus[5]) is not None
    # A GPU of another model on that board says nothing of it.
    other = dataclasses.replace(
        h100, gpus=tuple(dataclasses.replace(g, name="NVIDIA H100 PCIe") if g.index == 5 else g for g in h100.gpus)
    )
    assert nvlink_lost(other, other.gpus[5]) is None


def test_an_nvlink_version_the_architecture_cannot_have_is_warned_by_the_check(pytester):
    """An H100 whose NVML answers NVLink 5.0 (7; public code reads it as NVLink 4,
    tests/test_spec.py cites it) is judged as 4.0, and the check says so."""
    h100 = recorded.load_profile("hgx-h100").topology
    said_5 = dataclasses.replace(
        h100,
        gpus=tuple(
            dataclasses.replace(g, nvlinks=tuple(dataclasses.replace(ln, version="5.0") for ln in g.nvlinks))
            for g in h100.gpus
        ),
    )
    check = checks_of(pytester, said_5)["nvlink[GPU0]"]
    assert check["outcome"] == "passed"
    assert check["message"] == (
        "GPU0: 18/18 NVLinks up; warning: NVML says NVLink 5.0, compute capability 9.0 has 4.0: 4.0 taken"
    )
