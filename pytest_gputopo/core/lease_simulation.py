"""What leases would do with a suite on a machine, simulated with the policy itself (``lease_policy``):
pure, no process, lock or clock. Each test comes when a worker is free (xdist's ``load``: the run's
order, ``workers`` at a time), looks at the leases with the tests waiting before it, and takes a set
or reserves one, as ``Leases.take`` does; a test ends ``seconds`` after it took its GPUs.

For the plan of a leased run on a named machine and for the policy's own benchmark: its timeline,
its makespan against the lower bound, and the two counts that must stay 0 -- moments where the budgets
on a GPU exceed its memory, and exclusive tests sharing a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .lease_policy import Holding, Look, Seen, Waiter, could_hold, decide
from .placement import Placer


@dataclass(frozen=True)
class Job:
    """A leased test to place."""

    name: str
    placer: Placer  # where it may run (its k GPUs, its markers)
    budget_gib: float | None  # per GPU; None: whole GPUs
    seconds: float


@dataclass(frozen=True)
class Ran:
    name: str
    gpus: tuple[int, ...]
    start: float
    end: float


Running = tuple[float, Ran, float | None]  # (when it ends, the test as it runs, its budget)


@dataclass(frozen=True)
class Timeline:
    ran: tuple[Ran, ...]
    never: tuple[str, ...]  # tests no set of the machine could ever hold
    overcommitted: int  # moments where the budgets on a GPU exceeded its memory
    shared_exclusive: int  # moments where an exclusive test shared a GPU

    @property
    def makespan(self) -> float:
        return max((r.end for r in self.ran), default=0.0)


def lower_bound(
    tests: Sequence[Job], memory_gib: Mapping[int, float | None], reserve_gib: float, workers: int | None = None
) -> float:
    """No packing ends before the longest test, nor before the machine's memory-time is used up (each
    test takes its budget and a context's reserve on each of its GPUs, an exclusive one the GPU's
    whole memory, for its time; a GPU of unknown memory counts as the smallest known), nor before
    ``workers`` running one test at a time have run them all."""
    if not tests:
        return 0.0
    sizes = [m for m in memory_gib.values() if m is not None]
    whole = min(sizes) if sizes else 1.0
    total = sum(m if m is not None else whole for m in memory_gib.values())
    used = sum(t.placer.k * t.seconds * (whole if t.budget_gib is None else t.budget_gib + reserve_gib) for t in tests)
    by_workers = sum(t.seconds for t in tests) / workers if workers else 0.0
    return max([used / total, by_workers, *(t.seconds for t in tests)])


def simulate(
    tests: Sequence[Job], memory_gib: Mapping[int, float | None], workers: int, reserve_gib: float = 0.0
) -> Timeline:
    """The suite run on leases by ``workers`` workers, in its order."""
    never = tuple(t.name for t in tests if not could_hold(t.budget_gib, t.placer.meeting, memory_gib, reserve_gib))
    queue = [t for t in tests if t.name not in never]
    now, arrived = 0.0, 0
    running: list[Running] = []
    waiting: list[tuple[int, Job]] = []  # (its order, the test)
    ran: list[Ran] = []
    overcommitted = shared = 0
    while queue or waiting:
        while queue and len(waiting) + len(running) < workers:
            waiting.append((arrived, queue.pop(0)))
            arrived += 1
        held = _held(running)
        ahead: list[Waiter] = []
        for order, test in list(waiting):
            look = Look(now, held, memory_gib, tuple(ahead), reserve_gib)
            decision = decide(test.placer, test.budget_gib, look, Seen(None, now, 0.0), 0.0)
            if decision.take is None:
                ahead.append(Waiter((0.0, order, 0), decision.reserve, now))
                continue
            started = Ran(test.name, decision.take, now, now + test.seconds)
            running.append((started.end, started, test.budget_gib))
            waiting.remove((order, test))
            held = _held(running)
            overcommitted += _overcommitted(held, memory_gib, reserve_gib)
            shared += any(len(hs) > 1 and any(h.budget_gib is None for h in hs) for hs in held.values())
        if not running:  # (cannot be: a test that could ever run takes an idle machine)
            raise AssertionError(f"no test of {[t.name for _, t in waiting]} takes an idle machine")
        running.sort(key=lambda r: r[0])
        now = running[0][0]
        while running and running[0][0] == now:
            ran.append(running.pop(0)[1])
    ran += [r for _, r, _ in running]
    return Timeline(tuple(sorted(ran, key=lambda r: r.start)), never, overcommitted, shared)


def _held(running: list[Running]) -> dict[int, list[Holding]]:
    held: dict[int, list[Holding]] = {}
    for _, r, budget in running:
        for g in r.gpus:
            held.setdefault(g, []).append(Holding(r.start, budget))
    return held


def _overcommitted(
    held: Mapping[int, list[Holding]], memory_gib: Mapping[int, float | None], reserve_gib: float
) -> int:
    over = 0
    for g, holdings in held.items():
        budgets = [h.budget_gib for h in holdings if h.budget_gib is not None]
        memory = memory_gib.get(g)
        if memory is None:  # never shared: two holders of any kind are one too many
            over += len(holdings) > 1
        elif budgets and sum(budgets) + reserve_gib * len(budgets) > memory:
            over += 1
    return over
