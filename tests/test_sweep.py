"""``gputopo bench allreduce``, the all-reduce sweep for people. Sizes step as nccl-tests'
``-b -e -f`` (its loop in src/common.cu), figures follow nccl-tests' definitions (doc/PERFORMANCE.md:
algbw = S/t, busbw = algbw x 2(n-1)/n), measured for real on gloo with 2 and 3 ranks; the table is
nccl-tests' own format (our parser reads it back); a corrupted result shows in #wrong; the HTML report
draws busbw against size with the expected line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from conftest import browser_render, needs_browser, needs_torch
from pytest_gputopo.bench.sweep import element_sizes, sweep_sizes
from pytest_gputopo.cli import CliError
from pytest_gputopo.cli.bench import sweep_plan
from pytest_gputopo.parse.nccl_tests import parse_nccl_tests
from pytest_gputopo.probe import probe
from pytest_gputopo.render.chart import busbw_chart


def gputopo(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "pytest_gputopo.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


@given(st.integers(1, 2**30), st.integers(0, 2**31), st.integers(2, 16))
def test_the_sizes_step_as_nccl_tests_steps_them(begin, extra, factor):
    end = begin + extra
    expected, size = [], begin
    while size <= end:  # src/common.cu: for (size = minBytes; size <= maxBytes; size *= stepFactor)
        expected.append(size)
        size *= factor
    assert sweep_sizes(begin, end, factor) == expected


def test_the_sizes_announced_are_the_sizes_measured():
    """nccl-tests measures count = size / wordSize elements: sizes become whole elements (at least
    one), and two sizes that round alike are measured once."""
    assert element_sizes([1, 3, 9], "float32") == [4, 8]
    assert element_sizes([1000, 2048], "float64") == [1000, 2048]
    assert element_sizes([3, 1025], "bfloat16") == [2, 1024]


@pytest.fixture(scope="module")
def gloo_sweep(tmp_path_factory):
    """``gloo_sweep(ranks)``: ``gputopo bench allreduce`` from 64K to 256K on ``ranks`` gloo ranks, its
    output and its folder (s.json, s.html); run once per module and rank count, as the tests that read
    it each assert a different thing of the same sweep (each one starts ranks that import torch)."""
    made = {}

    def sweep(ranks: int):
        if ranks not in made:
            folder = tmp_path_factory.mktemp(f"sweep-{ranks}-ranks")
            made[ranks] = (
                gputopo(
                    "bench",
                    "allreduce",
                    "-b",
                    "64K",
                    "-e",
                    "256K",
                    "-f",
                    "2",
                    "--ranks",
                    str(ranks),
                    "--budget",
                    "0.2",
                    "--json",
                    str(folder / "s.json"),
                    "--html",
                    str(folder / "s.html"),
                ),
                folder,
            )
        return made[ranks]

    return sweep


@needs_torch
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.slow
def test_busbw_follows_the_nccl_tests_definition_on_gloo(ranks, gloo_sweep):
    out, tmp_path = gloo_sweep(ranks)
    assert out.returncode == 0, out.stderr
    sweep = json.loads((tmp_path / "s.json").read_text())["sweeps"][0]
    rows = sweep["result"]["rows"]
    assert [r["size_bytes"] for r in rows] == [65536, 131072, 262144] and sweep["origin"] == "measured"
    for r in rows:
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / (r["time_us"] * 1e-6) / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (ranks - 1) / ranks)
        assert r["wrong"] == 0 and r["count"] == r["size_bytes"] // 4
    table = parse_nccl_tests(out.stdout)  # nccl-tests' format: what reads nccl-tests reads it
    assert table.nranks == ranks and table.collective == "all_reduce" and table.data_ok is True
    for printed, r in zip(table.rows, rows, strict=True):
        assert printed.out_of_place is None or printed.out_of_place.busbw_gbps is None  # not run: in place only
        assert printed.in_place.busbw_gbps == pytest.approx(r["busbw_gbps"], abs=0.006)  # %.2f, as nccl-tests
        assert (printed.type, printed.redop, printed.in_place.wrong) == ("float", "sum", 0)
    assert "# Expected busbw       : unknown: gloo on CPUs (no link to judge it by)" in out.stdout
    page = (tmp_path / "s.html").read_text()
    assert page.count("<circle") == 3 and "no expected line: gloo on CPUs" in page and "http" not in page


@needs_torch
@pytest.mark.slow
def test_a_corrupted_result_shows_in_wrong_and_fails_the_sweep(tmp_path):
    env = {**os.environ, "PYTEST_GPUTOPO_TEST_FAULTS": json.dumps({"corrupt": True})}
    out = gputopo(
        "bench", "allreduce", "-b", "4K", "-e", "8K", "--budget", "0.1", "--html", str(tmp_path / "s.html"), env=env
    )
    assert out.returncode == 1, out.stderr
    table = parse_nccl_tests(out.stdout)
    assert [row.in_place.wrong for row in table.rows] == [1, 1]  # one flipped element per size
    assert table.data_ok is False and "# Out of bounds values : 2 FAILED" in out.stdout
    assert "data wrong: 1 wrong element(s) of 1024 after all_reduce of 4 KiB" in out.stderr
    page = (tmp_path / "s.html").read_text()
    assert page.count(">wrong</text>") == 2 and page.count('class="broken"') >= 2


@needs_torch
@needs_browser
@pytest.mark.slow
def test_a_real_browser_draws_the_sweep_without_console_errors(gloo_sweep, tmp_path):
    out, folder = gloo_sweep(2)  # three sizes, as test_busbw_follows_the_nccl_tests_definition_on_gloo reads them
    assert out.returncode == 0, out.stderr
    png, dom, log = browser_render(folder / "s.html", tmp_path)
    assert png > 10_000 and "CONSOLE" not in log and "Uncaught" not in log, log[-2000:]
    assert dom.count("<circle") == 3 and "busbw, GB/s" in dom  # the chart is in the browser's DOM


def test_the_expected_line_is_drawn_with_what_it_rests_on():
    rows = [
        {"size_bytes": s, "count": s // 4, "time_us": 10.0, "algbw_gbps": g, "busbw_gbps": g, "wrong": 0}
        for s, g in ((2**20, 100.0), (2**24, 300.0))
    ]
    svg = busbw_chart(rows, 450.0, "NV18 NVLink 4.0, every pair")
    assert 'data-expected="450"' in svg and "expected 450 GB/s (NV18 NVLink 4.0, every pair)" in svg
    assert "1 MiB" in svg and "16 MiB" in svg and "busbw 300.00 GB/s" in svg


def plan(machine, **given):
    args = argparse.Namespace(**{"backend": None, "ranks": None, "gpus": None, **given})
    return sweep_plan(args, probe(machine))


def test_nccl_runs_one_rank_per_gpu_judged_against_the_links_among_them():
    backend, devices, ranks, expected, basis = plan("hgx-h100")
    assert (backend, devices, ranks, expected.gbps) == ("nccl", list(range(8)), 8, 450.0)
    assert plan("hgx-h100", gpus="0,5")[1:3] == ([0, 5], 2)
    assert plan("dgx-a100", ranks=4)[1] == [0, 1, 2, 3]
    backend, devices, ranks, expected, basis = plan("hgx-h100", backend="gloo", ranks=3)
    assert (devices, ranks, expected) == (None, 3, None) and "gloo on CPUs" in basis


@pytest.mark.parametrize(
    "given, says",
    [
        ({"ranks": 9}, "--ranks 9: this host has 8 GPUs"),
        ({"gpus": "0,8"}, "--gpus '0,8': expected distinct GPU indices 0..7"),
        ({"gpus": "1,1"}, "expected distinct GPU indices"),
        ({"gpus": "0,x"}, "expected distinct GPU indices"),
        ({"gpus": "0,1", "ranks": 3}, "--ranks 3 and --gpus 0,1: one rank per GPU named"),
        ({"gpus": "0,1", "backend": "gloo"}, "--gpus goes with --backend nccl"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_naming_the_option(given, says):
    with pytest.raises(CliError) as caught:
        plan("hgx-h100", **given)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    "args, says",
    [
        (["-b", "1X"], "-b '1X': not a size in bytes"),
        (["-b", "1M", "-e", "1K"], "-b/-e/-f: sizes: need 1 <= begin <= end"),
        (["-f", "1"], "-b/-e/-f: factor must be 2 or more"),
        (["--ranks", "0"], "--ranks 0: expected a number from 1"),
        (["--json", "no/such/folder/s.json"], "--json no/such/folder/s.json: cannot write: no folder"),
        (["--backend", "nccl"], "--backend nccl: no GPU on this host"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(args, says, tmp_path):
    if args == ["--backend", "nccl"] and probe(None).gpus:
        pytest.skip("this host has GPUs: nccl is not refused here")
    out = gputopo("bench", "allreduce", *args, cwd=tmp_path)
    assert out.returncode == 2 and says in out.stderr and "measuring" not in out.stderr, out.stderr


def test_gputopo_report_draws_a_saved_sweep_and_names_a_bad_row(tmp_path, capsys):
    from pytest_gputopo.cli import main
    from pytest_gputopo.render.report import machine_document

    rows = [
        {"size_bytes": s, "count": s // 4, "time_us": 50.0, "algbw_gbps": g, "busbw_gbps": g * 1.75, "wrong": 0}
        for s, g in ((2**20, 20.0), (2**30, 250.0))
    ]
    sweep = {
        "what": "all-reduce sweep, 8 ranks (nccl, GPU0..GPU7)",
        "origin": "measured",
        "host": "node7",
        "devices": list(range(8)),
        "sizes": {"begin": 2**20, "end": 2**30, "factor": 1024},
        "expected": {"gbps": 450.0, "basis": "NV18 NVLink 4.0", "source": "spec"},
        "result": {"rows": rows, "world_size": 8, "backend": "nccl", "dtype": "float32"},
    }
    doc = {**machine_document(probe("hgx-h100")), "sweeps": [sweep], "complete": True}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    assert main(["report", str(tmp_path / "s.json"), "-o", str(tmp_path / "s.html")]) == 0
    page = (tmp_path / "s.html").read_text()
    assert page.count("<circle") == 2 and 'data-expected="450"' in page and "node7" in page
    rows[1]["wrong"] = "none"
    (tmp_path / "s.json").write_text(json.dumps(doc))
    assert main(["report", str(tmp_path / "s.json"), "-o", str(tmp_path / "s.html")]) == 2
    assert "sweeps[0].result.rows[1].wrong: expected an integer" in capsys.readouterr().err
