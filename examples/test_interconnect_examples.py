"""Examples of pytest-gputopo markers and the ``gputopo`` fixture, as a user would write them."""

import pytest


@pytest.mark.requires_gpus(2)
def test_needs_two_gpus(gputopo):
    assert len(gputopo.gpus) >= 2


@pytest.mark.requires_p2p(gpus=2)
def test_tensor_parallel_pair(gputopo):
    assert gputopo.p2p(0, 1)


@pytest.mark.requires_nvlink
def test_nvlink_everywhere(gputopo):
    assert not gputopo.pairs_worse_than("NV")


@pytest.mark.requires_link("NV12", gpus=8)
def test_full_nvswitch_box(gputopo):
    assert all(link.nvlinks >= 12 for link in gputopo.pairs(8))


@pytest.mark.requires_link("PXB", gpus=4)
def test_four_gpus_behind_one_switch_tree(gputopo):
    assert gputopo.link(0, 3).label is not None


def test_runs_everywhere(gputopo):
    # No marker: runs on any machine, with or without GPUs.
    assert gputopo.source.kind in ("nvml", "recorded", "smi-text")
