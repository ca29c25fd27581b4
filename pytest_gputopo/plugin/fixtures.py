"""What the fixtures pytest-gputopo gives tests hold (``entry`` names them, so that pytest finds them
before the plugin wakes): ``gputopo`` (the machine), ``gputopo_ranks`` (every rank's machine, and one
decision across the ranks), ``gputopo_bench`` (the measurement harness and the run's shared
benchmarks), ``gputopo_gpus`` (a leased test's GPUs) and ``gputopo_rank`` (a ``ranks(n)`` test's own
rank)."""

from __future__ import annotations

import json

import pytest

from ..core.units import counted
from .reporter import OWN_PROPERTY, UNMET_PROPERTY
from .run import RANKS_TEST, GputopoRun, run_of


def machine(config: pytest.Config):
    """``gputopo``: the machine as this process sees it."""
    return run_of(config).topology


def rank_facts(request: pytest.FixtureRequest) -> RankFacts:
    """``gputopo_ranks``: every rank's machine, and one decision across the ranks."""
    return RankFacts(run_of(request.config), request.node)


class RankFacts:
    """What ``gputopo_ranks`` gives a test. Under torchrun or srun the ranks exchanged their
    topologies when the run began, so every rank holds every rank's facts and decides alike without
    another exchange; outside a launcher this process is rank 0 alone."""

    def __init__(self, run: GputopoRun, node: pytest.Item):
        self._run = run
        self._node = node

    @property
    def views(self) -> tuple:
        """One ``RankView`` per rank, in rank order: ``rank``, ``hostname``, ``node_rank``,
        ``topology`` (the machine as that rank sees it), ``where`` (``"rank 1 (node-b)"``)."""
        if self._run.ranks is not None:
            return tuple(self._run.ranks.views)
        from ..runtime.ranks import RankView

        return (RankView(0, self._run.topology.hostname, None, self._run.topology),)

    @property
    def nodes(self) -> list:
        """One view per distinct machine of the run (ranks that see the same GPUs share one)."""
        return list(self._run.ranks.distinct) if self._run.ranks is not None else list(self.views)

    def require(self, predicate, reason: str, *, strict: bool | None = None) -> None:
        """Skip this test on every rank (fail under strict) unless ``predicate(topology)`` is true
        for every rank's topology (None, unknown, is not); the reason names the first rank that fails
        it. ``predicate`` must decide from the topology it is given, not from this process, for the
        ranks to agree."""
        __tracebackhide__ = True  # a skip points at the test's own line, not at this method
        unmet = [view for view in self.views if not predicate(view.topology)]
        if not unmet:
            return
        from ..render.escape import terminal
        from ..render.report import source_text

        first = unmet[0]

        others = f" and {counted(len(unmet) - 1, 'more rank')}" if len(unmet) > 1 else ""
        message = terminal(f"{reason}: unmet on {first.where}{others} [{source_text(first.topology)}]")
        self._node.user_properties.append((UNMET_PROPERTY, reason))
        if self._run.settings.strict if strict is None else strict:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def own_rank(request: pytest.FixtureRequest) -> RankInRanks:
    """``gputopo_rank``: in each rank of a ``@pytest.mark.ranks(n)`` test: ``rank``, ``world_size``, ``local_rank``,
    ``device`` (``"cuda:<i>"`` or ``"cpu"``) and ``gpus`` (the rank's GPU, or () on the CPUs). The
    rank's own value is made in the rank; here, in the pytest process, only its place is kept."""
    if request.node.stash.get(RANKS_TEST, None) is None:
        pytest.fail(
            f"{request.node.nodeid}: the fixture gputopo_rank is given to the ranks of a test marked "
            f"@pytest.mark.ranks(n) only",
            pytrace=False,
        )
    return RankInRanks()


class RankInRanks:
    """``gputopo_rank`` in the pytest process: each rank is given its own. A fixture that takes it is
    made here, once, before any rank exists, so it is refused by name."""

    def __getattr__(self, name: str):
        raise AttributeError(
            f"gputopo_rank.{name} exists in the ranks only: a fixture is made once, in the "
            f"pytest process, before the ranks start; take gputopo_rank in the test itself"
        )


def leased_gpus(request: pytest.FixtureRequest) -> tuple:
    """``gputopo_gpus``: the GPUs this test holds under ``--gputopo-lease``, as the machine's ``Gpu``
    objects (``index``: ``cuda:<index>`` inside the test, ``uuid``, ``pci_bus_id``, ``name``); without a
    lease, every GPU the test sees."""
    from .leases import gpus_of

    return gpus_of(request.node)


def bench(request: pytest.FixtureRequest) -> BenchFixture:
    """``gputopo_bench``: the measurement harness (``.measure(name, run, size_bytes=...)``) and the run's shared
    benchmarks (``.allreduce()``, ``.p2p(a, b)``, ``.h2d(gpu)``), as ``BenchResult``s."""
    return BenchFixture(request.config, request.node)


class BenchFixture:
    """What ``gputopo_bench`` gives a test: the plugin's harness for its own measurements, and the
    run's shared benchmark results (each measured at most once per run)."""

    def __init__(self, config: pytest.Config, node: pytest.Item):
        self._run = run_of(config)
        self._node = node

    def measure(self, name: str, run, *, size_bytes: int, device=None, verify=None, **options):
        """Time ``run(k)`` (k back-to-back iterations) with warm-up, a stable median and verification
        after timing (see ``pytest_gputopo.bench.harness.measure``). ``device``: a CUDA device to time
        with CUDA events; None times with the wall clock."""
        from ..bench.harness import CudaEventTimer, WallTimer, measure

        timer = CudaEventTimer(device) if device is not None else WallTimer()
        result = measure(name, run, size_bytes=size_bytes, timer=timer, verify=verify, **options)
        self._node.user_properties.append(
            (OWN_PROPERTY, json.dumps({"test": self._node.nodeid, "origin": "measured", **result.to_json()}))
        )
        return result

    # The benchmarks (and their keys) are imported by the first test that asks for one.
    def allreduce(self, gpus: int | None = None, size: int | None = None):
        s = self._suite()
        return s.get(s.allreduce_key(gpus, size))

    def p2p(self, a: int, b: int, *, peer: bool = True):
        from ..core.keys import Copy

        return self._suite().get(Copy("p2p" if peer else "p2p_staged", a, b))

    def h2d(self, gpu: int, *, pinned: bool = True):
        from ..core.keys import HostCopy

        return self._suite().get(HostCopy("h2d", gpu, pinned))

    def _suite(self):
        from .measurements import suite

        return suite(self._run)
