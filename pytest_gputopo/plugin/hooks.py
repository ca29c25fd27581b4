"""pytest hooks of pytest-gputopo (the ``pytest11`` entry point). Hooks only: the run object
(``run``) is built once in ``pytest_configure``; verdicts come from ``verdicts``, facts from
``facts``, text from ``reporter``. Nothing imports this module.

Loading it imports the standard library, pytest and the light modules of this package only (a test
checks it); the core's judges and the benchmarks are imported when something needs them.
"""

from __future__ import annotations

import shutil
import tempfile

import pytest

from ..probe import MachineError, probe
from ..render.report import source_text
from ..runtime import environ
from . import hookspecs, markers, options, reporter
from .fixtures import gputopo, gputopo_bench, gputopo_ranks  # noqa: F401  (registered as this plugin's fixtures)
from .run import RANKS_EXIT_STATUS, RUN, GputopoRun, Ranks, run_of
from .settings import read as read_settings

# Exit status of a run stopped by --gputopo-require or --gputopo-expect (pytest uses 0-5).
GATE_EXIT_STATUS = 8
ITEM_REQS = pytest.StashKey[list]()  # a test's (requirement, strict) pairs, read at collection
# xdist: what the controller hands each worker
WORKER_TOPOLOGY = "gputopo_topology"
WORKER_SHARED_DIR = "gputopo_shared_dir"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoption(parser)


def pytest_addhooks(pluginmanager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in markers.MARKER_HELP.items():
        sig = markers.marker_signature(name).replace("*, ", "").replace("strict=None", "strict=False")
        config.addinivalue_line("markers", f"{sig}: {help_text}; unmet -> skip (fail when strict)")
    settings = read_settings(config)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and WORKER_TOPOLOGY in workerinput:
        from ..core.schema import from_dict

        run = GputopoRun(config, settings, from_dict(workerinput[WORKER_TOPOLOGY]), worker=True,  # never probes
                         shared_dir=workerinput[WORKER_SHARED_DIR])
    elif workerinput is not None:  # a worker whose controller did not hand it the machine
        run = GputopoRun(config, settings, config.hook.pytest_gputopo_probe(config=config), worker=True)
    else:
        topology = config.hook.pytest_gputopo_probe(config=config)
        run = GputopoRun(config, settings, topology, shared_dir=_shared_dir(config))
        ranks = _join_ranks(run)
        if ranks is not None:
            run = run.with_ranks(ranks)
        if settings.json is not None or settings.html is not None:
            config.pluginmanager.register(reporter.JsonProgress(run), "gputopo-json-progress")
        if run.shared_dir is not None:  # xdist distributes: the workers' progress lines come in their reports
            from .progress import Relayed

            config.pluginmanager.register(Relayed(config), "gputopo-progress-relay")
    config.stash[RUN] = run
    config.hook.pytest_gputopo_topology(config=config, topology=run.topology)


def _shared_dir(config: pytest.Config) -> str | None:
    """A private folder where xdist workers will share benchmark results, made when this run
    distributes tests (xdist's own rule, ``xdist.plugin._is_distribution_mode``: ``--dist`` other
    than "no" and ``--tx`` set, as ``-n N`` sets them), removed at the end; None otherwise."""
    if config.getoption("dist", "no") == "no" or not config.getoption("tx", None):
        return None
    return tempfile.mkdtemp(prefix="pytest-gputopo-run-")


def _join_ranks(run: GputopoRun) -> Ranks | None:
    """Under a launcher (RANK/WORLD_SIZE set), exchange every rank's topology before any decision."""
    try:
        launch = environ.launch()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if launch is None:
        return None
    from ..runtime.ranks import Exchange, RankError, gather_views

    fallback = ""
    if len(run.topology.gpus) >= 2:  # each node's own NCCL settings: predicted where they are read
        from .facts import predicted_fallback_line

        fallback = predicted_fallback_line(run)
    try:
        exchange = Exchange.connect(launch, run.settings.rank_timeout_s)
        return Ranks(exchange, tuple(gather_views(exchange, run.topology, fallback)))
    except RankError as exc:
        pytest.exit(f"gputopo: the ranks cannot agree: {exc}", returncode=RANKS_EXIT_STATUS)


@pytest.hookimpl(trylast=True)
def pytest_gputopo_probe(config: pytest.Config):
    machine, where = options.value(config, "machine")
    try:
        return probe(machine)
    except MachineError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: hand the topology, and a folder to share benchmark results in, to each worker."""
    from ..core.schema import to_dict

    run = run_of(node.config)
    node.workerinput[WORKER_TOPOLOGY] = to_dict(run.topology)
    node.workerinput[WORKER_SHARED_DIR] = run.shared_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN, None)
    if run is not None and "suite" in run.derived:
        run.derived["suite"].close()
    if run is not None and run.shared_dir and not run.worker:
        shutil.rmtree(run.shared_dir, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return reporter.header_lines(run_of(config), config.get_verbosity())


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    """Run gates, before the first test is collected."""
    run = run_of(session.config)
    if run.worker or (run.settings.require is None and run.settings.expect is None):
        return
    from .verdicts import GateError, gate_problems

    try:
        problems = gate_problems(run)
    except GateError as exc:
        raise pytest.UsageError(str(exc)) from None
    if problems:
        tw = session.config.get_terminal_writer()
        tw.line(f"gputopo: this machine does not meet the run's requirements "
                f"[{source_text(run.topology)}]:", red=True, bold=True)
        for p in problems:
            tw.line(f"  - {p}", red=True)
        reporter.write_github_summary(run, tw.line, problems)
        pytest.exit(f"gputopo: run gate unmet ({len(problems)} problems); exit status {GATE_EXIT_STATUS}",
                    returncode=GATE_EXIT_STATUS)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Validate every gputopo marker now, so a bad argument stops the run naming the test."""
    marked, errors = markers.read_markers(items)
    for item, found in marked:
        item.stash[ITEM_REQS] = found
    if errors:
        raise pytest.UsageError("bad gputopo marker arguments:\n  " + "\n  ".join(errors))
    level = run_of(config).settings.check
    if level is not None:
        from .checks import check_items

        items.extend(check_items(session, level))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    found = item.stash.get(ITEM_REQS, None)
    if not found:
        return
    from .verdicts import evaluate

    run = run_of(item.config)
    for requirement, strict in found:
        outcome = evaluate(run, requirement)
        if outcome.reason is None:
            continue
        item.user_properties.append((reporter.UNMET_PROPERTY, str(requirement)))
        if outcome.broken:  # wrong data is a broken node: never a skip
            pytest.fail(f"broken node: {outcome.reason}", pytrace=False)
        if run.settings.strict if strict is None else strict:
            pytest.fail(outcome.reason, pytrace=False)
        # Reported at the test's own location, as pytest's skip markers are.
        raise pytest.skip.Exception(outcome.reason, _use_item_location=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    run = item.config.stash.get(RUN, None)
    if run is not None and run.worker and "progress" in run.derived:
        from .progress import relay

        relay(run, item)  # before the report is made: it copies the item's user_properties
    return (yield)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    run = config.stash.get(RUN, None)
    if run is None:
        return
    for error in run.derived.get("report_errors", ()):  # beside pytest's own summary, never in its place
        terminalreporter.write_line(error, red=True, bold=True)
    if not run.speaks:
        return
    lines = reporter.summary_lines(run, terminalreporter.stats)
    if lines:
        terminalreporter.write_sep("-", "gputopo")
        for line in lines:
            terminalreporter.write_line(line)
    reporter.write_github_summary(run, terminalreporter.write_line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(RUN, None)
    if run is not None:
        reporter.write_reports(run, complete=True)
