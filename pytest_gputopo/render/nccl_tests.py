"""nccl-tests' own text for a result (2.x, stdout): the inverse of ``parse.nccl_tests`` for what
its table shows."""

from __future__ import annotations

from ..parse.cells import NA
from ..parse.nccl_tests import NcclTestsResult, Result

def render_nccl_tests(result: NcclTestsResult) -> str:
    """The text nccl-tests (2.x, stdout) prints for ``result``'s table and summary: the inverse of
    ``parse_nccl_tests`` for what the table shows (time, algbw and busbw rounded as nccl-tests does;
    an old-format ``error`` is not shown). For test fixtures and reports, never as a measurement."""
    def cell(value, fmt: str, width: int) -> str:
        return f"{NA:>{width}}" if value is None else format(value, f">{width}{fmt}")

    def time_cell(t):  # nccl-tests shortens the time to 7 characters
        return cell(t, ".0f" if t is not None and t >= 10000 else ".1f" if t is not None and t >= 100
                    else ".2f", 7)

    out = [] if result.collective is None else [f"# Collective test starting: {result.collective}_perf"]
    out += [f"#  Rank {r:2d} Group  0 Pid      1 on  localhost device {r:2d} [0000:00:00] GPU"
            for r in range(result.nranks or 0)]
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
