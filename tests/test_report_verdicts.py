"""The JSON report holds every gated test's verdict -- met, unmet, unknown, broken -- and why, so that a
ported suite can be compared machine by machine from the reports alone; ``unmet`` stays as it was."""

from __future__ import annotations

import json

import pytest

from pytest_gputopo.render.document import ReportError, check_document

TESTS = """
import pytest

def test_ungated(): pass

@pytest.mark.requires_gpus(4)
def test_met(): pass

@pytest.mark.requires_gpus(min_memory_gb=80)
def test_short(): pass

@pytest.mark.requires_versions(nccl=">=2.18")
def test_versions(): pass

@pytest.mark.min_p2p_bw(10)
@pytest.mark.requires_versions(driver=">=400")
@pytest.mark.requires_gpus(16)
def test_after(): pass
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_report_holds_each_requirement_of_each_gated_test_with_its_verdict(pytester, xdist):
    """On 4x A100 40 GB: a count it has is met, 80 GB is unmet (known to fall short), an NCCL version no
    source reported is unknown (never unmet, never met); in a test skipped for its first unmet
    requirement, a later one on the topology is still judged and one on measurements is unknown
    (nothing is measured for a test not run). Ungated tests have none; xdist workers' reach the report."""
    pytester.makepyfile(test_f=TESTS)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", *xdist, "--gputopo-machine", "4x-a100-40gb", "--gputopo-json", "out.json"
    )
    result.assert_outcomes(passed=2, skipped=3)
    doc = json.loads((pytester.path / "out.json").read_text())
    check_document(doc)
    got = {(v["test"].split("::")[1], v["requirement"]): v for v in doc["verdicts"]}
    assert {k: v["verdict"] for k, v in got.items()} == {
        ("test_met", "requires_gpus(4)"): "met",
        ("test_short", "requires_gpus(1, min_memory_gb=80)"): "unmet",
        ("test_versions", "requires_versions(nccl='>=2.18')"): "unknown",
        ("test_after", "requires_gpus(16)"): "unmet",
        ("test_after", "requires_versions(driver='>=400')"): "met",
        ("test_after", "min_p2p_bw(10)"): "unknown",
    }
    assert len(doc["verdicts"]) == 6  # once each, though every phase's report repeats the properties
    assert "has 42.9 GB of memory, needs 80 GB" in got["test_short", "requires_gpus(1, min_memory_gb=80)"]["reason"]
    assert "(nccl) is unknown" in got["test_versions", "requires_versions(nccl='>=2.18')"]["reason"]
    assert got["test_after", "min_p2p_bw(10)"]["reason"] == "not judged: the test did not run for requires_gpus(16)"
    assert got["test_met", "requires_gpus(4)"]["reason"] is None
    assert sorted((u["test"].split("::")[1], u["requirement"]) for u in doc["unmet"]) == [
        ("test_after", "requires_gpus(16)"),
        ("test_short", "requires_gpus(1, min_memory_gb=80)"),
        ("test_versions", "requires_versions(nccl='>=2.18')"),
    ]


def test_a_met_verdict_on_recorded_figures_says_so(pytester):
    """A bandwidth requirement met by figures published for the machine is met, ``recorded`` true,
    its reason saying where the figures come from."""
    pytester.makepyfile(
        test_f="""
import pytest

@pytest.mark.min_allreduce_bw(1)
def test_bw(): pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", "dgx-a100", "--gputopo-json", "out.json")
    result.assert_outcomes(passed=1)
    (verdict,) = json.loads((pytester.path / "out.json").read_text())["verdicts"]
    assert verdict["verdict"] == "met" and verdict["recorded"] is True
    assert "met on recorded figures" in verdict["reason"]


def test_a_run_without_a_report_adds_no_verdict_property(pytester):
    """The verdicts travel as a ``gputopo_verdict`` property only when a report reads them: JUnit XML
    of a run without --gputopo-json is as it was."""
    pytester.makepyfile(test_f=TESTS)
    pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", "4x-a100-40gb", "--junitxml=r.xml")
    assert "gputopo_verdict" not in (pytester.path / "r.xml").read_text()


@pytest.mark.parametrize(
    "entry, field",
    [
        ({"test": "t", "requirement": "r", "verdict": "assumed ok"}, "verdicts[0].verdict"),
        ({"test": "t", "verdict": "met"}, "verdicts[0].requirement: missing"),
        ({"test": "t", "requirement": "r", "verdict": "met", "reason": 3}, "verdicts[0].reason"),
        ({"test": "t", "requirement": "r", "verdict": "met", "recorded": "yes"}, "verdicts[0].recorded"),
    ],
)
def test_gputopo_report_refuses_a_verdict_it_cannot_trust(entry, field):
    """A saved document's verdict is one of met, unmet, unknown, broken, with its test and requirement;
    anything else is refused naming the field."""
    from pytest_gputopo.probe.recorded import resolve

    topology = json.loads(resolve("4x-a100-40gb").read_text())["topology"]
    with pytest.raises(ReportError, match=field.replace("[", r"\[").replace("]", r"\]")):
        check_document({"schema": 1, "topology": topology, "verdicts": [entry]})


def test_the_documented_verdicts_are_what_the_report_holds(pytester):
    """docs/report.md's example: the verdicts of a test skipped for its first unmet requirement."""
    from doc_examples import blocks

    (block,) = [b for b in blocks() if b.path == "docs/report.md" and '"test_f.py::test_after"' in b.text]
    pytester.makepyfile(test_f=TESTS)
    pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", "4x-a100-40gb", "--gputopo-json", "out.json")
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [json.loads(line) for line in block.lines if line.strip()] == [
        v for v in doc["verdicts"] if v["test"] == "test_f.py::test_after"
    ]
