"""The health check is shown as the check: ``gputopo check`` on a degraded node fits a screen and
leads with what failed, ``-v`` is one line per item, and inside a user's suite the user's counts are
the user's tests, the check's are its own, and ``-rs`` holds only the user's skips -- while a failed
item still fails the run and JUnit XML and the JSON report still hold every item."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def gputopo_check(cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest_gputopo.cli", "check", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def section(lines: list[str]) -> list[str]:
    """The lines of the "gputopo check" section."""
    start = next(i for i, line in enumerate(lines) if line.strip("- ") == "gputopo check") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("gputopo check: "))
    return lines[start : end + 1]


def documented(path: str, contains: str) -> list[str]:
    """The lines of the fenced block of ``path`` that holds ``contains``, as the doc shows them."""
    blocks = re.findall(r"(?ms)^```[^\n]*\n(.*?)^```", (ROOT / path).read_text())
    (block,) = [b for b in blocks if contains in b]
    return block.splitlines()


def same(line: str) -> str:
    """A line of pytest's as a doc may show it: its duration (and the rule's width with it) aside."""
    return re.sub(r" in [0-9.]+s ", " in ...s ", line).strip("= ")


def assert_no_plumbing(text: str) -> None:
    """Neither the temporary folder ``gputopo check`` runs pytest in nor the plugin's own source."""
    assert "gputopo-check-" not in text and "pytest_gputopo" not in text and "checks.py" not in text


@pytest.mark.slow
def test_gputopo_check_on_a_degraded_node_fits_a_screen_and_leads_with_the_failure(tmp_path):
    done = gputopo_check(tmp_path, "--level", "full", "--machine", "hgx-h100-nvlink-down")
    assert done.returncode == 1, done.stdout + done.stderr  # a degraded node fails the check
    lines = done.stdout.splitlines()
    assert len(lines) <= 40, done.stdout
    assert_no_plumbing(done.stdout)
    assert "rootdir" not in done.stdout  # pytest's header: the check is not about where it ran
    found = section(lines)
    assert found[0] == (
        "FAILED nvlink[GPU5] (every NVLink of a GPU that has NVLink is up): GPU5: NVLinks "
        "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17] are down (0/18 up)"
    )
    # What could not be measured, and why, said once for all 109 items.
    assert found[1:] == [
        "SKIPPED p2p_bw (all 56), p2p_bidir_bw (all 28), h2d_bw (all 8), h2d_pageable_bw (all 8), d2h_bw (all 8), "
        "allreduce_bw: no figure: none published for recorded:hgx-h100-nvlink-down, which is not this host and "
        "cannot be measured",
        "gputopo check: 1 failed, 44 passed, 109 skipped",
    ]
    assert [same(line) for line in lines] == [same(line) for line in documented("docs/cli.md", "collected 154 items")]


@pytest.mark.slow
def test_gputopo_check_verbose_says_each_item_in_one_line(tmp_path):
    done = gputopo_check(tmp_path, "-v", "--level", "full", "--machine", "dgx-a100")
    assert done.returncode == 0, done.stdout + done.stderr
    assert_no_plumbing(done.stdout)
    items = [line for line in done.stdout.splitlines() if line.startswith("gputopo-check::")]
    assert len(items) == 154 and len({line.split(" ")[0] for line in items}) == 154
    assert "gputopo-check::nvlink[GPU0] PASSED (GPU0: 12/12 NVLinks up)" in items[2]
    # the machine's report (the header of -v), the items, the section and pytest's last line
    assert len(done.stdout.splitlines()) <= 40 + 154 + 10


@pytest.mark.slow
def test_a_users_suite_counts_its_tests_and_the_check_apart(pytester):
    pytester.makepyfile(
        test_user="""
        import pytest
        def test_a(): pass
        def test_b(): pass
        def test_c(): pass
        def test_d(): pass
        def test_e(): pytest.skip("the user's own reason")
    """
    )
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--gputopo-check",
        "full",
        "--gputopo-machine",
        "hgx-h100-nvlink-down",
        "-rs",
        "--junitxml=report.xml",
        "--gputopo-json=run.json",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the check is a gate: a degraded node fails the run
    result.assert_outcomes(passed=4, skipped=1)  # the user's tests, and only them
    assert_no_plumbing(result.stdout.str())
    skips = [line for line in result.stdout.lines if line.startswith("SKIPPED [")]
    assert skips == ["SKIPPED [1] test_user.py:6: the user's own reason"]  # -rs: the user's skips only
    assert section(result.stdout.lines)[0].startswith("FAILED nvlink[GPU5] ")
    assert section(result.stdout.lines)[-1] == "gputopo check: 1 failed, 44 passed, 109 skipped"
    result.stdout.fnmatch_lines(["*4 passed, 1 skipped, *1 checks failed*"])
    assert "FAILURES" not in result.stdout.str()  # the check's failure is in its own section
    # As docs/benchmarks.md shows it (that command: no reports asked for)
    again = pytester.runpytest("--gputopo-check", "full", "--gputopo-machine", "hgx-h100-nvlink-down", "-rs")
    shown = [same(line) for line in documented("docs/benchmarks.md", "SKIPPED [1] test_user.py:6")]
    printed = [same(line) for line in again.stdout.lines]
    at = printed.index(shown[0])
    assert printed[at : at + len(shown)] == shown

    # JUnit XML: every item of the check, the unmeasurable ones as skipped test cases
    suite = ET.parse(pytester.path / "report.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("159", "1", "110")
    (failed,) = [case for case in suite.iter("testcase") if case.find("failure") is not None]
    assert (failed.get("classname"), failed.get("name")) == ("gputopo-check", "nvlink[GPU5]")
    xml = (pytester.path / "report.xml").read_text()
    assert "pytest_gputopo" not in xml and "checks.py" not in xml
    # The JSON report's checks are as they were: one entry per item, the same three fields.
    checks = json.loads((pytester.path / "run.json").read_text())["checks"]
    assert {tuple(sorted(c)) for c in checks} == {("check", "message", "outcome")}
    assert Counter(c["outcome"] for c in checks) == {"passed": 44, "failed": 1, "skipped": 109}


def failing_quick_check_under_xdist(pytester, machine: str):
    """The quick check on ``machine``, where it fails, beside a user's passing test on two xdist
    workers: the run, once its exit status says the check failed and the user's test passed."""
    pytest.importorskip("xdist")
    pytester.makepyfile(test_user="def test_a(): pass\n")
    check = ("--gputopo-check", "quick", "--gputopo-machine", machine)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *check, "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    return result


@pytest.mark.slow
def test_under_xdist_the_check_is_counted_once_by_the_controller(pytester):
    result = failing_quick_check_under_xdist(pytester, "hgx-h100-nvlink-down")
    assert section(result.stdout.lines)[0].startswith("FAILED nvlink[GPU5] ")
    assert result.stdout.lines.count("gputopo check: 1 failed, 44 passed") == 1


def test_a_check_item_that_raises_is_a_failure_shown_in_the_section(pytester):
    pytester.makeconftest("""
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(items):
            for item in items:
                if item.name == "topology":
                    item._check = lambda: 1 / 0
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "quick", "--gputopo-machine", "hgx-h100")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # 45 items, and each GPU's health its profile carries (thamada/nvidia-smi's -q): 53
    assert section(result.stdout.lines) == ["FAILED topology: division by zero", "gputopo check: 1 failed, 52 passed"]


@pytest.mark.slow
def test_gputopo_check_reads_no_conftest_of_the_folder_it_runs_in(tmp_path):
    (tmp_path / "conftest.py").write_text("raise SystemExit('a conftest.py of the working folder was read')\n")
    done = gputopo_check(tmp_path, "--machine", "hgx-h100")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gputopo check: 53 passed" in done.stdout


def test_the_checks_lines_write_a_hostile_gpu_name_escaped(pytester):
    """An item's message names GPUs as their profile does: its -v line and the section write it
    escaped, so that no line a CI runner acts on ("::error::") is printed."""
    from pytest_gputopo.probe import recorded

    doc = recorded.profile_dict("hostile", recorded.load_profile("hgx-h100-nvlink-down").topology)
    for gpu in doc["topology"]["gpus"]:
        gpu["name"] = "RTX\r\n::error::pwn"
    (pytester.path / "hostile.json").write_text(json.dumps(doc))
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", "hostile.json", "-v")
    assert not [line for line in result.stdout.lines if line.startswith("::")]
    result.stdout.fnmatch_lines(["gputopo-check::topology PASSED (*RTX\\r\\n::error::pwn*"])


@pytest.mark.slow
def test_one_gpu_has_no_all_reduce_to_measure(tmp_path):
    """One GPU's all-reduce crosses no link: the full check lists no allreduce_bw item rather than spend
    seconds measuring a figure it cannot judge (on a real H200 it took 10 s to say "not judged")."""
    done = gputopo_check(tmp_path, "--level", "full", "--machine", "single-gpu", "-v")
    assert done.returncode == 0, done.stdout[-2000:]
    assert "h2d_bw[GPU0]" in done.stdout and "allreduce_bw" not in done.stdout
    two = gputopo_check(tmp_path, "--level", "full", "--machine", "2x-rtx3090-nvlink", "-v")
    assert "allreduce_bw" in two.stdout


# One cause, one line (issue 30): the check's failed items are said by cause, the run gate's rule
# (core.causes): every pair failing is the machine, a GPU in all its pairs' failures is that GPU, and
# one GPU's failures across kinds of item (NVLink, PCIe, figures) are one cause.


def failed_lines(lines: list[str]) -> list[str]:
    return [line for line in section(lines) if line.startswith("FAILED ")]


def degraded_profile(path: Path, name: str, base: str, published: list[dict]) -> Path:
    """A bundled machine with figures of its own (``published``): a node whose copies were measured."""
    from pytest_gputopo.probe import recorded

    doc = recorded.profile_dict(name, recorded.load_profile(base).topology)
    doc["topology"]["published"] = published
    out = path / f"{name}.json"
    out.write_text(json.dumps(doc))
    return out


def gpu5_slow(path: Path) -> Path:
    """hgx-h100-nvlink-down (GPU5 lost its 18 NVLinks) whose copies with GPU5 run at 20 GB/s."""
    slow = [
        {"kind": "p2p", "gbps": 20.0, "source": "test: GPU5's pairs", "src": min(g, 5), "dst": max(g, 5)}
        for g in range(8)
        if g != 5
    ]
    return degraded_profile(
        path, "gpu5-slow", "hgx-h100-nvlink-down", [{"kind": "p2p", "gbps": 364.0, "source": "test: every pair"}, *slow]
    )


def gpu2_x8(path: Path) -> Path:
    """hgx-h100-pcie-x8 (GPU2's PCIe trained down to x8) whose host -> device copy to GPU2 is slow."""
    return degraded_profile(
        path,
        "gpu2-x8",
        "hgx-h100-pcie-x8",
        [
            {"kind": "h2d", "gbps": 50.0, "pinned": True, "source": "test: every GPU"},
            {"kind": "h2d", "gbps": 10.0, "pinned": True, "source": "test: GPU2", "gpu": 2},
        ],
    )


@pytest.mark.slow
def test_a_p2p_refused_node_is_one_failed_line_for_the_machine(tmp_path):
    """8x-l40s-p2p-disabled refuses P2P (TNS) on all 28 pairs: one line, the machine, as the run gate
    says it -- not 28 FAILED lines; JUnit XML still holds each pair's item (docs/benchmarks.md: why)."""
    done = gputopo_check(tmp_path, "--level", "full", "--machine", "8x-l40s-p2p-disabled", "--junitxml", "node.xml")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert failed_lines(lines) == [
        "FAILED the machine: all 28 pairs of the 8 GPUs fail p2p_status: P2P refused: topology not supported (28 pairs)"
    ]
    assert section(lines)[-1] == "gputopo check: 28 failed (1 cause), 9 passed, 109 skipped"
    shown = [same(line) for line in lines if "generated xml file" not in line]  # the doc's command writes none
    assert shown == [same(line) for line in documented("docs/cli.md", "collected 146 items")]
    suite = ET.parse(tmp_path / "node.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("146", "28")


@pytest.mark.parametrize(
    "profile, line",
    [
        (
            gpu5_slow,
            "FAILED GPU5: NVLinks [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17] are down "
            "(0/18 up); all 7 of its pairs fail p2p_bw; the 21 pairs without GPU5 pass",
        ),
        (
            gpu2_x8,
            "FAILED GPU2: PCIe link trained down: x8 of x16 (its maximum width; Gen3 of Gen5); host->device "
            "copy, pinned: below the floor of the expected",
        ),
    ],
)
def test_one_gpus_failures_are_one_line_naming_the_gpu(pytester, profile, line):
    """A GPU whose NVLinks (or PCIe link) and copies failed: one line naming the GPU, its NVLink (PCIe)
    item and its pairs' (its own) figure items as one cause -- not a line per item."""
    path = profile(pytester.path)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "full", "--gputopo-machine", str(path))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert failed_lines(result.stdout.lines) == [line]
    assert re.fullmatch(
        r"gputopo check: \d+ failed \(1 cause\), \d+ passed, \d+ skipped", section(result.stdout.lines)[-1]
    )


def test_a_cause_of_one_item_keeps_the_items_line_and_causes_apart_are_lines_apart(pytester):
    """nvlink[GPU5] alone is its own line (what it checks, its message); two GPUs' causes are two."""
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", "hgx-h100-nvlink-down"
    )
    assert failed_lines(result.stdout.lines) == [
        "FAILED nvlink[GPU5] (every NVLink of a GPU that has NVLink is up): GPU5: NVLinks [0, 1, 2, 3, 4, 5, 6, 7, 8, "
        "9, 10, 11, 12, 13, 14, 15, 16, 17] are down (0/18 up)"
    ]
    assert section(result.stdout.lines)[-1] == "gputopo check: 1 failed, 44 passed"


def test_the_check_runs_before_the_users_tests(pytester):
    """--gputopo-check's items come first: a degraded node says so before the suite is spent."""
    pytester.makepyfile(test_user="def test_a(): pass\ndef test_b(): pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", "hgx-h100", "-v")
    ran = [line.split(" ")[0] for line in result.stdout.lines if "::" in line and " PASSED" in line]
    assert ran[0] == "gputopo-check::topology" and ran[-2:] == ["test_user.py::test_a", "test_user.py::test_b"]
    assert all(name.startswith("gputopo-check::") for name in ran[:-2])


def test_x_stops_after_the_whole_check_before_the_users_tests(pytester):
    """-x on a node with P2P refused: every item of the check runs (its cause is named from all 28 pairs),
    then the run stops, none of the user's tests run."""
    pytester.makepyfile(test_user="def test_a(): pass\ndef test_b(): pass\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", "8x-l40s-p2p-disabled", "-x"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes()  # none of the user's tests ran
    assert failed_lines(result.stdout.lines) == [
        "FAILED the machine: all 28 pairs of the 8 GPUs fail p2p_status: P2P refused: topology not supported (28 pairs)"
    ]
    assert section(result.stdout.lines)[-1] == "gputopo check: 28 failed (1 cause), 9 passed"
    result.stdout.fnmatch_lines(["*stopping after the gputopo check: 28 of its items failed*"])
    # A healthy node: -x lets the user's tests run after the check.
    healthy = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", "8x-l40s", "-x")
    healthy.assert_outcomes(passed=2)


@pytest.mark.slow
def test_under_xdist_the_controller_says_the_workers_failed_items_by_cause(pytester):
    """The items fail on the workers; the controller groups them from their reports (each failed
    item's gputopo_check_finding property): still one line, the machine."""
    result = failing_quick_check_under_xdist(pytester, "8x-l40s-p2p-disabled")
    assert failed_lines(result.stdout.lines) == [
        "FAILED the machine: all 28 pairs of the 8 GPUs fail p2p_status: P2P refused: topology not supported (28 pairs)"
    ]
