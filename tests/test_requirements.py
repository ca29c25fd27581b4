"""Requirements and verdicts on hand-built topologies (pure, no probing)."""

import pytest

from pytest_gputopo.core import gpu_requirements, requirements as reqs
from pytest_gputopo.core.expressions import parse_expression
from pytest_gputopo.core.fact_requirements import BandwidthRequirement
from pytest_gputopo.core.judgement import Measured
from pytest_gputopo.core.model import P2P, Gpu, Link, LinkClass, LinkLabel, P2PStatus, Topology
from pytest_gputopo.core.ranks_requirement import RanksRequirement
from pytest_gputopo.core.regressions import regressions
from pytest_gputopo.plugin.markers import from_marker

OK = P2P(P2PStatus.OK, P2PStatus.OK, P2PStatus.OK, P2PStatus.OK)
CNS = P2P(P2PStatus.CHIPSET_NOT_SUPPORTED, P2PStatus.CHIPSET_NOT_SUPPORTED)


def box(labels: dict, n: int, p2p=OK) -> Topology:
    """``labels``: {(a, b): "NV12" | "SYS" | None}; unlisted pairs are PIX."""
    links = []
    for a in range(n):
        for b in range(a + 1, n):
            text = labels.get((a, b), "PIX")
            if text is None:
                links.append(Link(a, b, pcie=None, nvlinks=None, p2p=P2P()))
                continue
            label = LinkLabel.parse(text)
            nv = label.nvlinks if label.cls is LinkClass.NV else 0
            links.append(Link(a, b, pcie=None if nv else label.cls, nvlinks=nv, p2p=p2p))
    return Topology(gpus=tuple(Gpu(i, name="GPU") for i in range(n)), links=tuple(links))


def test_link_order_and_nv_counts():
    assert reqs.LinkRequirement(need=LinkLabel.parse("PXB")).evaluate(box({}, 4)).ok
    verdict = from_marker("requires_link", ("PXB",), {})[0].evaluate(box({(0, 3): "SYS"}, 4))
    assert not verdict.ok
    assert verdict.reason == "requires_link('PXB'): GPU0-GPU3 are linked by SYS"
    nv12 = from_marker("requires_link", ("NV12",), {})[0]
    assert not nv12.evaluate(box({(0, 1): "NV4"}, 2)).ok
    assert nv12.evaluate(box({(0, 1): "NV18"}, 2)).ok
    any_nv = from_marker("requires_link", ("nv",), {})[0]
    assert any_nv.evaluate(box({(0, 1): "NV1"}, 2)).ok
    assert str(any_nv) == "requires_link('NV')"


def test_gpus_argument_limits_the_pairs_to_the_first_devices():
    topo = box({(0, 4): "SYS"}, 8)
    link = from_marker("requires_link", ("PIX",), {"gpus": 4})[0]
    assert link.evaluate(topo).ok
    assert not from_marker("requires_link", ("PIX",), {})[0].evaluate(topo).ok
    too_many = from_marker("requires_p2p", (), {"gpus": 16})[0].evaluate(topo)
    assert not too_many.ok and "needs 16 GPUs, 8 visible" in too_many.reason


def test_p2p_refused_unknown_and_cuda_disagreement():
    assert reqs.P2PRequirement().evaluate(box({}, 2)).ok
    refused = reqs.P2PRequirement().evaluate(box({}, 2, p2p=CNS))
    assert "GPU0-GPU1 cannot do P2P (read chipset not supported, write chipset not supported)" in refused.reason
    unknown = reqs.P2PRequirement().evaluate(box({(0, 1): None}, 2))
    assert not unknown.ok and "unknown" in unknown.reason
    topo = box({}, 2)
    cuda_says_no = Topology(gpus=topo.gpus, links=(Link(0, 1, LinkClass.PIX, 0, OK, cuda_peer=False),))
    assert "CUDA reports no peer access" in reqs.P2PRequirement().evaluate(cuda_says_no).reason


def test_pair_requirements_need_a_pair():
    one = box({}, 1)
    verdict = reqs.P2PRequirement().evaluate(one)
    assert not verdict.ok and "needs 2 GPUs to form a pair, 1 visible" in verdict.reason
    none = Topology(problem="NVML library not found")
    assert "(NVML library not found)" in gpu_requirements.GpuRequirement(gpus=1).evaluate(none).reason
    assert gpu_requirements.GpuRequirement(gpus=0).evaluate(none).ok


def test_nvlink_min_links():
    topo = box({(0, 1): "NV4", (0, 2): "PHB", (1, 2): "NV4"}, 3)
    verdict = from_marker("requires_nvlink", (), {"min_links": 2})[0].evaluate(topo)
    assert verdict.failures == ("GPU0-GPU2 are linked by PHB, not NVLink",)
    verdict = from_marker("requires_nvlink", (), {"min_links": 8})[0].evaluate(topo)
    assert len(verdict.failures) == 3 and "GPU0-GPU1 are linked by NV4, needs NV8" in verdict.failures


def test_reason_names_three_pairs_then_counts():
    topo = box({(0, b): "SYS" for b in range(1, 8)}, 8)
    verdict = from_marker("requires_link", ("PXB",), {})[0].evaluate(topo)
    assert verdict.reason.endswith("; and 4 more pairs")
    assert len(verdict.failures) == 7


@pytest.mark.parametrize(
    "name,args,kwargs,message",
    [
        ("requires_gpus", ("8",), {}, "n must be a number of GPUs from 0 to 1024"),
        ("requires_versions", (), {}, "name at least one version"),
        ("requires_versions", ("2.18",), {}, "too many positional arguments"),
        ("requires_versions", (), {"nccl": "2.18"}, "write '>=2.18' or '==2.18'"),
        ("requires_gpus", (), {"compute_capability": 9.0}, "compute_capability: expected a version specifier"),
        ("requires_gpus", (), {"compute_capability": [">=9"]}, "compute_capability: expected a version specifier"),
        ("requires_versions", (), {"nccl": {">=2.18"}}, "nccl: expected a version specifier"),
        ("requires_gpus", (), {"model": ["H100", 7]}, "model must be a name or a list of names"),
        ("requires_gpus", (), {"arch": "hoper"}, "arch must be one of kepler"),
        ("requires_gpus", (), {"min_memory_gb": "40"}, "min_memory_gb must be a number of GB"),
        ("requires_gpus", (0,), {"bf16": True}, "need at least one GPU, but n is 0"),
        ("requires_gpus", ([],), {}, "n must list at least one GPU index"),
        ("min_allreduce_bw", (50,), {"gpus": [3]}, "an all-reduce needs at least 2 GPUs"),
        ("requires_p2p", (), {"gpus": 0}, "gpus must be a number of GPUs from 1 to 1024"),
        ("requires_p2p", (), {"gpu": 2}, "unexpected keyword argument 'gpu'"),
        ("requires_link", ("PXQ",), {}, "unknown link label 'PXQ'"),
        ("requires_link", (12,), {}, "link class string"),
        ("requires_link", ("NV0",), {}, "unknown link label"),
        ("requires_nvlink", (), {"min_links": True}, "min_links"),
        ("requires_p2p", (), {"strict": "yes"}, "strict must be True or False"),
    ],
)
def test_bad_marker_arguments(name, args, kwargs, message):
    with pytest.raises(reqs.RequirementError, match=message):
        from_marker(name, args, kwargs)


def test_marker_strict_argument_is_returned():
    assert from_marker("requires_p2p", (), {"strict": True}) == (reqs.P2PRequirement(), True)
    assert from_marker("requires_gpus", (2,), {})[1] is None


def test_expression_grammar():
    terms = parse_expression("gpus>=8, p2p, link>=NV18, nvlink>=2@4, link >= pxb @2")
    assert terms == (
        gpu_requirements.GpuRequirement(gpus=8),
        reqs.P2PRequirement(),
        reqs.LinkRequirement(need=LinkLabel.parse("NV18"), spelled="NV18"),
        reqs.NvLinkRequirement(gpus=4, min_links=2),
        reqs.LinkRequirement(gpus=2, need=LinkLabel.parse("PXB"), spelled="PXB"),
    )


@pytest.mark.parametrize("text", ["", "gpus>8", "p2p,,link>=PIX", "link>=FAST", "gpus>=2@2", "nvlink>=0"])
def test_bad_expressions_show_the_grammar(text):
    with pytest.raises(reqs.RequirementError) as info:
        parse_expression(text)
    assert "TERM  :=" in str(info.value)


def test_regressions_against_a_reference():
    healthy = box({(a, b): "NV12" for a in range(4) for b in range(a + 1, 4)}, 4)
    assert regressions(healthy, healthy) == []
    degraded = box({(0, 1): "NV12", (0, 2): "NV12", (1, 2): "NV12", (0, 3): "SYS", (1, 3): "SYS", (2, 3): "NV8"}, 4)
    found = regressions(healthy, degraded)
    assert "GPU0-GPU3 are linked by SYS, the reference by NV12" in found
    assert "GPU2-GPU3 are linked by NV8, the reference by NV12" in found
    assert regressions(healthy, box({}, 2))[0] == "2 GPUs visible, the reference has 4"


def test_a_measured_figure_says_its_interval_and_a_small_one_keeps_its_digits():
    assert Measured(234.94, "recorded").text() == "recorded 234.9 GB/s"
    assert (
        Measured(0.5812, "measured", interval=(0.527, 0.6204)).text() == "measured 0.581 GB/s (95% interval 0.527-0.62)"
    )


def _figure(gbps, expected):
    """A P2P copy's figure (None: none, the copy failed) against 0.7 x ``expected`` (None: nothing says)."""
    from pytest_gputopo.core.judgement import Judgement, Threshold
    from pytest_gputopo.core.spec import Figure

    exp = Figure(expected, "spec", "NV4") if expected is not None else None
    measured = Measured(gbps, "measured", "GPU0->GPU1 copy, P2P", error=None if gbps is not None else "no peer access")
    return Judgement(measured, Threshold(exp, "NV4", 0.7))


@pytest.mark.parametrize(
    "requirement, topology, unknown",
    [
        # A fact no source reported: unmet, and unknown (never said to fall short).
        (gpu_requirements.GpuRequirement(model="H100"), Topology(gpus=(Gpu(0),)), True),
        (gpu_requirements.VersionRequirement(nccl=">=2.18"), Topology(gpus=(Gpu(0),)), True),
        (reqs.P2PRequirement(), box({(0, 1): None}, 2), True),
        (reqs.NvLinkRequirement(), box({(0, 1): None}, 2), True),
        (reqs.LinkRequirement(need="NV"), box({(0, 1): None}, 2), True),
        # One fact known to fall short beside an unknown one: unmet.
        (
            gpu_requirements.GpuRequirement(min_memory_gb=80, model="H100"),
            Topology(gpus=(Gpu(0, memory_total_bytes=40 * 10**9),)),
            False,
        ),
        (reqs.NvLinkRequirement(), box({(0, 1): None, (0, 2): "SYS"}, 3), False),
        # A shortfall worded with "is unknown" is still a shortfall: the verdict reads the finding, not its words.
        (gpu_requirements.GpuRequirement(model="is unknown"), Topology(gpus=(Gpu(0, name="NVIDIA A100"),)), False),
    ],
)
def test_an_unmet_verdict_says_whether_it_rests_only_on_unknown_facts(requirement, topology, unknown):
    verdict = requirement.evaluate(topology)
    assert not verdict.ok and verdict.unknown is unknown
    if unknown:  # each finding carries the flag too, whatever its wording
        assert all(f.unknown for f in requirement.findings(topology))


@pytest.mark.parametrize(
    "figures, unknown",
    [
        ([(50.0, None)], True),  # nothing says what the copy should reach
        ([(None, 60.0)], True),  # no figure at all
        ([(10.0, 60.0), (50.0, None)], False),  # one copy known to be slow
    ],
)
def test_a_bandwidth_verdict_is_unknown_only_when_no_figure_is_known_to_fall_short(figures, unknown):
    judgements = [_figure(gbps, exp) for gbps, exp in figures]
    verdict = BandwidthRequirement(metric="p2p").judge(box({}, 2), judgements)
    assert not verdict.ok and verdict.unknown is unknown


@pytest.mark.parametrize(
    ("timeout", "group"),
    [
        (None, 270.0),  # torch's 300 s: a tenth left
        (600, 570.0),  # at most 30 s left
        (20, 15.0),  # at least 5 s: the others' 3 s after a failure and 2 s for their stacks
        (8, 4.0),  # never more than half the test's time
        (1, 0.5),
    ],
)
def test_a_ranks_tests_process_group_times_out_inside_the_tests_own_deadline(timeout, group):
    assert RanksRequirement(n=2, timeout=timeout).group_timeout_s == group
