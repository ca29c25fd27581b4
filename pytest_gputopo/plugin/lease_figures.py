"""What each leased test used and how long it held its lease, measured by the run and kept for later.

Its peak GPU memory (``probe.gpu_memory.Sampler``: NVML's per-process used memory, sampled from the
moment its lease is taken to the end of its call) rides on its call report as ``LEASE_PROPERTY``
(from xdist workers and a lease's own process alike) into the JSON report; over its budget, the
terminal names it and, under ``--gputopo-strict``, the test fails. The process that logs every report
(the controller under xdist) adds each test's phases up to its duration and keeps both in pytest's
cache per test id (``CACHE_KEY``): ``--gputopo-lease-memory measured`` budgets an undeclared test from
its last peak, and a run under xdist hands the tests that held the most GPU-seconds out first
(``lease_demands.Demands.by_cost``), as CTest's ``COST`` orders its tests by their last duration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pytest

from ..core.lease_policy import over_budget
from ..probe.gpu_memory import Sampler
from ..render.escape import terminal
from .properties import LEASE_PROPERTY

CACHE_KEY = "gputopo/leased"  # {nodeid: {"seconds": s, "peak_gib": p or None}}
MAX_SECONDS = 7 * 86400.0
MAX_GIB = 1024.0


def read_cache(config: pytest.Config) -> dict[str, dict[str, float | None]]:
    """The figures kept by earlier runs, each checked: a duration of 0 to a week, a peak of 0 to 1024
    GiB or None; an entry of any other shape is left out (the cache is a file anyone may have edited)."""
    cache = getattr(config, "cache", None)
    found = cache.get(CACHE_KEY, None) if cache is not None else None
    if not isinstance(found, dict):
        return {}
    return {
        nodeid: {"seconds": entry["seconds"], "peak_gib": entry.get("peak_gib")}
        for nodeid, entry in found.items()
        if isinstance(nodeid, str) and isinstance(entry, dict) and _valid(entry)
    }


def _valid(entry: Mapping[str, Any]) -> bool:
    seconds, peak = entry.get("seconds"), entry.get("peak_gib")
    return _number(seconds, MAX_SECONDS) and (peak is None or _number(peak, MAX_GIB))


def _number(value: Any, most: float) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= most
    )


class Figures:
    """The plugin that samples each leased test's memory (where tests run) and keeps the figures
    (where every report is logged: not in an xdist worker)."""

    def __init__(self, config: pytest.Config, strict: bool) -> None:
        self.config, self.strict = config, strict
        self.sampling: dict[str, tuple[Sampler, float | None, bool]] = {}  # by test: sampler, budget, declared
        self.keeps = not hasattr(config, "workerinput")
        self.seconds: dict[str, float] = {}
        self.peaks: dict[str, float | None] = {}
        self.over: list[str] = []  # the terminal's lines for tests over their budget

    def start(self, nodeid: str, uuids, root: int | None, but, budget_gib: float | None, declared: bool) -> None:
        """Sample the GPUs ``uuids`` for the processes of ``root`` (None: set by ``runs_in``), none of
        ``but()``'s, while ``nodeid`` runs (``declared``: its budget is the user's, not one from its
        last peak, which is shown when exceeded, never failed)."""
        self.sampling[nodeid] = (Sampler(uuids, root, but), budget_gib, declared)

    def runs_in(self, nodeid: str, pid: int) -> None:
        """``nodeid`` runs in process ``pid`` (its lease's own): its processes are that one's."""
        if nodeid in self.sampling:
            self.sampling[nodeid][0].root = pid

    def stop(self, nodeid: str) -> None:
        """The test ended without a call report (its setup failed or skipped): no figure."""
        found = self.sampling.pop(nodeid, None)
        if found is not None:
            found[0].stop()

    @pytest.hookimpl(tryfirst=True)  # before the terminal, JUnit and xdist read the report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.nodeid in self.sampling:
            self.judge(report)
        if self.keeps:
            self.keep(report)

    def judge(self, report: pytest.TestReport) -> None:
        """The test's peak on its call report; over its budget, named (failed under strict)."""
        sampler, budget, declared = self.sampling.pop(report.nodeid)
        peak = sampler.stop()
        figure = {"budget_gib": budget, "peak_gib": peak.gib, "peak_unknown": peak.why_unknown}
        report.user_properties.append((LEASE_PROPERTY, json.dumps(figure)))
        if not over_budget(budget, peak.gib):
            return
        said = f"used {peak.gib:.2f} GiB of GPU memory at its peak, over its budget of {budget:g} GiB"
        if self.strict and declared and report.outcome == "passed":
            report.outcome = "failed"
            report.longrepr = f"{said} (NVML's per-process used memory; --gputopo-strict)"

    def keep(self, report: pytest.TestReport) -> None:
        """Add up the test's phases, and its peak from its call report (leased tests only)."""
        for key, value in getattr(report, "user_properties", ()):
            if key == LEASE_PROPERTY and report.when == "call":
                figure = json.loads(value)
                self.peaks[report.nodeid] = figure["peak_gib"]
                if over_budget(figure["budget_gib"], figure["peak_gib"]):
                    self.over.append(
                        f"{report.nodeid}: {figure['peak_gib']:.2f} GiB at its peak, "
                        f"budget {figure['budget_gib']:g} GiB"
                    )
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.over:
            terminalreporter.write_sep("=", "gputopo: leased tests over their GPU memory budget")
            for line in self.over:
                terminalreporter.write_line(terminal(line), yellow=True)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Keep this run's figures beside the earlier runs' (a test not run now keeps its own)."""
        cache = getattr(self.config, "cache", None)
        if not self.keeps or cache is None or not self.peaks:
            return
        kept = read_cache(self.config)
        for nodeid, peak in self.peaks.items():
            kept[nodeid] = {"seconds": round(min(self.seconds.get(nodeid, 0.0), MAX_SECONDS), 3), "peak_gib": peak}
        cache.set(CACHE_KEY, kept)
