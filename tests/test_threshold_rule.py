"""The one threshold rule (``core.judgement.threshold``), pure: what a figure must reach, whoever
judges it -- a ``min_*_bw`` marker, a check item, the run's report."""

import pytest

from pytest_gputopo.core import keys, spec
from pytest_gputopo.core.judgement import BELOW, MET, STAGED, UNKNOWN, Judgement, Measured, threshold
from pytest_gputopo.core.thresholds import DEFAULT_FLOORS

H100 = "NVIDIA H100 80GB HBM3"
ALLREDUCE = keys.AllReduce(8, 16 * 2**30)
NV18 = spec.nvlink_gbps("4.0", 18)  # 450 GB/s per direction


def _rule(key=ALLREDUCE, expected=NV18, explicit=(), gpu=H100, **kw):
    return threshold(key, expected, "NV18", DEFAULT_FLOORS, set(explicit), gpu, **kw)


def test_a_published_floor_sets_a_full_nodes_all_reduce_threshold():
    rule = _rule()
    assert rule.needed_gbps == 440.0 and rule.set_by.startswith("published ")


@pytest.mark.parametrize(
    "why, kw",
    [
        ("the user set the run's all-reduce floor", {"explicit": ("allreduce",)}),
        ("the marker set its own floor", {"floor": DEFAULT_FLOORS["allreduce"]}),
        ("NCCL did without NVLink SHARP, which the floor assumes", {"nvls": False}),
        ("a smaller all-reduce than the operators publish for", {"size_bytes": 2**30}),
        ("no GPU model is known", {"gpu": None}),
    ],
)
def test_the_floor_ratio_rules_where_no_published_floor_applies(why, kw):
    rule = _rule(**kw)
    assert rule.absolute is None and rule.set_by == "", why
    assert rule.needed_gbps == pytest.approx(DEFAULT_FLOORS["allreduce"] * 450)


def test_a_markers_own_gbps_is_the_threshold_whatever_else_applies():
    rule = _rule(gbps=100.0)
    assert rule.needed_gbps == 100.0 and rule.set_by == ""


def test_nothing_to_judge_by_is_unknown_never_met():
    rule = _rule(key=keys.Copy("p2p", 0, 1), expected=None)
    assert rule.needed_gbps is None
    assert Judgement(Measured(400.0, "measured"), rule).state == UNKNOWN


@pytest.mark.parametrize(
    "gbps, staged, state", [(400.0, None, MET), (300.0, None, BELOW), (400.0, 420.0, STAGED), (400.0, 100.0, MET)]
)
def test_a_p2p_copys_state(gbps, staged, state):
    """0.7 x 450 = 315 GB/s; a copy that reaches it but is slower than staging through the host is no P2P."""
    rule = _rule(key=keys.Copy("p2p", 0, 1))
    judged = Judgement(Measured(gbps, "measured"), rule, staged)
    assert judged.state == state
    assert judged.document()["state"] == state and judged.document()["expected"]["needed_gbps"] == pytest.approx(315)


def test_an_all_reduce_across_nodes_is_held_to_no_nodes_published_floor():
    """Eight ranks on two nodes of four GPUs: the published floor is a full 8-GPU node's (its NVLink
    or NVSwitch), not a network's; the run and the fleet pass ``one_node=False`` there."""
    rule = _rule(one_node=False)
    assert rule.absolute is None and rule.set_by == ""
    assert _rule(one_node=False, expected=None).needed_gbps is None  # nothing says what it should reach


def test_the_fleet_holds_an_all_reduce_of_more_ranks_than_the_node_has_to_no_published_floor():
    """A node of four H100s whose document holds an all-reduce of 8 ranks (a two-node job): it ran
    across nodes, so it is never "below" the published 8-GPU floor (440 GB/s) in the fleet."""
    import dataclasses

    from pytest_gputopo.core.faults import figure_fault
    from pytest_gputopo.probe import probe_recorded

    h100 = probe_recorded("hgx-h100")
    four = dataclasses.replace(h100, gpus=h100.gpus[:4], links=tuple(ln for ln in h100.links if ln.b < 4))
    assert figure_fault(four, keys.AllReduce(8, 16 * 2**30), 40.0, "all-reduce, 8 ranks on two nodes") is None
    assert figure_fault(h100, keys.AllReduce(8, 16 * 2**30), 40.0, "all-reduce, 8 ranks") is not None


@pytest.mark.parametrize(("nodes", "published"), [(1, True), (2, False)])
def test_the_run_under_a_launcher_asks_a_published_floor_only_of_one_nodes_all_reduce(nodes, published):
    """Under torchrun the suite's all-reduce spans every rank of the run: eight ranks on two nodes of
    four GPUs were held to the 8-GPU node's published floor (a "below" no healthy pair of nodes meets
    over a network). The run's rule asks it only where the ranks are on one node."""
    from types import SimpleNamespace

    from pytest_gputopo.plugin.verdicts import _Rule
    from pytest_gputopo.probe import probe_recorded

    run = SimpleNamespace(
        settings=SimpleNamespace(floors=lambda: (DEFAULT_FLOORS, set())),
        topology=probe_recorded("hgx-h100"),
        ranks=object(),
        nodes=lambda: [None] * nodes,
    )
    rule = _Rule(run)(ALLREDUCE, (None, "an all-reduce across the ranks of the run"), None, None, None, None)
    assert (rule.absolute is not None) == published
