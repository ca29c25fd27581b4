"""The plugin's all-reduce figure against a plain nccl-tests-style loop, in the same process pool.

    .venv/bin/python benchmarks/bench_allreduce.py [--ranks 2] [--repeats 5] [--sizes 262144,1048576,...]

For every size, ``--repeats`` times, alternating the order:

- **plugin**: ``pytest_gputopo.bench.allreduce.measure_allreduce`` -- the harness (5 warm-up calls,
  iterations per sample calibrated to >= ``--min-sample-s``, samples until the last 5 agree within
  10% or the ``--budget`` is spent, median, max over ranks, then a verifiable all-reduce);
- **reference**: the way nccl-tests times (``common.cu`` BenchTime): 5 warm-up calls, barrier, wall
  clock, 20 back-to-back ``all_reduce`` calls, stop, per-call time averaged over ranks (nccl-tests'
  default ``-a 1``), fixed iteration count, no verification.

Both run in the same worker processes (gloo on loopback, CPU tensors, float32), so they see the
same machine. Printed per size: busbw (median of the repeats) of each, their agreement, the spread
(max/min) of the repeated estimates of each, and the wall time one estimate cost.
GB/s = 1e9 B/s; busbw = algbw * 2(n-1)/n.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta

DEFAULT_SIZES = [256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def reference_estimate(dist, torch, buf, warmup=5, iters=20):
    """One nccl-tests-style estimate: (seconds per call averaged over ranks, wall seconds, max over ranks)."""
    t_begin = time.perf_counter()
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    per_call = (time.perf_counter() - t0) / iters
    wall = time.perf_counter() - t_begin
    t = torch.tensor([per_call, wall], dtype=torch.float64)
    dist.all_reduce(t)  # SUM -> mean per call
    w = torch.tensor([wall], dtype=torch.float64)
    dist.all_reduce(w, op=dist.ReduceOp.MAX)
    return t[0].item() / dist.get_world_size(), w.item()


def worker(rank, n, store, sizes, repeats, out_path, budget_s=2.0, min_sample_s=0.02):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    from pytest_gputopo.bench.allreduce import busbw_factor, measure_allreduce

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=n,
                            timeout=timedelta(seconds=600))
    factor = busbw_factor(n)
    out = []
    for size in sizes:
        count = size // 4
        buf = torch.zeros(count, dtype=torch.float32)
        plugin, reference = [], []
        for rep in range(repeats):
            order = ("plugin", "reference") if rep % 2 == 0 else ("reference", "plugin")
            for which in order:
                if which == "plugin":
                    m, wrong = measure_allreduce(count, budget_s=budget_s, min_sample_s=min_sample_s)
                    plugin.append({"time_s": m.median_s, "wall_s": m.wall_s, "wrong": wrong,
                                   "iterations": m.iterations_per_sample, "samples": len(m.samples_s),
                                   "stable": m.stable, "spread": m.spread})
                else:
                    t, wall = reference_estimate(dist, torch, buf)
                    reference.append({"time_s": t, "wall_s": wall})
        out.append({"size_bytes": count * 4, "plugin": plugin, "reference": reference, "factor": factor})
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


def busbw(size, t, factor):
    return size / t / 1e9 * factor


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--budget", type=float, default=2.0, help="plugin time budget per estimate, s (default 2)")
    ap.add_argument("--min-sample-s", type=float, default=0.02, help="plugin minimum sample length, s (default 0.02)")
    ap.add_argument("--json", help="write the raw figures here")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="bench-allreduce-") as tmp:
        out_path = os.path.join(tmp, "out.json")
        t0 = time.perf_counter()
        mp.spawn(worker, args=(args.ranks, os.path.join(tmp, "store"), sizes, args.repeats, out_path,
                                   args.budget, args.min_sample_s),
                 nprocs=args.ranks, join=True)
        total = time.perf_counter() - t0
        with open(out_path) as f:
            data = json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)

    print(f"gloo all-reduce, {args.ranks} ranks, float32, {args.repeats} estimates per size "
          f"(busbw factor 2(n-1)/n = {data[0]['factor']:g}); plugin budget {args.budget:g} s, samples >= "
          f"{args.min_sample_s * 1e3:g} ms; {os.cpu_count()} CPUs; total {total:.1f} s")
    hdr = (f"{'size':>9} | {'plugin busbw':>12} {'ref busbw':>10} {'agree':>7} | {'plugin spread':>13} "
           f"{'ref spread':>10} | {'plugin wall':>11} {'ref wall':>9} | {'k x samples':>11} {'stable':>6} {'wrong':>5}")
    print(hdr)
    print("-" * len(hdr))
    worst_agree, worst_spread = 0.0, 0.0
    for row in data:
        size, f = row["size_bytes"], row["factor"]
        p_bw = [busbw(size, e["time_s"], f) for e in row["plugin"]]
        r_bw = [busbw(size, e["time_s"], f) for e in row["reference"]]
        p_med, r_med = statistics.median(p_bw), statistics.median(r_bw)
        agree = p_med / r_med - 1
        p_spread, r_spread = max(p_bw) / min(p_bw), max(r_bw) / min(r_bw)
        p_wall = statistics.median(e["wall_s"] for e in row["plugin"])
        r_wall = statistics.median(e["wall_s"] for e in row["reference"])
        ks = statistics.median(e["iterations"] * e["samples"] for e in row["plugin"])
        stable = sum(e["stable"] for e in row["plugin"])
        wrong = sum(e["wrong"] for e in row["plugin"])
        worst_agree = max(worst_agree, abs(agree))
        worst_spread = max(worst_spread, p_spread)
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"{label:>9} | {p_med:>8.3f} GB/s {r_med:>5.3f} GB/s {agree:>+6.1%} | {p_spread - 1:>12.1%} "
              f"{r_spread - 1:>10.1%} | {p_wall:>9.3f} s {r_wall:>7.3f} s | {ks:>11.0f} {stable:>4}/{len(p_bw)} {wrong:>5}")
    print(f"worst agreement {worst_agree:.1%} (target 5%); worst plugin spread {worst_spread - 1:.1%} (target 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
