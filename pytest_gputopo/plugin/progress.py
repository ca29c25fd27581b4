"""Progress on long work: each measurement says what it measures and, when done, its figure and
time (a check item's own line under ``-v`` is ``check_report``'s). Written through pytest's
terminal reporter by the process that speaks for the run; an xdist worker's lines travel to the
controller in its test reports (``PROGRESS_PROPERTY``) and are written there once. Under ``-q``
only the line that ends a measurement is written."""

from __future__ import annotations

import contextlib

import pytest

from .run import GputopoRun

PROGRESS_PROPERTY = "gputopo_progress"


class Progress:
    """The benchmark suite's ``progress`` callback (``bench.suite.BenchSuite.progress``)."""

    def __init__(self, run: GputopoRun) -> None:
        self.run = run

    def __call__(self, what: str, result, seconds: float) -> None:
        if result is None:
            if self.run.config.get_verbosity() >= 0:
                tell(self.run, f"gputopo: measuring {what} ...", live_only=True)
            return
        origin = "" if result.origin == "measured" else f" ({result.origin})"
        figure = f"{result.gbps:.3g} GB/s{origin}" if result.gbps is not None else f"no figure: {result.error}"
        wrong = f"; data wrong: {result.error}" if result.gbps is not None and result.error else ""
        tell(self.run, f"gputopo: {what}: {figure}{wrong} in {seconds:.1f} s")


def tell(run: GputopoRun, line: str, live_only: bool = False) -> None:
    """Write ``line`` for the run: at once where this process speaks for it; from an xdist worker,
    with its next test report (``live_only`` lines -- "measuring ..." -- are not relayed: by the
    time they arrive the measurement is over)."""
    if run.worker:
        if not live_only:
            run.state.progress.append(line)
        return
    if run.speaks:
        write(run.config, line)


def write(config: pytest.Config, line: str) -> None:
    """Through the terminal reporter, with output capture suspended as pytest's own live logging
    does (``capturemanager.global_and_fixture_disabled``): during a test, fd 1 is captured."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        write_own_line(reporter, line)


def write_own_line(reporter, line: str) -> None:
    """``line`` on a line of its own: under xdist the progress letters (``.``) are written with no
    file name before them, so ``write_line`` (``ensure_newline``: only after a file name) would go on
    after them (".gputopo: all-reduce ..."); the terminal's current line says whether one is begun."""
    if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
        reporter.write("\n")
    reporter.write_line(line)


def relay(run: GputopoRun, item: pytest.Item) -> None:
    """On an xdist worker: the lines said since the last report go with this one."""
    lines, run.state.progress = run.state.progress, []
    item.user_properties += [(PROGRESS_PROPERTY, line) for line in lines]


class Relayed:
    """On the controller of an xdist run: each worker's line written once (a test's properties are
    on each of its reports, setup, call and teardown)."""

    def __init__(self, config: pytest.Config) -> None:
        self.seen: set[tuple[str, str]]  # (test, line) written
        self.config, self.seen = config, set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, line in getattr(report, "user_properties", ()):
            if key == PROGRESS_PROPERTY and (report.nodeid, line) not in self.seen:
                self.seen.add((report.nodeid, line))
                write(self.config, line)
