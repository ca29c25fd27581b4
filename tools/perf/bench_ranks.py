"""What ``@pytest.mark.ranks(2)`` costs on gloo: the time from the start of the test's call to the first
line of its body on the last rank, against ``torch.multiprocessing.spawn`` of the same body (each
rank's process group initialised on a FileStore first, as the plugin does), alternated, on this
machine's CPUs. Prints each round's two figures, the medians and the median of the paired differences.

    .venv/bin/python tools/perf/bench_ranks.py [rounds]
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


def main() -> None:
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
