"""``--gputopo-plan --gputopo-lease``: what leases would do, simulated with the policy, running nothing
(``plugin/lease_plan.py``); on a named machine, and on the emulated host beside a real leased run,
whose kept durations the plan reads (the reader on what the real writer wrote)."""

from __future__ import annotations

import json

import pytest

from emulated import emulated_host, emulated_libs  # noqa: F401  (fixtures)
from test_leases import leased  # noqa: F401  (fixture)

SUITE = """
import pytest, time

@pytest.mark.lease_memory(10)
@pytest.mark.requires_gpus(1)
@pytest.mark.parametrize("i", range(4))
def test_light(i):
    pass

@pytest.mark.lease_memory(40)
@pytest.mark.requires_p2p(gpus=2)
def test_pair():
    time.sleep(0.3)

@pytest.mark.requires_gpus(4)
def test_four():
    pass

@pytest.mark.lease_memory(200)
@pytest.mark.requires_gpus(1)
def test_huge():
    pass

@pytest.mark.requires_gpus(16)
def test_sixteen():
    pass

def test_plain():
    pass
"""


def plan_of(pytester, *args) -> tuple[pytest.RunResult, dict]:
    path = pytester.path / "plan.json"
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--gputopo-lease", f"--gputopo-plan-json={path}", *args)
    return result, json.loads(path.read_text())


def test_a_lease_plan_of_a_named_machine_places_each_test_and_simulates_the_run(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result, found = plan_of(pytester, "--gputopo-machine", "dgx-a100")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "SKIP test_suite.py::test_huge - lease_memory(200): each GPU it holds needs 200 GiB and a CUDA "
            "context's 1 GiB, 201 GiB; the GPUs here have 80.0 GiB",
            "SKIP test_suite.py::test_sixteen - requires_gpus(16): *",
            "*gputopo lease plan (simulated)*",
            "LEASE test_suite.py::test_four - GPU 0,1,2,3, whole GPUs, 0.0-1.0 s",
            "LEASE test_suite.py::test_pair - GPU 4,5, 40 GiB/GPU, 0.0-1.0 s",  # NVLink-linked, beside the four
            "LEASE test_suite.py::test_light?0? - GPU 6, 10 GiB/GPU, 0.0-1.0 s",
            "durations: 0 kept by earlier runs, 6 unmeasured (1 s each); times above with -n 8 *",
            "-n 8: makespan 1.0 s, 1.00x the lower bound 1.0 s; exclusive leases 2.0 s",
            "without -n: makespan 6.0 s, *",
            "simulated: 0 moments over a GPU's memory, 0 exclusive tests sharing a GPU",
        ]
    )
    leases = found["leases"]
    assert leases["simulated"] is True and leases["workers"] == 8
    assert [t["nodeid"].split("::")[1] for t in leases["tests"]][:2] == ["test_four", "test_pair"]  # largest first
    assert [s["nodeid"].split("::")[1] for s in leases["skipped"]] == ["test_huge"]  # test_sixteen: the plan's own skip
    verdicts = {t["nodeid"].split("::")[1]: t["verdict"] for t in found["tests"]}
    assert verdicts["test_huge"] == verdicts["test_sixteen"] == "skip"
    assert verdicts["test_plain"] == verdicts["test_four"] == "run"


def test_under_strict_a_test_no_set_holds_is_planned_to_fail(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result, found = plan_of(pytester, "--gputopo-machine", "dgx-a100", "--gputopo-strict")
    assert {t["nodeid"].split("::")[1]: t["verdict"] for t in found["tests"]}["test_huge"] == "fail"


def test_without_a_plan_leases_still_refuse_another_machine_and_say_a_plan_would_show_it(pytester):
    result = pytester.runpytest_subprocess("--gputopo-lease", "--gputopo-machine", "dgx-a100")
    result.stderr.fnmatch_lines(["*names another machine (dgx-a100); give one or the other (with --gputopo-plan, *"])


@pytest.mark.slow
def test_on_this_host_the_plan_agrees_with_the_leased_run_and_reads_the_durations_it_kept(pytester, leased, tmp_path):
    """The same verdict in the plan as in the run (a test no set holds skips with the same words), the
    plan takes no lock and starts no test process, and after a run it times each test by what that run
    kept (test_pair slept 0.3 s: its duration is measured, no longer the 1 s stand-in)."""
    args = leased("dgx-a100")
    pytester.makepyfile(test_suite=SUITE)
    path = pytester.path / "plan.json"
    before = pytester.runpytest_subprocess(*args, "--gputopo-plan", f"--gputopo-plan-json={path}")
    assert before.ret == 0
    assert not (tmp_path / "locks").exists()  # nothing taken, nothing started
    planned = json.loads(path.read_text())
    ran = pytester.runpytest_subprocess(*args, "-rs")
    ran.assert_outcomes(passed=7, skipped=2)
    huge = next(t for t in planned["tests"] if t["nodeid"].endswith("test_huge"))
    ran.stdout.fnmatch_lines([f"SKIPPED * {huge['reason']}"])
    after = pytester.runpytest_subprocess(*args, "--gputopo-plan", f"--gputopo-plan-json={path}")
    after.stdout.fnmatch_lines(["durations: 6 kept by earlier runs, 0 unmeasured *"])
    pair = next(t for t in json.loads(path.read_text())["leases"]["tests"] if t["nodeid"].endswith("test_pair"))
    assert pair["seconds_measured"] and pair["seconds"] >= 0.3  # its sleep, at least: measured, not the 1 s stand-in
