"""A suite on leases simulated with the policy itself (``core/lease_simulation.py``): no process, lock
or clock. Memory budgets pack tests onto shared GPUs, an exclusive test never shares one, no GPU's
budgets ever exceed its memory, and no packing beats the lower bound (issue 42)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from pytest_gputopo.core import requirements as reqs
from pytest_gputopo.core.gpu_requirements import GpuRequirement
from pytest_gputopo.core.lease_simulation import Job, lower_bound, simulate
from pytest_gputopo.core.placement import Placer
from pytest_gputopo.probe.recorded import load_profile

TOPOLOGY = load_profile("dgx-a100").topology
MEMORY = dict.fromkeys(range(8), 80.0)
PLACERS = {k: Placer(TOPOLOGY, [GpuRequirement(gpus=k)], k) for k in (1, 2, 4, 8)}


def suite_of(count, k=1, budget=None, seconds=1.0, prefix="t"):
    return [Job(f"{prefix}{i}", PLACERS[k], budget, seconds) for i in range(count)]


def test_one_gpu_tests_on_whole_gpus_run_eight_at_a_time():
    timeline = simulate(suite_of(16), MEMORY, workers=16)
    assert timeline.makespan == 2.0 and len(timeline.ran) == 16
    assert timeline.overcommitted == timeline.shared_exclusive == 0


def test_small_budgets_share_the_gpus():
    """Sixteen tests of 10 GiB on eight 80 GB GPUs: all at once, twice as fast as whole GPUs."""
    timeline = simulate(suite_of(16, budget=10.0), MEMORY, workers=16, reserve_gib=0.5)
    assert timeline.makespan == 1.0 and timeline.overcommitted == 0
    assert max(sum(1 for r in timeline.ran if gpu in r.gpus) for gpu in range(8)) == 2


def test_an_exclusive_test_waits_for_an_empty_gpu_and_shares_none():
    suite = suite_of(8, budget=10.0, seconds=2.0) + suite_of(1, k=8, prefix="all")
    timeline = simulate(suite, MEMORY, workers=9, reserve_gib=0.5)
    (whole,) = [r for r in timeline.ran if r.name == "all0"]
    assert whole.start == 2.0 and timeline.shared_exclusive == 0


def test_a_budget_no_gpu_could_hold_never_runs():
    timeline = simulate(suite_of(1, budget=80.0) + suite_of(1, prefix="ok"), MEMORY, workers=2, reserve_gib=0.5)
    assert timeline.never == ("t0",) and [r.name for r in timeline.ran] == ["ok0"]


def test_a_test_no_set_meets_never_runs():
    pcie = Placer(load_profile("4x-rtx4090").topology, [reqs.P2PRequirement(gpus=2)], 2)  # P2P refused everywhere
    timeline = simulate([Job("p2p", pcie, None, 1.0)], dict.fromkeys(range(4), 24.0), workers=1)
    assert timeline.never == ("p2p",) and timeline.ran == ()


SUITES = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 4, 8]),
        st.one_of(st.none(), st.floats(0.5, 79.0)),
        st.floats(0.1, 5.0),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(suite=SUITES, workers=st.integers(1, 12))
def test_whatever_the_suite_no_gpu_is_overcommitted_no_exclusive_test_shares_and_every_test_runs(suite, workers):
    tests = [Job(f"t{i}", PLACERS[k], budget, seconds) for i, (k, budget, seconds) in enumerate(suite)]
    timeline = simulate(tests, MEMORY, workers=workers, reserve_gib=0.5)
    assert timeline.overcommitted == 0 and timeline.shared_exclusive == 0
    assert sorted([r.name for r in timeline.ran] + list(timeline.never)) == sorted(t.name for t in tests)
    ran = [t for t in tests if t.name not in timeline.never]
    assert timeline.makespan >= lower_bound(ran, MEMORY, 0.5, workers) - 1e-9


@pytest.mark.parametrize(
    ("budget", "workers", "bound"), [(None, 16, 2.0), (9.5, 16, 1.0), (39.5, 16, 1.0), (9.5, 4, 4.0), (9.5, None, 1.0)]
)
def test_the_lower_bound(budget, workers, bound):
    """Sixteen one-GPU tests of 1 s: whole GPUs, 16 GPU-seconds on 8 GPUs; 10 GiB each (with the
    reserve), 160 GiB-seconds of 640; 40 GiB each, 640 of 640; four workers, 16 test-seconds."""
    assert lower_bound(suite_of(16, budget=budget), MEMORY, 0.5, workers) == bound
