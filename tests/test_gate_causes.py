"""A failed run gate names its cause first (a GPU, the machine), then the findings that show it, and
is a red entry per cause in JUnit, in GitHub's annotations and in pytest's own outcomes, with exit
status 8 and none of the run's tests run."""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_gputopo.core.causes import MACHINE, Finding, Group, causes
from pytest_gputopo.core.expressions import parse_expression
from pytest_gputopo.core.regressions import compared
from pytest_gputopo.plugin.run import GATE_EXIT_STATUS
from pytest_gputopo.probe import probe_recorded

TESTS = "def test_a(): pass\ndef test_b(): pass\n"


def _require(machine: str, expression: str, node: str = "") -> list[Group]:
    topology = probe_recorded(machine)
    return [
        Group(
            str(t),
            tuple(f"GPU{i}" for i in topology.chosen(t.gpus)),
            tuple(f.under(str(t)) for f in t.findings(topology)),
            node,
        )
        for t in parse_expression(expression)
    ]


def _pair(a: int, b: int, what: str = "are linked by SYS") -> Finding:
    return Finding(f"GPU{a}-GPU{b} {what}", (f"GPU{a}", f"GPU{b}"), what, f"GPU{a}-GPU{b}")


def _eight(*failing) -> Group:
    return Group("requires_link('NV12')", tuple(f"GPU{i}" for i in range(8)), tuple(_pair(a, b) for a, b in failing))


# ------------------------------------------------------------------ the rule (core.causes)


def test_a_gpu_in_every_failing_pair_is_named_first_with_its_pairs_as_evidence():
    """hgx-h100-nvlink-down: GPU5 lost its NVLinks, so every pair with GPU5 fails NV12 and no other."""
    (found,) = causes(_require("hgx-h100-nvlink-down", "gpus>=8,p2p,link>=NV12"))
    assert found.name == "GPU5"
    assert found.headline == ("GPU5: all 7 of its pairs fail requires_link('NV12'); the 21 pairs without GPU5 pass")
    assert found.evidence == [
        "requires_link('NV12'): GPU0-GPU5 are linked by SYS",
        "requires_link('NV12'): GPU1-GPU5 are linked by SYS",
        "requires_link('NV12'): GPU2-GPU5 are linked by SYS",
        "requires_link('NV12'): GPU3-GPU5 are linked by SYS",
        "requires_link('NV12'): GPU4-GPU5 are linked by NODE",
        "requires_link('NV12'): GPU5-GPU6 are linked by NODE",
        "requires_link('NV12'): GPU5-GPU7 are linked by NODE",
    ]


def test_every_pair_failing_is_the_machine_once_with_how_the_pairs_fail():
    """8x-l40s has no NVLink at all: one cause, not 28."""
    (found,) = causes(_require("8x-l40s", "gpus>=8,p2p,link>=NV12"))
    assert found.subject == MACHINE and found.name == "machine"
    assert found.headline == (
        "the machine: all 28 pairs of the 8 GPUs fail requires_link('NV12'): are linked by "
        "SYS (16 pairs), are linked by NODE (8 pairs), are linked by PIX (4 pairs)"
    )
    assert len(found.evidence) == 28
    assert found.lines()[-1] == "  and 20 more"  # the evidence is capped where it is shown


def test_most_gpus_failing_most_pairs_is_the_machine_not_one_gpu():
    (found,) = causes(_require("8x-l40s", "link>=PXB"))
    assert found.subject == MACHINE
    assert found.headline.startswith("the machine: 24 of the 28 pairs of the 8 GPUs fail requires_link('PXB')")


def test_failing_pairs_that_share_no_gpu_stand_alone():
    found = causes([_eight((0, 1), (2, 3))])
    assert [c.headline for c in found] == ["GPU0-GPU1 are linked by SYS", "GPU2-GPU3 are linked by SYS"]
    assert [c.evidence for c in found] == [[], []]


def test_two_bad_gpus_are_two_causes_and_a_stray_pair_stands_alone():
    bad = [(min(g, o), max(g, o)) for g in (3, 5) for o in range(8) if o != g]
    found = causes([_eight(*dict.fromkeys(bad), (0, 1))])
    assert [c.name for c in found] == ["GPU3", "GPU5", "GPU0-GPU1"]
    assert found[0].headline == (
        "GPU3: all 7 of its pairs fail requires_link('NV12'); 14 of the 15 pairs without GPU3 or GPU5 pass"
    )


def test_one_pair_of_two_gpus_names_no_gpu():
    """A single pair cannot tell which of its GPUs is at fault."""
    group = Group("requires_p2p", ("GPU0", "GPU1"), (_pair(0, 1, "cannot do P2P"),))
    (found,) = causes([group])
    assert found.headline == "GPU0-GPU1 cannot do P2P" and found.evidence == []


def test_the_expect_gate_leads_with_the_gpu_then_every_pair_it_spoils():
    names, found = compared(probe_recorded("hgx-h100"), probe_recorded("hgx-h100-nvlink-down"))
    group = Group("the comparison with hgx-h100", names, tuple(f.under("expected as hgx-h100") for f in found))
    (cause,) = causes([group])
    assert cause.headline.startswith("GPU5: has 0 active NVLinks, the reference 18; all 7 of its pairs fail")
    assert cause.evidence[0] == "expected as hgx-h100: GPU5 has 0 active NVLinks, the reference 18"
    assert len(cause.evidence) == 8


def test_one_gpu_found_by_two_checks_is_one_cause():
    names, found = compared(probe_recorded("hgx-h100"), probe_recorded("hgx-h100-nvlink-down"))
    expect = Group("the comparison with hgx-h100", names, tuple(f.under("expected as hgx-h100") for f in found))
    (cause,) = causes(_require("hgx-h100-nvlink-down", "link>=NV12") + [expect])
    assert cause.name == "GPU5" and len(cause.evidence) == 15
    assert "requires_link('NV12')" in cause.headline and "hgx-h100" in cause.headline


def test_the_same_gpu_on_two_nodes_is_two_causes():
    found = causes(
        _require("hgx-h100-nvlink-down", "link>=NV12", "rank 0 (a)")
        + _require("hgx-h100-nvlink-down", "link>=NV12", "rank 8 (b)")
    )
    assert [c.name for c in found] == ["rank 0 (a):GPU5", "rank 8 (b):GPU5"]
    assert found[1].headline.startswith("rank 8 (b): GPU5: all 7 of its pairs")


# ------------------------------------------------------------------ the run gate in pytest


def run_gated(pytester, machine: str, *args: str):
    """TESTS run on the recorded ``machine`` with ``args`` (the gate's options among them)."""
    pytester.makepyfile(test_x=TESTS)
    return pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", machine, *args)


def _junit(path) -> list[tuple[str, str, str]]:
    suite = ET.parse(path).getroot().find("testsuite")
    return [
        (case.get("classname"), case.get("name"), case.find("failure").get("message"))
        for case in suite.iter("testcase")
    ]


@pytest.mark.parametrize("gate", [["--gputopo-require", "gpus>=8,p2p,link>=NV12"], ["--gputopo-expect", "hgx-h100"]])
@pytest.mark.parametrize("xdist", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)])
def test_an_unmet_gate_is_one_failed_junit_case_per_cause_and_exit_status_8(pytester, gate, xdist):
    """GitLab's and Jenkins' test widgets read JUnit: an unmet gate is red there, named by its cause,
    the run's own tests are not run, and pytest's internal Exit line is not printed."""
    result = run_gated(pytester, "hgx-h100-nvlink-down", *gate, *xdist, "--junitxml=report.xml")
    assert result.ret == GATE_EXIT_STATUS
    ((classname, name, message),) = _junit(pytester.path / "report.xml")
    assert (classname, name) == ("gputopo-gate", "GPU5")
    assert message.startswith("GPU5: ")
    assert "GPU0-GPU5 are linked by SYS" in message  # the evidence comes with it
    out = result.stdout.str()
    assert "test_x" not in out and "Exit" not in out and "!!" not in out
    result.stdout.fnmatch_lines(["gputopo: run gate unmet: 1 cause (GPU5); exit status 8"])
    result.stdout.fnmatch_lines(["FAILED gputopo-gate::GPU5 - GPU5: *"])


def test_the_gate_output_leads_with_the_cause_then_its_evidence(pytester):
    result = run_gated(pytester, "hgx-h100-nvlink-down", "--gputopo-require", "gpus>=8,p2p,link>=NV12")
    result.stdout.fnmatch_lines(
        [
            "gputopo: this machine does not meet the run's requirements [[]recorded:hgx-h100-nvlink-down*]:",
            "  - GPU5: all 7 of its pairs fail requires_link('NV12'); the 21 pairs without GPU5 pass",
            "      requires_link('NV12'): GPU0-GPU5 are linked by SYS",
            "*",
            "      requires_link('NV12'): GPU5-GPU7 are linked by NODE",
            "gputopo: the run's tests are not collected; 1 cause, each a failed test gputopo-gate::<cause>",
        ]
    )


def test_a_machine_without_nvlink_is_one_annotation_not_28(pytester, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run_gated(pytester, "8x-l40s", "--gputopo-require", "gpus>=8,p2p,link>=NV12", "--junitxml=report.xml")
    assert result.ret == GATE_EXIT_STATUS
    annotations = [line for line in result.stdout.lines if line.startswith("::error")]
    assert len(annotations) == 1
    assert annotations[0].startswith(
        "::error title=gputopo run gate machine::all 28 pairs of the 8 GPUs "
        "fail requires_link('NV12'): are linked by SYS (16 pairs)"
    )
    assert annotations[0].endswith("%0Aand 20 more")  # the evidence, capped: GitHub shows a few lines
    text = summary.read_text()
    assert "- this machine: all 28 pairs of the 8 GPUs fail requires\\_link('NV12')" in text
    assert "  - requires\\_link('NV12'): GPU0-GPU1 are linked by PIX" in text and "  - and 20 more" in text
    assert [name for _, name, _ in _junit(pytester.path / "report.xml")] == ["machine"]


def test_collect_only_with_an_unmet_gate_lists_its_causes_and_exits_8(pytester):
    result = run_gated(pytester, "hgx-h100-nvlink-down", "--collect-only", "-q", "--gputopo-require", "link>=NV12")
    assert result.ret == GATE_EXIT_STATUS
    result.stdout.fnmatch_lines(["gputopo-gate::GPU5"])
    assert "test_x" not in result.stdout.str()


def test_a_met_gate_runs_the_tests_as_before(pytester):
    result = run_gated(pytester, "hgx-h100", "--gputopo-require", "gpus>=8,p2p,link>=NV18", "--junitxml=report.xml")
    assert result.ret == 0
    result.assert_outcomes(passed=2)
    assert "gputopo-gate" not in result.stdout.str()


def test_a_gpu_behind_several_tests_skips_is_named_once_in_the_summary(pytester):
    pytester.makepyfile(
        test_x="""
import pytest

@pytest.mark.requires_nvlink
def test_nvlink(): pass

@pytest.mark.requires_link("NV12")
def test_nv12(): pass

@pytest.mark.requires_link("NV12", gpus=[0, 5])
def test_one_pair(): pass

def test_plain(): pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", "hgx-h100-nvlink-down")
    result.assert_outcomes(passed=1, skipped=3)
    # One pair alone names no GPU: the common cause counts the two tests over every GPU.
    result.stdout.fnmatch_lines(
        ["gputopo: GPU5 is the common cause of 2 tests not run: requires_link('NV12') x1, requires_nvlink x1"]
    )


# ------------------------------------------------------------------ the docs say what it prints

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _block(doc: str, first: str) -> list[str]:
    """The lines of the fenced block of ``doc`` whose first line starts with ``first``."""
    (found,) = [b for b in re.findall(r"^```[^\n]*\n(.*?)^```", doc, re.S | re.M) if b.startswith(first)]
    return found.splitlines()


def _shown_in_order(shown: list[str], printed: list[str]) -> None:
    """Every shown line is printed, in order ("..." in a line: any text; a line of "..." alone: any lines)."""
    at = 0
    for line in shown:
        if line.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in line.split("...")))
        at = next(k for k in range(at, len(printed)) if pattern.fullmatch(printed[k].rstrip())) + 1


def test_the_documented_gate_output_is_what_it_prints(pytester):
    """docs/options.md's unmet-gate transcripts: GPU5 on hgx-h100-nvlink-down, the machine on 8x-l40s."""
    doc = (DOCS / "options.md").read_text()
    shown = _block(doc, "$ pytest --gputopo-machine hgx-h100-nvlink-down --gputopo-require")
    assert shown[-2:] == ["$ echo $?", "8"]
    pytester.makepyfile(test_x=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", *shlex.split(shown[0][len("$ pytest") :]))
    assert result.ret == GATE_EXIT_STATUS
    _shown_in_order(shown[1:-2], result.stdout.lines)
    l40s = _block(doc, "  - the machine: all 28 pairs")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-machine", "8x-l40s", "--gputopo-require", "link>=NV12"
    )
    _shown_in_order(l40s, result.stdout.lines)
