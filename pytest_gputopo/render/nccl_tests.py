"""nccl-tests' own text for a result (2.x, stdout): the inverse of ``parse.nccl_tests`` for what
its table shows."""

from __future__ import annotations

from typing import Sequence

from ..parse.cells import NA
from ..parse.nccl_tests import NcclTestsResult, NcclTestsRow, Result


def render_nccl_tests(result: NcclTestsResult, rank_lines: Sequence[str] | None = None,
                      preamble: Sequence[str] = ()) -> str:
    """The text nccl-tests (2.x, stdout) prints for ``result``'s table and summary: the inverse of
    ``parse_nccl_tests`` for what the table shows (time, algbw and busbw rounded as nccl-tests does;
    an old-format ``error`` is not shown). ``rank_lines`` say where each rank ran (default: a
    placeholder per rank, for test fixtures); ``preamble``, lines printed first."""
    def cell(value, fmt: str, width: int) -> str:
        return f"{NA:>{width}}" if value is None else format(value, f">{width}{fmt}")

    def time_cell(t):  # nccl-tests shortens the time to 7 characters
        return cell(t, ".0f" if t is not None and t >= 10000 else ".1f" if t is not None and t >= 100
                    else ".2f", 7)

    out = list(preamble)
    out += [] if result.collective is None else [f"# Collective test starting: {result.collective}_perf"]
    if rank_lines is None:
        rank_lines = [f"Pid      1 on  localhost device {r:2d} [0000:00:00] GPU" for r in range(result.nranks or 0)]
    out += [f"#  Rank {r:2d} Group  0 {line}" for r, line in enumerate(rank_lines)]
    out += ["#",
            "#                                                              out-of-place                       in-place",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    for row in result.rows:
        if row.count is None or row.type is None or row.redop is None or row.root is None:
            raise ValueError(f"render_nccl_tests: the row for size {row.size_bytes} lacks count, type, "
                             f"redop or root, which the modern table always prints")
        line = f"{row.size_bytes:12d}  {row.count:12d}  {row.type:>8}  {row.redop:>6}  {row.root:6d}"
        for res in (row.out_of_place or Result(), row.in_place or Result()):
            line += (f"  {time_cell(res.time_us)}  {cell(res.algbw_gbps, '.2f', 6)}  "
                     f"{cell(res.busbw_gbps, '.2f', 6)}  {cell(res.wrong, 'd', 5)}")
        out.append(line)
    if result.out_of_bounds is not None:
        out.append(f"# Out of bounds values : {result.out_of_bounds} "
                   f"{'FAILED' if result.out_of_bounds else 'OK'}")
    if result.avg_busbw_gbps is not None:
        out.append(f"# Avg bus bandwidth    : {result.avg_busbw_gbps:g} ")
    out.append("#")
    return "\n".join(out) + "\n"


def sweep_table(sweep: dict) -> str:
    """A sweep of ``gputopo bench allreduce`` (``bench.sweep.sweep_entry``) as nccl-tests prints an
    all_reduce_perf run, so that what reads nccl-tests output reads it (``gputopo parse nccl-tests``).
    Only the in-place columns hold figures: ``torch.distributed.all_reduce`` reduces in place, and an
    out-of-place run was not made (N/A, as nccl-tests prints a placement it did not run)."""
    from ..core.collectives import NCCL_TESTS_TYPES

    result, sizes, expected = sweep["result"], sweep["sizes"], sweep["expected"]
    type_name = {v: k for k, v in NCCL_TESTS_TYPES.items()}.get(result["dtype"], result["dtype"])
    rows = tuple(NcclTestsRow(r["size_bytes"], r["count"], type_name, "sum", -1, None,
                              Result(r["time_us"], r["algbw_gbps"], r["busbw_gbps"], r["wrong"]))
                 for r in result["rows"])
    wrong_rows = sum(1 for r in result["rows"] if r["wrong"])
    avg = sum(r["busbw_gbps"] for r in result["rows"]) / len(rows) if rows else None
    devices = sweep.get("devices")
    host = sweep.get("host") or "?"
    pids = sweep.get("worker_pids") or [0] * result["world_size"]
    where = [f"device {d:2d} [{result['backend']}] cuda:{d}" for d in devices] if devices else \
        [f"device cpu [{result['backend']}] CPU process" for _ in range(result["world_size"])]
    rank_lines = [f"Pid {pid:6d} on {host:>10} {place}" for pid, place in zip(pids, where)]
    preamble = [f"# gputopo bench allreduce: minBytes {sizes['begin']} maxBytes {sizes['end']} step: "
                f"{sizes['factor']}(factor) backend {result['backend']} ({sweep.get('origin')} on {host})",
                "# in-place only: torch.distributed.all_reduce reduces in place (out-of-place: N/A)"]
    text = render_nccl_tests(NcclTestsResult("all_reduce", rows, avg, wrong_rows, nranks=result["world_size"]),
                             rank_lines, preamble)
    if expected["gbps"] is None:
        return text + f"# Expected busbw       : unknown: {expected['basis']}\n"
    return text + f"# Expected busbw       : {expected['gbps']:g} GB/s ({expected['basis']})\n"
