"""What ``@pytest.mark.ranks(2)`` costs on gloo: the time from the start of the test's call to the first
line of its body on the last rank, against ``torch.multiprocessing.spawn`` of the same body (each
rank's process group initialised on a FileStore first, as the plugin does), alternated, on this
machine's CPUs. Prints each round's two figures, the medians and the median of the paired differences.

    .venv/bin/python tools/perf/bench_ranks.py [rounds]

``suite``: 20 trivial tests (an all-reduce of one tensor on 2 gloo ranks) three ways, alternated: each
test with ranks of its own (``ranks(2)``), with the warm pool (``ranks(2, pool=True)``), and as one
``MultiProcContinuousTest`` class of the installed torch (its ranks kept for the class). Prints each
way's whole run (the pytest process, start to end), the median call-to-body of its 20 tests and its
first test's.

    .venv/bin/pip install expecttest numpy   # torch's test helpers import them (not the project's)
    .venv/bin/python tools/perf/bench_ranks.py suite [rounds]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The plugin's side: the call's start (a hook that runs just before the plugin's own pytest_pyfunc_call)
# and each rank's first line, as wall-clock times in files.
CONFTEST = """
import os, time
import pytest

@pytest.hookimpl(tryfirst=True, wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    with open(os.path.join(os.environ["BENCH_OUT"], "start"), "w") as f:
        f.write(repr(time.time()))
    return (yield)
"""
TEST = """
import os, time
import pytest

@pytest.mark.ranks(2, backend="gloo")
def test_body(gputopo_rank):
    first = time.time()
    with open(os.path.join(os.environ["BENCH_OUT"], f"rank{gputopo_rank.rank}"), "w") as f:
        f.write(repr(first))
"""
# torch.multiprocessing.spawn of the same body, its group initialised as the plugin initialises it.
SPAWN = """
import os, sys, time
from datetime import timedelta
import torch.multiprocessing as mp

def body(rank, out, n):
    import torch.distributed as dist
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(out, "store"), n), rank=rank,
                            world_size=n, timeout=timedelta(seconds=300))
    first = time.time()
    with open(os.path.join(out, f"rank{rank}"), "w") as f:
        f.write(repr(first))
    dist.destroy_process_group()

if __name__ == "__main__":
    out = sys.argv[1]
    with open(os.path.join(out, "start"), "w") as f:
        f.write(repr(time.time()))
    mp.spawn(body, args=(out, 2), nprocs=2)
"""


def first_line_s(out: Path) -> float:
    start = float((out / "start").read_text())
    return max(float((out / f"rank{r}").read_text()) for r in range(2)) - start


def plugin_round(folder: Path) -> float:
    out = Path(tempfile.mkdtemp(dir=folder))
    env = {**os.environ, "BENCH_OUT": str(out)}
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "test_bench.py"],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
    )
    return first_line_s(out)


def spawn_round(folder: Path) -> float:
    out = Path(tempfile.mkdtemp(dir=folder))
    subprocess.run([sys.executable, "spawn_bench.py", str(out)], cwd=folder, check=True, capture_output=True)
    return first_line_s(out)


# The suite: the call's start (pytest_runtest_call, which unittest's tests pass through too) and each
# rank's first line of each test, in files named by the test.
SUITE_CONFTEST = """
import os, time
import pytest

@pytest.hookimpl(tryfirst=True, wrapper=True)
def pytest_runtest_call(item):
    with open(os.path.join(os.environ["BENCH_OUT"], item.name + ".start"), "w") as f:
        f.write(repr(time.time()))
    return (yield)
"""
SUITE_TESTS = 20
SUITE_BODY = """
    with open(os.path.join(os.environ["BENCH_OUT"], f"{NAME}.rank{RANK}"), "w") as f:
        f.write(repr(time.time()))
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""
SUITE_RANKS = "import os, time\nimport pytest\nimport torch\nimport torch.distributed as dist\n" + "".join(
    f"\n@pytest.mark.ranks(2, backend='gloo'{{pool}})\ndef test_{i:02d}(gputopo_rank):\n"
    + SUITE_BODY.replace("{NAME}", f"test_{i:02d}").replace("{RANK}", "{gputopo_rank.rank}")
    for i in range(SUITE_TESTS)
)
SUITE_TORCH = (
    "import os, time\nimport torch\nimport torch.distributed as dist\n"
    "from torch.testing._internal.common_distributed import MultiProcContinuousTest\n\n"
    "class TestContinuous(MultiProcContinuousTest):\n"
    "    world_size = 2\n\n"
    "    @classmethod\n    def backend_str(cls):\n        return 'gloo'\n\n"
    "    @classmethod\n    def device_type(cls):\n        return 'cpu'\n"
    + "".join(
        f"\n    def test_{i:02d}(self):\n"
        + SUITE_BODY.replace("\n    ", "\n        ").replace("{NAME}", f"test_{i:02d}").replace("{RANK}", "{self.rank}")
        for i in range(SUITE_TESTS)
    )
)
SUITE_WAYS = {
    "ranks(2)": "test_own.py",
    "ranks(2, pool=True)": "test_pool.py",
    "MultiProcContinuousTest": "test_mpct.py",
}


def suite_round(folder: Path, way: str) -> tuple[float, list[float]]:
    """(the whole run's seconds, each test's call-to-body seconds, in order)."""
    out = Path(tempfile.mkdtemp(dir=folder))
    env = {**os.environ, "BENCH_OUT": str(out)}
    start = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-n",
            "0",
            SUITE_WAYS[way],
        ],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
    )
    whole = time.monotonic() - start
    bodies = []
    for i in range(SUITE_TESTS):
        name = f"test_{i:02d}"
        began = float((out / f"{name}.start").read_text())
        bodies.append(max(float((out / f"{name}.rank{r}").read_text()) for r in range(2)) - began)
    return whole, bodies


def suite(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text(SUITE_CONFTEST)
        (folder / "test_own.py").write_text(SUITE_RANKS.replace("{pool}", ""))
        (folder / "test_pool.py").write_text(SUITE_RANKS.replace("{pool}", ", pool=True"))
        (folder / "test_mpct.py").write_text(SUITE_TORCH)
        figures: dict[str, list[tuple[float, list[float]]]] = {way: [] for way in SUITE_WAYS}
        for i in range(rounds):
            ways = list(SUITE_WAYS)[i % 3 :] + list(SUITE_WAYS)[: i % 3]  # each way first in turn
            for way in ways:
                figures[way].append(suite_round(folder, way))
                whole, bodies = figures[way][-1]
                print(
                    f"round {i + 1}: {way}: {whole:.2f} s, call-to-body median {statistics.median(bodies):.3f} s, "
                    f"first {bodies[0]:.2f} s",
                    flush=True,
                )
    load = os.getloadavg()[0]
    print(
        f"{SUITE_TESTS} tests of an all-reduce on 2 gloo ranks, median of {rounds} rounds "
        f"({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, load {load:.1f}):"
    )
    mpct = statistics.median(whole for whole, _ in figures["MultiProcContinuousTest"])
    for way, runs in figures.items():
        whole = statistics.median(w for w, _ in runs)
        body = statistics.median(statistics.median(b[1:]) for _, b in runs)
        first = statistics.median(b[0] for _, b in runs)
        print(
            f"  {way:26s} whole run {whole:6.2f} s ({whole / mpct:.2f}x MultiProcContinuousTest's), "
            f"call-to-body median {body:.3f} s after the first, first test {first:.2f} s"
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "suite":
        suite(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text(CONFTEST)
        (folder / "test_bench.py").write_text(TEST)
        (folder / "spawn_bench.py").write_text(SPAWN)
        ours, theirs = [], []
        for i in range(rounds):
            pair = [("plugin", plugin_round), ("spawn", spawn_round)]
            for name, measure in pair if i % 2 == 0 else reversed(pair):
                (ours if name == "plugin" else theirs).append(measure(folder))
            print(f"round {i + 1}: ranks(2) {ours[-1]:.2f} s, mp.spawn {theirs[-1]:.2f} s", flush=True)
    diffs = [a - b for a, b in zip(ours, theirs, strict=True)]
    print(
        f"time to the first line of the body on the last of 2 gloo ranks, median of {rounds}: "
        f"@pytest.mark.ranks(2) {statistics.median(ours):.2f} s, torch.multiprocessing.spawn "
        f"{statistics.median(theirs):.2f} s; the plugin adds {statistics.median(diffs):+.2f} s (median of the "
        f"paired differences; {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs)"
    )


if __name__ == "__main__":
    main()
