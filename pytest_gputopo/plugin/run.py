"""The run object: what a pytest-gputopo run knows, built once in ``pytest_configure`` and kept under
one ``StashKey`` (``RUN``). Hooks read it. It is frozen, but for what it holds that learns: the
machine (``Machine``) and what the run learns as it goes (``RunState``: the benchmark suite, NCCL's
view, each requirement's verdict, an unmet run gate's causes, what is waiting to be said)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

from .machine import Machine
from .run_settings import RunSettings

if TYPE_CHECKING:  # annotations only: these load when the run first needs them, not with the plugin
    from ..bench.suite import BenchSuite
    from ..core.causes import Cause
    from ..core.judgement import Judgement
    from ..core.keys import Key
    from ..core.model import Topology
    from ..core.requirements import Outcome, Requirement
    from ..nccl.fallbacks import NcclView

# Exit status of a run stopped by --gputopo-require or --gputopo-expect (pytest uses 0-5).
GATE_EXIT_STATUS = 8
# Exit status when the ranks of a distributed run cannot agree (one did not report in time).
RANKS_EXIT_STATUS = 9


class Ranks(NamedTuple):  # not a dataclass: cheaper to define, and this module loads with the plugin
    """Under a launcher (torchrun, srun): this rank's exchange with the others (``runtime.ranks``),
    every rank's view of its own node, in rank order, and one view per distinct node as its ranks see
    it (``runtime.ranks.distinct``: compared once per run, not per verdict)."""

    exchange: Any
    views: tuple
    distinct: tuple

    @property
    def rank(self) -> int:
        return self.exchange.launch.rank


# What an xdist worker (or a leased test's process, posing as one) is handed in ``workerinput``.
WORKER_TOPOLOGY = "gputopo_topology"
WORKER_SHARED_DIR = "gputopo_shared_dir"


class RunState:  # not a dataclass: defining one costs 0.36 ms, this class 0.01 ms, and it loads with the plugin
    """What a run learns as it goes, one field per thing, each written in one place (named below) and
    empty until then. The run (``GputopoRun.state``) and the same run with its ranks share one."""

    __slots__ = (
        "suite",
        "nccl_view",
        "verdicts",
        "judged",
        "figure_judgements",
        "gate_problems",
        "gate_causes",
        "progress",
        "json_seen",
        "report_errors",
        "lease_figures",
    )

    def __init__(self) -> None:
        # The benchmark suite, made when first needed (``measurements.suite``); closed at the end.
        self.suite: BenchSuite | None = None
        # NCCL's view, predicted or observed, kept once taken outside a plan (``nccl_view.nccl_view``).
        self.nccl_view: NcclView | None = None
        # Each requirement's verdict, judged once per run (``verdicts.evaluate``).
        self.verdicts: dict[Requirement, Outcome] = {}
        # The figures each requirement on measurements was judged on, at its own threshold
        # (``verdicts.judge_bandwidth``), for the reports' verdicts.
        self.judged: dict[Requirement, tuple[tuple[Key, Judgement], ...]] = {}
        # Each figure's verdict at the run's own threshold, with what it was judged on (its result and
        # its staged twin's): an interim report judges only what changed (``verdicts.run_judgements``).
        self.figure_judgements: dict[Key, tuple[tuple, Judgement]] = {}
        # An unmet run gate (``hooks.pytest_collection``): its problems, and the same grouped by cause;
        # empty when no gate stopped the run.
        self.gate_problems: list[str] = []
        self.gate_causes: list[Cause] = []
        # An xdist worker's progress lines, waiting for its next test report (``progress.tell``, ``relay``).
        self.progress: list[str] = []
        # The measurements (this process's, the shared folder's) when a report was last written, by
        # count: an interim report is written again only when they changed (``reporter.write_reports``).
        self.json_seen: tuple[int, int] | None = None
        # A report that could not be written at the end, said beside pytest's own summary (``reporter``).
        self.report_errors: list[str] = []
        # Where leased tests' processes leave their figures where the run shares none (no xdist): made
        # for the first (``lease_child.figures_folder``), read by the record, removed at the end (``hooks``).
        self.lease_figures: str | None = None


@dataclass(frozen=True, eq=False)
class GputopoRun:
    config: pytest.Config
    settings: RunSettings
    machine: Machine  # the topology, learned on first use with what the run needs
    worker: bool = False  # an xdist worker: it never speaks; it learns the machine through shared_dir
    ranks: Ranks | None = None  # under a launcher
    shared_dir: str | None = None  # xdist: where the processes of this run share benchmark results
    state: RunState = field(default_factory=RunState, repr=False)  # what the run learns as it goes

    @property
    def topology(self) -> Topology:
        """The machine as this process sees it; learning it, the first time, is the probe."""
        return self.machine.topology

    @property
    def shared_folders(self) -> tuple[str, ...]:
        """Where other processes of this run leave their figures: xdist's folder, and the leased tests'
        processes' where the run shares none."""
        return tuple(f for f in (self.shared_dir, self.state.lease_figures) if f)

    @property
    def speaks(self) -> bool:
        """Whether this process prints for the run: not an xdist worker; rank 0 under a launcher."""
        return not self.worker and (self.ranks is None or self.ranks.rank == 0)

    def with_ranks(self, ranks: Ranks) -> GputopoRun:
        return dataclasses.replace(self, ranks=ranks)  # the same state: what was learned stays learned

    def nodes(self) -> list[tuple[Any, Topology]]:
        """(rank view or None, topology) of every distinct node of the run: this process alone,
        or under a launcher every node as its ranks see it (the same list on every rank)."""
        if self.ranks is None:
            return [(None, self.topology)]
        return [(view, view.topology) for view in self.ranks.distinct]

    def all_ranks(self, name: str, value: dict) -> list[dict]:
        """Every rank's ``value`` under a launcher ([value] alone otherwise); a rank that does not
        answer ends the run with a reason instead of a hang."""
        if self.ranks is None:
            return [value]
        from ..runtime.ranks import RankError

        try:
            return self.ranks.exchange.all_gather(name, value)
        except RankError as exc:
            pytest.exit(f"gputopo: the ranks cannot agree: {exc}", returncode=RANKS_EXIT_STATUS)


RUN = pytest.StashKey[GputopoRun]()
RANKS_TEST = pytest.StashKey[tuple]()  # a ranks(n) test's (RanksRequirement, strict): its body runs as n ranks


def run_of(config: pytest.Config) -> GputopoRun:
    return config.stash[RUN]
