"""What each test asks of the leasable GPUs (``plugin/lease_demands.py``), read without a process:
its budget (declared, measured, the run's) and the run's order by cost (CTest's ``COST``: the tests
that took longest last time are started first, docs: cmake.org/cmake/help/latest/prop_test/COST.html)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_gputopo.core.gpu_requirements import GpuRequirement
from pytest_gputopo.plugin.lease_demands import Demands
from pytest_gputopo.probe.recorded import load_profile

REQS = pytest.StashKey[list]()


def item(name: str, gpus: int = 0) -> SimpleNamespace:
    stash = {REQS: [(GpuRequirement(gpus=gpus), False)]} if gpus else {}
    return SimpleNamespace(nodeid=f"t.py::{name}", name=name, stash=stash)


def demands(figures=None, budgets=None, budget_gib=None, measured=False) -> Demands:
    found = Demands(load_profile("dgx-a100").topology, REQS, budget_gib, measured)
    found.figures = {f"t.py::{k}": v for k, v in (figures or {}).items()}
    found.budgets = {f"t.py::{k}": v for k, v in (budgets or {}).items()}
    return found


@pytest.mark.parametrize(
    ("tests", "figures", "order"),
    [
        # Unmeasured: GPUs stand in for time (1 s each), largest first; the others keep their places.
        ([("plain", 0), ("one", 1), ("four", 4), ("two", 2)], {}, ["plain", "four", "two", "one"]),
        # Measured: GPU-seconds, the costliest first: a long one-GPU test before a short pair.
        (
            [("one_long", 1), ("two_short", 2), ("one_short", 1)],
            {"one_long": {"seconds": 30.0}, "two_short": {"seconds": 2.0}, "one_short": {"seconds": 0.5}},
            ["one_long", "two_short", "one_short"],
        ),
        # Equal costs keep their order; an unmeasured test counts 1 s per GPU.
        ([("a", 1), ("b", 1), ("c", 2)], {"c": {"seconds": 0.25}}, ["a", "b", "c"]),
    ],
)
def test_leased_tests_go_costliest_first_in_the_places_leased_tests_held(tests, figures, order):
    items = [item(name, gpus) for name, gpus in tests]
    demands(figures).by_cost(items)
    assert [i.name for i in items] == order


@pytest.mark.parametrize(
    ("declared", "run_budget", "measured", "peak", "budget"),
    [
        (None, None, False, None, None),  # nothing said: whole GPUs
        (None, 12.0, False, 3.0, 12.0),  # the run's budget
        (6.0, 12.0, True, 3.0, 6.0),  # its own mark first
        ("unset", None, True, 8.0, 10.0),  # measured: the last peak and a quarter
        ("unset", None, True, None, None),  # measured, no peak yet (or unknown): whole GPUs
    ],
)
def test_a_tests_budget_is_its_own_else_its_measured_peaks_else_the_runs(declared, run_budget, measured, peak, budget):
    budgets = {} if declared == "unset" else {"x": declared} if declared is not None else {}
    figures = {"x": {"seconds": 1.0, "peak_gib": peak}}
    found = demands(figures, budgets, run_budget, measured)
    assert found.budget_of(item("x", 1)) == budget
