"""What the supervisor costs to start and end one child (``procs.run_child`` of ``python -S -c pass``):
its own session, its parent-death signal (set between fork and exec, so the child is forked, not
vforked), its output in a file, its exit awaited and its group ended; with ``--before DIR``, also
another checkout's ``run_child`` (DIR holds its ``pytest_gputopo``), the two interleaved. Each from a
process holding ``--ballast MB`` of memory (a pytest run's size: forking copies its page tables).
Medians of wall time.

    .venv/bin/python tools/perf/bench_child_start.py 50 [--before DIR] [--ballast 200]
"""

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ONE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pytest_gputopo.runtime.procs import run_child
ballast = bytearray(int(sys.argv[3]) << 20)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1  # touched: its pages are mapped, as a run's are
times = []
for _ in range(int(sys.argv[2])):
    began = time.perf_counter()
    run_child([sys.executable, "-S", "-c", "pass"], timeout_s=60)
    times.append(time.perf_counter() - began)
print(sorted(times)[len(times) // 2])
"""


def median_ms(checkout: Path, runs: int, ballast: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", ONE, str(checkout), str(runs), str(ballast)], capture_output=True, text=True
    )
    return float(out.stdout) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", type=int, nargs="?", default=50)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--ballast", type=int, default=200)
    args = parser.parse_args()
    here, before = [], []
    for _ in range(5):  # interleaved rounds of ``runs`` children each
        here.append(median_ms(ROOT, args.runs, args.ballast))
        if args.before:
            before.append(median_ms(args.before, args.runs, args.ballast))
    print(f"run_child of python -S -c pass, from a process of {args.ballast} MB: {statistics.median(here):.1f} ms")
    if before:
        print(f"  before ({args.before}): {statistics.median(before):.1f} ms")


if __name__ == "__main__":
    main()
