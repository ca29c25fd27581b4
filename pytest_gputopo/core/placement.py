"""Where a test runs under GPU leases: the best-linked set of GPUs that meets its requirements.

Pure. A candidate set is judged as the test will see it -- the machine restricted to the set and
renumbered ``cuda:0..k-1`` (``Topology.restrict``) -- by each requirement's own ``evaluate``, the
rule its marker uses: never by a second copy. Requirements judged on measurements (``min_*_bw``,
``requires_nccl_transport``) only count GPUs here; the test judges them on the GPUs it holds.

``Placer(topology, requirements, k)`` judges every candidate once: ``never`` says why no set of the
GPUs given could ever meet them (the test skips with it); ``choose(free)`` is the best meeting set
among the GPUs free now, or None (the test waits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import combinations
from math import comb, inf

from .fact_requirements import FactRequirement
from .gpu_requirements import VersionRequirement
from .model import Topology
from .ranks_requirement import RanksRequirement
from .requirements import Requirement
from .units import counted

# Above this many k-sets every one is not judged: sets grown greedily from each GPU are (and the
# first k GPUs, so that a set the markers would meet in place is never missed).
MAX_CANDIDATES = 5000


def gpus_needed(requirements: Iterable[Requirement], topology: Topology) -> int:
    """How many GPUs a test holds: the most any requirement names (``n``, or the highest index
    listed + 1; ``ranks(n)``: n where its ranks run on GPUs); every GPU of ``topology`` where one
    names none (it judges every visible GPU, so it sees them all, as without leases); 0 where none is
    about GPUs (``requires_versions``, ranks on the CPUs)."""
    need = 0
    for req in requirements:
        if isinstance(req, VersionRequirement):
            continue
        if isinstance(req, RanksRequirement):  # one GPU per rank, or none
            need = max(need, req.n if req.on_gpus(topology) else 0)
            continue
        gpus = req.gpus
        need = max(need, len(topology.gpus) if gpus is None else max(gpus) + 1 if isinstance(gpus, tuple) else gpus)
    return need


def lease_size(requirements: Iterable[Requirement]) -> float:
    """How many GPUs a test will hold, for ordering leased tests largest first (at collection, before
    the machine is known): ``gpus_needed``'s rules with "every visible GPU" counted as more than any
    count, and ranks on GPUs unless their backend is gloo. Never a verdict: only an order."""
    need = 0.0
    for req in requirements:
        if isinstance(req, VersionRequirement):
            continue
        if isinstance(req, RanksRequirement):
            need = max(need, 0 if (req.backend or "").lower() == "gloo" else req.n)
            continue
        gpus = req.gpus
        need = max(need, float("inf") if gpus is None else max(gpus) + 1 if isinstance(gpus, tuple) else gpus)
    return need


def _pair_score(topology: Topology, a: int, b: int) -> tuple[int, int]:
    label = topology.link(a, b).label
    return (0, 0) if label is None else (int(label.cls), label.nvlinks)  # unknown: the worst


def _set_score(topology: Topology, gpus: Sequence[int]) -> tuple[tuple[int, int], int]:
    """Best-linked first: the worst pair's link, then the sum of every pair's (NVLinks counted)."""
    scores = [_pair_score(topology, a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    if not scores:
        return ((99, 0), 0)
    return (min(scores), sum(c * 100 + n for c, n in scores))


class Placer:
    """The sets of ``k`` GPUs of ``topology`` (the GPUs a lease may use, in its numbering) that meet
    ``requirements``, judged once, best-linked first."""

    def __init__(self, topology: Topology, requirements: Sequence[Requirement], k: int):
        self.topology, self.k = topology, k
        self.requirements = tuple(r for r in requirements if not isinstance(r, (FactRequirement, VersionRequirement)))
        n = len(topology.gpus)
        self.meeting: list[tuple[int, ...]] = []
        self.never: str | None = None
        self.unknown = False  # never, only for facts no source reported
        if k > n:
            asked = ", ".join(map(str, self.requirements))  # the markers the test skips for, first
            self.never = f"{asked + ': ' if asked else ''}needs {counted(k, 'GPU')}, {n} may be leased here"
            return
        self._scores = {s: _set_score(topology, s) for s in self._candidates(n)}
        self.meeting = sorted((s for s in self._scores if self._meets(s)), key=self._scores.__getitem__, reverse=True)
        if not self.meeting:
            self._why_never(n)

    def _candidates(self, n: int) -> list[tuple[int, ...]]:
        if comb(n, self.k) <= MAX_CANDIDATES:
            return list(combinations(range(n), self.k))
        grown = {tuple(range(self.k))}
        for seed in range(n):
            chosen = [seed]
            while len(chosen) < self.k:
                rest = [g for g in range(n) if g not in chosen]
                chosen.append(max(rest, key=lambda g: (min(_pair_score(self.topology, g, c) for c in chosen), -g)))
            grown.add(tuple(sorted(chosen)))
        return list(grown)

    def _meets(self, gpus: tuple[int, ...]) -> bool:
        view = self.topology.restrict(gpus)
        return all(r.evaluate(view).ok for r in self.requirements)

    def _why_never(self, n: int) -> None:
        """Each unmet requirement as its marker says it on the GPUs in place (``cuda:0..k-1``, named
        as the machine names them), and that no other set does better."""
        verdicts = [r.evaluate(self.topology) for r in self.requirements]
        unmet = [v for v in verdicts if not v.ok]
        others = f"no other {counted(self.k, 'GPU')} of the {n} here meet it either"
        if unmet:
            self.never = "; ".join(v.reason for v in unmet) + f" ({others})"
            self.unknown = all(v.unknown for v in unmet)
        else:  # met in place one by one, never all together on one set
            self.never = f"{', '.join(map(str, self.requirements))}: {others}"

    def choose(
        self, free: Iterable[int], prefer: Callable[[tuple[int, ...]], float] | None = None
    ) -> tuple[int, ...] | None:
        """The best meeting set among the ``free`` GPUs; between equals, the one ``prefer`` ranks
        highest (where given), then the one that leaves the best links to the free GPUs it does not
        take (another test may need them); None when no meeting set is free now."""
        free = set(free)
        fitting = [gpus for gpus in self.meeting if free.issuperset(gpus)]
        if not fitting:
            return None
        top = self._scores[fitting[0]]  # best-linked first
        equals = [gpus for gpus in fitting if self._scores[gpus] == top]
        return max(
            equals,
            key=lambda gpus: (
                prefer(gpus) if prefer is not None else 0.0,
                -self._spoiled(gpus, free - set(gpus)),
                [-g for g in gpus],
            ),
        )

    def accepts(self, held: Sequence[int], free: Iterable[int]) -> bool:
        """Whether a test may run on ``held``, a set it would keep from the test before: it meets the
        requirements and no better-linked meeting set is among ``held`` and the ``free`` GPUs (the
        set ``choose`` would give it, or one as good)."""
        held = tuple(sorted(held))
        if held not in self._scores or held not in self.meeting:
            return False
        best = self.choose(set(free) | set(held))
        return best is not None and self._scores[best] == self._scores[held]

    def reserve(self, open_: Iterable[int], held: Mapping[int, float]) -> tuple[int, ...]:
        """The GPUs a waiting test reserves: of its meeting sets, the one with the most GPUs no earlier
        waiter reserved (``open_``), then the one free soonest -- whose GPUs held now (``held``: when
        each one's holder took it) were all taken longest ago, the first to end where tests take
        alike -- then with the most free now, best-linked between those; of that set, the GPUs in
        ``open_`` (an earlier waiter keeps the others and the test takes them after it). Reserving
        part of a set is what keeps a large test from being starved: without it, an eight-GPU test
        behind a waiting four-GPU test would reserve nothing, and one-GPU tests arriving later would
        take its GPUs one by one for as long as they come. Reserving GPUs that free last would let
        later waiters take those that free first (bench_leases: two-GPU tests reserved the lowest
        pairs, still held, and one-GPU tests took the pair that freed)."""
        open_ = set(open_)
        free = open_.difference(held)
        if not self.meeting:
            return ()
        best = max(
            self.meeting,
            key=lambda gpus: (
                len(open_.intersection(gpus)),
                -max((held[g] for g in gpus if g in held), default=-inf),
                len(free.intersection(gpus)),
                self._scores[gpus],
                [-g for g in gpus],
            ),
        )
        return tuple(g for g in best if g in open_)

    def _spoiled(self, gpus: tuple[int, ...], rest: set[int]) -> int:
        """How good the links are that taking ``gpus`` denies the GPUs ``rest`` left free."""
        return sum(max((_pair_score(self.topology, g, r) for r in rest), default=(0, 0))[0] for g in gpus)
