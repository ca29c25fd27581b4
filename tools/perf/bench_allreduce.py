"""The plugin's all-reduce figure against a plain nccl-tests-style loop, in the same process pool.

    .venv/bin/python tools/perf/bench_allreduce.py [--sched fair|fifo] [--ranks 2] [--repeats 5]
        [--sizes 262144,1048576,...] [--drift 10]

For every size, ``--repeats`` times, alternating the order:

- **plugin**: ``pytest_gputopo.bench.allreduce_worker.measure_allreduce`` -- the harness (5 warm-up calls,
  iterations per sample calibrated to >= ``--min-sample-s``, samples until the 95% interval of their
  median is within 10% or the ``--budget`` is spent, per-call time averaged over ranks, median, then
  a verifiable all-reduce);
- **reference**: the way nccl-tests times (``common.cu`` BenchTime): 5 warm-up calls, barrier, wall
  clock, 20 back-to-back ``all_reduce`` calls, stop, per-call time averaged over ranks (nccl-tests'
  default ``-a 1``), fixed iteration count, no verification.

Both run in the same worker processes (gloo on loopback, CPU tensors, float32, under the
scheduling policy ``--sched`` that ``--gputopo-allreduce-sched`` gives the plugin's workers), so they
see the same machine. Printed per size: busbw (median of the repeats) of each, their agreement
(median against median, and the median of the ratios of estimates taken back to back), the spread
(max/min) of the repeated estimates of each, and the wall time one estimate cost. Then the
shape of the per-call noise (percentiles of single calls) and the machine's own drift (per-second
medians of a continuous loop), the floor under any spread.
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

from pytest_gputopo.bench.allreduce_worker import apply_sched, measure_allreduce
from pytest_gputopo.bench.harness import MIN_SAMPLE_S
from pytest_gputopo.core.collectives import allreduce_factor

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


def worker(rank, n, store, sizes, repeats, out_path, budget_s, min_sample_s, sched, drift_size, drift_s, tail_calls):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    apply_sched(sched)  # as the plugin's workers do, before gloo starts its threads
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method="file://" + store, rank=rank, world_size=n, timeout=timedelta(seconds=600)
    )
    factor = allreduce_factor(n)
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
                    plugin.append(
                        {
                            "time_s": m.median_s,
                            "wall_s": m.wall_s - m.verify_s,
                            "verify_s": m.verify_s,
                            "wrong": wrong,
                            "iterations": m.iterations_per_sample,
                            "samples": len(m.samples_s),
                            "stable": m.stable,
                            "spread": m.spread,
                            "ci_s": [m.ci_low_s, m.ci_high_s],
                        }
                    )
                else:
                    t, wall = reference_estimate(dist, torch, buf)
                    reference.append({"time_s": t, "wall_s": wall})
        out.append({"size_bytes": count * 4, "plugin": plugin, "reference": reference, "factor": factor})
    tail = call_latencies(dist, torch, 256 << 10, tail_calls) if tail_calls > 0 else None
    drift = drift_windows(dist, torch, drift_size, drift_s, out) if drift_s > 0 else None
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"rows": out, "tail": tail, "drift": drift}, f)
    dist.barrier()
    dist.destroy_process_group()


def call_latencies(dist, torch, size, calls):
    """Single calls, each timed on its own (rank 0's clock): the shape of the per-call noise, e.g. a
    scheduler's tail, which a median of samples and a back-to-back mean weigh differently."""
    buf = torch.zeros(size // 4, dtype=torch.float32)
    for _ in range(5):
        dist.all_reduce(buf)
    dist.barrier()
    took = []
    for _ in range(calls):
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        took.append(time.perf_counter() - t0)
    took.sort()
    pick = {f"p{q}": took[min(len(took) - 1, len(took) * q // 100)] for q in (10, 50, 90, 99)}
    return {"size_bytes": size, "calls": calls, "mean": statistics.mean(took), **pick}


def drift_windows(dist, torch, size, seconds, rows):
    """The machine's own drift: back-to-back all-reduces of ``size`` bytes for about ``seconds``,
    median per-call time of each 1-second window (rank 0's clock). No estimator can be more
    reproducible than the quantity it estimates: when these medians differ by 20%, so will any two
    estimates taken seconds apart."""
    buf = torch.zeros(size // 4, dtype=torch.float32)
    per_call = next(
        (statistics.median(e["time_s"] for e in r["reference"]) for r in rows if r["size_bytes"] == size), 0.002
    )
    calls = max(10, int(seconds / per_call))
    for _ in range(5):
        dist.all_reduce(buf)
    dist.barrier()
    stamps = []
    t_begin = time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        stamps.append((t0 - t_begin, time.perf_counter() - t0))
    windows = {}
    for start, took in stamps:
        windows.setdefault(int(start), []).append(took)
    full = [statistics.median(v) for k, v in sorted(windows.items()) if k < int(stamps[-1][0])]
    return {"size_bytes": size, "window_s": 1.0, "median_s": full}


def busbw(size, t, factor):
    return size / t / 1e9 * factor


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--budget", type=float, default=2.0, help="plugin time budget per estimate, s (default 2)")
    ap.add_argument(
        "--min-sample-s",
        type=float,
        default=MIN_SAMPLE_S,
        help=f"plugin minimum sample length, s (default {MIN_SAMPLE_S:g}, the plugin's)",
    )
    ap.add_argument(
        "--sched",
        choices=("fair", "fifo"),
        default="fair",
        help="CPU scheduling policy of the worker pool (both loops), as --gputopo-allreduce-sched",
    )
    ap.add_argument(
        "--drift",
        type=float,
        default=10.0,
        metavar="S",
        help="then measure the machine's drift: S seconds of back-to-back 4 MiB calls (0: skip)",
    )
    ap.add_argument(
        "--tail",
        type=int,
        default=2000,
        metavar="N",
        help="then time N single 256 KiB calls one by one: percentiles of the per-call noise (0: skip)",
    )
    ap.add_argument("--json", help="write the raw figures here")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="bench-allreduce-") as tmp:
        out_path = os.path.join(tmp, "out.json")
        t0 = time.perf_counter()
        mp.spawn(
            worker,
            args=(
                args.ranks,
                os.path.join(tmp, "store"),
                sizes,
                args.repeats,
                out_path,
                args.budget,
                args.min_sample_s,
                args.sched,
                4 << 20,
                args.drift,
                args.tail,
            ),
            nprocs=args.ranks,
            join=True,
        )
        total = time.perf_counter() - t0
        with open(out_path) as f:
            data = json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)

    rows, tail, drift = data["rows"], data["tail"], data["drift"]
    print(
        f"gloo all-reduce, {args.ranks} ranks, float32, scheduling {args.sched}, {args.repeats} estimates per size "
        f"(busbw factor 2(n-1)/n = {rows[0]['factor']:g}); plugin budget {args.budget:g} s, samples >= "
        f"{args.min_sample_s * 1e3:g} ms; {os.cpu_count()} CPUs; total {total:.1f} s"
    )
    hdr = (
        f"{'size':>9} | {'plugin busbw':>12} {'ref busbw':>10} {'agree':>7} {'paired':>7} | {'plugin spread':>13} "
        f"{'ref spread':>10} | {'plugin wall':>11} {'ref wall':>9} | {'k x samples':>11} {'stable':>6} {'wrong':>5}"
    )
    print(hdr)
    print("-" * len(hdr))
    met = {"agree": 0, "paired": 0, "spread": 0, "wall": 0}
    for row in rows:
        size, f = row["size_bytes"], row["factor"]
        p_bw = [busbw(size, e["time_s"], f) for e in row["plugin"]]
        r_bw = [busbw(size, e["time_s"], f) for e in row["reference"]]
        p_med, r_med = statistics.median(p_bw), statistics.median(r_bw)
        agree = p_med / r_med - 1
        # Estimates i of both loops were taken back to back: their ratio cancels the machine's slow drift.
        paired = statistics.median(p / r for p, r in zip(p_bw, r_bw, strict=True)) - 1
        p_spread, r_spread = max(p_bw) / min(p_bw), max(r_bw) / min(r_bw)
        p_wall = statistics.median(e["wall_s"] for e in row["plugin"])
        r_wall = statistics.median(e["wall_s"] for e in row["reference"])
        ks = statistics.median(e["iterations"] * e["samples"] for e in row["plugin"])
        stable = sum(e["stable"] for e in row["plugin"])
        wrong = sum(e["wrong"] for e in row["plugin"])
        met["agree"] += abs(agree) <= 0.05
        met["paired"] += abs(paired) <= 0.05
        met["spread"] += p_spread < 1.10
        met["wall"] += p_wall < r_wall
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(
            f"{label:>9} | {p_med:>8.3f} GB/s {r_med:>5.3f} GB/s {agree:>+6.1%} {paired:>+6.1%} | "
            f"{p_spread - 1:>12.1%} {r_spread - 1:>10.1%} | {p_wall:>9.3f} s {r_wall:>7.3f} s | "
            f"{ks:>11.0f} {stable:>4}/{len(p_bw)} {wrong:>5}"
        )
    n = len(rows)
    verify = [e["verify_s"] for row in rows for e in row["plugin"]]
    print(
        f"plugin wall = warm-up, calibration and samples; the verifiable all-reduce after them took "
        f"{min(verify):.3f}-{max(verify):.3f} s more per estimate (the reference verifies nothing)"
    )
    print(
        f"sizes meeting the targets: agreement within 5% {met['agree']}/{n} (paired {met['paired']}/{n}), "
        f"plugin spread under 10% "
        f"{met['spread']}/{n}, less wall time than the reference {met['wall']}/{n}"
    )
    if tail:
        print(
            f"per-call noise: {tail['calls']} single {tail['size_bytes'] >> 10} KiB all-reduces, p10 "
            f"{tail['p10'] * 1e3:.3f} p50 {tail['p50'] * 1e3:.3f} p90 {tail['p90'] * 1e3:.3f} p99 "
            f"{tail['p99'] * 1e3:.3f} mean {tail['mean'] * 1e3:.3f} ms"
        )
    if drift and drift["median_s"]:
        ms = [t * 1e3 for t in drift["median_s"]]
        print(
            f"machine drift: median per-call time of back-to-back {drift['size_bytes'] >> 20} MiB all-reduces in "
            f"each of {len(ms)} one-second windows ranges {min(ms):.3f}-{max(ms):.3f} ms "
            f"({max(ms) / min(ms) - 1:.0%}); estimates taken seconds apart cannot agree more closely"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
