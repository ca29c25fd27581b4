"""What pytest-gputopo says about a run: the header, the summary beside pytest's own, and the
``--gputopo-json`` report (rewritten as the run goes, so that a run ended by SIGTERM leaves what it
measured). Text comes from ``render.report``; only the process that speaks for the run writes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ..render import report
from ..runtime import files
from .run import GputopoRun

# What travels in user_properties, so that it reaches the controller (and JUnit XML) from xdist
# workers too: a health-check item's outcome, and a test's own measurement (``gputopo_bench``).
CHECK_PROPERTY = "gputopo_check"
OWN_PROPERTY = "gputopo_test_measurement"
UNMET_PROPERTY = "gputopo_unmet"  # the requirement a test did not run for


def header_lines(run: GputopoRun, verbosity: int) -> list[str]:
    if not run.speaks:
        return []  # only rank 0 speaks for the run
    topology, ranks = run.topology, run.ranks
    if verbosity > 0:
        return (report.rank_lines(list(ranks.views)) if ranks else []) + report.full_report(topology)
    if ranks is not None:
        return report.rank_lines(list(ranks.views)) + [f"gputopo warning: {w}" for w in topology.warnings]
    lines = [report.header_line(topology)]
    if len(topology.gpus) >= 2:  # a fallback needs a pair; hosts without GPUs pay nothing for it
        from .facts import predicted_fallback_line

        lines += [line for line in (predicted_fallback_line(run),) if line]
    return lines + [f"gputopo warning: {w}" for w in topology.warnings]


def summary_lines(run: GputopoRun, stats: dict) -> list[str]:
    """One line counting the tests not run per unmet requirement (from the reports themselves, so
    that outcomes of xdist workers are counted too), and what NCCL itself used when it ran."""
    skipped, failed = Counter(), Counter()
    for outcome, counter in (("skipped", skipped), ("failed", failed), ("error", failed)):
        for rep in stats.get(outcome, []):
            for key, value in getattr(rep, "user_properties", ()):
                if key == UNMET_PROPERTY and getattr(rep, "when", None) == "setup":
                    counter[value] += 1
    view = run.derived.get("nccl_view")  # there only if this run needed NCCL's view
    lines = [report.skip_summary(skipped, failed, [topology for _, topology in run.nodes()]),
             view.account_line() if view is not None else None]
    return [line for line in lines if line]


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


def write_json(run: GputopoRun, complete: bool) -> None:
    """--gputopo-json: the topology, every measurement and every check, as one document. Written
    again whenever a test adds a measurement (``"complete": false``) and once at the end, so that
    a run ended by SIGTERM (a CI cancel, ``timeout``) leaves what it measured -- without a signal
    handler in the user's process. A report lost at the end is said beside pytest's own summary
    (``json_error``), never in its place."""
    path = run.settings.json
    if path is None or run.worker:
        return
    from ..bench.suite import SharedFolder

    suite = run.derived.get("suite")
    shared = run.shared_dir
    if not complete:  # cheap: what there is to report, by count
        seen = (len(suite.results) if suite else 0, len(SharedFolder(shared).names()) if shared else 0)
        if run.derived.get("json_seen") == seen:
            return  # nothing new since the last write
        run.derived["json_seen"] = seen
    results, lost = SharedFolder(shared).results() if shared else ([], [])  # the workers'
    results = {r.key: r for r in results}
    results.update({r.key: r for r in (suite.results if suite else [])})
    document = report.json_document(run.topology, list(results.values()), _from_reports(run.config, CHECK_PROPERTY),
                                    _from_reports(run.config, OWN_PROPERTY), lost)
    try:  # strict JSON: a NaN would be a figure no strict reader takes
        files.write_text(path, json.dumps({**document, "complete": complete}, indent=1, allow_nan=False) + "\n")
    except (OSError, ValueError) as exc:  # checked at start; a disk that filled since loses the report, not the outcome
        if complete:
            run.derived["json_error"] = (f"ERROR: {run.settings.json_from}: cannot write {path}: "
                                         f"{getattr(exc, 'strerror', None) or exc}")


class JsonProgress:
    """Registered when --gputopo-json is given (never on xdist workers): the partial report after
    each test, from the reports the controller receives."""

    def __init__(self, run: GputopoRun) -> None:
        self.run = run

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        write_json(self.run, complete=False)  # a run ended during its first test leaves the topology

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            write_json(self.run, complete=False)
