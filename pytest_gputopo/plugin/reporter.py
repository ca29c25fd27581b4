"""What pytest-gputopo says about a run: the header, what each gated test's report carries (its
verdicts, what it rested on), the summary beside pytest's own, read from the run's record
(``run_record``), and when the report documents are written (``report_writer``: rewritten as the run
goes, so that a run ended by SIGTERM leaves what it measured). Text comes from ``render``; only the
process that speaks for the run writes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from ..core.units import counted
from .properties import (
    CAUSE_PROPERTY,
    CHECK_PROPERTY,
    OWN_PROPERTY,
    RANKS_PROPERTY,
    RECORDED_PROPERTY,
    UNMET_PROPERTY,
    VERDICT_PROPERTY,
)
from .run import GATE_EXIT_STATUS, GputopoRun, run_of

if TYPE_CHECKING:
    from .run_record import RunRecord

# Loaded with the plugin: the renderers (``render``, never loaded with it), the run's record
# (``run_record``: the judges, the benchmarks' results, NCCL's view) and the report writers
# (``report_writer``) are imported by the functions that have something to say, the boundary
# docs/performance.md names.

__all__ = [
    "CAUSE_PROPERTY",
    "OWN_PROPERTY",
    "RANKS_PROPERTY",
    "RECORDED_PROPERTY",
    "UNMET_PROPERTY",
    "VERDICT_PROPERTY",
]  # the tests' properties, named here for the hooks and fixtures too
RECORDED_WORD = "PASSED (recorded, not measured)"  # the passed line of such a test (-v, -rA)


def header_lines(run: GputopoRun, verbosity: int, predicted: Callable[[], str]) -> list[str]:
    """The machine in one line (``-v``: the whole report) with how its facts were had this time, the
    fallback NCCL is predicted to take (``predicted``: the judge's line, asked only where a plain header
    shows it), and the warnings; or, where nothing asked for it, that nothing was probed. Each a terminal
    line: no control character from a profile, a name or a warning (``escape.terminal``)."""
    from ..render.escape import terminal_lines

    return terminal_lines(_header_lines(run, verbosity, predicted))


def _header_lines(run: GputopoRun, verbosity: int, predicted: Callable[[], str]) -> list[str]:
    from ..render import report  # the renderers, when there is something to say

    if not run.speaks:
        return []  # only rank 0 speaks for the run
    if not run.machine.learned and not run.machine.needs:
        return ["gputopo: no selected test or option asks about the machine: nothing probed"]
    topology, ranks = run.topology, run.ranks
    learned = f" ({'; '.join(run.machine.notes)})" if run.machine.notes else ""
    warnings = [f"gputopo warning: {w}" for w in (*run.machine.warnings, *topology.warnings)]
    if verbosity > 0:
        lines = (_rank_lines(ranks) if ranks else []) + report.full_report(topology)
        return (
            lines
            + ([f"gputopo: {'; '.join(run.machine.notes)}"] if learned else [])
            + [f"gputopo warning: {w}" for w in run.machine.warnings]
        )
    if ranks is not None:
        return _rank_lines(ranks) + warnings
    lines = [report.header_line(topology) + learned]
    if len(topology.gpus) >= 2:  # a fallback needs a pair; hosts without GPUs pay nothing for it
        lines += [line for line in (predicted(),) if line]
    return lines + warnings


def _rank_lines(ranks) -> list[str]:
    from ..render import report

    return report.rank_lines(list(ranks.views)) + [ranks.exchange.describe()]


def say_recorded(item: pytest.Item, recorded: list[str]) -> None:
    """A test about to run on requirements met by figures recorded for the machine (published, not
    measured here), ``recorded`` saying which: every output says so -- a JUnit ``<property>`` per
    requirement, a section of the test's report (``-rA``, ``-rP``, beside a failure) and its passed
    line (``recorded_status``)."""
    if not recorded:
        return
    from ..render.escape import terminal

    for note in recorded:
        item.user_properties.append((RECORDED_PROPERTY, note))
    item.add_report_section("setup", "gputopo", "\n".join(terminal(note) for note in recorded))


def say_verdicts(item: pytest.Item, entries: list[str]) -> None:
    """Every requirement of a gated test with its verdict as the run judged it (``verdicts.report_entries``:
    met, unmet, unknown, broken, and why), each a ``gputopo_verdict`` property, so that xdist workers'
    reach the controller's JSON report."""
    item.user_properties += [(VERDICT_PROPERTY, entry) for entry in entries]


def recorded_status(report: pytest.TestReport):
    """``pytest_report_teststatus`` of a test that passed on recorded figures: still passed (counted
    and coloured as one), its word saying the figures were recorded; None for every other report."""
    if (
        report.when == "call"
        and report.passed
        and not hasattr(report, "wasxfail")
        and any(key == RECORDED_PROPERTY for key, _ in getattr(report, "user_properties", ()))
    ):
        return "passed", ".", (RECORDED_WORD, {"green": True})
    return None


def summary_lines(run: GputopoRun, record: RunRecord | None) -> list[str]:
    """One line counting the tests not run per unmet requirement, one counting the tests that passed
    on recorded figures, and what NCCL itself used when it ran: read from the run's record (its
    tests' parts from their reports, so that outcomes of xdist workers are counted too); None: the run
    used nothing of the plugin, and has nothing to say here."""
    if record is None:
        return []
    skipped: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for unmet in record.unmet:
        if unmet.at_setup:
            (skipped if unmet.outcome == "skipped" else failed)[unmet.requirement] += 1
    recorded = Counter(record.recorded)
    lines = [record.nccl.account_line if record.nccl is not None else None]
    lines[:0] = _common_causes(record) + _gate_summary(record)
    if skipped or failed or recorded:
        from ..render import report

        topologies = [topology for _, topology in run.nodes()]
        lines[:0] = [report.skip_summary(skipped, failed, topologies), report.recorded_summary(recorded, topologies)]
    lines = [line for line in lines if line]
    if not lines:  # a run that has nothing to say loads no renderer for its summary
        return []
    from ..render.escape import terminal_lines

    return terminal_lines(lines)


def gate_lines(run: GputopoRun, causes: list, nodeid: str | None) -> list[str]:
    """An unmet run gate, as it stops the run: the verdict, then each cause (``core.causes``: a GPU,
    the machine, or a finding alone) and the findings that show it, each a terminal line; ``nodeid``:
    the gate's, each cause then a failed test under it (None in a plan, which runs nothing)."""
    from ..render.escape import terminal_lines
    from ..render.report import source_text

    lines = [f"gputopo: this machine does not meet the run's requirements [{source_text(run.topology)}]:"]
    for cause in causes:
        first, *evidence = cause.lines(indent="    ")
        lines += [f"  - {first}"] + [f"  {line}" for line in evidence]
    each = f"; {counted(len(causes), 'cause')}, each a failed test {nodeid}::<cause>" if nodeid else ""
    lines.append("gputopo: the run's tests are not collected" + each)
    return terminal_lines(lines)


def _gate_summary(record: RunRecord) -> list[str]:
    """The last word of a run an unmet gate stopped: its causes and exit status."""
    causes = record.gate_causes
    if not causes:
        return []
    return [
        f"gputopo: run gate unmet: {counted(len(causes), 'cause')} ({', '.join(c.name for c in causes)}); "
        f"exit status {GATE_EXIT_STATUS}"
    ]


def _common_causes(record: RunRecord) -> list[str]:
    """One line per GPU (or machine) that made the requirements of several tests unmet."""
    tests: dict[str, set] = {}
    unmet: dict[str, Counter] = {}
    for entry in record.unmet:
        for cause in entry.causes if entry.at_setup else ():
            tests.setdefault(cause, set()).add(entry.test)
            unmet.setdefault(cause, Counter())[entry.requirement] += 1
    return [
        f"gputopo: {subject} is the common cause of {counted(len(nodeids), 'test')} not run: "
        + ", ".join(f"{req} x{n}" for req, n in sorted(unmet[subject].items()))
        for subject, nodeids in tests.items()
        if len(nodeids) > 1
    ]


# ---------------------------------------------------------------------------------------------
# --gputopo-json, --gputopo-html, GITHUB_STEP_SUMMARY


def write_reports(run: GputopoRun, complete: bool, changed: bool = False) -> None:
    """--gputopo-json and --gputopo-html (``report_writer.write``), where one is asked for and this
    process writes them (never an xdist worker); called at the end (``complete``) and as the run goes."""
    if not run.settings.writes_report or run.worker:
        return
    from .report_writer import write  # the writers load when a report is asked for

    write(run, complete, changed)


def write_github_summary(run: GputopoRun, write_line) -> None:
    """Under GitHub Actions (``GITHUB_STEP_SUMMARY``): the job summary and the annotations
    (``report_writer.github_summary``), by the process that speaks for a run that asked something."""
    if run.settings.github_summary is None or not run.speaks or not run.machine.learned:
        return
    from .report_writer import github_summary  # the writers load when a report is asked for

    github_summary(run, write_line)


class JsonProgress:
    """Registered when --gputopo-json or --gputopo-html is given (never on xdist workers): the
    partial report after each report the controller receives that changes what is known -- one
    carrying a check's outcome, a test's own figure or an unmet requirement, at once -- and after each
    test's teardown when the run's measurements grew. Last among the hooks, so that the terminal
    reporter (whose stats the document is read from) has the report already."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        # What a report of a test adds to the document.
        self.properties = (CHECK_PROPERTY, OWN_PROPERTY, UNMET_PROPERTY, RANKS_PROPERTY)
        self.known: set = set()  # (test, property, value) already written (a test's later phases repeat them)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # A run ended during its first test leaves the topology (xdist's controller collects nothing).
        write_reports(run_of(self.config), complete=False)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        new = {
            (report.nodeid, key, str(value))
            for key, value in getattr(report, "user_properties", ())
            if key in self.properties
        } - self.known
        self.known |= new
        changed = bool(new)
        if changed or report.when == "teardown":
            write_reports(run_of(self.config), complete=False, changed=changed)
