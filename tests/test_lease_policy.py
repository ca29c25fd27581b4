"""The lease scheduling policy (``core/lease_policy.py``, issue 42 item 3): each rule a table, run
with no process, lock or clock -- one look at the leases in, a decision out. The runtime that carries
it out (``plugin/leases.py``) is tested with real locks and processes in tests/test_leases.py."""

from __future__ import annotations

import pytest

from pytest_gputopo.core import lease_policy as policy, requirements as reqs
from pytest_gputopo.core.gpu_requirements import GpuRequirement
from pytest_gputopo.core.lease_policy import Holding, Look, Seen, Waiter
from pytest_gputopo.core.placement import Placer
from pytest_gputopo.probe.recorded import load_profile

NOW = 1_000_000.0
A100 = 80.0  # GiB: each GPU of the dgx-a100 here
EIGHT = dict.fromkeys(range(8), A100)


def look(held=None, ahead=(), memory=None, reserve=0.0) -> Look:
    return Look(NOW, held or {}, EIGHT if memory is None else memory, tuple(ahead), reserve)


def waiter(reserved, looked=NOW, place=(0.0, -1, 1)) -> Waiter:
    return Waiter(place, reserved, looked)


@pytest.fixture(scope="module")
def dgx():
    return load_profile("dgx-a100").topology


@pytest.mark.parametrize(
    ("one", "other", "first"),
    [
        ((5.0, None, 9), (6.0, None, 1), True),  # waited longest
        ((6.0, None, 1), (5.0, None, 9), False),
        ((5.0, None, 1), (5.0, None, 2), True),  # the same moment: by pid
        ((9.0, (1.0, 3), 1), (2.0, None, 2), True),  # under xdist its run's turn counts, not when it began
        ((9.0, (1.0, 3), 1), (9.0, (1.0, 2), 2), False),  # the same turn: the run's order
    ],
)
def test_who_is_served_first(one, other, first):
    since, turn, pid = one
    since2, turn2, pid2 = other
    assert policy.in_line_before(policy.in_line(turn, since, pid), policy.in_line(turn2, since2, pid2)) is first


@pytest.mark.parametrize(
    ("looked_ago", "holds_back"),
    [(0.0, True), (policy.STOPPED_S, True), (policy.STOPPED_S + 0.01, False), (3600.0, False)],
)
def test_a_waiter_that_stopped_looking_holds_nobody_back(looked_ago, holds_back):
    """Issue 41: a suspended run (Ctrl-Z, a frozen job) kept every GPU it reserved idle."""
    assert (policy.ahead([waiter({0: None}, NOW - looked_ago)], NOW) != []) is holds_back


@pytest.mark.parametrize(
    ("held", "reserved", "memory", "room"),
    [
        ((), (), A100, A100),
        ((Holding(1.0, 10.0),), (), A100, 70.0 - 0.5),  # its budget and one context's reserve
        ((Holding(1.0, 10.0), Holding(2.0, 20.0)), (), A100, 50.0 - 1.0),
        ((Holding(1.0, 10.0),), (20.0,), A100, 50.0 - 1.0),  # a waiter ahead's budget counts as held
        ((Holding(1.0),), (), A100, 0.0),  # an exclusive lease: nothing left
        ((), (None,), A100, 0.0),  # an exclusive reservation ahead: nothing left
        ((), (), None, None),  # memory unknown: unknown
    ],
)
def test_the_room_left_on_a_gpu(held, reserved, memory, room):
    seen = look({0: held}, memory={0: memory}, reserve=0.5)
    assert policy.room(0, seen, reserved) == room


@pytest.mark.parametrize(
    ("budget", "held", "memory", "fits"),
    [
        (None, (), A100, True),  # exclusive: a GPU nobody holds
        (None, (Holding(1.0, 1.0),), A100, False),  # ... not one that a small lease shares
        (None, (), None, True),  # its memory need not be known
        (10.0, (), A100, True),
        (10.0, (Holding(1.0),), A100, False),  # never beside an exclusive lease
        (10.0, (), None, True),  # memory unknown: a budget takes the GPU whole...
        (10.0, (Holding(1.0, 5.0),), None, False),  # ...and never shares it
        (79.5, (), A100, True),  # its budget and its own reserve: exactly the memory
        (79.6, (), A100, False),
        (40.0, (Holding(1.0, 39.0),), A100, True),  # 39 + 0.5 + 40 + 0.5 = 80
        (40.1, (Holding(1.0, 39.0),), A100, False),
    ],
)
def test_what_fits_on_a_gpu(budget, held, memory, fits):
    assert policy.fits(budget, 0, look({0: held}, memory={0: memory}, reserve=0.5)) is fits


def test_the_gpus_the_waiters_ahead_leave_open():
    ahead = [waiter({0: None, 1: 30.0}), waiter({1: 30.0, 2: 70.0}), waiter({3: None}, looked=NOW - 3600)]
    seen = look(ahead=ahead, memory=dict.fromkeys(range(4), A100))
    assert policy.open_to(None, range(4), seen) == {3}  # exclusive: no reservation at all (a stopped one aside)
    assert policy.open_to(10.5, range(4), seen) == {1, 3}  # 80 - 60 on GPU1: room; GPU2 keeps 70 of 80
    assert policy.open_to(25.0, range(4), seen) == {3}


def test_a_free_set_is_taken_at_once_with_nobody_ahead(dgx):
    two = Placer(dgx, [reqs.P2PRequirement(gpus=2)], 2)
    decision = policy.decide(two, None, look({0: (Holding(1.0),)}), None, clock_s=50.0)
    assert decision.take is not None and 0 not in decision.take and decision.reserve == {}


def test_a_set_that_frees_goes_first_to_the_waiters_ahead(dgx):
    """Taken once every waiter ahead has looked since the set came free, or after ``GRACE_S``."""
    one = Placer(dgx, [GpuRequirement(gpus=1)], 1)
    held = {g: (Holding(1.0),) for g in range(8) if g != 5}
    behind = look(held, ahead=[waiter({}, looked=NOW - 1)])  # it looked before GPU5 came free
    first = policy.decide(one, None, behind, None, clock_s=50.0)
    assert first.take is None and first.seen == Seen((5,), NOW, 50.0)
    again = policy.decide(one, None, behind, first.seen, clock_s=50.0 + policy.GRACE_S / 2)
    assert again.take is None and again.seen == first.seen
    late = policy.decide(one, None, behind, first.seen, clock_s=50.0 + policy.GRACE_S)
    assert late.take == (5,)
    looked = look(held, ahead=[waiter({}, looked=NOW + 0.01)])  # it looked since, and did not take it
    assert policy.decide(one, None, looked, first.seen, clock_s=50.0).take == (5,)


def test_a_waiting_test_reserves_the_set_free_soonest(dgx):
    """Every GPU held: a four-GPU test reserves the four held longest (the first to end)."""
    four = Placer(dgx, [GpuRequirement(gpus=4)], 4)
    held = {g: (Holding(100.0 - g),) for g in range(8)}  # GPU7 taken first
    decision = policy.decide(four, None, look(held), None, clock_s=0.0)
    assert decision.take is None and decision.whole and set(decision.reserve) == {4, 5, 6, 7}
    assert policy.reservation(four, None, look(held)) == decision.reserve


def test_a_small_test_takes_none_of_the_gpus_a_large_one_ahead_reserved(dgx):
    one = Placer(dgx, [GpuRequirement(gpus=1)], 1)
    ahead = [waiter(dict.fromkeys(range(8)))]  # an eight-GPU test reserved all eight, and waits for GPU7
    decision = policy.decide(one, None, look({7: (Holding(1.0),)}, ahead=ahead), None, clock_s=0.0)
    assert decision.take is None and decision.reserve == {}  # nothing open to it: it waits, reserving nothing


def test_small_budgets_share_a_gpu_and_an_exclusive_test_takes_an_empty_one(dgx):
    one = Placer(dgx, [GpuRequirement(gpus=1)], 1)
    shared = {g: (Holding(1.0, 10.0),) for g in range(8)}  # a 10 GiB test on every GPU
    assert policy.decide(one, 10.0, look(shared, reserve=0.5), None, clock_s=0.0).take is not None
    waits = policy.decide(one, None, look(shared, reserve=0.5), None, clock_s=0.0)
    assert waits.take is None and len(waits.reserve) == 1 and list(waits.reserve.values()) == [None]
    full = {g: (Holding(1.0, 70.0),) for g in range(8)}
    assert policy.decide(one, 10.0, look(full, reserve=0.5), None, clock_s=0.0).take is None


def test_a_multi_gpu_budget_takes_a_set_whose_every_gpu_has_room(dgx):
    pair = Placer(dgx, [reqs.P2PRequirement(gpus=2)], 2)
    held = {g: (Holding(1.0, 75.0),) for g in range(8) if g not in (2, 6)}  # room on GPU2 and GPU6 only
    decision = policy.decide(pair, 20.0, look(held, reserve=0.5), None, clock_s=0.0)
    assert decision.take == (2, 6)


@pytest.mark.parametrize(
    ("budget", "memory", "holds"),
    [
        (None, {0: 80.0, 1: 80.0}, True),  # whole GPUs: any meeting set
        (79.0, {0: 80.0, 1: 80.0}, True),  # 79 + 1 = 80
        (79.5, {0: 80.0, 1: 80.0}, False),
        (79.5, {0: 80.0, 1: None}, True),  # unknown memory: the budget takes that GPU whole
        (30.0, {0: 24.0, 1: 80.0}, True),  # one set of the two holds it
    ],
)
def test_whether_a_budget_could_ever_be_held_here(budget, memory, holds):
    assert policy.could_hold(budget, [(0,), (1,)], memory, 1.0) is holds
    assert policy.could_hold(budget, [], memory, 1.0) is False  # no set meets the markers


@pytest.mark.parametrize(
    ("budget", "leased", "held", "ahead", "keeps"),
    [
        (None, (0,), {0: [Holding(NOW - 1)]}, [], True),  # nobody waits: kept
        (None, (0,), {0: [Holding(NOW - 1)]}, [waiter({0: None})], False),  # a waiter ahead wants it whole
        (None, (0,), {0: [Holding(NOW - 1)]}, [waiter({0: 10.0})], False),  # a share of it: an exclusive test yields
        (10.0, (0,), {0: [Holding(NOW - 1, 10.0)]}, [waiter({0: 40.0})], True),  # 40 and 10 fit beside: kept
        (10.0, (0,), {0: [Holding(NOW - 1, 10.0)]}, [waiter({0: 75.0})], False),  # 75 and 10 do not
        (10.0, (0,), {0: [Holding(NOW - 1, 10.0)]}, [waiter({0: None})], False),  # whole: it goes back
        (10.0, (0,), {0: [Holding(NOW - 1, 10.0)]}, [waiter({1: None})], True),  # another GPU's waiter
    ],
)
def test_a_set_is_kept_for_the_next_test_while_it_is_open_to_it(dgx, budget, leased, held, ahead, keeps):
    placer = Placer(dgx, [GpuRequirement(gpus=1)], 1)
    assert policy.may_keep(placer, budget, leased, look(held, ahead, reserve=1.0)) is keeps


def test_a_pair_is_not_kept_where_a_better_linked_pair_is_open():
    """A test that asks for a pair keeps the one it holds only where no better-linked pair is free and
    open to it: on hgx-h100-nvlink-down GPU5 lost its NVLinks, so (0, 5) goes back while an NVLink
    pair is free, and is kept where every other GPU is held."""
    topology = load_profile("hgx-h100-nvlink-down").topology
    placer = Placer(topology, [GpuRequirement(gpus=2)], 2)
    ours = {0: [Holding(NOW)], 5: [Holding(NOW)]}
    assert not policy.may_keep(placer, None, (0, 5), look(ours))
    everyone = {g: [Holding(NOW)] for g in range(8)}
    assert policy.may_keep(placer, None, (0, 5), look(everyone))
    assert policy.may_keep(placer, None, (0, 1), look({0: [Holding(NOW)], 1: [Holding(NOW)]}))
