"""Taking a lease: the host's lock folder looked at (locks, shares, the tickets of the tests waiting),
the policy asked (``core.lease_policy``), and its decision carried out -- a set locked whole or as
shares, or a ticket that reserves the set while the test waits. One ``Taker`` per pytest process
that runs leased tests (each xdist worker); ``leases.Leases`` asks it and owns the processes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

import pytest

from ..core import lease_policy, placement
from ..core.model import Gpu, Topology
from ..runtime import gpu_locks, gpu_shares
from .lease_demands import Demands
from .lease_memory import fits_beside

POLL_S = 0.05
# A run's first round under xdist: each worker's first leased test waits up to this long, its ticket
# in, for the other workers' first tests to reach the lock folder (xdist starts them together, after
# every worker collected), so that they take their GPUs in the run's order (largest first).
SETTLE_S = 0.3
# workerinput: the controller's time.time() when leases began, and an id of the run for its tickets
RUN = "gputopo_lease_run"


class Lease(NamedTuple):
    gpus: tuple[Gpu, ...]  # as the test sees them: index i is cuda:<i>
    view: Topology  # the machine as the test sees it (the leased GPUs, renumbered)
    locks: tuple  # a ``gpu_locks.GpuLock`` per GPU, or a ``gpu_shares.SharedLock`` where it has a budget
    indices: tuple[int, ...]  # the GPUs among those a lease may hold (``leasable``)
    budget_gib: float | None = None  # per GPU (--gputopo-lease-memory); None: the whole GPUs

    @property
    def fds(self) -> tuple[int, ...]:
        """Every descriptor that holds it (for a process that should hold it too)."""
        return tuple(fd for lock in self.locks for fd in lock.fds)

    def release(self, handed_on: bool = False) -> None:
        """Give the GPUs back (``handed_on``: to a process of the test's that may not have ended yet,
        which holds them until it has; the locks still name the test)."""
        for lock in self.locks:
            lock.release(handed_on)

    def shrunk(self, budget_gib: float | None) -> Lease:
        """The lease with its shares' budget lowered to ``budget_gib`` (said at the next ``say``): a
        kept lease's next test may ask less, never more (``Leases.keeps``), and less always fits."""
        if budget_gib == self.budget_gib:
            return self
        for lock in self.locks:
            lock.budget_gib = budget_gib
        return self._replace(budget_gib=budget_gib)

    def say(self, holder: gpu_locks.Holder) -> None:
        """The locks name ``holder``: the test the lease is kept for, since it began (waiters reserve
        the GPUs whose holders began longest ago, ``Placer.reserve``)."""
        for lock in self.locks:
            lock.say(holder)


def within(budget_gib: float | None, leased_gib: float | None) -> bool:
    """Whether a test asking ``budget_gib`` per GPU may run on a lease of ``leased_gib``: whole GPUs for
    whole GPUs, a budget within a share's (its share then shrinks to it: ``Lease.shrunk``)."""
    if budget_gib is None or leased_gib is None:
        return budget_gib is None and leased_gib is None
    return budget_gib <= leased_gib


class Taker:
    """Takes leases for the tests of this process. ``workerinput``: xdist's, where this is a worker
    (the run's id and start: its tests wait in the run's order); ``prestart(item)``: start the test's
    process ahead (it is next in line for its set); ``reap()``: end this run's processes that were
    told to end (one late to end may hold the GPUs waited for)."""

    def __init__(
        self,
        folder: str,
        demands: Demands,
        timeout_s: float,
        workerinput: dict,
        prestart: Callable[[pytest.Item], None],
        reap: Callable[[], None],
    ):
        self.folder, self.demands, self.timeout_s = folder, demands, timeout_s
        self.prestart, self.reap = prestart, reap
        # Under xdist, (the run's start, its id): the workers' tests wait in the run's order (``take``)
        self.xdist_run: tuple[float, str] | None = None
        self.workers = workerinput.get("workercount", 1)
        if self.workers > 1 and RUN in workerinput:
            self.xdist_run = (float(workerinput[RUN][0]), str(workerinput[RUN][1]))
        # Until this worker's first test comes: if leased, it is in the run's first round, which xdist
        # starts on every worker at once (``take``).
        self.first_round = self.xdist_run is not None
        self._order: dict[str, int] | None = None

    def may_keep(self, lease: Lease, nextitem: pytest.Item, placer: placement.Placer) -> bool:
        """Whether the policy lets ``nextitem`` keep ``lease`` (``lease_policy.may_keep``), judged from
        the place it would wait in now."""
        look = self.look(self.waiter(nextitem, time.time()))
        return lease_policy.may_keep(placer, self.demands.budget_of(nextitem), lease.indices, look)

    def take(self, item: pytest.Item, placer: placement.Placer) -> Lease | None:
        """The best free set that meets the item's markers, locked; waits for one (None past the
        timeout). All or nothing: a set is taken whole or not at all, never held in part while
        waiting (no deadlock). In turn: a test that waits reserves the set it waits for
        (``gpu_locks.Ticket``), and a test that came later takes none of those GPUs, so a large set
        is not starved by small tests taking its GPUs one by one; the GPUs no waiter reserved stay
        free for the others; a set that frees goes to them first (``GRACE_S``). Under xdist, a test
        goes before the run's waiting tests that come after it in the run's order, largest first
        (``gpu_locks.turn_in``), and a worker's first test, where it is leased, waits from the run's
        start: it reserves its set at once and waits (``settle``), so that the run's first round is
        served largest first, not in the order the workers reached the folder."""
        deadline = time.monotonic() + self.timeout_s
        ticket, seen, budget = None, None, self.demands.budget_of(item)
        try:
            if self.first_round and self.xdist_run is not None:
                ticket = self.ticket(item, self.xdist_run[0])
                first = lease_policy.reservation(placer, budget, self.look(ticket))  # whole or not: known
                ticket.reserve((self.demands.uuids[i] for i in first), time.time(), budget)  # after the others' come
                self.settle(self.xdist_run)
            while True:
                look = self.look(ticket)
                decision = lease_policy.decide(placer, budget, look, seen, time.monotonic())
                seen = decision.seen
                if decision.take is not None:
                    lease = self.lock(item, decision.take, budget)
                    if lease is not None:
                        return lease
                if time.monotonic() > deadline:
                    return None
                self.reap()  # one of this run's processes late to end is ended: it may hold these GPUs
                if ticket is None:
                    ticket = self.ticket(item, time.time())
                self.reserve(item, ticket, tuple(decision.reserve), placer.k, look.now, budget)
                time.sleep(POLL_S)
        finally:
            if ticket is not None:
                ticket.close()

    def look(self, ticket: gpu_locks.Ticket | gpu_locks.Waiter | None) -> lease_policy.Look:
        """The host's leases as a test waiting with ``ticket`` sees them now: who holds each GPU
        (since when), and what the tests waiting before it reserved."""
        now, uuids = time.time(), self.demands.uuids
        index = {uuid: i for i, uuid in enumerate(uuids)}
        ahead = [
            lease_policy.Waiter(w.place(), {index[u]: w.budget_gib for u in w.reserved if u in index}, w.looked)
            for w in gpu_locks.waiting_before(self.folder, ticket)
        ]
        held: dict[int, list[lease_policy.Holding]] = {}
        shares = gpu_shares.every_share(self.folder)
        for i, uuid in enumerate(uuids):
            found = gpu_locks.holder(self.folder, uuid)
            if found is not None:  # one whose holder has not said yet: since now
                held[i] = [lease_policy.Holding(found.since if isinstance(found, gpu_locks.Holder) else now)]
            else:
                held[i] = [lease_policy.Holding(s.holder.since, s.budget_gib) for s in shares.get(uuid, [])]
        return lease_policy.Look(now, held, self.demands.memory_gib, ahead, lease_policy.CONTEXT_RESERVE_GIB)

    def lock(self, item: pytest.Item, chosen: tuple[int, ...], budget: float | None) -> Lease | None:
        """``chosen`` locked whole, or None: another process was quicker (all or nothing: a set is
        never held in part while waiting, so no deadlock). With a budget, a share of each GPU, taken
        where it still fits beside the shares there (``lease_policy.fits``, under the GPU's mutex)."""
        holder = gpu_locks.Holder(os.getpid(), item.nodeid, time.time())  # since it took them
        locks: list[gpu_locks.GpuLock | gpu_shares.SharedLock] = []
        for i in chosen:
            lock = self.lock_one(i, holder, budget)
            if lock is None:
                for other in locks:
                    other.release()
                return None
            locks.append(lock)
        view = self.demands.allowed[0].restrict(chosen)
        return Lease(view.gpus, view, tuple(locks), tuple(chosen), budget)

    def lock_one(
        self, i: int, holder: gpu_locks.Holder, budget: float | None
    ) -> gpu_locks.GpuLock | gpu_shares.SharedLock | None:
        """GPU ``i`` locked whole, or a share of it with ``budget``; None where it is not free."""
        uuid = self.demands.uuids[i]
        if budget is None:
            whole = gpu_locks.GpuLock(self.folder, uuid)
            return whole if whole.take(holder) else None
        memory = self.demands.memory_gib[i]
        share = gpu_shares.SharedLock(self.folder, uuid, budget)
        return share if share.take(holder, lambda budgets: fits_beside(budget, budgets, memory)) else None

    def reserve(
        self,
        item: pytest.Item,
        ticket: gpu_locks.Ticket,
        gpus: tuple[int, ...],
        k: int,
        looked: float,
        budget: float | None = None,
    ) -> None:
        """Reserve ``gpus`` for ``item`` (chosen from the locks as they were at ``looked``); where
        they are a whole set (no earlier waiter holds back any of them: the test is next in line for
        them) its process is started ahead, while they are waited for. Not before: a test further
        back would start its process among those of the tests that run first, and hold it, idle,
        for rounds."""
        ticket.reserve((self.demands.uuids[i] for i in gpus), looked, budget)
        if len(gpus) == k:
            self.prestart(item)

    def settle(self, run: tuple[float, str]) -> None:
        """Wait for the other workers' first tests to reach the folder: until each worker has a
        ticket of the run's first round in (they wait from the run's start), at most ``SETTLE_S``
        (a worker whose first test is not leased writes none)."""
        until = time.monotonic() + SETTLE_S
        while time.monotonic() < until:
            first = [w for _, w in gpu_locks.waiters(self.folder) if w.run == run[1] and w.since == run[0]]
            if len(first) >= self.workers:
                return
            time.sleep(SETTLE_S / 10)

    def ticket(self, item: pytest.Item, since: float) -> gpu_locks.Ticket:
        """``item``'s place in the queue, waiting from ``since`` (``waiter``)."""
        me = self.waiter(item, since)
        return gpu_locks.Ticket(self.folder, me.pid, me.test, me.since, me.turn, me.run)

    def waiter(self, item: pytest.Item, since: float) -> gpu_locks.Waiter:
        """Where ``item`` waits from ``since``: under xdist, its turn in the run."""
        if self.xdist_run is None:
            return gpu_locks.Waiter(os.getpid(), item.nodeid, since, ())
        if self._order is None:
            self._order = {other.nodeid: i for i, other in enumerate(item.session.items)}
        run = self.xdist_run[1]
        turn = gpu_locks.turn_in(self.folder, run, since, self._order[item.nodeid])
        return gpu_locks.Waiter(os.getpid(), item.nodeid, since, (), turn, run)

    def who_holds_what(self, placer: placement.Placer, requirements: tuple) -> str:
        uuids, every_share = self.demands.uuids, gpu_shares.every_share(self.folder)
        held_by = []
        for i, uuid in enumerate(uuids):
            found = gpu_locks.holder(self.folder, uuid)
            if found is not None:
                who = str(found) if found is not True else "a process that has not said who it is"
                held_by.append(f"GPU{i} ({uuid}) by {who}")
            shares = every_share.get(uuid, []) if found is None else []
            if shares:
                who = "; ".join(f"{s.holder} with {s.budget_gib:g} GiB" for s in shares)
                held_by.append(f"GPU{i} ({uuid}) shared by {who}")
        index = {uuid: i for i, uuid in enumerate(uuids)}
        now = time.time()
        waiting = [
            f"{gpu_locks.Holder(w.pid, w.test, w.since)} for "
            f"{', '.join(f'GPU{index[u]}' for u in w.reserved if u in index) or 'none yet'}"
            + (f" with {w.budget_gib:g} GiB each" if w.budget_gib is not None and w.reserved else "")
            + (
                f" (stopped looking {now - w.looked:.0f} s ago: its reservation holds nobody back)"
                if gpu_locks.stopped_looking(w, now)
                else ""
            )
            for _, w in gpu_locks.waiters(self.folder)
        ]
        asked = ", ".join(map(str, requirements))
        return (
            f"no free set of {placer.k} GPUs meeting {asked} within {self.timeout_s:g} s "
            f"(--gputopo-lease-timeout); held: {'; '.join(held_by) or 'none now'}"
            + (f"; reserved by tests waiting: {'; '.join(waiting)}" if waiting else "")
        )
