"""``gputopo bench allreduce``: the all-reduce sweep, its arguments refused before anything runs,
printed as nccl-tests' table, written as a report document and its HTML page on request."""

from __future__ import annotations

import json
import sys

from ..bench import allreduce
from ..bench.allreduce import BenchError
from ..bench.sweep import element_sizes, gloo_rank_limit, sweep_entry, sweep_sizes
from ..core import model
from ..core.collectives import NCCL_TESTS_TYPES, allreduce_expected_busbw
from ..core.limits import MAX_BYTES
from ..core.nvlinks import nvlink_faults
from ..core.units import counted, read_size, size_text
from ..probe import probe
from ..render import report
from ..render.html import html_report
from ..render.nccl_tests import sweep_table
from ..runtime import files
from .common import CliError, add_command, check_writable


def cmd_bench(args) -> int:
    """The all-reduce sweep: nccl-tests' table on stdout, JSON and HTML on request."""
    for flag, value, low in (
        ("--ranks", args.ranks, 1),
        ("-w", args.warmup_iters, 0),
        ("--budget", args.budget, 1e-3),
        ("--timeout", args.timeout, 1.0),
    ):
        if value is not None and not (low <= value <= 1e6):
            raise CliError(f"{flag} {value:g}: expected a number from {low:g} to 1e6")
    for flag, path in (("--json", args.json), ("--html", args.html)):
        check_writable(flag, path)
    try:
        wanted = sweep_sizes(_size_arg("-b", args.minbytes), _size_arg("-e", args.maxbytes), args.stepfactor)
    except ValueError as exc:
        raise CliError(f"-b/-e/-f: {exc}") from None
    sizes = element_sizes(wanted, NCCL_TESTS_TYPES[args.datatype])
    topology = probe(None)  # learned in children: this process never starts CUDA
    backend, devices, ranks, expected, basis = sweep_plan(args, topology)
    if backend == "gloo":
        _check_gloo_ranks(args, ranks, max(sizes))
    timeout = args.timeout if args.timeout is not None else 60 + 4 * args.budget * len(sizes)
    print(
        f"gputopo: measuring an all-reduce sweep: {counted(ranks, 'rank')}, {backend}, {counted(len(sizes), 'size')} "
        f"(up to {timeout:g} s) ...",
        file=sys.stderr,
        flush=True,
    )
    try:
        result = allreduce.run_allreduce(
            ranks,
            sizes,
            backend=backend,
            dtype=NCCL_TESTS_TYPES[args.datatype],
            devices=devices,
            budget_s_per_size=args.budget,
            timeout_s=timeout,
            warmup=args.warmup_iters,
        )
    except BenchError as exc:
        print(f"gputopo: the sweep gave no figures: {exc.reason}", file=sys.stderr)
        return 1
    sweep = sweep_entry(
        result,
        host=topology.hostname,
        devices=devices,
        sizes=(wanted[0], wanted[-1], args.stepfactor),
        expected=expected,
        basis=basis,
    )
    sys.stdout.write(sweep_table(sweep))
    document = {
        **report.machine_document(topology),
        "nvlink_faults": nvlink_faults(topology),  # judged here: the report colours what it is given
        "sweeps": [sweep],
        "complete": True,
    }
    for flag, path, text in (
        ("--json", args.json, lambda: json.dumps(document, indent=1, allow_nan=False) + "\n"),
        ("--html", args.html, lambda: html_report(document)),
    ):
        if path is not None:
            try:
                files.write_text(path, text())
            except OSError as exc:
                raise CliError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
    wrong = "" if result.ok else f"; data wrong: {'; '.join(result.errors)}"
    print(f"gputopo: done in {result.wall_s:.1f} s" + wrong, file=sys.stderr)
    return 0 if result.ok else 1


def _size_arg(flag: str, text: str) -> int:
    found = read_size(text, 1, MAX_BYTES)
    if found is None:
        raise CliError(f"{flag} {text[:40]!r}: not a size in bytes from 1 to 1T, such as 8, 64K, 256M or 1G")
    return found


def sweep_plan(args, topology: model.Topology):
    """(backend, the GPU of each rank or None for gloo's CPU processes, ranks, the busbw the links
    should give or None, what that rests on) for ``gputopo bench allreduce``; each refusal names the option."""
    backend = args.backend or ("nccl" if topology.gpus else "gloo")
    if backend == "gloo":
        if args.gpus is not None:
            raise CliError("--gpus goes with --backend nccl (gloo ranks are CPU processes)")
        return backend, None, 2 if args.ranks is None else args.ranks, None, "gloo on CPUs (no link to judge it by)"
    if not topology.gpus:
        raise CliError(
            f"--backend nccl: no GPU on this host ({topology.problem or 'NVML lists none'}); use --backend gloo"
        )
    count = len(topology.gpus)
    if args.gpus is None:
        ranks = count if args.ranks is None else args.ranks
        if ranks > count:
            raise CliError(f"--ranks {ranks}: this host has {counted(count, 'GPU')} (one rank per GPU)")
        devices = list(range(ranks))
    else:
        named = args.gpus.split(",")
        devices = [int(v) for v in named if v.strip().isascii() and v.strip().isdigit()]
        if len(devices) != len(named) or len(set(devices)) != len(devices) or max(devices) >= count:
            raise CliError(f"--gpus {args.gpus!r}: expected distinct GPU indices 0..{count - 1}, comma-separated")
        if args.ranks is not None and args.ranks != len(devices):
            raise CliError(f"--ranks {args.ranks} and --gpus {args.gpus}: one rank per GPU named")
    expected = allreduce_expected_busbw(topology, len(devices), tuple(devices))
    basis = expected.label if expected else f"links among {', '.join(f'GPU{d}' for d in devices)} (unknown)"
    return backend, devices, len(devices), expected, basis


def _check_gloo_ranks(args, ranks: int, max_bytes: int) -> None:
    """Refuse more gloo ranks than this machine runs (``bench.sweep.gloo_rank_limit``: its CPUs, and
    its memory for the largest size), naming the option and why."""
    limit, why = gloo_rank_limit(max_bytes)
    if ranks <= limit:
        return
    if args.ranks is None:
        raise CliError(
            f"-e {args.maxbytes}: the default {ranks} gloo ranks do not fit this host at {size_text(max_bytes)} ({why})"
        )
    raise CliError(
        f"--ranks {ranks}: at most {counted(limit, 'gloo rank')} on this host for "
        f"sizes up to {size_text(max_bytes)} ({why})"
    )


def add_bench(sub) -> None:
    p = add_command(
        sub,
        "bench",
        "benchmarks for people: the all-reduce sweep (nccl-tests' table, JSON, HTML)",
        "The all-reduce sweep: sizes stepped as nccl-tests' -b -e -f step them, each timed for\n"
        "--budget seconds with torch.distributed (nccl with one rank per GPU, else gloo CPU\n"
        "processes), printed as nccl-tests' table with the busbw the links should give.",
        "  gputopo bench allreduce -b 64K -e 4M -f 4 --budget 0.2 --json sweep.json --html sweep.html",
        "  0    every size's data came back right\n"
        "  1    a size's data came back wrong, or the sweep gave no figure\n"
        "  2    bad arguments (named), refused before anything runs",
    )
    p.add_argument("benchmark", choices=["allreduce"], help="the benchmark: allreduce (the only one)")
    p.add_argument("-b", "--minbytes", default="1M", metavar="SIZE", help="first size (default 1M; 8, 64K, 1G)")
    p.add_argument("-e", "--maxbytes", default="64M", metavar="SIZE", help="last size (default 64M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2, metavar="N", help="multiply the size by N (default 2)")
    p.add_argument("--backend", choices=["nccl", "gloo"], help="default: nccl where NVML lists GPUs, else gloo")
    p.add_argument("--ranks", type=int, metavar="N", help="ranks (gloo default 2; nccl: GPU0..N-1, default all)")
    p.add_argument("--gpus", metavar="LIST", help="nccl: the GPUs to use, one rank each (0,2,5; default: all)")
    p.add_argument(
        "-d",
        "--datatype",
        choices=sorted(NCCL_TESTS_TYPES),
        default="float",
        help="the element type, by nccl-tests' names (default float)",
    )
    p.add_argument(
        "-w",
        "--warmup_iters",
        type=int,
        default=5,
        metavar="N",
        help="untimed all-reduces before each size is timed (default 5)",
    )
    p.add_argument("--budget", type=float, default=1.0, metavar="S", help="seconds of timing per size (default 1)")
    p.add_argument(
        "--timeout", type=float, metavar="S", help="bound on the whole sweep (default 60 + 4 x budget x sizes)"
    )
    p.add_argument(
        "--json", metavar="PATH", help="write the sweep as a report document (gputopo report reads it; default: none)"
    )
    p.add_argument(
        "--html",
        metavar="PATH",
        help="write the HTML report: busbw against size with the expected line (default: none)",
    )
    p.set_defaults(func=cmd_bench)
