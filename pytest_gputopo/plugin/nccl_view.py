"""The run's view of NCCL: what it should do, predicted from its settings and NVML, and, on GPUs,
what it did (its own log of a small run, once per run, like any benchmark); kept in the run's
state once taken. Glue: rules and the view itself (``nccl.fallbacks.NcclView``) from ``nccl``, NCCL's run
from the benchmark suite (``measurements``)."""

from __future__ import annotations

from ..nccl.expect import expected_transports
from ..nccl.fallbacks import NcclView, fallback_summary
from ..nccl.nccl_settings import read_settings
from ..runtime import environ
from .run import GputopoRun


def nccl_view(run: GputopoRun, observe: bool = False) -> NcclView:
    """The run's view of NCCL; with ``observe``, on a GPU host, NCCL's own account of a small run
    (once per run, like any benchmark)."""
    view = run.state.nccl_view
    if view is not None and (view.observed or not observe):
        return view
    topology = run.topology
    settings = read_settings(*environ.nccl_inputs())
    vendor = environ.cpu_vendor() if topology.is_this_host else None
    expectations = expected_transports(topology, settings, vendor)
    account, origin, planned = None, "predicted from NCCL's settings and NVML", False
    s = None
    if observe:  # NCCL's own run, a benchmark: imported when asked, never for the header's prediction
        from .measurements import suite  # (the benchmarks: a boundary of the load budget, docs/performance.md)

        s = suite(run)
    # s: the suite wherever observe is
    if observe and topology.is_this_host and (len(topology.gpus) >= 2 or s.world_size):  # type: ignore[union-attr]
        from ..bench.suite import PLANNED
        from ..core import keys

        across = s.world_size is not None  # type: ignore[union-attr]  # one GPU per rank, across nodes: pairs are ranks, not GPUs
        result = s.get(keys.NcclTransports(s.world_size or len(topology.gpus)))  # type: ignore[union-attr]
        planned = result.origin == PLANNED
        if result.error is None and result.detail:
            log = result.detail["log"]
            account = {
                "pairs": {} if across else result.detail["pairs"],
                "transports": log["transports"],
                "families": log.get("families", []),
                "gdrdma": log["gdrdma"],
            }
            origin = "NCCL's own log"
        else:
            origin += (
                " (NCCL's own run is not made in a plan)"
                if planned
                else f" (NCCL's own account failed: {result.error})"
            )
    elif observe:
        origin += " (NCCL does not run here)" if topology.is_this_host else " (not this host: NCCL cannot run on it)"
    view = NcclView(topology, settings, expectations, account, origin, observe)
    if not planned:  # a plan's view is not kept: each requirement resting on NCCL's run lists that run
        run.state.nccl_view = view
    return view


def predicted_fallback_line(run: GputopoRun) -> str:
    """For the header: the fallback NCCL's settings and NVML predict, and its cause ("" if none)."""
    line = fallback_summary(nccl_view(run).fallbacks())
    return f"gputopo {line} [predicted from NCCL's settings and NVML]" if line else ""
