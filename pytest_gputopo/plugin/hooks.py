"""pytest hooks of pytest-gputopo, registered by the entry point (``entry``) once a run asks something
of the plugin. Hooks only: the run object (``run``) is built once in ``pytest_configure``; verdicts
come from ``verdicts``, measurements from ``measurements``, NCCL's view from ``nccl_view``, text from
``reporter``. Only ``entry`` imports this module.

Loading it imports the standard library, pytest and the light modules of this package only (a test
checks it); the core's judges and the benchmarks are imported when something needs them.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from ..runtime import environ
from . import markers, options, reporter
from .machine import Machine, boot_record, item_facts, learned_by_others, shared
from .run import (
    GATE_EXIT_STATUS,
    RANKS_EXIT_STATUS,
    RANKS_TEST,
    RUN,
    WORKER_SHARED_DIR,
    WORKER_TOPOLOGY,
    GputopoRun,
    Ranks,
    run_of,
)
from .run_settings import read_run_settings

ITEM_REQS = pytest.StashKey[list]()  # a test's (requirement, strict) pairs, read at collection
PROBE_NOTES = pytest.StashKey[tuple]()  # what the probe asked and what it took from this boot's record
# xdist: what the controller hands each worker


def pytest_configure(config: pytest.Config) -> None:
    settings = read_run_settings(config)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        shared_dir = workerinput.get(WORKER_SHARED_DIR)
        if WORKER_TOPOLOGY in workerinput:  # the controller learned it: never probed again
            from ..core.schema import from_dict

            machine = Machine(_learner(config), known=from_dict(workerinput[WORKER_TOPOLOGY]))
        else:  # the first worker that needs it learns it for all
            machine = Machine(shared(shared_dir, _learner(config)) if shared_dir else _learner(config))
        config.stash[RUN] = GputopoRun(config, settings, machine, worker=True, shared_dir=shared_dir)
        _leases(config)
        return
    shared_dir = _shared_dir(config)
    learn = _learner(config)
    config.stash[RUN] = GputopoRun(
        config, settings, Machine(shared(shared_dir, learn) if shared_dir else learn), shared_dir=shared_dir
    )
    if settings.plan:  # a dry run: its plugin shows the selected tests' verdicts instead of running them
        from .plan import Plan

        config.pluginmanager.register(Plan(run_of(config), ITEM_REQS), "gputopo-plan")
    _leases(config)
    if settings.asks_machine:  # an option asks: learned now, and handed to xdist workers
        from ..core.model import ALL_FACTS

        _use(config, ALL_FACTS).machine.learn()
    if settings.writes_report:
        config.pluginmanager.register(reporter.JsonProgress(config), "gputopo-json-progress")
    if settings.check is not None:  # the check counted and shown apart from the user's tests
        from .check_report import CheckReport

        config.pluginmanager.register(CheckReport(config), "gputopo-check-report")
    if shared_dir is not None or settings.lease:  # the workers' and leased tests' processes' progress
        # lines come in their reports (each is a worker of this run: ``progress.tell``)
        from .progress import Relayed

        config.pluginmanager.register(Relayed(config), "gputopo-progress-relay")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """A leased test's own process, started ahead of its lease, takes it here: before any conftest,
    which may start CUDA at import, is loaded."""
    spec = environ.lease_spec()  # a leased test's own process: its environment says so (lease_child)
    if spec:
        from .lease_child import take_lease

        take_lease(early_config, spec, before_conftests=True)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A leased test's own process is a worker of the run that started it, before any plugin's
    ``pytest_configure`` asks (report writers leave the writing to that run, as on xdist's workers)."""
    if environ.lease_spec():
        from .lease_child import enter_child

        enter_child(config, WORKER_TOPOLOGY)


def _leases(config: pytest.Config) -> None:
    """GPU leases, where asked (``--gputopo-lease``): the leasing plugin, or in a leased test's own
    process the one that relays its reports. Nothing of them is imported otherwise."""
    if environ.lease_spec():
        from .lease_child import Child

        config.pluginmanager.register(Child(config), "gputopo-lease-child")
    elif run_of(config).settings.lease and not run_of(config).settings.plan:  # a plan simulates them
        from .leases import register

        register(config, run_of(config), ITEM_REQS)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` with leases: one worker per GPU a lease may hold (xdist's own count where none)."""
    if not options.flag(config, "lease"):
        return None
    from .leases import auto_workers

    return auto_workers(config)


def _learner(config: pytest.Config):
    """needs -> (topology, notes): the ``pytest_gputopo_probe`` hook, then ``pytest_gputopo_topology``."""

    def learn(needs: frozenset) -> tuple:
        topology = config.hook.pytest_gputopo_probe(config=config, needs=needs)
        config.hook.pytest_gputopo_topology(config=config, topology=topology)
        return topology, config.stash.get(PROBE_NOTES, ())

    return learn


def fixture_used(config: pytest.Config) -> None:
    """A fixture of the plugin's is made: the run uses the plugin, and the fixture hands it the whole
    machine (a test that named it was counted at collection; one that asked by ``getfixturevalue`` is
    counted here)."""
    from ..core.model import ALL_FACTS

    _use(config, ALL_FACTS)


def _use(config: pytest.Config, facts) -> GputopoRun:
    """The run uses the plugin: its machine is learned with ``facts`` (when first read) and, under a
    launcher, its ranks join now. A run that uses no marker, fixture or option of the plugin never
    comes here: a launcher's variables in the environment are not the plugin's business then."""
    run = run_of(config)
    run.machine.need(facts)
    if run.worker or run.machine.used:  # xdist workers are one process of the controller's rank
        return run
    run.machine.used = True
    try:
        launch = environ.launch()
        secret = environ.store_secret() if launch is not None else None
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    ranks = _join_ranks(run, launch, secret) if launch is not None else None
    if ranks is not None:
        run = config.stash[RUN] = run.with_ranks(ranks)
    return run


def _shared_dir(config: pytest.Config) -> str | None:
    """A private folder where xdist workers will share the machine and benchmark results, made when
    this run distributes tests (xdist's own rule, ``xdist.plugin._is_distribution_mode``: ``--dist``
    other than "no" and ``--tx`` set, as ``-n N`` sets them), removed at the end, or by a later run
    where this one was killed (``runtime.run_folder``); None otherwise."""
    if config.getoption("dist", "no") == "no" or not config.getoption("tx", None):
        return None
    from ..runtime import run_folder

    return run_folder.make()


def _join_ranks(run: GputopoRun, launch, secret) -> Ranks | None:
    """Exchange every rank's topology before any decision. Without torch (whose store the ranks
    meet at) this process is judged alone, and the header says so."""
    if importlib.util.find_spec("torch") is None:
        run.machine.warnings.append(
            f"a launcher's variables say this is rank {launch.rank} of {launch.world_size}, "
            f"but torch is not installed: this process is judged alone"
        )
        return None
    from ..runtime.ranks import Exchange, RankError, distinct, gather_views

    fallback = ""
    if len(run.topology.gpus) >= 2:  # each node's own NCCL settings: predicted where they are read
        from .nccl_view import predicted_fallback_line

        fallback = predicted_fallback_line(run)
    try:
        exchange = Exchange.connect(launch, run.settings.rank_timeout_s, secret)
        views = tuple(gather_views(exchange, run.topology, fallback))
        return Ranks(exchange, views, tuple(distinct(list(views))))
    except RankError as exc:
        pytest.exit(f"gputopo: the ranks cannot agree: {exc}", returncode=RANKS_EXIT_STATUS)


@pytest.hookimpl(trylast=True)
def pytest_gputopo_probe(config: pytest.Config, needs: frozenset):
    from ..probe import MachineError, learn

    settings = run_of(config).settings  # read once, in pytest_configure
    # A health check asks CUDA anew (its cuda item judges CUDA now, not this boot's record of it: a fabric
    # manager that went down since, a GPU CUDA no longer enumerates; issue 39 item 3); torch's versions
    # may still come from the record.
    fresh = frozenset({"cuda"}) if settings.check is not None else frozenset()  # model.CUDA, the fact's name
    try:
        record = boot_record(config, settings.reprobe)
        learned = learn(settings.machine, needs=needs, boot_record=record, fresh=fresh)
    except MachineError as exc:
        raise pytest.UsageError(f"{settings.machine_from}: {exc}") from None
    config.stash[PROBE_NOTES] = learned.notes
    return learned.topology


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: hand the topology when an option made it learn it, and the folder to share the
    machine and benchmark results in, to each worker."""
    from ..core.schema import to_dict

    run = run_of(node.config)
    if run.machine.learned:
        node.workerinput[WORKER_TOPOLOGY] = to_dict(run.topology)
    node.workerinput[WORKER_SHARED_DIR] = run.shared_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN, None)
    if run is not None and run.state.suite is not None:
        run.state.suite.close()
    if run is not None and run.shared_folders and not run.worker:
        from ..runtime import run_folder

        for folder in run.shared_folders:
            run_folder.remove(folder)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The machine, where an option made the run learn it at start-up; else after collection."""
    run = run_of(config)
    return _header(run) if run.machine.learned else []


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    run = run_of(config)
    # A run whose tests need the machine learns it here, once, before the first test.
    lines = _header(run) if run.machine.needs or run.machine.learned or config.get_verbosity() > 0 else []
    return lines + _left_to_project(run)


def _left_to_project(run: GputopoRun) -> list[str]:
    """Once, where the run speaks: the gputopo marker names the project registered itself."""
    if not run.machine.leave or not run.speaks:
        return []
    return [
        f"gputopo: {', '.join(run.machine.leave)} registered by this project (ini file or conftest): "
        f"those marks are the project's own, and gputopo does not read them"
    ]


def _header(run: GputopoRun) -> list[str]:
    """Once per run: the machine and how it was learned, or, verbose, that nothing asked for it."""
    if run.machine.header_shown:
        return []
    run.machine.header_shown = True
    return reporter.header_lines(run, run.config.get_verbosity(), lambda: _predicted_fallback(run))


def _predicted_fallback(run: GputopoRun) -> str:
    from .nccl_view import predicted_fallback_line  # NCCL's rules, where a header shows their prediction

    return predicted_fallback_line(run)


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> bool | None:
    """Run gates, before the first test is collected. Unmet, the run's tests are not collected: its
    items are one failing test per cause (``gate``), and the run ends with ``GATE_EXIT_STATUS``."""
    run = run_of(session.config)
    if run.worker or (run.settings.require is None and run.settings.expect is None):
        return None
    from .verdicts import GateError, gate_causes

    try:
        problems, causes = gate_causes(run)
    except GateError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not causes:
        return None
    run.state.gate_problems = problems  # the reports' verdict: a run stopped here FAILED
    run.state.gate_causes = causes
    planned = session.config.pluginmanager.has_plugin("gputopo-plan")  # runs nothing: these lines are its verdict
    from .gate import NODEID, gate_items

    if run.speaks:
        tw = session.config.get_terminal_writer()
        for i, line in enumerate(reporter.gate_lines(run, causes, None if planned else NODEID)):
            tw.line(line, red=True, bold=i == 0)
    session.items = [] if planned else gate_items(session, causes)
    session.ihook.pytest_collection_finish(session=session)
    session.testscollected = len(session.items)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """An unmet run gate runs its own items here, in the process that decided it: under xdist the
    controller, whose workers' tests never run."""
    run = session.config.stash.get(RUN, None)
    if run is None or not run.state.gate_causes or session.config.option.collectonly:
        return None
    for i, item in enumerate(session.items):
        nextitem = session.items[i + 1] if i + 1 < len(session.items) else None
        item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem)
    return True


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``ranks([2, 4])``: one test per world size, by pytest's own parametrization (ids ``ranks2``,
    ``ranks4``; the parameter is the plugin's, never passed to the body)."""
    if metafunc.definition.get_closest_marker("ranks") is None:
        return
    leave = markers.registered_by_others(metafunc.config.getini("markers"), markers.registration_lines())
    sizes = markers.world_sizes(metafunc.definition, frozenset(leave))
    if sizes:
        metafunc.fixturenames.append(markers.WORLD_SIZE)
        metafunc.parametrize(markers.WORLD_SIZE, sizes, ids=[f"ranks{size}" for size in sizes])


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Validate every gputopo marker now, so a bad argument stops the run naming the test. Marks of a
    name the project registered itself are the project's, and left alone. ``--gputopo-check``'s items
    go before the user's tests (xdist hands items out in this order: the first worker starts with them)."""
    run = run_of(config)
    run.machine.leave = markers.registered_by_others(config.getini("markers"), markers.registration_lines())
    marked, errors = markers.read_markers(items, frozenset(run.machine.leave))
    for item, found in marked:
        from ..core.ranks_requirement import RanksRequirement  # on a marked run only: one class, beside the marks' own

        item.stash[ITEM_REQS] = found
        ranks = [(r, strict) for r, strict in found if isinstance(r, RanksRequirement)]
        if len(ranks) > 1:
            errors.append(f"{item.nodeid}: @pytest.mark.ranks: {len(ranks)} marks on one test; give it one")
        elif ranks and _of_unittest(item):
            errors.append(
                f"{item.nodeid}: @pytest.mark.ranks: a unittest.TestCase method is run by unittest itself, "
                f"once, in this process: its ranks would never start; make it a test function or a method "
                f"of a class that is not a TestCase"
            )
        elif ranks and ranks[0][0].sizes:
            errors.append(
                f"{item.nodeid}: @pytest.mark.{ranks[0][0]}: a list of world sizes makes one test per size when "
                f"the test is collected; this one was given none (a mark added after collection?)"
            )
        elif ranks:
            item.stash[RANKS_TEST] = ranks[0]
    if errors:
        raise pytest.UsageError("bad gputopo marker arguments:\n  " + "\n  ".join(errors))
    level = run.settings.check
    if level is not None:  # the health check first: a degraded node says so before the user's suite runs
        from .checks import check_items

        items[:0] = check_items(session, level)


def _of_unittest(item: pytest.Item) -> bool:
    """Whether ``item`` is a ``unittest.TestCase``'s method (a class of it exists only where unittest
    was imported: it is not imported here for the question)."""
    unittest, cls = sys.modules.get("unittest"), getattr(item, "cls", None)
    return unittest is not None and isinstance(cls, type) and issubclass(cls, unittest.TestCase)


@pytest.hookimpl(tryfirst=True)  # before the terminal reporter asks for the header
def pytest_collection_finish(session: pytest.Session) -> None:
    """What the selected tests (after every plugin's deselection) need of the machine: a run that
    needs something uses the plugin from here on; one that needs nothing never probes."""
    config = session.config
    if config.option.collectonly:
        return
    needs = set()
    for item in session.items:
        needs |= item_facts(item, item.stash.get(ITEM_REQS, ()))
    if needs:
        _use(config, needs)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    found = item.stash.get(ITEM_REQS, None)
    if not found:
        return
    from ..render.escape import terminal
    from .verdicts import BROKEN, FAIL, evaluate, unmet_verdict

    run = run_of(item.config)
    recorded = []
    for index, (requirement, strict) in enumerate(found):
        outcome = evaluate(run, requirement)
        if outcome.reason is None:
            recorded += [outcome.recorded] if outcome.recorded else []
            continue
        _say_verdicts(run, item, found, index)  # every requirement's verdict, for the JSON report
        item.user_properties.append((reporter.UNMET_PROPERTY, str(requirement)))
        item.user_properties += [(reporter.CAUSE_PROPERTY, cause) for cause in outcome.causes]
        reason = terminal(outcome.reason)  # a reason names GPUs by the names their profile gives
        verdict = unmet_verdict(run, outcome, strict)  # the rule a plan (--gputopo-plan) shows
        if verdict == BROKEN:  # wrong data is a broken node: never a skip
            pytest.fail(f"broken node: {reason}", pytrace=False)
        if verdict == FAIL:
            pytest.fail(reason, pytrace=False)
        # Reported at the test's own location, as pytest's skip markers are.
        raise pytest.skip.Exception(reason, _use_item_location=True)
    _say_verdicts(run, item, found, len(found))
    reporter.say_recorded(item, recorded)


def _say_verdicts(run: GputopoRun, item: pytest.Item, found: list, stop: int) -> None:
    if run.settings.writes_report:  # only a report reads them (each is a JUnit property too)
        from .verdicts import report_entries

        reporter.say_verdicts(item, report_entries(run, found, stop))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A ``ranks(n)`` test's body runs as its n ranks (``ranks_run``), not in this process."""
    ranks = pyfuncitem.stash.get(RANKS_TEST, None)
    if ranks is None:
        return None
    from .ranks_run import call

    call(pyfuncitem, *ranks)
    return True


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    """A test that passed on figures recorded for the machine says so in its own line (-v, -rA)."""
    return reporter.recorded_status(report)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    run = item.config.stash.get(RUN, None)
    if run is not None and run.worker and run.state.progress:
        from .progress import relay

        relay(run, item)  # before the report is made: it copies the item's user_properties
    return (yield)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    run = config.stash.get(RUN, None)
    if run is None:
        return
    for error in run.state.report_errors:  # beside pytest's own summary, never in its place
        terminalreporter.write_line(error, red=True, bold=True)
    if not run.speaks:
        return
    header = []
    if not run.machine.header_shown and run.shared_dir is not None:  # xdist: the workers learned it, if any did
        known = learned_by_others(run.shared_dir)
        if known is not None:
            run.machine.adopt(known)
            header = _header(run)
    if run.shared_dir is not None:  # xdist: the workers collected, so this process has not said it yet
        run.machine.leave = markers.registered_by_others(config.getini("markers"), markers.registration_lines())
        header += _left_to_project(run)
    lines = header + reporter.summary_lines(run, _finished_record(run))
    if lines:
        terminalreporter.write_sep("-", "gputopo")
        for line in lines:
            terminalreporter.write_line(line)
    reporter.write_github_summary(run, terminalreporter.write_line)


def _finished_record(run: GputopoRun):
    """The run's record once it ended (``run_record``, with its verdict); None where the run used nothing
    of the plugin (nothing learned: it loads no judge and no record)."""
    if not run.machine.learned:
        return None
    from .run_record import finished

    return finished(run)


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(RUN, None)
    if run is not None:
        reporter.write_reports(run, complete=True)
    # Its causes failed as tests (or, in a plan, ran as nothing): the run's status says the gate.
    if run is not None and run.state.gate_causes and session.exitstatus in (0, 1, 5):
        session.exitstatus = GATE_EXIT_STATUS
