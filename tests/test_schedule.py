"""tests/schedule.py: the order an xdist run of this suite hands its tests out in."""

import random

from schedule import slow_first_per_worker


class Item:
    def __init__(self, nodeid: str, slow: bool):
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name):
        return object() if name == "slow" and self.slow else None

    def __repr__(self):
        return self.nodeid


def collection(seed: int) -> list[Item]:
    """Forty modules of 1-60 tests in file order; a quarter of them hold some slow tests."""
    draw = random.Random(seed)
    items = []
    for module in range(40):
        has_slow = draw.random() < 0.25
        for test in range(draw.randint(1, 60)):
            items.append(Item(f"tests/test_{module:02}.py::test_{test}", has_slow and draw.random() < 0.4))
    return items


def worksteal_slices(items: list, workers: int) -> list[list]:
    """What xdist's worksteal sends each worker first (WorkStealingScheduling.check_schedule)."""
    slices, pending = [], list(items)
    for worker in range(workers):
        size = len(pending) // (workers - worker)
        slices.append(pending[:size])
        del pending[:size]
    return slices


def module(item) -> str:
    return item.nodeid.split("::")[0]


def test_each_workers_share_starts_with_slow_modules_and_ends_with_fast_tests():
    for seed in range(50):
        items = collection(seed)
        slow_modules = {module(i) for i in items if i.slow}
        for workers in (2, 3, 4):
            ordered = slow_first_per_worker(items, workers)
            assert sorted(map(id, ordered)) == sorted(map(id, items))
            for share in worksteal_slices(ordered, workers):
                if len(slow_modules) >= workers:
                    assert module(share[0]) in slow_modules, (seed, workers, share[:3])
                    assert not share[-1].slow, (seed, workers, share[-3:])


def test_a_modules_tests_keep_their_order_and_a_slow_module_stays_whole():
    for seed in range(50):
        items = collection(seed)
        slow_modules = {module(i) for i in items if i.slow}
        ordered = slow_first_per_worker(items, 3)
        for name in {module(i) for i in items}:
            positions = [n for n, item in enumerate(ordered) if module(item) == name]
            assert [ordered[n] for n in positions] == [i for i in items if module(i) == name]
            if name in slow_modules:
                assert positions == list(range(positions[0], positions[0] + len(positions)))


def test_every_worker_computes_the_same_order_and_one_worker_keeps_the_collections():
    items = collection(7)
    assert slow_first_per_worker(items, 3) == slow_first_per_worker(list(items), 3)
    assert slow_first_per_worker(items, 1) == items
