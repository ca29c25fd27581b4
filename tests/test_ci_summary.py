"""Under GitHub Actions (GITHUB_STEP_SUMMARY) the run appends a Markdown summary to the
job summary, and a failed run gate or check is an error annotation (GitHub's workflow command,
escaped as actions/toolkit's command.ts escapes it)."""

from __future__ import annotations

import pytest

from pytest_gputopo.render.markdown import annotation

GATE_EXIT_STATUS = 8


@pytest.fixture
def summary(tmp_path, monkeypatch):
    path = tmp_path / "step_summary.md"
    path.write_text("earlier step\n")  # other steps' summaries stay: the plugin appends
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    return path


def test_a_failed_check_is_summarised_and_annotated(pytester, summary):
    pytester.makepyfile(test_x="import pytest\n@pytest.mark.requires_nvlink\ndef test_nv(): pass\n")
    result = pytester.runpytest("--gputopo-machine", "hgx-h100-nvlink-down", "--gputopo-check", "quick")
    result.stdout.fnmatch_lines(
        ["::error title=gputopo check nvlink[[]GPU5[]]::GPU5: NVLinks [[]0, 1, *] are down (0/18 up)"]
    )
    text = summary.read_text()
    assert text.startswith("earlier step\n## gputopo\n")
    assert "**FAILED**: 45 health checks: 1 failed, 44 passed; 1 test not run for an unmet requirement" in text
    assert "**Failed checks:**" in text and "- **check nvlink** (GPU5): GPU5: NVLinks" in text
    assert (
        "| test\\_x.py::test\\_nv | skipped | requires\\_nvlink | requires\\_nvlink: GPU0-GPU5 are linked by SYS"
    ) in text
    assert "| **GPU5** | SYS | SYS | SYS | SYS | NODE | X | NODE | NODE |" in text
    assert "recorded:hgx-h100-nvlink-down (a recorded machine, not this host)" in text


def test_an_unmet_run_gate_is_summarised_and_annotated(pytester, summary):
    pytester.makepyfile(test_x="def test_a(): pass\n")
    result = pytester.runpytest("--gputopo-machine", "4x-rtx4090", "--gputopo-require", "gpus>=8")
    assert result.ret == GATE_EXIT_STATUS
    result.stdout.fnmatch_lines(["::error title=gputopo run gate requires_gpus(8)::4 visible"])
    assert (
        "**Run gate unmet** \\[recorded:4x-rtx4090 (a recorded machine, not this host)\\]:\n\n"
        "- requires\\_gpus(8): 4 visible"
    ) in summary.read_text()


def test_measured_figures_are_in_the_summary_with_their_origin(pytester, summary):
    pytester.makepyfile(test_x="def test_a(): pass\n")
    pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-check", "full")
    assert "| GPU0-\\>GPU1 copy, P2P | 364 | 450 | 315 | recorded |  |" in summary.read_text()


def test_without_github_nothing_is_written_or_annotated(pytester, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makepyfile(test_x="def test_a(): pass\n")
    result = pytester.runpytest("--gputopo-machine", "hgx-h100-nvlink-down", "--gputopo-check", "quick")
    assert "::error" not in result.stdout.str()


def test_annotations_escape_as_github_reads_them():
    assert (
        annotation("gputopo check p2p[GPU0,GPU1]", "50% of\nexpected")
        == "::error title=gputopo check p2p[GPU0%2CGPU1]::50%25 of%0Aexpected"
    )
    assert annotation("a: b", "c: d") == "::error title=a%3A b::c: d"


def test_a_measurement_without_a_figure_is_said_once_per_reason_with_no_origin(pytester, summary):
    """A recorded machine with no figure published for some kinds of copy: the summary has a row (and
    an origin) only for each figure there is, and says once why the others have none -- not a row of
    "—" labelled "recorded" per measurement, each repeating the same error."""
    pytester.makepyfile(test_x="def test_a(): pass\n")
    pytester.runpytest("--gputopo-machine", "dgx-a100", "--gputopo-check", "full")
    text = summary.read_text()
    assert "—" not in text and text.count("none published for recorded:dgx-a100") == 1
    assert (
        "- No figure for 56 copies staged through the host, 28 P2P copies both ways at once, "
        "8 device -\\> host copies: none published for recorded:dgx-a100, which is not this host and cannot be "
        "measured"
    ) in text
    figures = [line for line in text.splitlines() if line.endswith("| recorded |  |")]
    assert len(figures) == 2 * 28 + 16 + 1


def test_a_p2p_refused_node_is_one_annotation_one_row_and_one_banner_row(pytester, summary):
    """8x-l40s-p2p-disabled refuses P2P on all 28 pairs: one cause (the machine), so one error
    annotation (GitHub shows about 10 of a step), one row of the summary's failed checks and one row
    of the HTML report's verdict -- not 28 of each."""
    import re

    pytester.makepyfile(test_x="def test_a(): pass\n")
    result = pytester.runpytest(
        "--gputopo-machine", "8x-l40s-p2p-disabled", "--gputopo-check", "full", "--gputopo-html", "report.html"
    )
    errors = [line for line in result.stdout.lines if line.startswith("::error")]
    assert 1 <= len(errors) <= 3, errors
    assert errors[0].startswith(
        "::error title=gputopo check machine::all 28 pairs of the 8 GPUs fail "
        "p2p_status: P2P refused: topology not supported (28 pairs)%0AGPU0-GPU1 (PIX): "
    )
    assert errors[0].endswith("%0Aand 20 more")  # the evidence, eight lines at most
    text = summary.read_text()
    failed = text.split("**Failed checks:**\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert failed[0] == (
        "- **check p2p\\_status x28** (this machine): all 28 pairs of the 8 GPUs fail p2p\\_status: P2P refused: "
        "topology not supported (28 pairs)"
    )
    assert [line[:4] for line in failed[1:]] == ["  - "] * 9 and failed[-1] == "  - and 20 more"  # its evidence
    page = (pytester.path / "report.html").read_text()
    banner = page.split('<section id="verdict"', 1)[1].split("</section>", 1)[0]
    rows = re.findall(r'<tr><td class="failed">FAILED</td>.*?</tr>', banner)
    assert rows == [
        '<tr><td class="failed">FAILED</td><td>check p2p_status x28</td><td class="text">this machine</td>'
        '<td class="text">all 28 pairs of the 8 GPUs fail p2p_status: P2P refused: topology not supported '
        "(28 pairs)</td></tr>"
    ]


def test_at_most_ten_annotations_the_last_counting_the_rest():
    """GitHub shows 10 error annotations of a step: more causes than that end in one that counts them."""
    from pytest_gputopo.core.run_verdict import decide
    from pytest_gputopo.render.markdown import ANNOTATIONS, annotations

    checks = [
        {"check": f"pcie[GPU{i}]", "outcome": "failed", "message": f"GPU{i} PCIe link trained down"} for i in range(12)
    ]
    causes = [{"cause": c["check"], "headline": c["message"], "checks": [c["check"]]} for c in checks]
    found = annotations({"verdict": decide(checks, [], [], [], causes, complete=True).document()})
    assert len(found) == ANNOTATIONS == 10
    assert found[0] == "::error title=gputopo check pcie[GPU0]::GPU0 PCIe link trained down"
    assert found[-1].startswith("::error title=gputopo%3A 3 more causes::check pcie[GPU9]; check pcie[GPU10]; ")


def test_a_check_item_that_errored_fails_the_summary_as_it_fails_the_banner():
    """Issue 45: the HTML banner counted a check item whose outcome is pytest's ``error`` (its setup
    failed) as failed, and the job summary did not. One verdict now, decided once: both draw it."""
    from pytest_gputopo.core.run_verdict import FAILED, decide
    from pytest_gputopo.probe import probe
    from pytest_gputopo.render import report
    from pytest_gputopo.render.html import html_report
    from pytest_gputopo.render.markdown import annotations, summary as job_summary

    checks = [
        {"check": "nvlink[GPU5]", "outcome": "error", "message": "GPU5: the item's setup failed"},
        {"check": "pcie[GPU0]", "outcome": "passed", "message": "GPU0: x16 of x16"},
    ]
    verdict = decide(checks, [], [], [], [], complete=True)
    assert verdict.word == FAILED and [c.name for c in verdict.failed] == ["nvlink[GPU5]"]
    doc = {**report.machine_document(probe("dgx-a100")), "checks": checks, "unmet": [], "verdict": verdict.document()}
    assert "**FAILED**" in job_summary(doc) and "(GPU5): GPU5: the item" in job_summary(doc)
    assert annotations(doc) == ["::error title=gputopo check nvlink[GPU5]::GPU5: the item's setup failed"]
    assert '<section id="verdict" class="failed">' in html_report(doc)
