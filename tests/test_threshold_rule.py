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
