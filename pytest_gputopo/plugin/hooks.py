"""pytest hooks of pytest-gputopo. Hooks only: facts come from ``probe``, verdicts from
``requirements``, text from ``report``; state lives in ``config.stash``.

Loading this module imports the standard library and pytest only (a test checks it).
"""

from __future__ import annotations

from collections import Counter

import pytest

from . import markers, options
from ..render import report

TOPOLOGY = pytest.StashKey["object"]()
ITEM_REQS = pytest.StashKey[list]()
STATE = pytest.StashKey["RunState"]()
RANKS = pytest.StashKey["object"]()  # (Exchange, [RankView]) under a launcher, else absent

# Exit status of a run stopped by --gputopo-require or --gputopo-expect (pytest uses 0-5).
GATE_EXIT_STATUS = 8
# Exit status when the ranks of a distributed run cannot agree (one did not report in time).
RANKS_EXIT_STATUS = 9
WORKER_KEY = "gputopo_topology"
SHARED_KEY = "gputopo_shared_dir"  # xdist: where the workers of one run share benchmark results
SHARED_DIR = pytest.StashKey[str]()
JSON_ERROR = pytest.StashKey[str]()  # --gputopo-json could not be written at the end
JSON_SEEN = pytest.StashKey[tuple]()  # what the last partial --gputopo-json held


class RunState:
    def __init__(self, strict: bool):
        self.strict = strict
        self.verdicts: dict = {}  # requirement -> (skip reason or None: met, broken), evaluated once per run

    @staticmethod
    def evaluate(requirement, config) -> tuple[str | None, bool]:
        """(the reason it is unmet or None, whether the node is broken: a failure even when not strict)."""
        from .checks import judge
        from ..core.requirements import FactRequirement

        ranks = config.stash.get(RANKS, None)
        if isinstance(requirement, FactRequirement):
            verdict = judge(config, requirement)  # measures lazily, once per run
            mine = {"reason": None if verdict.ok else verdict.reason, "broken": verdict.broken}
            # Judged on each rank's facts: agree on one verdict (unmet anywhere -> skipped everywhere).
            gathered = _all_ranks(config, f"verdict/{requirement}", mine)
            if len(gathered) == 1:
                return mine["reason"], mine["broken"]
            unmet = [(r, d) for r, d in enumerate(gathered) if d["reason"]]
            if not unmet:
                return None, False
            rank, first = unmet[0]
            return f"rank {rank}: {first['reason']}", any(d["broken"] for _, d in unmet)
        views = [(None, config.stash[TOPOLOGY])] if ranks is None else \
            [(v, v.topology) for v in _distinct(ranks[1])]
        for view, topology in views:  # the same combined view on every rank: the same decision
            verdict = requirement.evaluate(topology)
            if not verdict.ok:
                where = f"on {view.where}: " if view is not None and len(ranks[1]) > 1 else ""
                return f"{where}{verdict.reason} [{report.source_text(topology)}]", False
        return None, False


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoption(parser)


def pytest_addhooks(pluginmanager) -> None:
    from . import hookspecs as hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in markers.MARKER_HELP.items():
        sig = markers.marker_signature(name).replace("*, ", "").replace("strict=None", "strict=False")
        config.addinivalue_line("markers", f"{sig}: {help_text}; unmet -> skip (fail when strict)")
    state = RunState(strict=options.flag(config, "strict"))
    options.validate(config)
    config.stash[STATE] = state
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and WORKER_KEY in workerinput:
        from ..core.model import from_dict

        topology = from_dict(workerinput[WORKER_KEY])  # xdist workers never probe
        config.stash[SHARED_DIR] = workerinput[SHARED_KEY]
    else:
        topology = config.hook.pytest_gputopo_probe(config=config)
    config.stash[TOPOLOGY] = topology
    if workerinput is None:
        _join_ranks(config, topology)
        if options.value(config, "json")[0] is not None:
            config.pluginmanager.register(_JsonProgress(config), "gputopo-json-progress")
    config.hook.pytest_gputopo_topology(config=config, topology=topology)


def _join_ranks(config: pytest.Config, topology) -> None:
    """Under torchrun (RANK/WORLD_SIZE set), exchange every rank's topology before any decision."""
    from ..runtime import environ as runtime

    try:
        launch = runtime.launch()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if launch is None:
        return
    from ..runtime.ranks import Exchange, RankError, gather_views

    timeout = options.number(config, "rank-timeout", 120.0)
    fallback = ""
    if len(topology.gpus) >= 2:  # each node's own NCCL settings: predicted where they are read
        from .checks import predicted_fallback_line

        fallback = predicted_fallback_line(config)
    try:
        exchange = Exchange.connect(launch, timeout)
        config.stash[RANKS] = (exchange, gather_views(exchange, topology, fallback))
    except RankError as exc:
        pytest.exit(f"gputopo: the ranks cannot agree: {exc}", returncode=RANKS_EXIT_STATUS)


def _distinct(views):
    from ..runtime.ranks import distinct

    return distinct(views)


def _fact_gate_problems(config: pytest.Config, terms: list) -> list[str]:
    """Gate terms judged on facts (no-fallback): on each rank's own node, then shared by all ranks."""
    from .checks import judge

    mine = [("broken node: " if verdict.broken else "") + verdict.reason
            for verdict in (judge(config, t, max_items=None) for t in terms) if not verdict.ok]
    gathered = _all_ranks(config, "gate", {"problems": mine})
    if len(gathered) == 1:
        return mine
    return [f"rank {r}: {p}" for r, d in enumerate(gathered) for p in d["problems"]]


def _all_ranks(config: pytest.Config, name: str, value: dict) -> list[dict]:
    """Every rank's ``value`` under torchrun ([value] alone otherwise); a rank that does not answer
    ends the run with a reason instead of a hang."""
    ranks = config.stash.get(RANKS, None)
    if ranks is None:
        return [value]
    from ..runtime.ranks import RankError

    try:
        return ranks[0].all_gather(name, value)
    except RankError as exc:
        pytest.exit(f"gputopo: the ranks cannot agree: {exc}", returncode=RANKS_EXIT_STATUS)


def _is_rank_zero(config: pytest.Config) -> bool:
    ranks = config.stash.get(RANKS, None)
    return ranks is None or ranks[0].launch.rank == 0


@pytest.hookimpl(trylast=True)
def pytest_gputopo_probe(config: pytest.Config):
    from ..probe import MachineError, probe

    machine, where = options.value(config, "machine")
    try:
        return probe(machine)
    except MachineError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: hand the topology, and a folder to share benchmark results in, to each worker."""
    import tempfile

    from ..core.model import to_dict

    config = node.config
    if SHARED_DIR not in config.stash:
        config.stash[SHARED_DIR] = tempfile.mkdtemp(prefix="pytest-gputopo-run-")
    node.workerinput[WORKER_KEY] = to_dict(config.stash[TOPOLOGY])
    node.workerinput[SHARED_KEY] = config.stash[SHARED_DIR]


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(SHARED_DIR, None)
    if shared and not hasattr(config, "workerinput"):
        import shutil

        shutil.rmtree(shared, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not _is_rank_zero(config):
        return []  # only rank 0 speaks for the run
    topology = config.stash[TOPOLOGY]
    ranks = config.stash.get(RANKS, None)
    if config.get_verbosity() > 0:
        return (report.rank_lines(ranks[1]) if ranks else []) + report.full_report(topology)
    if ranks is not None:
        return report.rank_lines(ranks[1]) + [f"gputopo warning: {w}" for w in topology.warnings]
    lines = [report.header_line(topology)]
    if len(topology.gpus) >= 2:  # a fallback needs a pair; hosts without GPUs pay nothing for it
        from .checks import predicted_fallback_line

        lines += [line for line in (predicted_fallback_line(config),) if line]
    return lines + [f"gputopo warning: {w}" for w in topology.warnings]


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    """Run gates, before the first test is collected."""
    config = session.config
    expr, where = options.value(config, "require")
    reference, ref_where = options.value(config, "expect")
    if hasattr(config, "workerinput") or (expr is None and reference is None):
        return
    from ..core import requirements as reqs

    ranks = config.stash.get(RANKS, None)
    views = [(None, config.stash[TOPOLOGY])] if ranks is None else [(v, v.topology) for v in _distinct(ranks[1])]
    topology = config.stash[TOPOLOGY]
    problems = []
    if expr is not None:
        try:
            terms = reqs.parse_expression(expr)
        except reqs.RequirementError as exc:
            raise pytest.UsageError(f"{where}: {exc}") from None
        for view, topo in views:
            prefix = f"{view.where}: " if view is not None else ""
            for term in terms:
                if isinstance(term, reqs.FactRequirement):
                    continue  # judged below, on this rank's own facts
                verdict = term.evaluate(topo, max_pairs=None)
                if not verdict.ok:
                    problems += [f"{prefix}{term}: {f}" for f in verdict.failures]
        problems += _fact_gate_problems(config, [t for t in terms if isinstance(t, reqs.FactRequirement)])
    if reference is not None:
        from ..runtime import environ as runtime
        from ..probe import MachineError
        from ..probe import reference as reference_machine

        try:
            ref = reference_machine(reference)
        except MachineError as exc:
            raise pytest.UsageError(f"{ref_where}: {exc}") from None
        everything = runtime.all_gpus_visible()
        for view, topo in views:
            prefix = f"{view.where}: " if view is not None else ""
            problems += [f"{prefix}expected as {ref.source.name}: {r}"
                         for r in reqs.regressions(ref, topo, everything)]
    if problems:
        tw = config.get_terminal_writer()
        tw.line(f"gputopo: this machine does not meet the run's requirements "
                f"[{report.source_text(topology)}]:", red=True, bold=True)
        for p in problems:
            tw.line(f"  - {p}", red=True)
        pytest.exit(f"gputopo: run gate unmet ({len(problems)} problems); exit status {GATE_EXIT_STATUS}",
                    returncode=GATE_EXIT_STATUS)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Validate every gputopo marker now, so a bad argument stops the run naming the test."""
    marked, errors = markers.read_markers(items)
    for item, found in marked:
        item.stash[ITEM_REQS] = found
    if errors:
        raise pytest.UsageError("bad gputopo marker arguments:\n  " + "\n  ".join(errors))
    if options.value(config, "check")[0] is not None:
        from .checks import check_items

        items.extend(check_items(session))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    found = item.stash.get(ITEM_REQS, None)
    if not found:
        return
    state: RunState = item.config.stash[STATE]
    for requirement, strict in found:
        verdict = state.verdicts.get(requirement)
        if verdict is None:
            verdict = state.verdicts[requirement] = state.evaluate(requirement, item.config)
        reason, broken = verdict
        if reason is None:
            continue
        strict = state.strict if strict is None else strict
        item.user_properties.append(("gputopo_unmet", str(requirement)))
        if broken:  # wrong data is a broken node: never a skip
            pytest.fail(f"broken node: {reason}", pytrace=False)
        if strict:
            pytest.fail(reason, pytrace=False)
        # Reported at the test's own location, as pytest's skip markers are.
        raise pytest.skip.Exception(reason, _use_item_location=True)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if JSON_ERROR in config.stash:  # beside pytest's own summary, never in its place
        terminalreporter.write_line(config.stash[JSON_ERROR], red=True, bold=True)
    state = config.stash.get(STATE, None)
    if state is None or hasattr(config, "workerinput") or not _is_rank_zero(config):
        return
    # Count from the reports themselves, so that outcomes of xdist workers are counted too.
    skipped, failed = Counter(), Counter()
    for outcome, counter in (("skipped", skipped), ("failed", failed), ("error", failed)):
        for rep in terminalreporter.stats.get(outcome, []):
            for key, value in getattr(rep, "user_properties", ()):
                if key == "gputopo_unmet" and getattr(rep, "when", None) == "setup":
                    counter[value] += 1
    ranks = config.stash.get(RANKS, None)
    sources = [config.stash[TOPOLOGY]] if ranks is None else [v.topology for v in _distinct(ranks[1])]
    import sys

    checks = sys.modules.get("pytest_gputopo.checks")  # imported only if this run needed NCCL's view
    view = config.stash.get(checks.NCCL_VIEW, None) if checks else None
    lines = [line for line in (report.skip_summary(skipped, failed, sources),
                               view.account_line() if view is not None else None) if line]
    if lines:
        terminalreporter.write_sep("-", "gputopo")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def gputopo(pytestconfig: pytest.Config):
    """The machine as this process sees it (``pytest_gputopo.model.Topology``): ``gpus``,
    ``link(a, b)``, ``p2p(a, b)``, ``pairs(gpus=None)``, ``pairs_worse_than("PXB")``, ``source``."""
    return pytestconfig.stash[TOPOLOGY]


def _from_reports(config: pytest.Config, name: str) -> list:
    """The JSON values that tests left under ``name`` in their user_properties (xdist workers' too)."""
    import json

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    found, seen = [], set()
    for reports in (reporter.stats.values() if reporter else ()):
        for rep in reports:
            for key, value in getattr(rep, "user_properties", ()):
                if key == name and (rep.nodeid, value) not in seen:
                    seen.add((rep.nodeid, value))
                    found.append(json.loads(value))
    return found


def _json_report(config: pytest.Config, complete: bool) -> None:
    """--gputopo-json: the topology, every measurement and every check, as one document. Written
    again whenever a test adds a measurement (``"complete": false``) and once at the end, so that
    a run ended by SIGTERM (a CI cancel, ``timeout``) leaves what it measured -- without a signal
    handler in the user's process."""
    path, where = options.value(config, "json")
    if path is None or hasattr(config, "workerinput") or TOPOLOGY not in config.stash:
        return
    import json

    from ..runtime import files
    from ..bench.suite import SharedFolder
    from .checks import CHECK_PROPERTY, OWN_PROPERTY, SUITE

    suite = config.stash.get(SUITE, None)
    shared = config.stash.get(SHARED_DIR, None)
    if not complete:  # cheap: what there is to report, by count
        seen = (len(suite.results) if suite else 0, len(SharedFolder(shared).names()) if shared else 0)
        if config.stash.get(JSON_SEEN, None) == seen:
            return  # nothing new since the last write
        config.stash[JSON_SEEN] = seen
    results, lost = SharedFolder(shared).results() if shared else ([], [])  # the workers'
    results = {r.key: r for r in results}
    results.update({r.key: r for r in (suite.results if suite else [])})
    document = report.json_document(config.stash[TOPOLOGY], list(results.values()),
                                    _from_reports(config, CHECK_PROPERTY), _from_reports(config, OWN_PROPERTY), lost)
    try:  # strict JSON: a NaN would be a figure no strict reader takes
        files.write_text(path, json.dumps({**document, "complete": complete}, indent=1, allow_nan=False) + "\n")
    except (OSError, ValueError) as exc:  # checked at start; a disk that filled since loses the report, not the run's outcome
        if complete:
            config.stash[JSON_ERROR] = f"ERROR: {where}: cannot write {path}: {getattr(exc, 'strerror', None) or exc}"


class _JsonProgress:
    """Registered when --gputopo-json is given (never on xdist workers): the partial report after
    each test, from the reports the controller receives."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        _json_report(self.config, complete=False)  # a run ended during its first test leaves the topology

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            _json_report(self.config, complete=False)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _json_report(session.config, complete=True)


@pytest.fixture
def gputopo_bench(request: pytest.FixtureRequest):
    """The measurement harness (``.measure(name, run, size_bytes=...)``) and the run's shared
    benchmarks (``.allreduce()``, ``.p2p(a, b)``, ``.h2d(gpu)``), as ``BenchResult``s."""
    from .checks import BenchFixture

    return BenchFixture(request.config, request.node)
