"""core/placement: the set of GPUs a leased test holds, judged by its markers' own rules on the
machine as the test will see it, on recorded machines."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from pytest_gputopo.core import requirements as reqs
from pytest_gputopo.core.gpu_requirements import GpuRequirement, VersionRequirement
from pytest_gputopo.core.placement import Placer, gpus_needed
from pytest_gputopo.core.ranks_requirement import RanksRequirement
from pytest_gputopo.probe.recorded import load_profile


def machine(name):
    return load_profile(name).topology


def labels(topology, gpus):
    return sorted(str(topology.link(a, b).label) for a, b in itertools.combinations(gpus, 2))


def test_requires_p2p_on_two_gets_an_nvlink_pair_where_one_is_free():
    """dgx1-v100: every pair does P2P, some over NV2, some NV1, some only PCIe (NODE)."""
    topo = machine("dgx1-v100")
    placer = Placer(topo, [reqs.P2PRequirement(gpus=2)], 2)
    assert labels(topo, placer.choose(range(8))) == ["NV2"]
    # Among the GPUs free, the best-linked pair; with only a PCIe pair left, that one (P2P still works).
    assert labels(topo, placer.choose([0, 2, 3, 4])) == ["NV2"]  # GPU2-GPU4
    assert labels(topo, placer.choose([0, 2, 5, 6])) == ["NV2"]  # GPU5-GPU6
    assert labels(topo, placer.choose([0, 4])) == ["NODE"]  # no NVLink between them: P2P over PCIe


def test_requires_link_pxb_on_four_gets_the_four_under_one_switch():
    """8x-rtx4090, a PCIe box: GPU0-3 share a switch (PIX); GPU4-7 too but GPU6-GPU7's link is unknown."""
    topo = machine("8x-rtx4090")
    placer = Placer(topo, [reqs.LinkRequirement(gpus=4, need="PXB")], 4)
    assert placer.choose(range(8)) == (0, 1, 2, 3)
    assert placer.meeting == [(0, 1, 2, 3)]  # an unknown link is never met
    assert placer.choose([1, 2, 3, 4, 5, 6, 7]) is None  # GPU0 held: wait, never a set that fails


def test_no_set_on_the_machine_can_meet_it_says_why_as_the_marker_does():
    topo = machine("8x-l40s")  # NODE within a NUMA node, PIX pairs: no four GPUs under one switch
    placer = Placer(topo, [reqs.LinkRequirement(gpus=4, need="PXB")], 4)
    assert placer.meeting == [] and placer.choose(range(8)) is None
    assert placer.never.startswith("requires_link('PXB', gpus=4): GPU0-GPU2 are linked by NODE")
    assert placer.never.endswith("(no other 4 GPUs of the 8 here meet it either)")
    p2p = Placer(machine("4x-rtx4090"), [reqs.P2PRequirement(gpus=2)], 2)  # P2P refused on every pair
    assert "GPU0-GPU1 cannot do P2P" in p2p.never and not p2p.unknown
    assert Placer(topo, [], 9).never == "needs 9 GPUs, 8 may be leased here"
    assert Placer(topo, [RanksRequirement(n=9)], 9).never == "ranks(9): needs 9 GPUs, 8 may be leased here"


def test_unknown_is_never_met():
    topo = machine("8x-rtx4090")  # no P2P status recorded
    placer = Placer(topo, [reqs.P2PRequirement(gpus=2)], 2)
    assert placer.never and placer.unknown


@pytest.mark.parametrize("name", ["dgx-a100", "hgx-h100", "8x-l40s", "4x-rtx4090", "dgx1-v100", "8x-rtx4090"])
@pytest.mark.parametrize(
    "requirement",
    [
        reqs.P2PRequirement(gpus=2),
        reqs.NvLinkRequirement(gpus=2, min_links=2),
        reqs.LinkRequirement(gpus=4, need="PXB"),
        reqs.P2PRequirement(gpus=(0, 2)),
        GpuRequirement(gpus=2, min_memory_gb=40),
    ],
)
def test_every_set_chosen_meets_the_marker_as_the_test_sees_it(name, requirement):
    topo = machine(name)
    k = gpus_needed([requirement], topo)
    placer = Placer(topo, [requirement], k)
    for free in (range(len(topo.gpus)), range(1, len(topo.gpus)), range(0, len(topo.gpus), 2)):
        chosen = placer.choose(free)
        if chosen is not None:
            assert set(chosen) <= set(free) and len(chosen) == k
            assert requirement.evaluate(topo.restrict(chosen)).ok
    # never, exactly when no k-set of the machine meets it
    exists = any(requirement.evaluate(topo.restrict(s)).ok for s in itertools.combinations(range(len(topo.gpus)), k))
    assert (placer.never is None) == exists


@settings(max_examples=60, deadline=None)
@given(free=st.sets(st.integers(0, 7)), k=st.integers(1, 4))
def test_a_chosen_set_is_free_and_meets_every_requirement(free, k):
    topo = machine("dgx1-v100")
    found = [reqs.P2PRequirement(gpus=k), reqs.NvLinkRequirement(gpus=min(k, 2))] if k > 1 else []
    chosen = Placer(topo, found, k).choose(free)
    if chosen is not None:
        assert set(chosen) <= free and len(chosen) == k
        assert all(r.evaluate(topo.restrict(chosen)).ok for r in found)


def test_one_gpu_tests_leave_the_best_pairs_to_others():
    """8x-l40s: GPU0-GPU1 is PIX; with GPU1 held, a one-GPU test takes GPU0 (whose pair is spoiled),
    not a GPU of a PIX pair still whole."""
    placer = Placer(machine("8x-l40s"), [GpuRequirement(gpus=1)], 1)
    assert placer.choose([0, 2, 3, 4, 5, 6, 7]) == (0,)


def test_how_many_gpus_a_test_holds():
    topo = machine("dgx-a100")
    assert gpus_needed([reqs.P2PRequirement(gpus=2), GpuRequirement(gpus=1)], topo) == 2
    assert gpus_needed([reqs.P2PRequirement(gpus=(0, 5))], topo) == 6  # it uses cuda:5
    assert gpus_needed([reqs.P2PRequirement()], topo) == 8  # every visible GPU: all of them, as without leases
    assert gpus_needed([VersionRequirement(driver=">=500")], topo) == 0
    assert gpus_needed([GpuRequirement(gpus=0)], topo) == 0


def test_a_waiting_test_reserves_the_meeting_set_free_soonest_among_those_no_earlier_waiter_took():
    four = Placer(machine("dgx-a100"), [GpuRequirement(gpus=4)], 4)  # every pair NV12: ties broken by GPU
    assert four.reserve(range(8), held={1: 10.0, 2: 10.0, 3: 10.0, 4: 10.0}) == (0, 5, 6, 7)  # free now
    assert four.reserve(range(4, 8), held=dict.fromkeys(range(8), 10.0)) == (4, 5, 6, 7)  # 0-3: an earlier waiter's
    # Fewer than four left: it reserves those (of its best set), so later comers cannot take them
    # one by one while it waits behind the earlier waiter.
    assert four.reserve(range(3), held={}) == (0, 1, 2)
    assert four.reserve((), held={}) == ()


def test_a_waiting_test_reserves_the_gpus_whose_holders_began_longest_ago():
    """bench_leases (29 Nov): two-GPU tests waiting while every GPU was held reserved the lowest
    pairs; the four GPUs that freed first went to one-GPU tests behind them. Where tests take alike,
    the GPUs taken longest ago are free first."""
    pair = Placer(machine("dgx-a100"), [reqs.P2PRequirement(gpus=2)], 2)
    held = {0: 30.0, 1: 30.0, 2: 31.0, 3: 31.0, 4: 28.0, 5: 28.0, 6: 28.0, 7: 29.5}
    assert pair.reserve(range(8), held) == (4, 5)
    assert pair.reserve([0, 1, 2, 3, 6, 7], held) == (6, 7)  # 4, 5 reserved before: 6 and 7 free before 0-3
    assert pair.reserve([0, 1, 2, 3, 6], held={**held, 1: 40.0}) == (0, 6)  # (every dgx-a100 pair is NVLink)


def test_a_large_test_behind_an_earlier_waiter_still_reserves_what_it_can():
    """The eight-GPU test found waiting behind a four-GPU waiter: it reserves the four GPUs the
    other left (before, it reserved none, and the one-GPU tests that came later took them turn by
    turn: bench_leases ran it last)."""
    eight = Placer(machine("dgx-a100"), [GpuRequirement(gpus=8)], 8)
    assert eight.reserve(range(4, 8), held={4: 1.0, 5: 1.0, 7: 1.0}) == (4, 5, 6, 7)


def test_a_test_keeps_the_set_of_the_test_before_only_where_it_meets_it_and_nothing_better_is_free():
    dgx1 = machine("dgx1-v100")  # hybrid cube mesh: pairs with two NVLinks, pairs with one, pairs with none
    pair = Placer(dgx1, [reqs.P2PRequirement(gpus=2)], 2)
    best = pair.choose(range(8))
    assert pair.accepts(best, free=range(8))
    worse = next(s for s in pair.meeting if pair._scores[s] < pair._scores[best])
    assert not pair.accepts(worse, free=best)  # a better pair is free: the test gets that one
    assert pair.accepts(worse, free=())  # nothing better free: it keeps what it has
    assert not pair.accepts((1, 0), free=()) or (0, 1) in pair.meeting  # held sets are compared sorted
    one = Placer(dgx1, [GpuRequirement(gpus=1)], 1)
    assert one.accepts((3,), free=range(8)) and not Placer(dgx1, [GpuRequirement(gpus=2)], 2).accepts((3,), free=())
