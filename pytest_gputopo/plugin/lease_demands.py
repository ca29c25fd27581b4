"""What each selected test asks of the GPUs a lease may hold: its set (a ``placement.Placer`` per
distinct set of requirements), its memory budget per GPU, why it never fits, and its cost; read
at collection. The policy's inputs, shared by the run that takes leases (``leases``) and by the plan
that simulates them (``lease_plan``), which must agree test by test.
"""

from __future__ import annotations

import functools

import pytest

from ..core import lease_policy, placement
from ..core.model import Topology
from .lease_figures import read_cache
from .lease_memory import read_budgets

DEFAULT_SECONDS = 1.0  # a test's duration until a run has measured it (the order, the plan's timeline)


def leasable(topology: Topology) -> tuple[Topology, list[str]]:
    """The GPUs a lease may hold, as a topology of their own, and why each other GPU is left out:
    one without a UUID cannot be named (nor locked), and a MIG-enabled one shows a process an
    instance, never the GPU."""
    keep, left = [], []
    for i, gpu in enumerate(topology.gpus):
        if not gpu.uuid:
            left.append(f"GPU{i} has no UUID (NVML gave none)")
        elif gpu.mig:
            left.append(f"GPU{i} has MIG enabled")
        else:
            keep.append(i)
    return topology.restrict(keep), left


class Demands:
    """The selected tests' demands on ``topology``'s leasable GPUs. ``budget_gib``: the run's budget
    for a test that declares none (None: whole GPUs); ``measured``: an undeclared test's budget is
    its last measured peak's (``lease_policy.measured_budget``), whole GPUs until it has one."""

    def __init__(self, topology: Topology, reqs_key, budget_gib: float | None, measured: bool = False):
        self.topology, self.reqs_key = topology, reqs_key
        self.budget_gib, self.measured = budget_gib, measured
        self.budgets: dict[str, float | None] = {}  # by test: its own (``lease_memory``)
        self.figures: dict[str, dict] = {}  # by test: what earlier runs measured (``lease_figures``)
        self._placers: dict = {}

    @classmethod
    def of_run(cls, run, reqs_key) -> Demands:
        """The demands as the run's settings say (``--gputopo-lease-memory``), on its machine."""
        settings = run.settings
        return cls(run.topology, reqs_key, settings.lease_memory_gib, settings.lease_memory_measured)

    def read(self, config: pytest.Config, items: list) -> None:
        """Each test's own budget, checked (a usage error names a bad one), and the kept figures."""
        self.budgets = read_budgets(items)
        self.figures = read_cache(config)

    @functools.cached_property
    def allowed(self) -> tuple[Topology, list[str]]:
        return leasable(self.topology)

    @functools.cached_property
    def uuids(self) -> list[str]:
        """The UUIDs of the GPUs a lease may hold (``leasable`` keeps only GPUs that have one)."""
        return [str(gpu.uuid) for gpu in self.allowed[0].gpus]

    @functools.cached_property
    def memory_gib(self) -> dict[int, float | None]:
        """Each leasable GPU's memory in GiB, None where unknown (such a GPU is never shared)."""
        return {
            i: None if gpu.memory_total_bytes is None else gpu.memory_total_bytes / 2**30
            for i, gpu in enumerate(self.allowed[0].gpus)
        }

    def placer(self, requirements: tuple) -> placement.Placer | None:
        """The placer of a set of requirements (one per distinct set), or None: they ask for no GPU."""
        if requirements not in self._placers:
            allowed, left = self.allowed
            k = placement.gpus_needed(requirements, self.topology)
            placer = placement.Placer(allowed, requirements, k) if k else None
            if placer is not None and placer.never and left:
                placer.never += f"; not leased: {', '.join(left)}"
            self._placers[requirements] = placer
        return self._placers[requirements]

    def placer_of(self, item: pytest.Item) -> tuple[placement.Placer | None, tuple]:
        requirements = tuple(r for r, _ in item.stash.get(self.reqs_key, ()))
        return (self.placer(requirements) if requirements else None), requirements

    def budget_of(self, item: pytest.Item) -> float | None:
        """``item``'s memory per GPU: its own (``lease_memory``), else its last peak's (measured),
        else the run's; None: whole GPUs."""
        if item.nodeid in self.budgets:
            return self.budgets[item.nodeid]
        if self.measured:
            peak = self.figures.get(item.nodeid, {}).get("peak_gib")
            return None if peak is None else round(lease_policy.measured_budget(peak), 2)
        return self.budget_gib

    def declared(self, item: pytest.Item) -> bool:
        """Whether ``item``'s budget is one the user set (its mark, the run's number), not one taken
        from its last peak: only a declared budget fails a test that exceeds it under strict."""
        return item.nodeid in self.budgets or not self.measured

    def seconds_of(self, item: pytest.Item) -> float:
        """How long ``item`` held its lease in the last run that measured it (else ``DEFAULT_SECONDS``)."""
        return self.figures.get(item.nodeid, {}).get("seconds") or DEFAULT_SECONDS

    def said(self, item: pytest.Item) -> str:
        """Where ``item``'s budget comes from, as the user set it."""
        budget = self.budget_of(item)
        if item.nodeid in self.budgets:
            return f"lease_memory({budget:g})"
        return (
            f"its last measured peak with a margin, {budget:g} GiB"
            if self.measured
            else f"--gputopo-lease-memory {budget:g}"
        )

    def too_large(self, item: pytest.Item, placer: placement.Placer) -> str | None:
        """Why ``item``'s budget fits no set that meets its markers, with the figures, or None (a GPU
        whose memory is unknown holds it: it takes that GPU whole)."""
        budget = self.budget_of(item)
        if budget is None:
            return None
        memory, reserve = self.memory_gib, lease_policy.CONTEXT_RESERVE_GIB
        if lease_policy.could_hold(budget, placer.meeting, memory, reserve):
            return None
        sizes = sorted({f"{m:.1f} GiB" for m in memory.values() if m is not None})
        return (
            f"{self.said(item)}: each GPU it holds needs {budget:g} GiB and a CUDA context's "
            f"{reserve:g} GiB, {budget + reserve:g} GiB; the GPUs here have {', '.join(sizes)}"
        )

    def by_cost(self, items: list) -> None:
        """The leased tests in ``items`` reordered in place, the costliest first (LPT: GPUs times its
        last duration, ``DEFAULT_SECONDS`` until measured; the tests holding most GPU-seconds are handed
        out first and the short ones fill the gaps at the end), each in a place a leased test held: the
        other tests (health-check items first) keep theirs. Equal costs keep their order."""
        sizes = [placement.lease_size(r for r, _ in item.stash.get(self.reqs_key, ())) for item in items]
        slots = [i for i, size in enumerate(sizes) if size]
        ordered = sorted(slots, key=lambda i: -sizes[i] * self.seconds_of(items[i]))
        moved = [items[i] for i in ordered]
        for slot, item in zip(slots, moved, strict=True):
            items[slot] = item
