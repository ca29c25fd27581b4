"""A test that passes on figures recorded for a machine (published, never measured here) says so in
every output: its -v and -rA lines, a report section, JUnit XML and the run's summary."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_gputopo.core import judgement
from pytest_gputopo.core.fact_requirements import BandwidthRequirement
from pytest_gputopo.core.spec import Figure
from pytest_gputopo.probe import reference

BENCH = """
import pytest

@pytest.mark.min_allreduce_bw(100)
def test_ar(): pass

@pytest.mark.min_allreduce_bw(1000)
def test_ar_too_fast(): pass

@pytest.mark.requires_p2p
def test_p2p(): pass
"""


def _properties(xml_path):
    root = ET.parse(xml_path).getroot()
    return {
        case.get("name"): [(p.get("name"), p.get("value")) for p in case.iter("property")]
        for case in root.iter("testcase")
    }


def test_pass_on_recorded_figure_says_so_everywhere(pytester):
    """-v, -rA (its line and a section naming the figure and where it was published), JUnit's
    property, and the run's summary; a test met on topology facts and a skipped one add nothing."""
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--gputopo-machine", "dgx-a100", "-v", "-rA", "--junitxml=report.xml")
    result.assert_outcomes(passed=2, skipped=1)  # the verdicts do not change
    result.stdout.fnmatch_lines(
        [
            "test_bench.py::test_ar PASSED (recorded, not measured)*",
            "test_bench.py::test_p2p PASSED *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*Captured gputopo setup*",
            "min_allreduce_bw(100): met on recorded figures, not measured here: all-reduce busbw, 8 ranks, 16 GiB: "
            "recorded 234.9 GB/s, needed 100.0, * (published: ml-engineering *) [[]recorded:dgx-a100 *]",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "gputopo: 1 test passed on figures recorded for the machine, not measured here: "
            "min_allreduce_bw(100) x1 [[]recorded:dgx-a100 *]",
            "*short test summary*",
        ]
    )
    result.stdout.fnmatch_lines(["PASSED (recorded, not measured) test_bench.py::test_ar"])
    assert "test_p2p PASSED (recorded" not in result.stdout.str()
    props = _properties(pytester.path / "report.xml")
    [(name, value)] = props["test_ar"]
    assert name == "gputopo_recorded"
    assert value.startswith("min_allreduce_bw(100): met on recorded figures, not measured here: ")
    assert "recorded 234.9 GB/s" in value and "[recorded:dgx-a100" in value
    assert props["test_p2p"] == []
    assert "gputopo_recorded" not in dict(props["test_ar_too_fast"])


@pytest.mark.slow
def test_recorded_pass_under_xdist_reaches_junit(pytester):
    """Under xdist the controller writes the line and the JUnit property from the worker's report."""
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest("--gputopo-machine", "dgx-a100", "-n", "2", "-v", "--junitxml=report.xml")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*PASSED (recorded, not measured) test_bench.py::test_ar*"])
    assert (
        dict(_properties(pytester.path / "report.xml")["test_ar"])
        .get("gputopo_recorded", "")
        .startswith("min_allreduce_bw(100): met on recorded figures")
    )


def _judged(origin):
    source = "a paper" if origin == "recorded" else None
    measured = judgement.Measured(50.0, origin, "GPU0->GPU1 copy, P2P", source=source)
    return judgement.Judgement(measured, judgement.Threshold(Figure(60.0, "spec", "NV2"), "NV2", 0.5))


def test_measured_pass_says_nothing_recorded():
    """Only figures recorded for the machine are named: a figure measured here or cached adds nothing."""
    topology = reference("dgx-a100")
    requirement = BandwidthRequirement(metric="p2p", gbps=None, gpus=2)
    for origin in ("measured", "cached"):
        verdict = requirement.judge(topology, [_judged(origin)])
        assert verdict.ok and verdict.recorded == ""
    verdict = requirement.judge(topology, [_judged("recorded")])
    assert verdict.ok
    assert verdict.recorded == (
        "min_p2p_bw(gpus=2): met on recorded figures, not measured here: GPU0->GPU1 copy, "
        "P2P: recorded 50.0 GB/s, needed 30.0, expected 60.0 from NV2 (published: a paper)"
    )


def test_docs_show_what_a_recorded_pass_prints(pytester):
    """docs/benchmarks.md shows the lines such a run prints ("..." standing for text left out)."""
    doc = (Path(__file__).parents[1] / "docs" / "benchmarks.md").read_text()
    block = doc.split("PASSED (recorded, not measured)", 1)[0].rsplit("```\n", 1)[1]
    block += "PASSED (recorded, not measured)" + doc.split("PASSED (recorded, not measured)", 1)[1].split("```", 1)[0]
    shown = [ln for ln in block.splitlines() if ln.strip() and ln.strip() != "..."]
    pytester.makepyfile(test_x="import pytest\n@pytest.mark.min_allreduce_bw(100)\ndef test_ar(): pass\n")
    result = pytester.runpytest("--gputopo-machine", "dgx-a100", "-v", "-rA", "--junitxml=report.xml", "test_x.py")
    result.stdout.fnmatch_lines([ln.replace("[", "[[]").replace("...", "*") for ln in shown])
