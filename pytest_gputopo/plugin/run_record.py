"""The run's record: what the run decided, gathered once when it ends (``finished``) and only read
after that -- by the terminal summary (``reporter``), the JSON report, the HTML report and the
step summary (``report_writer``). Nothing here judges a requirement again: each test's verdict is the one it had,
with the figures it was judged on at its own threshold (``verdicts.judge_bandwidth`` kept them);
each measurement's verdict is the run's own (``verdicts.run_judgements``: the check items' rule),
taken here once for all. A report written while the run goes (``"complete": false``) is drawn
from a record of the run so far (``build``), made each time and kept by nobody.

The tests' parts come from their reports (``properties``), so that xdist workers' are read as
the controller's; the rest from the run's state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

from ..core import keys, run_verdict
from ..core.causes import Cause
from ..core.model import Topology
from ..core.nvlinks import nvlink_faults
from ..core.schema import to_dict
from .check_report import document_causes
from .properties import (
    CAUSE_PROPERTY,
    CHECK_PROPERTY,
    LEASE_PROPERTY,
    OWN_PROPERTY,
    RANKS_PROPERTY,
    RECORDED_PROPERTY,
    UNMET_PROPERTY,
    VERDICT_PROPERTY,
)
from .run import GputopoRun
from .verdicts import run_judgements

if TYPE_CHECKING:
    from ..bench.bench_result import BenchResult
    from ..core.judgement import Judgement

# The parts of the run a record reads only where the run had them -- the benchmarks, NCCL's view,
# the health check, the ranks' nodes -- are imported where it reads them: a run that judged its
# markers on NVML's facts alone pays for none of them (docs/performance.md).

RECORD = pytest.StashKey["RunRecord"]()  # the finished record, once made (``finished``)


class Measurement(NamedTuple):
    """A benchmark result of the run with the run's own verdict of it (None: not a bandwidth)."""

    result: BenchResult
    judgement: Judgement | None

    def document(self) -> dict:
        """The report document's entry: the result, then its verdict (``Judgement.document``)."""
        return {**self.result.to_json(), **(self.judgement.document() if self.judgement is not None else {})}


class JudgedFigure(NamedTuple):
    """A figure a test's requirement was judged on, as that requirement judged it: its state and
    the threshold it had to reach there (the marker's ``gbps``, its ``floor``, else the run's)."""

    key: keys.Key
    state: str
    needed_gbps: float | None

    def document(self) -> dict:
        return {"key": self.key.to_list(), "state": self.state, "needed_gbps": self.needed_gbps}


class RequirementVerdict(NamedTuple):
    """One requirement of one gated test with its verdict (met, unmet, unknown, broken), why, and the
    figures it was judged on (none for a requirement on the topology, or one not judged)."""

    test: str
    requirement: str
    verdict: str
    reason: str | None
    recorded: bool
    figures: tuple[JudgedFigure, ...] = ()

    def document(self) -> dict:
        figures = {"figures": [f.document() for f in self.figures]} if self.figures else {}
        return {
            "test": self.test,
            "requirement": self.requirement,
            "verdict": self.verdict,
            "reason": self.reason,
            "recorded": self.recorded,
            **figures,
        }


class Unmet(NamedTuple):
    """A test not run (skipped, or failed under strict) for an unmet requirement: ``outcome`` as
    pytest counts its report (``skipped``, ``failed``, ``error``), ``at_setup`` whether that report is
    its setup's, and what made it unmet where one GPU or the machine did (``causes``)."""

    test: str
    outcome: str
    requirement: str
    reason: str
    at_setup: bool
    causes: tuple[str, ...]

    def document(self) -> dict:
        return {
            "test": self.test,
            "outcome": "failed" if self.outcome == "error" else self.outcome,
            "requirement": self.requirement,
            "reason": self.reason,
        }


class NcclAccount(NamedTuple):
    """NCCL's view as the run has it: where it comes from, NCCL's own line (None: not observed),
    the transport per pair and the fallbacks with their causes."""

    origin: str
    account_line: str | None
    pairs: tuple[dict, ...]
    fallbacks: tuple[dict, ...]

    def document(self) -> dict:
        return {
            "origin": self.origin,
            "account_line": self.account_line,
            "pairs": list(self.pairs),
            "fallbacks": list(self.fallbacks),
        }


class RunRecord(NamedTuple):
    """Everything the reports say of a run; see the module's docstring. The record and its parts are
    ``NamedTuple``s, immutable and typed: cheaper to define than frozen dataclasses, for a module a
    marked run loads at its summary (docs/performance.md)."""

    complete: bool
    topology: Topology
    measurements: Mapping[keys.Key, Measurement]
    lost: tuple[str, ...]  # results another process left that could not be read back
    checks: tuple[dict, ...]  # each health-check item's outcome (``check_report.CHECK_PROPERTY``)
    own: tuple[dict, ...]  # the tests' own measurements (``gputopo_bench``)
    unmet: tuple[Unmet, ...]
    verdicts: tuple[RequirementVerdict, ...]
    recorded: tuple[str, ...]  # the requirement of each passed test that rested on recorded figures
    ranks_failed: tuple[dict, ...]
    leased: tuple[dict, ...]  # each leased test's budget and peak GPU memory (``lease_figures``)
    gate_problems: tuple[str, ...]
    gate_causes: tuple[Cause, ...]
    check_causes: tuple[dict, ...] | None  # None: no health check was asked for
    nccl: NcclAccount | None
    settings: Mapping[str, Any]
    nodes: tuple[dict, ...] | None  # every distinct node of a launch (None: not under one)
    verdict: run_verdict.RunVerdict  # the run's, decided here once (``core.run_verdict``): every medium draws it
    nvlink_faults: dict[str, str]  # each GPU whose NVLinks down are a fault, as the nvlink check judges it


def gate_cause_documents(causes: tuple[Cause, ...]) -> list[dict]:
    """An unmet run gate, cause by cause, as the report document holds it."""
    return [{"cause": c.name, "headline": c.headline, "evidence": list(c.evidence)} for c in causes]


def finished(run: GputopoRun) -> RunRecord:
    """The run's record once it has ended: made at the first ask, then the same for every reader."""
    found = run.config.stash.get(RECORD, None)
    if found is None:
        found = run.config.stash[RECORD] = build(run, complete=True)
    return found


def build(run: GputopoRun, complete: bool) -> RunRecord:
    """The record of the run so far (``complete``: the run has ended). What the run holds is read
    first; then NCCL's account and the figures' verdicts, each in one call down."""
    reports = _reports(run.config)
    results, lost = _results(run)
    settings, nodes, check_causes = _settings(run), _nodes(run), _check_causes(run)
    nccl = _nccl(run)
    judged = run_judgements(run, results) if results else {}
    checks, unmet = tuple(_values(reports, CHECK_PROPERTY)), tuple(_unmet(reports))
    gate_problems, gate_causes = tuple(run.state.gate_problems), tuple(run.state.gate_causes)
    verdict = run_verdict.decide(
        checks, [u.document() for u in unmet], gate_cause_documents(gate_causes), gate_problems, check_causes, complete
    )
    return RunRecord(
        complete=complete,
        topology=run.topology,
        measurements={key: Measurement(result, judged.get(key)) for key, result in results.items()},
        lost=tuple(lost),
        checks=checks,
        own=tuple(_values(reports, OWN_PROPERTY)),
        unmet=unmet,
        verdicts=tuple(_verdicts(reports)),
        recorded=tuple(_recorded(reports)),
        ranks_failed=tuple(_values(reports, RANKS_PROPERTY)),
        leased=tuple(_values(reports, LEASE_PROPERTY, with_test=True)),
        gate_problems=gate_problems,
        gate_causes=gate_causes,
        check_causes=check_causes,
        nccl=nccl,
        settings=settings,
        nodes=nodes,
        verdict=verdict,
        nvlink_faults=nvlink_faults(run.topology),
    )


# ---------------------------------------------------------------------------------------------
# From the tests' reports


def _reports(config: pytest.Config) -> dict[str, list]:
    """The terminal reporter's reports by category (every process's: xdist workers' come there)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return dict(reporter.stats) if reporter is not None else {}


def _values(reports: dict[str, list], name: str, with_test: bool = False) -> list[dict]:
    """The JSON values that tests left under ``name``, each once per test (its phases repeat them);
    ``with_test``: each with its test's id first."""
    found, seen = [], set()
    for category in reports.values():
        for rep in category:
            for key, value in getattr(rep, "user_properties", ()):
                if key == name and (rep.nodeid, value) not in seen:
                    seen.add((rep.nodeid, value))
                    found.append({"test": rep.nodeid, **json.loads(value)} if with_test else json.loads(value))
    return found


def _unmet(reports: dict[str, list]) -> list[Unmet]:
    out = []
    for outcome in ("skipped", "failed", "error"):
        for rep in reports.get(outcome, []):
            props = getattr(rep, "user_properties", ())
            causes = tuple(v for k, v in props if k == CAUSE_PROPERTY)
            for key, value in props:
                if key == UNMET_PROPERTY:
                    longrepr = rep.longrepr
                    reason = longrepr[2] if isinstance(longrepr, tuple) else getattr(rep, "longreprtext", "")
                    out.append(
                        Unmet(
                            rep.nodeid,
                            outcome,
                            value,
                            str(reason).removeprefix("Skipped: "),
                            getattr(rep, "when", None) == "setup",
                            causes,
                        )
                    )
    return out


def _verdicts(reports: dict[str, list]) -> list[RequirementVerdict]:
    out = []
    for found in _values(reports, VERDICT_PROPERTY, with_test=True):
        figures = tuple(
            JudgedFigure(keys.from_list(f["key"]), f["state"], f["needed_gbps"]) for f in found.get("figures", ())
        )
        out.append(
            RequirementVerdict(
                found["test"], found["requirement"], found["verdict"], found["reason"], found["recorded"], figures
            )
        )
    return out


def _recorded(reports: dict[str, list]) -> list[str]:
    """A recorded note starts with its requirement: "min_allreduce_bw(100): met on recorded figures, ..."."""
    return [
        value.split(":", 1)[0]
        for rep in reports.get("passed", [])
        if rep.when == "call"
        for key, value in getattr(rep, "user_properties", ())
        if key == RECORDED_PROPERTY
    ]


# ---------------------------------------------------------------------------------------------
# From the run's state


def _results(run: GputopoRun) -> tuple[dict[keys.Key, BenchResult], list[str]]:
    """Every result of the run by key -- the xdist workers' (the shared folder), then this process's --
    and why each result another process left could not be read back."""
    by_key: dict[keys.Key, BenchResult] = {}
    lost: list[str] = []
    for folder in run.shared_folders:
        from ..bench.shared_folder import SharedFolder  # the workers' and leased tests' processes' results

        results, unread = SharedFolder(folder).results(run.topology)
        by_key.update({r.key: r for r in results})
        lost += unread
    suite = run.state.suite
    by_key.update({r.key: r for r in (suite.results if suite else [])})
    return by_key, lost


def _check_causes(run: GputopoRun) -> tuple[dict, ...] | None:
    if run.settings.check is None:
        return None
    return tuple(document_causes(run.config))


def _nccl(run: GputopoRun) -> NcclAccount | None:
    """NCCL's view as the run has it (observed, or predicted from its settings and NVML), where the
    machine has a pair or the run took the view."""
    if len(run.topology.gpus) < 2 and run.state.nccl_view is None:
        return None
    from .nccl_view import nccl_view  # NCCL's view (loaded by the header of a machine with a pair)

    view = nccl_view(run)
    measured = {}
    if run.state.suite is not None:  # P2P copies this run measured: a fallback's cause
        from .measurements import measured_p2p  # (loaded with the suite)

        measured = measured_p2p(run)
    pairs = tuple(
        {"pair": f"GPU{a}-GPU{b}", "transports": sorted(t), "why": why}
        for (a, b), (t, why) in sorted(view.pairs().items())
    )
    fallbacks = tuple(
        {"pair": f.name, "label": str(f.label), "actual": f.actual, "expected": f.expected, "causes": list(f.causes)}
        for f in view.fallbacks(measured)
    )
    return NcclAccount(view.origin, view.account_line(), pairs, fallbacks)


def _settings(run: GputopoRun) -> dict[str, Any]:
    """What the run was asked to judge by, so that a document read months later (``gputopo fleet``)
    says how its figures were taken: the gate, the reference, the check level, the floors and how the
    benchmarks measure (the store's secret is no setting: it is never written)."""
    s, bench = run.settings, run.settings.bench
    return {
        "strict": s.strict,
        "require": s.require,
        "expect": s.expect,
        "check": s.check,
        "floors": dict(s.floor_overrides),
        "allreduce_backend": bench.allreduce_backend,
        "allreduce_engine": bench.allreduce_engine,
        "size_bytes": bench.size_bytes,
        "budget_s": bench.budget_s,
        "timeout_s": bench.timeout_s,
        "cache": s.cache,
    }


def _nodes(run: GputopoRun) -> tuple[dict, ...] | None:
    if run.ranks is None:
        return None

    first = to_dict(run.ranks.views[0].topology)
    return tuple(
        {
            "where": view.where,
            "differs": to_dict(view.topology) != first,
            "topology": to_dict(view.topology),
            "nvlink_faults": nvlink_faults(view.topology),
        }
        for view in run.ranks.distinct
    )
