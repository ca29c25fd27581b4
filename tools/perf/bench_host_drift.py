"""How steady is this host? Per-second medians of a fixed piece of work, no GPU, no plugin code.

    .venv/bin/python tools/perf/bench_host_drift.py [--seconds 20] [--cpu N]

Two kinds of work, each timed call by call for ``--seconds`` and summarised per one-second window:

- **memory**: copy and add two 4 MiB float32 tensors (torch, one thread): what an all-reduce of a
  few MiB does on a CPU, and what a neighbour on a shared L3 cache or memory bus disturbs;
- **ALU**: a pure-Python integer loop that touches no memory to speak of.

The range (max/min - 1) of the window medians is the floor under the spread of any two estimates
taken seconds apart on this host: a benchmark cannot be more reproducible than the machine.
``--cpu N`` pins the process to one CPU, to tell migrations between CPUs from outside interference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def windows(work, seconds: int) -> list:
    medians = []
    t_begin = time.perf_counter()
    for w in range(seconds):
        took = []
        while time.perf_counter() - t_begin < w + 1:
            t0 = time.perf_counter()
            work()
            took.append(time.perf_counter() - t0)
        medians.append(statistics.median(took))
    return medians


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--cpu", type=int, help="pin to this CPU")
    args = ap.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})

    import torch

    torch.set_num_threads(1)
    a, b = torch.ones(1 << 20), torch.empty(1 << 20)

    def memory() -> None:
        b.copy_(a)
        a.add_(b)

    def alu() -> None:
        x = 0
        for i in range(20000):
            x += i

    where = f"pinned to CPU {args.cpu}" if args.cpu is not None else f"{os.cpu_count()} CPUs, not pinned"
    print(f"one-second windows, {args.seconds} s each, {where}")
    for name, work in (("memory (4 MiB copy+add)", memory), ("ALU (integer loop)", alu)):
        us = [t * 1e6 for t in windows(work, args.seconds)]
        print(
            f"{name:>24}: median per call {min(us):.0f}-{max(us):.0f} us across windows, "
            f"range {max(us) / min(us) - 1:.0%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
