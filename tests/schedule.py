"""The order an xdist run hands its tests out in: each worker's share starts with modules of slow tests.

xdist's worksteal scheduler gives worker i the i-th of ``workers`` contiguous, equal-count slices of
the collection (``WorkStealingScheduling.check_schedule``: ``len(pending) // nodes_remaining`` each),
and a worker that runs out steals the last half of the longest queue. In file order the slow modules
fall where the alphabet puts them, so a worker could end the run alone on a slow test while the others
idle. Here each slice starts with its share of the modules that hold slow tests, largest first, and
ends with fast tests: a steal takes fast tests, and the run ends on fast tests on every worker.

Every worker collects and orders on its own, and xdist refuses a run whose workers' collections
differ: the order depends only on the collection, the ``slow`` marks and the number of workers, never
on a measured time. A module's tests stay together and in their order (its module-scoped fixtures,
such as test_sweep's shared sweeps, are made once per worker); a fast module may be cut at a slice's
end.
"""

from collections.abc import Sequence


def _modules(items: Sequence) -> dict[str, list]:
    """The items by their file, in collection order."""
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    return by_file


def slow_first_per_worker(items: Sequence, workers: int) -> list:
    """``items`` reordered so that each of ``workers`` worksteal slices starts with slow modules."""
    if workers < 2:
        return list(items)
    modules = _modules(items)
    slow_count = {name: sum(1 for i in its if i.get_closest_marker("slow")) for name, its in modules.items()}
    slow = sorted((name for name in modules if slow_count[name]), key=lambda name: (-slow_count[name], name))
    fast = [item for name, its in modules.items() if not slow_count[name] for item in its]

    # The slow modules dealt out by their count of slow tests (a stable stand-in for their time): each
    # to the worker with the fewest so far, the first such on a tie.
    dealt: list[list[str]] = [[] for _ in range(workers)]
    load = [0] * workers
    for name in slow:
        worker = load.index(min(load))
        dealt[worker].append(name)
        load[worker] += slow_count[name]

    # Each slice filled up to the size worksteal gives it, with fast tests after its slow modules.
    ordered: list = []
    remaining = len(items)
    for worker in range(workers):
        size = remaining // (workers - worker)
        remaining -= size
        share = [item for name in dealt[worker] for item in modules[name]]
        room = max(0, size - len(share))
        ordered += share + fast[:room]
        del fast[:room]
    return ordered + fast
