"""``--gputopo-plan``: a dry run. After collection (and every plugin's deselection), each selected
test's verdict on this host or on ``--gputopo-machine`` -- run, skip, fail (strict), broken, or
unknown until a benchmark measures -- and why, with no test body and no benchmark run.

The verdicts are the run's own: ``verdicts.evaluate`` judges each requirement and
``verdicts.unmet_verdict`` says what an unmet one does, as ``hooks.pytest_runtest_setup`` does, so
a figure gets the same verdict in a plan as in a run. Only measuring differs: the suite lists what
it would measure (``BenchSuite.planned``) and takes figures at hand alone (recorded for the machine,
or kept in pytest's cache with ``--gputopo-cache``); a requirement that needs a measurement is
``unknown``, naming it. A plan of a machine that is not this host previews a run on that machine: a
figure its profile does not record is one the node would measure (``unknown``), not a skip, so that a
CI pool whose profile has no figures still gets the jobs of its bandwidth tests.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from ..core.fact_requirements import FactRequirement
from ..core.units import counted
from ..render.escape import terminal
from ..render.report import source_text
from ..runtime import environ
from ..runtime.files import write_text
from .lease_plan import demands_of, document as lease_plan_document, lease_plan, show as lease_plan_show
from .machine import item_facts
from .run import GATE_EXIT_STATUS, GputopoRun, run_of
from .verdicts import BROKEN, FAIL, RUN, SKIP, evaluate, unmet_verdict

UNKNOWN = "unknown"  # decided by a measurement the plan does not make
VERDICTS = (RUN, SKIP, FAIL, BROKEN, UNKNOWN)
LABELS = {RUN: "RUN", SKIP: "SKIP", FAIL: "FAIL (strict)", BROKEN: "BROKEN", UNKNOWN: "UNKNOWN"}
COUNTED = {RUN: "run", SKIP: "skip", FAIL: "fail (strict)", BROKEN: "broken", UNKNOWN: "unknown (would measure)"}
MARKUP = {
    RUN: {"green": True},
    SKIP: {"yellow": True},
    FAIL: {"red": True},
    BROKEN: {"red": True, "bold": True},
    UNKNOWN: {"cyan": True},
}
SCHEMA = 1  # of the JSON plan (--gputopo-plan-json)
CHECK = "a health check (--gputopo-check): its outcome is the check's"  # run, not gated


class Entry(NamedTuple):
    nodeid: str
    verdict: str  # one of VERDICTS
    reason: str
    requirement: str | None = None  # the requirement that decides (None: the test runs)
    measure: tuple[str, ...] = ()  # what would be measured before a verdict (UNKNOWN)
    # The deciding requirement's own verdict (``requirements.Outcome.word``): unmet, unknown (no source
    # reported a fact it needs, or it waits for a measurement), broken; None where the test runs.
    requirement_verdict: str | None = None


class Plan:
    """The plugin of a planned run: after collection it shows the plan instead of running the tests."""

    def __init__(self, run: GputopoRun, item_reqs: pytest.StashKey) -> None:
        # A plan runs no test: nothing to distribute, and one process plans what every rank would
        # judge alike. Refused where xdist distributes or a launcher started this as one rank.
        if run.shared_dir is not None:
            raise pytest.UsageError(
                f"{run.settings.plan_from}: a plan runs no test, so xdist has nothing to "
                f"distribute; plan without -n/--dist (add -n 0 where the ini file sets -n)"
            )
        try:
            launch = environ.launch()
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        if launch is not None:
            raise pytest.UsageError(
                f"{run.settings.plan_from}: this is rank {launch.rank} of {launch.world_size} "
                f"(torchrun or srun); a plan runs no test: run it once, without the launcher"
            )
        self.item_reqs = item_reqs

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session):
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            return None  # pytest's own loop stops the run for its collection errors
        run = run_of(session.config)
        entries = plan(run, session.items, self.item_reqs)
        leases = None
        if run.settings.lease:  # what leases would do with the tests that would run
            demands = demands_of(session.config, run, self.item_reqs, session.items)
            leases = lease_plan(demands, session.items, {e.nodeid for e in entries if e.verdict in (RUN, UNKNOWN)})
            entries = unleased(run, entries, session.items, self.item_reqs, dict(leases.skipped))
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            show(run, entries, reporter)
            if leases is not None:
                lease_plan_show(leases, reporter)
        path = run.settings.plan_json
        if path is not None:  # checked writable at start; a disk that filled since is a usage error too
            found = document(run, entries)
            if leases is not None:
                found["leases"] = lease_plan_document(leases)
            try:
                write_text(path, json.dumps(found, indent=2) + "\n")
            except OSError as exc:
                raise pytest.UsageError(f"gputopo: cannot write the plan to {path}: {exc}") from None
            if reporter is not None:
                reporter.write_line(f"gputopo: wrote the plan to {terminal(path)}")
        return True  # no test runs


def plan(run: GputopoRun, items: list, item_reqs: pytest.StashKey) -> list[Entry]:
    """Each item's entry, in the order the run would take them."""
    found = [(item, item.stash.get(item_reqs, ())) for item in items]
    for item, reqs in found:  # what the run would learn (--collect-only learns nothing before this)
        run.machine.need(item_facts(item, reqs))
    checks = None
    if run.settings.check is not None:
        from .checks import CheckItem as checks  # type: ignore[assignment]  # None where no check runs
    memo: dict = {}
    return [_entry(run, item, reqs, memo, checks) for item, reqs in found]


def _entry(run: GputopoRun, item, reqs, memo: dict, checks) -> Entry:
    if checks is not None and isinstance(item, checks):
        return Entry(item.nodeid, RUN, CHECK)
    if not reqs:
        return Entry(item.nodeid, RUN, "no gputopo marker")
    met = []
    for requirement, strict in reqs:  # as the run's setup: the first unmet requirement decides
        outcome, measure = _judged(run, requirement, memo)
        if measure:
            there = "" if run.topology.is_this_host else _THERE.format(source_text(run.topology))
            return Entry(
                item.nodeid,
                UNKNOWN,
                f"{requirement}: would measure {'; '.join(measure)}{there}",
                str(requirement),
                measure,
                UNKNOWN,
            )
        if outcome.reason is None:  # met: on figures recorded for the machine, it says so
            met.append(outcome.recorded or f"{requirement}: met")
            continue
        verdict = unmet_verdict(run, outcome, strict)
        reason = f"broken node: {outcome.reason}" if verdict == BROKEN else outcome.reason
        return Entry(item.nodeid, verdict, reason, str(requirement), requirement_verdict=outcome.word)
    return Entry(item.nodeid, RUN, "; ".join(met))


def unleased(run: GputopoRun, entries: list[Entry], items: list, item_reqs, skipped: dict[str, str]) -> list[Entry]:
    """With leases, a test that no set of the machine holds (``skipped``: why) skips, or fails where
    strict, as a leased run's setup decides (``Leases.pytest_runtest_setup``)."""
    strict = {item.nodeid: any(s for _, s in item.stash.get(item_reqs, ())) or run.settings.strict for item in items}
    return [
        Entry(e.nodeid, FAIL if strict[e.nodeid] else SKIP, skipped[e.nodeid], requirement_verdict="unmet")
        if e.nodeid in skipped
        else e
        for e in entries
    ]


# Where the measurement an unknown verdict waits for is made, on a machine that is not this host.
_THERE = " on the node (no figure recorded) [{}]"


def _judged(run: GputopoRun, requirement, memo: dict) -> tuple:
    """(the run's outcome, what it would measure first) of one requirement, once per plan.

    On a machine that is not this host (a CI pool's recorded node), a requirement left unmet for
    want of a figure the machine records none of waits for the node to measure it, as on a GPU host:
    the plan previews the run on that node, where a bandwidth test is measured, not skipped. A
    figure it asks for but does not need (one it compares with, when recorded) leaves a met verdict met."""
    if requirement not in memo:
        planned = unrecorded = None
        if isinstance(requirement, FactRequirement):  # judged on measurements: the suite lists them
            from .measurements import suite

            planned, unrecorded = suite(run).planned, suite(run).unrecorded
        start = len(planned) if planned is not None else 0
        start_unrecorded = len(unrecorded) if unrecorded is not None else 0
        outcome = evaluate(run, requirement)
        waits = list(planned[start:]) if planned else []
        if not waits and outcome.reason is not None and unrecorded:
            waits = list(unrecorded[start_unrecorded:])
        measure = tuple(dict.fromkeys(key.describe() for key in waits))
        memo[requirement] = (outcome, measure)
    return memo[requirement]


def where(run: GputopoRun) -> str:
    """The machine the plan is for, as the header names it."""
    if not run.machine.learned:
        return "this host (nothing probed: no selected test asks about the machine)"

    topology = run.topology
    return f"this host ({source_text(topology)})" if topology.is_this_host else source_text(topology)


def counts(entries: list[Entry]) -> dict[str, int]:
    return {v: sum(e.verdict == v for e in entries) for v in VERDICTS}


def show(run: GputopoRun, entries: list[Entry], reporter) -> None:
    """One line per test, as pytest's short summary writes them, and one line of counts."""
    reporter.write_sep("=", "gputopo plan")
    for e in entries:
        if e.reason != CHECK:
            reporter.write_line(terminal(f"{LABELS[e.verdict]} {e.nodeid} - {e.reason}"), **MARKUP[e.verdict])
    checks = sum(e.reason == CHECK for e in entries)
    if checks:  # the check as the check: one line, not one per pair
        reporter.write_line(
            f"RUN gputopo-check - {counted(checks, 'health check')} "
            f"(--gputopo-check {run.settings.check}): each outcome is the check's",
            **MARKUP[RUN],
        )
    found = ", ".join(f"{n} {COUNTED[v]}" for v, n in counts(entries).items() if n) or "no test selected"
    if run.state.gate_problems:  # the gate already said why, cause by cause
        found = f"the run gate is unmet: no test would run (exit status {GATE_EXIT_STATUS})"
    reporter.write_line(
        f"gputopo plan on {where(run)}: {found}; no test ran ({terminal(run.settings.plan_from)})", bold=True
    )


def document(run: GputopoRun, entries: list[Entry]) -> dict:
    """The plan as JSON (--gputopo-plan-json), for CI to route jobs on."""
    learned = run.machine.learned
    return {
        "schema": SCHEMA,
        "machine": str(run.topology.source) if learned else None,  # "recorded:NAME", "text:FILE", "NVML"
        "this_host": run.topology.is_this_host if learned else True,
        "strict": run.settings.strict,
        "gate": list(run.state.gate_problems),  # an unmet run gate's problems: no test would run
        "counts": counts(entries),
        "tests": [
            {
                "nodeid": e.nodeid,
                "verdict": e.verdict,
                "reason": e.reason,
                "requirement": e.requirement,
                "requirement_verdict": e.requirement_verdict,
                "would_measure": list(e.measure),
            }
            for e in entries
        ],
    }
