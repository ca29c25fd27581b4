"""nccl-tests as a benchmark engine: run ``all_reduce_perf`` at one size under a deadline and read
its table (``parse.nccl_tests``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..parse.nccl_tests import NcclTestsParseError, NcclTestsResult, parse_nccl_tests
from ..runtime.procs import KILL_GRACE_S, run_child, tail

# The exit status of a finished run that nccl-tests itself failed (wrong data, or an average below
# NCCL_TESTS_MIN_BW): exit(EXIT_FAILURE) up to v2.17.2, testNumResults (src/common.h testResult_t) from
# v2.17.3 (commit 00f5281). Status 1 is also testInternalError, so the status alone is no verdict.
VERDICT_STATUSES = (1, 7)


class NcclTestsRunError(RuntimeError):
    """The benchmark ran but gave no result (non-zero exit, or no table); the message ends with the
    tail of its output."""


def all_reduce_perf_argv(binary: str, n_gpus: int, size_bytes: int, *, iters: int = 20, warmup: int = 5) -> list[str]:
    """One size (-b = -e), n_gpus GPUs in this one process (-g), iters timed (-n) after warmup (-w)
    iterations, one check iteration (-c 1) so that #wrong is counted."""
    for name, value, low in (
        ("n_gpus", n_gpus, 1),
        ("size_bytes", size_bytes, 1),
        ("iters", iters, 1),
        ("warmup", warmup, 0),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"all_reduce_perf: {name} must be an integer >= {low}, got {value!r}")
    return [
        binary,
        "-b",
        str(size_bytes),
        "-e",
        str(size_bytes),
        "-f",
        "2",
        "-g",
        str(n_gpus),
        "-n",
        str(iters),
        "-w",
        str(warmup),
        "-c",
        "1",
    ]


def run_all_reduce_perf(
    binary: str,
    n_gpus: int,
    size_bytes: int,
    *,
    iters: int = 20,
    warmup: int = 5,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    grace_s: float = KILL_GRACE_S,
) -> NcclTestsResult:
    """Run ``all_reduce_perf`` at one size and parse its table.

    ``env`` is the child's complete environment (runtime.py builds it); None inherits ours. The child
    leads its own process group, so a timeout kills it and everything it started: ``BenchTimeout``.
    A non-zero exit (except nccl-tests' own verdict on a finished run: wrong data or a low average,
    status 1 or 7 after a summary that says FAILED), or output with no table, raises
    ``NcclTestsRunError`` with the output's tail."""
    argv = all_reduce_perf_argv(binary, n_gpus, size_bytes, iters=iters, warmup=warmup)
    command = " ".join(argv)
    try:
        status, output = run_child(argv, timeout_s=timeout_s, env=env, grace_s=grace_s, reap=True)
    except OSError as exc:
        raise NcclTestsRunError(f"cannot start {command}: {exc}") from exc
    try:
        result = parse_nccl_tests(output)
    except NcclTestsParseError as exc:
        if status != 0:
            raise NcclTestsRunError(f"{command} exited with status {status}:\n{tail(output)}") from None
        raise NcclTestsRunError(f"{command}: {exc}:\n{tail(output)}") from exc
    if status == 0:
        return result
    # A finished run whose data were wrong (or whose average missed NCCL_TESTS_MIN_BW) exits with
    # status 1 or 7 after its summary (src/common.cu run(), v2.13.9 and v2.19.6): that table is the
    # result, wrong data included -- a broken node, not a run without a figure. The summary
    # ("Out of bounds values", printed only once every row is) must say FAILED: a run that ended
    # before it, or whose summary is all OK, failed for another reason.
    if status in VERDICT_STATUSES and result.out_of_bounds is not None and result.ok is False:
        return dataclasses.replace(
            result,
            warnings=result.warnings
            + (f"{command} exited with status {status} (nccl-tests: wrong data or below NCCL_TESTS_MIN_BW)",),
        )
    raise NcclTestsRunError(f"{command} exited with status {status}:\n{tail(output)}")
