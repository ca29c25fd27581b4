"""``--gputopo-plan --gputopo-lease``: what leases would do with the selected tests, on this host or on
the machine ``--gputopo-machine`` names, running nothing. Each test that would run (or measure, then
run) and asks for GPUs is placed by the policy itself (``core.lease_simulation`` over
``core.lease_policy``), with the budgets and the order a leased run would use (``lease_demands``),
its duration the one kept by the last run that measured it (``lease_figures``), else 1 s. The plan
shows each test's simulated GPU set, budget and time, then the makespan for a few worker counts beside
exclusive leases' and the lower bound. Every figure here is simulated, and says so.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from ..core import lease_policy, lease_simulation
from ..core.lease_simulation import Job, Timeline
from ..render.escape import terminal
from .lease_demands import DEFAULT_SECONDS, Demands


class Workers(NamedTuple):
    """The suite simulated with ``n`` workers (xdist's ``-n``; 1: without xdist)."""

    n: int
    timeline: Timeline  # with the tests' budgets
    exclusive: Timeline  # every test holding whole GPUs
    bound: float  # no packing ends sooner (``lease_simulation.lower_bound``)


class LeasePlan(NamedTuple):
    jobs: tuple[Job, ...]  # in the run's order
    skipped: tuple[tuple[str, str], ...]  # (test, why): no set of this machine ever holds it
    measured: frozenset[str]  # the tests whose duration an earlier run measured
    gpus: int  # the GPUs a lease may hold
    runs: tuple[Workers, ...]  # the first: one worker per GPU, as -n auto gives with leases


def lease_plan(demands: Demands, items: list, runnable: set[str]) -> LeasePlan:
    """The leased tests among ``items`` (those the plan says would run: ``runnable``), simulated."""
    ordered = list(items)
    demands.by_cost(ordered)
    jobs, skipped = [], []
    for item in ordered:
        placer, _ = demands.placer_of(item)
        if placer is None or item.nodeid not in runnable:
            continue
        never = placer.never or demands.too_large(item, placer)
        if never:
            skipped.append((item.nodeid, never))
        else:
            jobs.append(Job(item.nodeid, placer, demands.budget_of(item), demands.seconds_of(item)))
    gpus = len(demands.memory_gib)
    more = {n for n in (2 * gpus, len(jobs)) if gpus < n <= len(jobs)}  # more workers than tests wait
    counts = sorted(({1, gpus} | more) - {0}, key=lambda n: (n != gpus, n))  # -n auto's first
    runs = tuple(_simulated(jobs, demands.memory_gib, n) for n in counts)
    measured = frozenset(job.name for job in jobs if job.name in demands.figures)
    return LeasePlan(tuple(jobs), tuple(skipped), measured, gpus, runs)


def _simulated(jobs: list[Job], memory: dict, n: int) -> Workers:
    reserve = lease_policy.CONTEXT_RESERVE_GIB
    whole = [Job(job.name, job.placer, None, job.seconds) for job in jobs]
    return Workers(
        n,
        lease_simulation.simulate(jobs, memory, n, reserve),
        lease_simulation.simulate(whole, memory, n, reserve),
        lease_simulation.lower_bound(jobs, memory, reserve, n),
    )


def _budget(budget: float | None) -> str:
    return "whole GPUs" if budget is None else f"{budget:g} GiB/GPU"


def show(found: LeasePlan, reporter) -> None:
    """Each leased test's simulated place and time, then the makespans by workers (the tests no set
    holds are the plan's own lines: skip, or fail where strict)."""
    reporter.write_sep("=", "gputopo lease plan (simulated)")
    if not found.jobs and not found.skipped:
        reporter.write_line("no selected test asks for GPUs: leases would place none")
        return
    first = found.runs[0]
    ran = {r.name: r for r in first.timeline.ran}
    budgets = {job.name: job.budget_gib for job in found.jobs}
    for name in [job.name for job in found.jobs]:
        r = ran[name]
        gpus = ",".join(map(str, r.gpus))
        reporter.write_line(
            terminal(f"LEASE {name} - GPU {gpus}, {_budget(budgets[name])}, {r.start:.1f}-{r.end:.1f} s"), green=True
        )
    unmeasured = len(found.jobs) - len(found.measured)
    reporter.write_line(
        f"durations: {len(found.measured)} kept by earlier runs, {unmeasured} unmeasured ({DEFAULT_SECONDS:g} s each); "
        f"times above with -n {first.n} (one worker per leasable GPU, as -n auto gives with leases)"
    )
    for w in found.runs:
        workers = "without -n" if w.n == 1 else f"-n {w.n}"
        reporter.write_line(
            f"{workers}: makespan {w.timeline.makespan:.1f} s, {w.timeline.makespan / w.bound:.2f}x the lower "
            f"bound {w.bound:.1f} s; exclusive leases {w.exclusive.makespan:.1f} s"
            if w.bound
            else f"{workers}: nothing to run"
        )
    over = sum(w.timeline.overcommitted for w in found.runs)
    shared = sum(w.timeline.shared_exclusive for w in found.runs)
    reporter.write_line(
        f"simulated: {over} moments over a GPU's memory, {shared} exclusive tests sharing a GPU", bold=True
    )


def document(found: LeasePlan) -> dict:
    """The lease plan in the JSON plan (``--gputopo-plan-json``): simulated, every figure."""
    first = found.runs[0]
    ran = {r.name: r for r in first.timeline.ran}
    return {
        "simulated": True,
        "workers": first.n,
        "tests": [
            {
                "nodeid": job.name,
                "gpus": list(ran[job.name].gpus),
                "budget_gib": job.budget_gib,
                "seconds": job.seconds,
                "seconds_measured": job.name in found.measured,  # else DEFAULT_SECONDS
                "start": ran[job.name].start,
                "end": ran[job.name].end,
            }
            for job in found.jobs
        ],
        "skipped": [{"nodeid": name, "reason": why} for name, why in found.skipped],
        "makespans": [
            {
                "workers": w.n,
                "makespan_s": w.timeline.makespan,
                "exclusive_makespan_s": w.exclusive.makespan,
                "lower_bound_s": w.bound,
                "overcommitted": w.timeline.overcommitted,
                "shared_exclusive": w.timeline.shared_exclusive,
            }
            for w in found.runs
        ],
    }


def demands_of(config: pytest.Config, run, reqs_key, items: list) -> Demands:
    """The demands a leased run would read, on the plan's machine."""
    demands = Demands.of_run(run, reqs_key)
    demands.read(config, items)
    return demands
