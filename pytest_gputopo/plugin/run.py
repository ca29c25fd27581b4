"""The run object: what a pytest-gputopo run knows, built once in ``pytest_configure`` and kept under
one ``StashKey`` (``RUN``). Hooks read it; what the run learns as it goes (benchmark results, NCCL's
view, verdicts) is derived from it on first use and kept with it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

from .machine import Machine
from .settings import Settings

if TYPE_CHECKING:  # annotations only: the model is loaded by the probe, not by loading the plugin
    from ..core.model import Topology

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


@dataclass(frozen=True, eq=False)
class GputopoRun:
    config: pytest.Config
    settings: Settings
    machine: Machine  # the topology, learned on first use with what the run needs
    worker: bool = False  # an xdist worker: it never speaks; it learns the machine through shared_dir
    ranks: Ranks | None = None  # under a launcher
    shared_dir: str | None = None  # xdist: where the processes of this run share benchmark results
    # What the run learns as it goes, made on first use (``facts``): the benchmark suite, NCCL's
    # view; and each requirement's verdict, judged once per run (``verdicts``).
    derived: dict = field(default_factory=dict, repr=False)
    verdicts: dict = field(default_factory=dict, repr=False)

    @property
    def topology(self) -> Topology:
        """The machine as this process sees it; learning it, the first time, is the probe."""
        return self.machine.topology

    @property
    def speaks(self) -> bool:
        """Whether this process prints for the run: not an xdist worker; rank 0 under a launcher."""
        return not self.worker and (self.ranks is None or self.ranks.rank == 0)

    def with_ranks(self, ranks: Ranks) -> "GputopoRun":
        return dataclasses.replace(self, ranks=ranks)  # the same derived facts and verdicts

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


def run_of(config: pytest.Config) -> GputopoRun:
    return config.stash[RUN]
