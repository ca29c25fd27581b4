"""A measurement says what it measures and, when done, its figure and time, through
pytest's terminal reporter: once per run (the xdist controller, rank 0 under torchrun: see
tests/test_distributed.py), and under -q only the line that ends it. ``gputopo check -v`` says every
item's measured/expected/floor/ratio."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest
from _pytest.terminal import TerminalReporter

from conftest import needs_torch, quick_gloo
from pytest_gputopo.plugin.progress import write_own_line

TWO_TESTS = (
    "import pytest\n"
    "@pytest.mark.min_allreduce_bw(0.0001)\ndef test_a(): pass\n"
    "@pytest.mark.min_allreduce_bw(0.0001)\ndef test_b(): pass\n"
)
DONE = re.compile(r"^gputopo: all-reduce busbw, 2 ranks, 64 KiB: [0-9.]+ GB/s in [0-9.]+ s$")
ARGS = ("-p", "no:cacheprovider", *quick_gloo("64K"))  # what is said of a measurement, not its precision


def lines(result, pattern=DONE) -> list[str]:
    return [ln for ln in result.stdout.lines if pattern.match(ln)]


@needs_torch
@pytest.mark.slow
def test_a_measurement_says_what_it_measures_then_its_figure_and_time(pytester):
    pytester.makepyfile(test_x=TWO_TESTS)
    result = pytester.runpytest_subprocess(*ARGS)
    result.assert_outcomes(passed=2)
    assert result.stdout.lines.count("gputopo: measuring all-reduce busbw, 2 ranks, 64 KiB ...") == 1
    assert len(lines(result)) == 1  # measured once for both tests, said once
    quiet = pytester.runpytest_subprocess(*ARGS, "-q")
    assert "measuring" not in quiet.stdout.str() and len(lines(quiet)) == 1  # -q: one line per measurement


@needs_torch
@pytest.mark.slow
def test_under_xdist_the_controller_says_each_workers_measurement_once(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_x=TWO_TESTS)
    result = pytester.runpytest_subprocess(*ARGS, "-n", "2")
    result.assert_outcomes(passed=2)
    assert len(lines(result)) == 1  # one measurement (the workers share it), said once by the controller


@pytest.mark.parametrize("before", ["", ".", "test_x.py ."])
def test_a_line_said_after_xdists_progress_letters_starts_a_line_of_its_own(pytestconfig, before):
    """Under xdist the controller writes each test's letter with no file name before it, and a worker's
    relayed line went on after it (".gputopo: all-reduce busbw ...": seen once in the whole suite, which
    the test above then missed)."""
    out = io.StringIO()
    reporter = TerminalReporter(pytestconfig, file=out)
    reporter.write(before)
    write_own_line(reporter, "gputopo: said")
    assert "gputopo: said\n" in out.getvalue() and out.getvalue().splitlines()[-1] == "gputopo: said"
    assert out.getvalue().startswith(before)


def test_gputopo_check_verbose_says_every_items_figures(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pytest_gputopo.cli", "check", "-v", "--level", "full", "--machine", "hgx-h100"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (
        "gputopo-check::p2p_bw[GPU0->GPU1] PASSED (GPU0->GPU1 copy, P2P: measured 364.0 GB/s, needed 315.0 "
        "(0.70 x expected 450.0 GB/s from NV18 NVLink 4.0), ratio 0.81 (recorded, not measured:"
    ) in out.stdout
    quiet = subprocess.run(
        [sys.executable, "-m", "pytest_gputopo.cli", "check", "--level", "full", "--machine", "hgx-h100"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "p2p_bw[GPU0->GPU1]" not in quiet.stdout  # without -v, failures and skips only, as before
    assert "measuring" not in quiet.stdout  # a recorded machine's figures are published, never measured
