"""The run is judged once: its record (``plugin/run_record.py``) is built once when it ends, and every
output reads it. Each test's verdicts carry the figures it was judged on at its own threshold, and the
HTML report marks them, so that no cell is green where a test was skipped over its figure."""

from __future__ import annotations

import json
import re

import pytest

from pytest_gputopo.plugin import report_writer, run_record
from pytest_gputopo.render.document import check_document

# On hgx-h100 the recorded GPU0->GPU1 copy is 364 GB/s against NV18's 450: the run's threshold (the
# default floor 0.70) is 315 GB/s, met; a marker's floor of 0.99 needs 445.5, a marker's 10,000 GB/s
# needs that: both unmet.
PAIR = """
import pytest

@pytest.mark.min_p2p_bw(floor=0.99, gpus=[0, 1])
def test_near_line_rate(): pass

@pytest.mark.min_p2p_bw(10000, gpus=[0, 1])
def test_impossibly_fast(): pass

@pytest.mark.min_p2p_bw(gpus=[0, 1])
def test_at_the_run_floor(): pass
"""

# The reports a run of PAIR writes: JSON (out.json) and HTML (out.html).
REPORTS = ("--gputopo-json", "out.json", "--gputopo-html", "out.html")


def _cell(html: str, what: str) -> str:
    """The measured cell whose hover text starts with ``what``."""
    found = re.search(r'<td class="[^"]*" title="' + re.escape(what) + r'[^"]*"[^>]*>.*?</td>', html)
    assert found, what
    return found.group(0)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_figure_two_tests_were_skipped_over_is_not_green(pytester, xdist):
    pytester.makepyfile(test_f=PAIR)
    result = pytester.runpytest("-p", "no:cacheprovider", *xdist, "--gputopo-machine", "hgx-h100", *REPORTS)
    result.assert_outcomes(passed=1, skipped=2)
    doc = json.loads((pytester.path / "out.json").read_text())
    check_document(doc)
    figures = {v["test"].split("::")[1]: v["figures"] for v in doc["verdicts"]}
    assert figures == {
        "test_near_line_rate": [{"key": ["p2p", 0, 1], "state": "below", "needed_gbps": pytest.approx(445.5)}],
        "test_impossibly_fast": [{"key": ["p2p", 0, 1], "state": "below", "needed_gbps": 10000.0}],
        "test_at_the_run_floor": [{"key": ["p2p", 0, 1], "state": "met", "needed_gbps": pytest.approx(315.0)}],
    }
    # The figure itself keeps the run's own verdict (the check items' rule): met at 315 GB/s.
    (pair,) = [m for m in doc["measurements"] if m["key"] == ["p2p", 0, 1]]
    assert pair["state"] == "met" and pair["expected"]["needed_gbps"] == pytest.approx(315.0)
    cell = _cell((pytester.path / "out.html").read_text(), "GPU0-&gt;GPU1 copy, P2P;")
    assert 'class="below"' in cell and 'data-state="below"' in cell, cell
    assert "tests needed 315.0 (met), 445.5 (below), 10000.0 (below)" in cell
    assert "test_impossibly_fast: min_p2p_bw(10000, gpus=[0, 1]) needed 10000.0 GB/s, below" in cell


def test_a_cell_no_test_was_judged_on_keeps_the_run_verdict(pytester):
    """Another pair's figure, judged by no test, is drawn as before: the run's verdict, no need marked."""
    pytester.makepyfile(test_f=PAIR)
    pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--gputopo-machine",
        "hgx-h100",
        "--gputopo-check",
        "full",
        "--gputopo-html",
        "out.html",
    )
    cell = _cell((pytester.path / "out.html").read_text(), "GPU0-&gt;GPU2 copy, P2P;")
    assert 'class="met"' in cell and "tests needed" not in cell, cell


def test_the_record_is_built_once_and_every_output_reads_it(pytester, monkeypatch):
    """The terminal summary, the JSON and HTML reports and the step summary read one finished record;
    the reports written while the run goes read records of the run so far."""
    built = []
    real = run_record.build

    def build(run, complete):
        built.append(complete)
        return real(run, complete)

    monkeypatch.setattr(run_record, "build", build)  # the finished record's
    monkeypatch.setattr(report_writer, "build", build)  # the reports' while the run goes
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary.md"))
    pytester.makepyfile(test_f=PAIR)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", "hgx-h100", *REPORTS)
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["gputopo: 2 tests not run for unmet requirements: *"])
    assert built.count(True) == 1 and False in built, built
    summary = (pytester.path / "summary.md").read_text()  # the step summary, from the same record
    assert "test\\_near\\_line\\_rate | skipped" in summary and "| 364 | 450 | 315 | recorded |" in summary
