"""Bandwidth markers and the --gputopo-check items in real pytest sessions.

On recorded machines the figures published for them are served (labelled recorded); with
``--gputopo-allreduce-backend gloo`` the all-reduce really runs on this host's CPUs.
"""

import json

import pytest

from conftest import needs_torch
from pytest_gputopo.core import keys

# A gloo all-reduce on this 2-core machine rarely settles within the plugin's 10 s per size: these tests
# assert what a run does with its figure, not its precision, so they give each size 1 s.
QUICK = ("--gputopo-bench-budget", "1")

BW = """
import pytest

@pytest.mark.min_p2p_bw(200)
def test_p2p(): pass

@pytest.mark.min_p2p_bw(300)
def test_p2p_faster_than_published(): pass

@pytest.mark.min_allreduce_bw(200)
def test_allreduce(): pass

@pytest.mark.min_h2d_bw(20)
def test_h2d(): pass

@pytest.mark.min_p2p_bw(floor=0.8)
def test_p2p_floor_of_expected(): pass
"""


def run(pytester, *args, src=BW):
    pytester.makepyfile(test_bw=src)
    return pytester.runpytest("-rs", "-p", "no:cacheprovider", *args)


def test_recorded_figures_satisfy_markers_and_say_they_are_recorded(pytester):
    result = run(pytester, "--gputopo-machine", "dgx-a100")
    # 272 GB/s published: meets 200 and 0.8 x the expected 300 (240), not 300
    result.assert_outcomes(passed=4, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*min_p2p_bw(300): GPU0->GPU1 copy, P2P: recorded 272.0 GB/s, needed 300.0, expected 300.0 from NV12*"
            "(recorded figures, not measured here: ml-engineering*",
        ]
    )


def test_recorded_machine_without_figures_cannot_satisfy_bandwidth_markers(pytester):
    result = run(pytester, "--gputopo-machine", "hgx-h100-pcie-x8")
    result.assert_outcomes(skipped=5)
    result.stdout.fnmatch_lines(
        [
            "*min_allreduce_bw(200): *no figure (none published for recorded:hgx-h100-pcie-x8, "
            "which is not this host and cannot be measured)*"
        ]
    )


def test_strict_bandwidth_marker_fails(pytester):
    result = run(pytester, "--gputopo-machine", "dgx-a100", "--gputopo-strict")
    assert result.parseoutcomes()["errors"] == 1


def test_no_gpu_says_why(pytester):
    result = run(pytester, "--gputopo-machine", "no-gpu")
    result.stdout.fnmatch_lines(["*min_h2d_bw(20): nothing to measure: 0 visible (NVML library not found*"])


@needs_torch
@pytest.mark.slow
def test_gloo_allreduce_really_runs_on_this_host(pytester):
    """gloo measures this host's CPUs once for every marker of the run; min_allreduce_bw(..., gpus=8)
    skips on a GPU-less host with gloo (needs 8 GPUs), never passes (GLOO's tests: one run and one
    measurement for both, where each took a gloo all-reduce of its own)."""
    src = (
        "import pytest\n@pytest.mark.min_allreduce_bw(0.001)\ndef test_ok(): pass\n"
        "@pytest.mark.min_allreduce_bw(10000)\ndef test_too_fast(): pass\n" + GLOO
    )
    result = run(
        pytester,
        "--gputopo-allreduce-backend",
        "gloo",
        *QUICK,
        "--gputopo-allreduce-size",
        "1M",
        "--gputopo-json",
        "out.json",
        src=src,
    )
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*min_allreduce_bw(10000): all-reduce busbw, 2 ranks, 1 MiB: measured * GB/s "
            "(95% interval *-*), needed 10000.0 (gloo on CPUs*"
        ]
    )
    result.stdout.fnmatch_lines(["*min_allreduce_bw(0.0001, gpus=8): needs 8 GPUs, 0 visible*"])
    doc = json.loads((pytester.path / "out.json").read_text())
    (m,) = doc["measurements"]
    assert m["origin"] == "measured" and m["key"] == ["allreduce", 2, 2**20]
    assert m["detail"]["engine"] == "torch.distributed" and m["gbps"] > 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--gputopo-floor-p2p", "1.5x"], "*--gputopo-floor-p2p: expected a number such as 0.8*"),
        (["--gputopo-floor-allreduce", "3"], "*--gputopo-floor-allreduce: floor must be > 0 and <= 2*"),
        (["--gputopo-allreduce-backend", "mpi"], "*--gputopo-allreduce-backend: 'mpi' is not one of nccl, gloo*"),
        (["--gputopo-allreduce-sched", "rt"], "*--gputopo-allreduce-sched: 'rt' is not one of fair, fifo*"),
        (["--gputopo-allreduce-size", "lots"], "*--gputopo-allreduce-size: 'lots' is not a size in bytes*"),
        (
            ["--gputopo-bench-timeout", "-1"],
            "*--gputopo-bench-timeout: '-1' is not a number above 0 and at most 604800*",
        ),
    ],
)
def test_bad_benchmark_options(pytester, args, message):
    result = run(pytester, "--gputopo-machine", "dgx-a100", *args)
    assert result.ret != 0
    result.stderr.fnmatch_lines([message])


@pytest.mark.parametrize(
    "args,message",
    [
        ("min_p2p_bw(-5)", "gbps must be a number above 0 and at most 1e+06"),
        ("min_allreduce_bw(50, size='1G')", "size (bytes) must be an integer from 4 to 1099511627776"),
        ("min_h2d_bw(10, pinned='yes')", "pinned must be True or False"),
        ("min_p2p_bw(floor=5)", "floor must be a fraction"),
    ],
)
def test_bad_bandwidth_marker_arguments(pytester, args, message):
    src = f"import pytest\n@pytest.mark.{args}\ndef test_x(): pass\n"
    result = run(pytester, "--gputopo-machine", "dgx-a100", src=src)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_x: @pytest.mark.{args.split('(')[0]}: {message}*"])


# ------------------------------------------------------------------ --gputopo-check


def test_quick_check_on_a_healthy_box(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", "hgx-h100", "-v")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*gputopo-check::health[[]GPU7] PASSED (GPU7: no uncorrectable ECC error since the driver loaded*",
            "*gputopo-check::p2p_status[[]GPU0-GPU1] PASSED (GPU0-GPU1 (NV18): P2P read and write OK)*",
            f"gputopo check: {1 + 8 + 8 + 8 + 28} passed",  # topology, pcie, nvlink, health, p2p_status
        ]
    )


@pytest.mark.parametrize(
    "machine,failed,line",
    [
        ("hgx-h100-nvlink-down", "1", "*: GPU5: NVLinks [[]0, 1, *] are down (0/18 up)"),
        ("hgx-h100-pcie-x8", "1", "*: GPU2 PCIe link trained down: x8 of x16 (its maximum width; Gen3 of Gen5)"),
        # 28 pairs refusing P2P: one cause, the machine (the run gate's rule), one line
        (
            "8x-l40s-p2p-disabled",
            "28 failed (1 cause)",
            "the machine: all 28 pairs of the 8 GPUs fail p2p_status: P2P refused: topology not supported (28 pairs)",
        ),
    ],
)
def test_quick_check_names_what_is_degraded(pytester, machine, failed, line):
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check=quick", "--gputopo-machine", machine)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"FAILED {line}", f"gputopo check: {failed}*, * passed*"])
    assert len([ln for ln in result.stdout.lines if ln.startswith("FAILED ")]) == 1


def test_gpu_model_without_p2p_is_not_a_fault(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", "4x-rtx4090")
    result.stdout.fnmatch_lines(
        ["SKIPPED p2p_status (all 6): P2P not supported by this GPU model or chipset (GPU not supported; not a fault)"]
    )
    assert result.ret == 0


@pytest.mark.slow
def test_full_check_reads_like_a_pytest_run_and_lands_in_junit_and_json(pytester):
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--gputopo-check=full",
        "--gputopo-machine",
        "dgx-a100",
        "--junitxml=report.xml",
        "--gputopo-json=check.json",
        "-v",
    )
    result.stdout.fnmatch_lines(
        [
            "*p2p_bw[[]GPU0->GPU1]*",
            "*allreduce_bw*",
        ]
    )
    xml = (pytester.path / "report.xml").read_text()
    assert 'name="p2p_bw[GPU0-&gt;GPU1]"' in xml and "gputopo_measurement" in xml
    doc = json.loads((pytester.path / "check.json").read_text())
    assert doc["recorded"] is True and doc["source"].startswith("recorded:dgx-a100")
    by_check = {c["check"]: c for c in doc["checks"]}
    ar = by_check["allreduce_bw"]
    # 234.89 GB/s published for 8x A100 at 16 GiB, judged against OCI's published A100 floor (185)
    assert ar["outcome"] == "passed" and "measured 234.9 GB/s, needed 185.0" in ar["message"]
    assert "recorded, not measured" in ar["message"]
    assert {m["origin"] for m in doc["measurements"]} == {"recorded"}


@needs_torch
@pytest.mark.slow
def test_a_measured_check_item_says_the_interval_of_its_figure(pytester):
    pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--gputopo-check=full",
        "--gputopo-allreduce-backend",
        "gloo",
        *QUICK,
        "--gputopo-allreduce-size",
        "256K",
        "--gputopo-json=check.json",
    )
    doc = json.loads((pytester.path / "check.json").read_text())
    (ar,) = [c for c in doc["checks"] if c["check"] == "allreduce_bw"]
    assert "(measured; 95% interval " in ar["message"], ar["message"]
    (m,) = doc["measurements"]
    low, high = m["detail"]["judged"]["busbw_ci95_gbps"]
    assert low <= m["gbps"] <= high


def test_interval_of_a_result_from_either_kind_of_detail():
    from pytest_gputopo.bench.bench_result import BenchResult

    copy = BenchResult(keys.HostCopy("h2d", 0, True), "h2d", 20.0, "measured", detail={"bw_ci95_gbps": [19.0, 21.0]})
    allreduce = BenchResult(
        keys.AllReduce(2, 1024), "ar", 1.0, "cached", detail={"judged": {"busbw_ci95_gbps": [0.9, 1.1]}}
    )
    recorded = BenchResult(keys.AllReduce(8, 1 << 34), "ar", 234.9, "recorded", detail={"size_bytes": 1 << 34})
    assert copy.interval_gbps == (19.0, 21.0) and allreduce.interval_gbps == (0.9, 1.1)
    assert recorded.interval_gbps is None


def test_invalid_check_level(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check=deep", "--gputopo-machine", "dgx-a100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gputopo-check: 'deep' is not one of quick, full*"])


def test_gputopo_bench_fixture_measures_with_the_harness(pytester):
    src = """
def test_memcpy(gputopo_bench):
    src = bytearray(b"x" * (1 << 20))
    dst = bytearray(len(src))

    def run(k):
        for _ in range(k):
            dst[:] = src

    m = gputopo_bench.measure("host memcpy", run, size_bytes=len(src), budget_s=1.0,
                              verify=lambda: None if dst == src else "copy differs")
    assert m.verified and m.bw_gbps > 0 and m.spread >= 1.0


def test_shared_results(gputopo_bench):
    r = gputopo_bench.p2p(0, 1)
    assert r.origin == "recorded" and r.gbps == 272.0
"""
    result = run(pytester, "--gputopo-machine", "dgx-a100", "--gputopo-json", "out.json", src=src)
    result.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "out.json").read_text())
    (own,) = doc["test_measurements"]
    assert own["name"] == "host memcpy" and own["test"].endswith("test_memcpy") and own["verified"] is True


@needs_torch
@pytest.mark.slow
def test_cache_reuses_results_across_runs(pytester):
    src = "import pytest\n@pytest.mark.min_allreduce_bw(0.001)\ndef test_ok(): pass\n"
    pytester.makepyfile(test_bw=src)
    args = [
        "--gputopo-allreduce-backend",
        "gloo",
        *QUICK,
        "--gputopo-allreduce-size",
        "256K",
        "--gputopo-cache",
        "--gputopo-json",
        "out.json",
    ]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    first = json.loads((pytester.path / "out.json").read_text())["measurements"][0]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    second = json.loads((pytester.path / "out.json").read_text())["measurements"][0]
    assert (first["origin"], second["origin"]) == ("measured", "cached")
    assert second["gbps"] == first["gbps"]
    pytester.runpytest(*args, "--gputopo-cache-max-age", "0.0000001").assert_outcomes(passed=1)
    third = json.loads((pytester.path / "out.json").read_text())["measurements"][0]
    assert third["origin"] == "measured"  # too old: measured again
    # a figure taken another way is not the same figure: another engine or policy is not served the cache
    pytester.runpytest(*args, "--gputopo-allreduce-engine", "nccl-tests").assert_outcomes(skipped=1)
    fourth = json.loads((pytester.path / "out.json").read_text())["measurements"][0]
    assert fourth["origin"] == "measured" and fourth["gbps"] is None


@needs_torch
@pytest.mark.slow
def test_xdist_workers_share_one_measurement_per_run(pytester):
    pytest.importorskip("xdist")
    src = """
import json, pytest

@pytest.mark.parametrize("i", range(4))
@pytest.mark.min_allreduce_bw(0.001)
def test_allreduce(gputopo_bench, i, tmp_path_factory):
    r = gputopo_bench.allreduce()
    root = tmp_path_factory.getbasetemp().parent
    (root / f"seen-{i}.json").write_text(json.dumps(r.detail, sort_keys=True))
"""
    pytester.makepyfile(test_bw=src)
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--gputopo-allreduce-backend",
        "gloo",
        *QUICK,
        "--gputopo-allreduce-size",
        "256K",
        "--gputopo-json",
        "out.json",
        "-p",
        "no:cacheprovider",
        "--basetemp",
        str(pytester.path / "bt"),
    )
    result.assert_outcomes(passed=4)
    files = list((pytester.path / "bt").glob("seen-*.json"))
    assert len(files) == 4
    seen = {p.read_text() for p in files}
    assert len(seen) == 1  # every test on every worker got the same measurement: one benchmark run
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [m["origin"] for m in doc["measurements"]] == ["measured"]  # it reached the controller


# ------------------------------------------------------------------ machines that are not this host

GLOO = (
    "import pytest\n@pytest.mark.min_allreduce_bw(0.0001)\ndef test_any(): pass\n"
    "@pytest.mark.min_allreduce_bw(0.0001, gpus=8)\ndef test_eight_gpus(): pass\n"
)


def test_gloo_never_serves_this_hosts_figure_as_a_recorded_machines(pytester):
    """With gloo on a recorded machine, the host's CPU all-reduce is never labelled recorded:dgx-a100
    nor meets dgx-a100's markers: a recorded machine's figures are its own, gloo cannot measure it."""
    result = run(
        pytester,
        "--gputopo-machine",
        "dgx-a100",
        "--gputopo-allreduce-backend",
        "gloo",
        *QUICK,
        "--gputopo-allreduce-size",
        "64K",
        src=GLOO,
    )
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*min_allreduce_bw(0.0001): *no figure (gloo measures this host's CPUs, "
            "and recorded:dgx-a100 is not this host)*"
        ]
    )


def test_min_p2p_bw_with_more_gpus_than_visible_is_unmet(pytester):
    src = "import pytest\n@pytest.mark.min_p2p_bw(1, gpus=8)\ndef test_p2p(): pass\n"
    result = run(pytester, "--gputopo-machine", "4x-rtx4090", src=src)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*min_p2p_bw(1, gpus=8): needs 8 GPUs, 4 visible*"])
