"""Each leased test's peak GPU memory and duration, measured by the run (``plugin/lease_figures.py``,
``probe/gpu_memory.py``), on the emulated GPU host: its NVML lists a process using what the test said
it uses (``emulated_host/emulated_gpu.py``), as ``nvmlDeviceGetComputeRunningProcesses`` does.

Sources: nvidia-ml-py's ``nvmlDeviceGetComputeRunningProcesses`` (the installed ``pynvml.py``) returns
objects with ``pid`` and ``usedGpuMemory``, the latter None where the driver reports
``NVML_VALUE_NOT_AVAILABLE`` ("special case for WDDM on Windows"); NVML names processes by the host's
pids, which a container without the host's PID namespace does not show (NVIDIA/nvidia-docker #179,
"nvidia-smi doesn't show processes inside a container").
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from emulated import INSTALLED_TORCH, emulated_host, emulated_libs  # noqa: F401  (fixtures)
from pytest_gputopo.core import lease_policy
from pytest_gputopo.probe.gpu_memory import _Seen, look
from test_leases import leased  # noqa: F401  (fixture)

GIB = 2**30


def looked(*samples, own=frozenset({10, 11})) -> _Seen:
    seen = _Seen()
    for listed in samples:
        look(listed, lambda: set(own), seen)
    return seen


@pytest.mark.parametrize(
    ("samples", "peak", "unknown"),
    [
        ([[]], None, "listed no compute process"),  # it used none, or NVML shows none here: not a 0
        ([[[(os.getpid(), 9 * GIB)]]], 0, None),  # NVML shows processes here, none of its own: it used none
        ([[[(10, 2 * GIB), (11, 1 * GIB)]]], 3 * GIB, None),  # its processes add up on a GPU
        ([[[(10, 2 * GIB)], [(10, 5 * GIB)]]], 5 * GIB, None),  # per GPU: the fullest one
        ([[[(10, 2 * GIB)]], [[(10, 4 * GIB)]], [[(10, 1 * GIB)]]], 4 * GIB, None),  # the most at a look
        ([[[(10, 2 * GIB), (os.getpid(), 9 * GIB)]]], 2 * GIB, None),  # another process here is not its
        ([[[(10, None)]]], None, "no per-process memory"),  # WDDM, or a driver that cannot say
        ([[[(2**22 + 7, 3 * GIB)]]], None, "PID namespace"),  # NVML's pids are not this namespace's
        ([[[(2**22 + 7, 3 * GIB)]], [[(10, 1 * GIB)]]], 1 * GIB, None),  # its own matched once: known
    ],
)
def test_the_peak_is_the_most_its_processes_held_on_one_gpu_and_unknown_where_nvml_cannot_say(samples, peak, unknown):
    result = looked(*samples).result()
    assert result.bytes == peak
    assert (result.why_unknown is None) == (unknown is None)
    if unknown:
        assert unknown in result.why_unknown


@pytest.mark.parametrize(
    ("budget", "peak", "over"), [(10, 10.5, True), (10, 10.0, False), (None, 70, False), (10, None, False)]
)
def test_over_budget_only_where_both_are_known(budget, peak, over):
    assert lease_policy.over_budget(budget, peak) is over


def test_a_measured_budget_leaves_a_margin_over_the_peak():
    assert lease_policy.measured_budget(8.0) == 10.0  # a quarter more
    assert lease_policy.measured_budget(1.0) == 1.5  # at least half a GiB more


USES = """
import emulated_gpu, os, pytest

@pytest.mark.lease_memory(4)
@pytest.mark.requires_gpus(1)
def test_within():
    emulated_gpu.use(3)

@pytest.mark.lease_memory(4)
@pytest.mark.requires_gpus(1)
def test_over():
    emulated_gpu.use(6)

@pytest.mark.requires_gpus(1)
def test_undeclared():
    emulated_gpu.use(float(os.environ.get("UNDECLARED_USES", 8)))
"""


def cached(pytester) -> dict:
    path = pytester.path / ".pytest_cache" / "v" / "gputopo" / "leased"
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_each_leased_tests_peak_is_reported_and_kept_and_one_over_its_budget_is_named(pytester, leased, workers):
    """From a lease's own process (and, under -n, through xdist's worker): the peak rides on the call
    report into the JSON and HTML reports, the terminal names the test over its budget, and the cache keeps each
    test's peak and duration for later runs."""
    pytester.makepyfile(test_uses=USES)
    report = pytester.path / "report.json"
    html = pytester.path / "report.html"
    result = pytester.runpytest_subprocess(
        *leased("dgx-a100"), "-n", str(workers), f"--gputopo-json={report}", f"--gputopo-html={html}"
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*gputopo: leased tests over their GPU memory budget*",
            "*test_uses.py::test_over: 6.00 GiB at its peak, budget 4 GiB*",
        ]
    )
    assert "test_within:" not in result.stdout.str()
    leased_figures = {e["test"].split("::")[-1]: e for e in json.loads(report.read_text())["leased"]}
    assert leased_figures["test_within"] == {
        "test": "test_uses.py::test_within",
        "budget_gib": 4,
        "peak_gib": 3.0,
        "peak_unknown": None,
    }
    assert leased_figures["test_undeclared"]["budget_gib"] is None
    assert leased_figures["test_undeclared"]["peak_gib"] == 8.0
    page = html.read_text()
    assert "<h2>Leased tests' GPU memory</h2>" in page
    assert '<td class="failed">6.00 GiB (over its budget)</td>' in page and "<td>3.00 GiB</td>" in page
    kept = cached(pytester)
    assert {k.split("::")[-1]: v["peak_gib"] for k, v in kept.items()} == {
        "test_within": 3.0,
        "test_over": 6.0,
        "test_undeclared": 8.0,
    }
    # each test's call duration, kept to the millisecond (a call this short may keep 0.0: seen under load)
    assert all(type(v["seconds"]) is float and v["seconds"] >= 0 for v in kept.values())


@pytest.mark.slow
def test_over_its_budget_a_test_fails_under_strict(pytester, leased):
    pytester.makepyfile(test_uses=USES)
    result = pytester.runpytest_subprocess(*leased("dgx-a100"), "--gputopo-strict", "-rf")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "used 6.00 GiB of GPU memory at its peak, over its budget of 4 GiB (*--gputopo-strict)",
            "FAILED test_uses.py::test_over*",
        ]
    )


@pytest.mark.slow
def test_measured_budgets_undeclared_tests_from_their_last_peak_and_whole_gpus_before(pytester, leased, monkeypatch):
    """``--gputopo-lease-memory measured``: the first run holds an undeclared test's GPU whole (no peak
    yet); the next budgets it at its last peak and a quarter (8 GiB: 10), its own marks untouched."""
    pytester.makepyfile(test_uses=USES)
    args = [*leased("dgx-a100"), "--gputopo-lease-memory", "measured", f"--gputopo-json={pytester.path / 'r.json'}"]
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=3)

    def budgets():
        found = json.loads((pytester.path / "r.json").read_text())["leased"]
        return {e["test"].split("::")[-1]: e["budget_gib"] for e in found}

    assert budgets() == {"test_within": 4, "test_over": 4, "test_undeclared": None}
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=3)
    assert budgets() == {"test_within": 4, "test_over": 4, "test_undeclared": 10.0}
    # Over a budget taken from its last peak, a test is named, never failed, even under strict: that
    # budget is the plugin's guess, not the user's word (test_over's declared 4 still fails).
    monkeypatch.setenv("UNDECLARED_USES", "12")
    result = pytester.runpytest_subprocess(*args, "--gputopo-strict")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_uses.py::test_undeclared: 12.00 GiB at its peak, budget 10 GiB*"])
    assert "FAILED test_uses.py::test_undeclared" not in result.stdout.str()


def test_kept_figures_of_any_other_shape_are_left_out():
    """The cache is a file anyone may have edited: an entry that is not a duration and a peak in range
    is left out, never read as a budget."""
    from pytest_gputopo.plugin.lease_figures import CACHE_KEY, read_cache

    kept = {
        CACHE_KEY: {
            "t.py::ok": {"seconds": 2.5, "peak_gib": 3.0},
            "t.py::unknown_peak": {"seconds": 1.0, "peak_gib": None},
            "t.py::negative": {"seconds": -1, "peak_gib": 3.0},
            "t.py::huge": {"seconds": 1.0, "peak_gib": 1e9},
            "t.py::text": {"seconds": "1", "peak_gib": 3.0},
            "t.py::nan": {"seconds": float("nan"), "peak_gib": 3.0},
            "t.py::list": [1, 2],
        }
    }
    config = SimpleNamespace(cache=SimpleNamespace(get=lambda key, default: kept.get(key, default)))
    assert read_cache(config) == {
        "t.py::ok": {"seconds": 2.5, "peak_gib": 3.0},
        "t.py::unknown_peak": {"seconds": 1.0, "peak_gib": None},
    }


ENDING_SLOWLY = """
import atexit, time
import emulated_gpu, pytest

atexit.register(time.sleep, 1.5)  # its process ends slowly, its memory held, beside the next tests

@pytest.mark.lease_memory(10)
@pytest.mark.requires_gpus(1)
def test_a():
    emulated_gpu.use(6)
"""

NEXT_IN_OWN_PROCESS = """
import emulated_gpu, pytest

@pytest.mark.lease_memory(10)
@pytest.mark.requires_gpus(1)
def test_b():
    emulated_gpu.use(1)
"""

NEXT_AS_RANKS = """
import time
import emulated_gpu, pytest

@pytest.mark.lease_memory(10)
@pytest.mark.ranks(1, backend="cpu:gloo,cuda:gloo")
def test_c(gputopo_rank):
    emulated_gpu.use(2, 0)
    time.sleep(0.3)
"""


@pytest.mark.slow
def test_a_tests_peak_is_its_own_processes_not_those_of_a_test_before_still_ending_on_its_gpu(pytester, leased):
    """Leases x the figures x the processes that end without being waited for: test_a's process, told
    to end, holds its 6 GiB on the GPU while the next tests share it; their peaks are theirs alone
    (the one run in a process of its own counted from that process, not from pytest's; the ranks test
    from pytest's, but not below the other tests' processes)."""
    pytest.importorskip("torch")
    pytester.makepyfile(test_1=ENDING_SLOWLY, test_2=NEXT_IN_OWN_PROCESS, test_3=NEXT_AS_RANKS)
    report = pytester.path / "report.json"
    args = leased("single-gpu", torch=INSTALLED_TORCH)
    result = pytester.runpytest_subprocess(*args, "-n", "0", f"--gputopo-json={report}")
    result.assert_outcomes(passed=3)
    peaks = {e["test"].split("::")[-1]: e["peak_gib"] for e in json.loads(report.read_text())["leased"]}
    assert peaks == {"test_a": 6.0, "test_b": 1.0, "test_c": 2.0}
