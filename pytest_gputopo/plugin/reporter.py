"""What pytest-gputopo says about a run: the header, the summary beside pytest's own, and the
``--gputopo-json`` report (rewritten as the run goes, so that a run ended by SIGTERM leaves what it
measured). Text comes from ``render.report``; only the process that speaks for the run writes."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from ..runtime import files
from .run import GputopoRun, run_of

# What travels in user_properties, so that it reaches the controller (and JUnit XML) from xdist
# workers too: a test's own measurement (``gputopo_bench``); a health-check item's outcome is
# ``check_report.CHECK_PROPERTY``, beside the check's other properties.
OWN_PROPERTY = "gputopo_test_measurement"
UNMET_PROPERTY = "gputopo_unmet"  # the requirement a test did not run for
CAUSE_PROPERTY = "gputopo_cause"  # what made it unmet, where one GPU or the machine did (``core.causes``)
RECORDED_PROPERTY = "gputopo_recorded"  # a met requirement that rests on recorded figures, not measured here
RANKS_PROPERTY = "gputopo_rank_failed"  # a rank of a ranks(n) test that did not pass: which, how, why (JSON)
VERDICT_PROPERTY = "gputopo_verdict"  # each requirement of a gated test with its verdict (JSON), met ones too
RECORDED_WORD = "PASSED (recorded, not measured)"  # the passed line of such a test (-v, -rA)


def header_lines(run: GputopoRun, verbosity: int) -> list[str]:
    """The machine in one line (``-v``: the whole report) with how its facts were had this time, and
    the warnings; or, where nothing asked for it, that nothing was probed. Each a terminal line: no
    control character from a profile, a name or a warning (``escape.terminal``)."""
    from ..render.escape import terminal_lines

    return terminal_lines(_header_lines(run, verbosity))


def _header_lines(run: GputopoRun, verbosity: int) -> list[str]:
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
        return (lines + ([f"gputopo: {'; '.join(run.machine.notes)}"] if learned else [])
                + [f"gputopo warning: {w}" for w in run.machine.warnings])
    if ranks is not None:
        return _rank_lines(ranks) + warnings
    lines = [report.header_line(topology) + learned]
    if len(topology.gpus) >= 2:  # a fallback needs a pair; hosts without GPUs pay nothing for it
        from .nccl_view import predicted_fallback_line

        lines += [line for line in (predicted_fallback_line(run),) if line]
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


UNKNOWN = "unknown"  # a requirement's verdict in the report when not judged (``requirements.Outcome.word``: the others)


def say_verdicts(run: GputopoRun, item: pytest.Item, found: list, stop: int) -> None:
    """Every requirement of a gated test with its verdict -- met, unmet, unknown, broken -- and why,
    as a ``gputopo_verdict`` property (so that xdist workers' reach the controller's JSON report).
    ``found``: the test's (requirement, strict) pairs; ``stop``: the index of the first unmet one,
    which decided (``len(found)``: none). A requirement after it is judged where that is pure (on
    the topology); one judged on measurements is ``unknown``: nothing is measured for a test not run."""
    if run.settings.json is None and run.settings.html is None:
        return  # only a report reads them (each is a JUnit property too)
    from ..core.requirements import FactRequirement
    from .verdicts import evaluate

    for index, (requirement, _) in enumerate(found):
        if index > stop and isinstance(requirement, FactRequirement):
            entry = {"verdict": UNKNOWN, "reason": f"not judged: the test did not run for {found[stop][0]}",
                     "recorded": False}
        else:
            outcome = evaluate(run, requirement)  # judged once per run: this is the verdict the test had
            entry = {"verdict": outcome.word, "reason": outcome.reason or outcome.recorded or None,
                     "recorded": bool(outcome.recorded)}
        item.user_properties.append((VERDICT_PROPERTY, json.dumps({"requirement": str(requirement), **entry})))


def recorded_status(report: pytest.TestReport):
    """``pytest_report_teststatus`` of a test that passed on recorded figures: still passed (counted
    and coloured as one), its word saying the figures were recorded; None for every other report."""
    if (report.when == "call" and report.passed and not hasattr(report, "wasxfail")
            and any(key == RECORDED_PROPERTY for key, _ in getattr(report, "user_properties", ()))):
        return "passed", ".", (RECORDED_WORD, {"green": True})
    return None


def summary_lines(run: GputopoRun, stats: dict) -> list[str]:
    """One line counting the tests not run per unmet requirement (from the reports themselves, so
    that outcomes of xdist workers are counted too), one counting the tests that passed on recorded
    figures, and what NCCL itself used when it ran."""
    skipped, failed = Counter(), Counter()
    for outcome, counter in (("skipped", skipped), ("failed", failed), ("error", failed)):
        for rep in stats.get(outcome, []):
            for key, value in getattr(rep, "user_properties", ()):
                if key == UNMET_PROPERTY and getattr(rep, "when", None) == "setup":
                    counter[value] += 1
    # A recorded note starts with its requirement: "min_allreduce_bw(100): met on recorded figures, ..."
    recorded = Counter(value.split(":", 1)[0] for rep in stats.get("passed", []) if rep.when == "call"
                       for key, value in getattr(rep, "user_properties", ()) if key == RECORDED_PROPERTY)
    view = run.state.nccl_view  # there only if this run needed NCCL's view
    lines = [view.account_line() if view is not None else None]
    lines[:0] = _common_causes(stats) + _gate_summary(run)
    if skipped or failed or recorded:
        from ..render import report

        topologies = [topology for _, topology in run.nodes()]
        lines[:0] = [report.skip_summary(skipped, failed, topologies), report.recorded_summary(recorded, topologies)]
    lines = [line for line in lines if line]
    if not lines:  # a run that used nothing of the plugin loads no renderer for its summary
        return []
    from ..render.escape import terminal_lines

    return terminal_lines(lines)


def gate_lines(run: GputopoRun, causes: list, as_tests: bool = True) -> list[str]:
    """An unmet run gate, as it stops the run: the verdict, then each cause (``core.causes``: a GPU,
    the machine, or a finding alone) and the findings that show it, each a terminal line;
    ``as_tests``: each cause is then a failed test (not in a plan, which runs nothing)."""
    from ..core.units import counted
    from ..render.escape import terminal_lines
    from ..render.report import source_text
    from .gate import NODEID

    lines = [f"gputopo: this machine does not meet the run's requirements [{source_text(run.topology)}]:"]
    for cause in causes:
        first, *evidence = cause.lines(indent="    ")
        lines += [f"  - {first}"] + [f"  {line}" for line in evidence]
    each = f"; {counted(len(causes), 'cause')}, each a failed test {NODEID}::<cause>" if as_tests else ""
    lines.append("gputopo: the run's tests are not collected" + each)
    return terminal_lines(lines)


def _gate_summary(run: GputopoRun) -> list[str]:
    """The last word of a run an unmet gate stopped: its causes and exit status."""
    causes = run.state.gate_causes
    if not causes:
        return []
    from ..core.units import counted
    from .run import GATE_EXIT_STATUS

    return [f"gputopo: run gate unmet: {counted(len(causes), 'cause')} ({', '.join(c.name for c in causes)}); "
            f"exit status {GATE_EXIT_STATUS}"]


def _common_causes(stats: dict) -> list[str]:
    """One line per GPU (or machine) that made the requirements of several tests unmet."""
    tests, unmet = {}, {}
    for outcome in ("skipped", "failed", "error"):
        for rep in stats.get(outcome, []):
            props = getattr(rep, "user_properties", ())
            for key, value in props:
                if key == CAUSE_PROPERTY and getattr(rep, "when", None) == "setup":
                    tests.setdefault(value, set()).add(rep.nodeid)
                    unmet.setdefault(value, Counter()).update(v for k, v in props if k == UNMET_PROPERTY)
    if not any(len(nodeids) > 1 for nodeids in tests.values()):
        return []
    from ..core.units import counted

    return [f"gputopo: {subject} is the common cause of {counted(len(nodeids), 'test')} not run: "
            + ", ".join(f"{req} x{n}" for req, n in sorted(unmet[subject].items()))
            for subject, nodeids in tests.items() if len(nodeids) > 1]


# ---------------------------------------------------------------------------------------------
# --gputopo-json


def _from_reports(config: pytest.Config, name: str) -> list:
    """The JSON values that tests left under ``name`` in their user_properties (xdist workers' too)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    found, seen = [], set()
    for reports in (reporter.stats.values() if reporter else ()):
        for rep in reports:
            for key, value in getattr(rep, "user_properties", ()):
                if key == name and (rep.nodeid, value) not in seen:
                    seen.add((rep.nodeid, value))
                    found.append(json.loads(value))
    return found


def write_reports(run: GputopoRun, complete: bool, changed: bool = False) -> None:
    """--gputopo-json and --gputopo-html: the topology, every measurement against what it should give,
    every check, every unmet requirement and NCCL's view, as one document (and the report drawn from
    it). Written again (``"complete": false``) whenever a test changes what is known -- a measurement,
    a check's outcome, a test's own figure, a test not run for an unmet requirement (``changed``) --
    and once at the end, so that a run ended by SIGTERM (a CI cancel, ``timeout``) leaves what it knew
    -- without a signal handler in the user's process. A report lost at the end is said beside
    pytest's own summary (``report_errors``), never in its place."""
    settings = run.settings
    if (settings.json is None and settings.html is None) or run.worker:
        return
    from ..bench.suite import SharedFolder

    suite = run.state.suite
    shared = run.shared_dir
    if not complete:  # cheap: the measurements there are, by count (the rest comes as ``changed``)
        seen = (len(suite.results) if suite else 0, len(SharedFolder(shared).names()) if shared else 0)
        if run.state.json_seen == seen and not changed:
            return  # nothing new since the last write
        run.state.json_seen = seen
    document = {**report_document(run), "complete": complete}
    outputs = [(settings.json, settings.json_from, lambda: json.dumps(document, indent=1, allow_nan=False) + "\n")]
    if run.speaks:  # one report for the run, drawn by the process that speaks for it
        outputs.append((settings.html, settings.html_from, lambda: _html(document)))
    for path, where, text in outputs:
        if path is None:
            continue
        try:  # strict JSON: a NaN would be a figure no strict reader takes
            files.write_text(path, text())
        except (OSError, ValueError) as exc:
            # checked at start; a disk that filled since loses the report, not the outcome
            if complete:
                run.state.report_errors.append(
                    f"ERROR: {where}: cannot write {path}: {getattr(exc, 'strerror', None) or exc}")


def _html(document: dict) -> str:
    from ..render.html import html_report  # drawn only when asked for

    return html_report(document)


def report_document(run: GputopoRun) -> dict:
    """What the JSON report holds: ``render.report.json_document`` over every result of the run
    (xdist workers' too), each measurement with its verdict by the check items' rule -- its
    ``state`` and what it should give (``verdicts.judgement_of``: nothing is measured for it; a P2P
    copy beside its staged twin where that was measured) -- the tests not run for an unmet
    requirement, NCCL's view, and every node of a distributed run."""
    from ..bench.suite import SharedFolder
    from ..render import report  # the renderers, when there is something to say
    from ..runtime.software import software
    from .check_report import CHECK_PROPERTY, document_causes
    from .verdicts import judgement_of

    suite = run.state.suite
    results, lost = SharedFolder(run.shared_dir).results() if run.shared_dir else ([], [])  # the workers'
    by_key = {r.key: r for r in results}
    by_key.update({r.key: r for r in (suite.results if suite else [])})
    results = list(by_key.values())
    document = report.json_document(run.topology, results, _from_reports(run.config, CHECK_PROPERTY),
                                    _from_reports(run.config, OWN_PROPERTY), lost)
    for entry, result in zip(document["measurements"], results, strict=True):
        key = result.key
        if key.kind in ("p2p", "p2p_staged", "p2p_bidir", "h2d", "d2h", "allreduce"):
            staged = by_key.get(key.staged()) if key.kind == "p2p" else None
            entry.update(judgement_of(run, result, staged).document())
    document["unmet"] = _unmet_tests(run.config)
    document["verdicts"] = _verdicts(run.config)
    document["ranks_failed"] = _from_reports(run.config, RANKS_PROPERTY)
    document["gate"] = list(run.state.gate_problems)  # the run gate that stopped the run, if one did
    document["gate_causes"] = [{"cause": c.name, "headline": c.headline, "evidence": list(c.evidence)}
                               for c in run.state.gate_causes]  # the same, cause by cause
    if run.settings.check is not None:  # the failed check items by cause (check_report.check_causes)
        document["check_causes"] = document_causes(run.config)
    document["nccl"] = _nccl(run)
    document["written"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    document["settings"] = _settings(run)
    document["software"] = dict(software())
    if run.ranks is not None:
        from ..core.schema import to_dict

        first = to_dict(run.ranks.views[0].topology)
        document["nodes"] = [{"where": view.where, "differs": to_dict(view.topology) != first,
                              "topology": to_dict(view.topology)} for view in run.ranks.distinct]
    return document


def _settings(run: GputopoRun) -> dict:
    """What the run was asked to judge by, so that a document read months later (``gputopo fleet``)
    says how its figures were taken: the gate, the reference, the check level, the floors and how the
    benchmarks measure (the store's secret is no setting: it is never written)."""
    s, bench = run.settings, run.settings.bench
    return {"strict": s.strict, "require": s.require, "expect": s.expect, "check": s.check,
            "floors": dict(s.floor_overrides), "allreduce_backend": bench.allreduce_backend,
            "allreduce_engine": bench.allreduce_engine, "size_bytes": bench.size_bytes,
            "budget_s": bench.budget_s, "timeout_s": bench.timeout_s, "cache": s.cache}


def _unmet_tests(config: pytest.Config) -> list[dict]:
    """Each test not run (skipped, or failed under strict) for an unmet requirement, with the reason."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    out = []
    for outcome in ("skipped", "failed", "error"):
        for rep in (reporter.stats.get(outcome, []) if reporter else []):
            for key, value in getattr(rep, "user_properties", ()):
                if key == UNMET_PROPERTY:
                    longrepr = rep.longrepr
                    reason = longrepr[2] if isinstance(longrepr, tuple) else getattr(rep, "longreprtext", "")
                    out.append({"test": rep.nodeid, "outcome": "failed" if outcome == "error" else outcome,
                                "requirement": value, "reason": str(reason).removeprefix("Skipped: ")})
    return out


def _verdicts(config: pytest.Config) -> list[dict]:
    """Each requirement of each gated test that reached its setup, with its verdict and why (``say_verdicts``)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    out, seen = [], set()
    for reports in (reporter.stats.values() if reporter else ()):
        for rep in reports:
            for key, value in getattr(rep, "user_properties", ()):
                if key == VERDICT_PROPERTY and (rep.nodeid, value) not in seen:  # each phase repeats them
                    seen.add((rep.nodeid, value))
                    out.append({"test": rep.nodeid, **json.loads(value)})
    return out


def _nccl(run: GputopoRun) -> dict | None:
    """NCCL's view as the run has it (observed, or predicted from its settings and NVML)."""
    if len(run.topology.gpus) < 2 and run.state.nccl_view is None:
        return None
    from .measurements import measured_p2p
    from .nccl_view import nccl_view

    view = nccl_view(run)
    pairs = [{"pair": f"GPU{a}-GPU{b}", "transports": sorted(t), "why": why}
             for (a, b), (t, why) in sorted(view.pairs().items())]
    fallbacks = [{"pair": f.name, "label": str(f.label), "actual": f.actual, "expected": f.expected,
                  "causes": list(f.causes)} for f in view.fallbacks(measured_p2p(run))]
    return {"origin": view.origin, "account_line": view.account_line(), "pairs": pairs, "fallbacks": fallbacks}


def write_github_summary(run: GputopoRun, write_line) -> None:
    """Under GitHub Actions (``GITHUB_STEP_SUMMARY``): append the run's Markdown summary to the job
    summary, and write an error annotation per cause of an unmet run gate (its evidence in the
    message) and per cause of the failed checks through pytest's terminal writer (``write_line``). Only the process
    that speaks for the run does it."""
    path = run.settings.github_summary
    if path is None or not run.speaks or not run.machine.learned:  # a run that never asked says nothing
        return
    from ..render import markdown

    document = report_document(run)
    gate = run.state.gate_causes
    for line in markdown.annotations(document, gate):  # one per cause (the check's: ``check_causes``)
        write_line(line)
    try:
        files.append_text(path, markdown.summary(document, gate))
    except OSError as exc:
        write_line(f"ERROR: GITHUB_STEP_SUMMARY: cannot append to {path}: {exc.strerror or exc}")


class JsonProgress:
    """Registered when --gputopo-json or --gputopo-html is given (never on xdist workers): the
    partial report after each report the controller receives that changes what is known -- one
    carrying a check's outcome, a test's own figure or an unmet requirement, at once -- and after each
    test's teardown when the run's measurements grew. Last among the hooks, so that the terminal
    reporter (whose stats the document is read from) has the report already."""

    def __init__(self, config: pytest.Config) -> None:
        from .check_report import CHECK_PROPERTY

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
        new = {(report.nodeid, key, str(value)) for key, value in getattr(report, "user_properties", ())
               if key in self.properties} - self.known
        self.known |= new
        changed = bool(new)
        if changed or report.when == "teardown":
            write_reports(run_of(self.config), complete=False, changed=changed)
