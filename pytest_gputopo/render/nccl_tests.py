"""nccl-tests' own text for a result (2.x, stdout): the inverse of ``parse.nccl_tests`` for what
its table shows."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.collectives import NCCL_TESTS_TYPES
from ..parse.cells import NA
from ..parse.nccl_tests import NcclTestsResult, NcclTestsRow, Result

# nccl-tests prints its figures with getFloatStr from v2.17.3 (commit 00f5281, src/util.cu); up to
# v2.17.2, src/common.cu BenchTime's fixed formats. ``version=None`` renders the current ones.
GET_FLOAT_STR_SINCE = (2, 17, 3)


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr (src/util.cu, v2.19.6): the most decimals (2, 1, 0) that fit ``width``,
    then an exponent. (v2.17.3-v2.19.1 chose the decimals by the integer digits before rounding, so
    a value just under a power of ten printed one character wider: 9999.996 as "10000.00".)"""
    for decimals in (2, 1, 0):
        text = f"{value:{width}.{decimals}f}"
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"[:width]


def _legacy_time(t: float) -> str:  # src/common.cu BenchTime up to v2.17.2 (tag v2.13.9)
    return f"{t:7.0f}" if t >= 10000 else f"{t:7.1f}" if t >= 100 else f"{t:7.2f}"


_NAMES = (
    "size",
    "count",
    "type",
    "redop",
    "root",
    "time",
    "algbw",
    "busbw",
    "#wrong",
    "time",
    "algbw",
    "busbw",
    "#wrong",
)
_UNITS = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")


def render_nccl_tests(
    result: NcclTestsResult,
    rank_lines: Sequence[str] | None = None,
    preamble: Sequence[str] = (),
    version: tuple[int, ...] | None = None,
) -> str:
    """The text nccl-tests (2.x, stdout) prints for ``result``'s table and summary: the inverse of
    ``parse_nccl_tests`` for what the table shows (time, algbw, busbw and #wrong formatted as
    nccl-tests ``version`` does, the current one when None; an old-format ``error`` is not shown).
    ``rank_lines`` say where each rank ran (default: a placeholder per rank, for test fixtures);
    ``preamble``, lines printed first."""
    if version is None or tuple(version) >= GET_FLOAT_STR_SINCE:
        # src/util.cu (v2.19.6): writeBenchmarkLineBody's "%6g" #wrong, writeResultHeader's columns.
        time, bw, wrong = (lambda t: float_str(t, 7)), (lambda b: float_str(b, 6)), "6g"
        head = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
        heads = [head % _NAMES, head % _UNITS]
    else:  # src/common.cu (tag v2.13.9): BenchTime's row, "%5g" #wrong, run()'s header
        time, bw, wrong = _legacy_time, (lambda b: f"{b:6.2f}"), "5g"
        heads = [
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s" % _NAMES,
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s" % _UNITS,
        ]

    def figures(res: Result) -> str:
        cells = [f"{NA:>7}" if res.time_us is None else time(res.time_us)]
        cells += [f"{NA:>6}" if b is None else bw(b) for b in (res.algbw_gbps, res.busbw_gbps)]
        cells.append(f"{NA:>5}" if res.wrong is None else format(res.wrong, wrong))
        return "".join("  " + c for c in cells)

    out = list(preamble)
    out += [] if result.collective is None else [f"# Collective test starting: {result.collective}_perf"]
    if rank_lines is None:
        rank_lines = [f"Pid      1 on  localhost device {r:2d} [0000:00:00] GPU" for r in range(result.nranks or 0)]
    out += [f"#  Rank {r:2d} Group  0 {line}" for r, line in enumerate(rank_lines)]
    out += ["#", f"#{'':62}out-of-place                       in-place          ", *heads]
    for row in result.rows:
        if row.count is None or row.type is None or row.redop is None or row.root is None:
            raise ValueError(
                f"render_nccl_tests: the row for size {row.size_bytes} lacks count, type, "
                f"redop or root, which the modern table always prints"
            )
        out.append(
            f"{row.size_bytes:12d}  {row.count:12d}  {row.type:>8}  {row.redop:>6}  {row.root:6d}"
            + figures(row.out_of_place or Result())
            + figures(row.in_place or Result())
        )
    if result.out_of_bounds is not None:
        out.append(f"# Out of bounds values : {result.out_of_bounds} {'FAILED' if result.out_of_bounds else 'OK'}")
    if result.avg_busbw_gbps is not None:
        out.append(f"# Avg bus bandwidth    : {result.avg_busbw_gbps:g} ")
    out.append("#")
    return "\n".join(out) + "\n"


def sweep_table(sweep: dict) -> str:
    """A sweep of ``gputopo bench allreduce`` (``bench.sweep.sweep_entry``) as nccl-tests prints an
    all_reduce_perf run, so that what reads nccl-tests output reads it (``gputopo parse nccl-tests``).
    Only the in-place columns hold figures: ``torch.distributed.all_reduce`` reduces in place, and an
    out-of-place run was not made (N/A, as nccl-tests prints a placement it did not run)."""
    result, sizes, expected = sweep["result"], sweep["sizes"], sweep["expected"]
    type_name = {v: k for k, v in NCCL_TESTS_TYPES.items()}.get(result["dtype"], result["dtype"])
    rows = tuple(
        NcclTestsRow(
            r["size_bytes"],
            r["count"],
            type_name,
            "sum",
            -1,
            None,
            Result(r["time_us"], r["algbw_gbps"], r["busbw_gbps"], r["wrong"]),
        )
        for r in result["rows"]
    )
    # "Out of bounds values" counts checks, not sizes (parse.nccl_tests.NcclTestsResult.out_of_bounds):
    # with one process per rank, as here, one per rank whose own buffer came back wrong, per size. The
    # sweep keeps wrong elements summed over ranks: a size with w wrong is 1 to min(w, ranks) checks.
    wrong = [r["wrong"] for r in result["rows"] if r["wrong"]]
    checks, most = len(wrong), sum(min(w, result["world_size"]) for w in wrong)
    avg = sum(r["busbw_gbps"] for r in result["rows"]) / len(rows) if rows else None
    devices = sweep.get("devices")
    host = sweep.get("host") or "?"
    pids = sweep.get("worker_pids") or [0] * result["world_size"]
    where = (
        [f"device {d:2d} [{result['backend']}] cuda:{d}" for d in devices]
        if devices
        else [f"device cpu [{result['backend']}] CPU process" for _ in range(result["world_size"])]
    )
    rank_lines = [f"Pid {pid:6d} on {host:>10} {place}" for pid, place in zip(pids, where, strict=True)]
    preamble = [
        f"# gputopo bench allreduce: minBytes {sizes['begin']} maxBytes {sizes['end']} step: "
        f"{sizes['factor']}(factor) backend {result['backend']} ({sweep.get('origin')} on {host})",
        "# in-place only: torch.distributed.all_reduce reduces in place (out-of-place: N/A)",
    ]
    text = render_nccl_tests(
        NcclTestsResult("all_reduce", rows, avg, checks, nranks=result["world_size"]), rank_lines, preamble
    )
    if most > checks:
        text += (
            f"# gputopo: Out of bounds values counts, per size, the ranks whose check found wrong elements; "
            f"this sweep kept them summed over ranks, so {checks} is a floor (at most {most})\n"
        )
    if expected["gbps"] is None:
        return text + f"# Expected busbw       : unknown: {expected['basis']}\n"
    return text + f"# Expected busbw       : {expected['gbps']:g} GB/s ({expected['basis']})\n"
