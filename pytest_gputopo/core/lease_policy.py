"""Which GPUs a waiting leased test takes now, and which it reserves while it waits: the lease
scheduling policy, a pure function of one look at the host's leases (``Look``). No process, lock or
clock here: ``plugin/leases.py`` looks (the locks, the tickets, the time), asks ``decide`` and
carries out its ``Decision``.

The rules, each a function below:

- ``in_line_before``: who is served first -- the test that has waited longest; under xdist a run's
  tests in the run's order (``turn``).
- ``ahead``: a waiter ahead holds this test back only while it looks (``STOPPED_S``): a stopped one
  (Ctrl-Z, a frozen job) reserves nothing.
- ``room`` and ``fits``: a GPU takes an exclusive test when nobody holds it; a test with a memory
  budget where no exclusive test holds it and its memory, less every holder's budget and a CUDA
  context's reserve per process, holds the budget and its own reserve. A GPU whose memory is unknown
  is never shared: a test with a budget takes it whole.
- ``open_to``: the GPUs the waiters ahead left to it: an exclusive reservation keeps a GPU whole,
  a budget keeps its share of the memory.
- ``may_keep``: a set kept from one test for the next, as long as it is open to it and no better set is.
- ``decide``: the best-linked set (``placement.Placer``) among the GPUs open to it that fit now (with
  a budget, between sets linked alike the one with the most room: ``_spread``); it
  is taken once every waiter ahead has looked since the set came free, or after ``GRACE_S`` (a set
  that frees goes to those ahead first); else the test reserves the set it waits for
  (``Placer.reserve``), so that a large test is not starved by small ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .placement import Placer

STOPPED_S = 10.0  # a waiter that has not looked at the locks for this long reserves nothing
GRACE_S = 0.2  # a set that came free goes to the waiters ahead first, unless they look no more for this long
# What a process's CUDA context takes on each GPU it uses, beside its tensors: about 700 MiB and more
# "depending on the CUDA version, used device etc." (PyTorch's forum: discuss.pytorch.org/t/81330;
# 723 MiB for one float, /t/73021); less with CUDA's lazy loading (CUDA_MODULE_LOADING=LAZY, the
# default since CUDA 12.2). A memory budget is counted with this beside it.
CONTEXT_RESERVE_GIB = 1.0


@dataclass(frozen=True)
class Holding:
    """One lease on a GPU: since when (``time.time()``), and its memory budget in GiB (None: the
    whole GPU, exclusive)."""

    since: float
    budget_gib: float | None = None


@dataclass(frozen=True)
class Waiter:
    """A test waiting for GPUs, as its ticket says: its place in line, what it reserved (GPU ->
    budget in GiB, None: the whole GPU) and when it last looked."""

    place: tuple[float, int, int]  # (waits from, its place in its run's order or -1, pid): ``in_line``
    reserved: Mapping[int, float | None]
    looked: float


@dataclass(frozen=True)
class Look:
    """What a waiting test saw at one look at the host's leases (GPUs numbered as the lease's)."""

    now: float  # time.time()
    held: Mapping[int, Sequence[Holding]]  # the leases on each GPU held now
    memory_gib: Mapping[int, float | None]  # each GPU's memory (None: unknown)
    ahead: Sequence[Waiter]  # the tests waiting before this one (``in_line_before``)
    reserve_gib: float = 0.0  # a CUDA context's memory, per process on a GPU


@dataclass(frozen=True)
class Seen:
    """The set a test chose at a look, and when it first chose that set: on the wall clock (the
    waiters ahead's looks are compared with it) and on its own monotonic clock (the grace)."""

    gpus: tuple[int, ...] | None
    at: float
    since: float


@dataclass(frozen=True)
class Decision:
    take: tuple[int, ...] | None  # the set to lock now, or None: wait
    reserve: Mapping[int, float | None]  # what to reserve while it waits (GPU -> budget, None: whole)
    seen: Seen
    whole: bool  # the reservation is a whole set: the test is next in line for it


def in_line(turn: tuple[float, int] | None, since: float, pid: int) -> tuple[float, int, int]:
    """A waiter's place: when it waits from (its run's turn under xdist), then its place in the run's
    order, then its pid; the lower is served first."""
    return (*(turn or (since, -1)), pid)


def in_line_before(one: tuple[float, int, int], other: tuple[float, int, int]) -> bool:
    return one < other


def ahead(waiters: Sequence[Waiter], now: float) -> list[Waiter]:
    """The waiters that hold this test back: those still looking (``STOPPED_S``)."""
    return [w for w in waiters if now - w.looked <= STOPPED_S]


def room(gpu: int, look: Look, reserved: Sequence[float | None] = ()) -> float | None:
    """The memory in GiB a new process could still use on ``gpu``: its memory less every holder's
    and waiter-ahead's budget (``reserved``) and a context's reserve for each; 0 where an exclusive
    lease holds or keeps it; None where its memory is unknown."""
    budgets = [h.budget_gib for h in look.held.get(gpu, ())] + list(reserved)
    if any(b is None for b in budgets):
        return 0.0
    memory = look.memory_gib.get(gpu)
    if memory is None:
        return None
    return memory - sum(b for b in budgets if b is not None) - len(budgets) * look.reserve_gib


def fits(budget_gib: float | None, gpu: int, look: Look, reserved: Sequence[float | None] = ()) -> bool:
    """Whether a test asking ``budget_gib`` on ``gpu`` (None: the whole GPU) could run there beside
    what holds it and what the waiters ahead reserved (``reserved``)."""
    if budget_gib is None or look.memory_gib.get(gpu) is None:  # (unknown memory: held whole, never shared)
        return not look.held.get(gpu) and not reserved
    left = room(gpu, look, reserved)
    return left is not None and left >= budget_gib + look.reserve_gib


def could_hold(
    budget_gib: float | None,
    sets: Sequence[tuple[int, ...]],
    memory_gib: Mapping[int, float | None],
    reserve_gib: float,
) -> bool:
    """Whether some set of ``sets`` holds ``budget_gib`` and a context's reserve on every GPU, all else
    gone (a GPU whose memory is unknown does: a budget takes it whole); a test for which none does never
    runs here."""
    if budget_gib is None:
        return bool(sets)
    need = budget_gib + reserve_gib
    return any(all(_holds(memory_gib.get(g), need) for g in gpus) for gpus in sets)


def _holds(memory: float | None, need: float) -> bool:
    return memory is None or memory >= need


def open_to(budget_gib: float | None, gpus: Sequence[int], look: Look) -> set[int]:
    """The GPUs the waiters ahead leave to a test asking ``budget_gib``: an exclusive reservation
    keeps a GPU whole; budgets keep their share, and the GPU is open while the test's budget fits
    beside them (held leases aside: those end)."""
    waiting = ahead(look.ahead, look.now)
    opened = set()
    for gpu in gpus:
        reserved = [w.reserved[gpu] for w in waiting if gpu in w.reserved]
        if budget_gib is None:
            ok = not reserved
        else:
            unheld = Look(look.now, {}, look.memory_gib, (), look.reserve_gib)
            ok = fits(budget_gib, gpu, unheld, reserved)
        if ok:
            opened.add(gpu)
    return opened


def _spread(budget_gib: float | None, look: Look) -> Callable[[tuple[int, ...]], float] | None:
    """Between sets linked alike, a test with a budget takes the one whose fullest GPU has the most
    room: tests sharing GPUs also share their compute, so they spread before they pile up (an
    exclusive test takes empty GPUs: none to rank)."""
    if budget_gib is None:
        return None
    return lambda gpus: min(room(g, look) or 0.0 for g in gpus)


def may_take(seen: Seen, waiting: Sequence[Waiter], clock_s: float) -> bool:
    """Whether the set seen may be taken: every waiter ahead has looked since it was first seen (each
    had its chance at it), or they were given ``GRACE_S``."""
    return all(w.looked >= seen.at for w in waiting) or clock_s - seen.since >= GRACE_S


def decide(placer: Placer, budget_gib: float | None, look: Look, before: Seen | None, clock_s: float) -> Decision:
    """What a test waiting for a set of ``placer``'s, asking ``budget_gib`` per GPU (None: whole
    GPUs), does at this look: take a set, or wait reserving one. ``before``: what it saw at its last
    look; ``clock_s``: its monotonic clock now."""
    opened = open_to(budget_gib, list(look.memory_gib), look)
    chosen = placer.choose((g for g in opened if fits(budget_gib, g, look)), _spread(budget_gib, look))
    seen = before if before is not None and before.gpus == chosen else Seen(chosen, look.now, clock_s)
    if chosen is not None and may_take(seen, ahead(look.ahead, look.now), clock_s):
        return Decision(chosen, {}, seen, False)
    wanted = _reservation(placer, budget_gib, look, opened)
    return Decision(None, wanted, seen, len(wanted) == placer.k)


def may_keep(placer: Placer, budget_gib: float | None, leased: tuple[int, ...], look: Look) -> bool:
    """Whether the next test (``placer``, ``budget_gib``) may run on the set ``leased`` that the test
    before holds, kept for it: no waiter ahead reserved any of it beyond what the test's budget fits
    beside (``open_to``), and no better-linked set is open to it and fits now (``Placer.accepts``)."""
    opened = open_to(budget_gib, list(look.memory_gib), look)
    if not set(leased) <= opened:
        return False  # a waiting test's turn: the GPUs go back
    return placer.accepts(leased, [g for g in opened if g not in leased and fits(budget_gib, g, look)])


def reservation(placer: Placer, budget_gib: float | None, look: Look) -> dict[int, float | None]:
    """What a test that waits reserves (GPU -> its budget, None: the whole GPU): of the GPUs open to
    it, the part of the set ``Placer.reserve`` picks (held GPUs by when their first lease began: the
    first to end)."""
    return _reservation(placer, budget_gib, look, open_to(budget_gib, list(look.memory_gib), look))


def _reservation(placer: Placer, budget_gib: float | None, look: Look, opened: set[int]) -> dict[int, float | None]:
    held = {g: min(h.since for h in look.held[g]) for g in opened if look.held.get(g) and not fits(budget_gib, g, look)}
    return dict.fromkeys(placer.reserve(opened, held), budget_gib)


# A budget from a measured peak (``--gputopo-lease-memory measured``): the peak and a quarter of it, at
# least half a GiB more: a test's peak varies from run to run (allocator caching, data-dependent shapes).
MEASURED_MARGIN = 1.25
MEASURED_MIN_GIB = 0.5


def measured_budget(peak_gib: float) -> float:
    """The budget of a test from its last measured peak (per GPU, in GiB)."""
    return max(peak_gib * MEASURED_MARGIN, peak_gib + MEASURED_MIN_GIB)


def over_budget(budget_gib: float | None, peak_gib: float | None) -> bool:
    """Whether a measured peak exceeds the test's budget (a whole GPU, or an unknown peak, never does)."""
    return budget_gib is not None and peak_gib is not None and peak_gib > budget_gib
