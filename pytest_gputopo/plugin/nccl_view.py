"""The run's view of NCCL: what it should do, predicted from its settings and NVML, and, on GPUs,
what it did (its own log of a small run, once per run, like any benchmark); kept in the run's
state once taken. Glue: rules from ``nccl``, NCCL's run from the benchmark suite (``measurements``)."""

from __future__ import annotations

from ..bench.suite import PLANNED
from ..core import keys
from ..core.model import Topology
from ..nccl.expect import expected_transports, fallback_summary, find_fallbacks
from ..nccl.nccl_settings import read_settings
from ..runtime import environ
from .measurements import suite
from .run import GputopoRun


class NcclView:
    """NCCL's transport for each GPU pair, and its fallbacks: by its own log where its run connected
    the pair, else predicted (``pairs`` says which)."""

    def __init__(self, topology: Topology, settings, expectations: list, account: dict | None, origin: str,
                 observed: bool = False):
        self.topology, self.settings, self.expectations = topology, settings, expectations
        self.account = account  # NCCL's log of a run, when one could be had
        self.origin = origin  # in words, for reasons
        self.observed = observed  # NCCL's own account was asked for (had or not): never ask twice

    def pairs(self) -> dict:
        """(a, b) -> (transports, why): NCCL's own for the pairs its run connected; the prediction,
        said to be one, for the others (a ring or tree connects neighbours only, and NCCL >= 2.22
        connects lazily per algorithm: an unconnected pair is not a pair without a transport)."""
        connected = (self.account or {}).get("pairs") or {}
        out = {}
        for e in self.expectations:
            used = connected.get(f"{e.a}-{e.b}")
            if used:
                out[(e.a, e.b)] = (set(used), f"used {', '.join(used)} (NCCL's log)")
            elif connected:
                out[(e.a, e.b)] = ({e.transport}, f"would use {e.transport}: {e.reason} "
                                                  f"(predicted: NCCL's run did not connect this pair)")
            else:
                out[(e.a, e.b)] = ({e.transport}, f"would use {e.transport}: {e.reason}")
        return out

    def fallbacks(self, measured_p2p: dict | None = None) -> list:
        observed = {pair: transports for pair, (transports, _) in self.pairs().items()}
        return find_fallbacks(self.expectations, observed, self.settings, measured_p2p)

    def account_line(self) -> str | None:
        """For the summary: what NCCL itself used (across nodes under torchrun), when it ran."""
        if self.account is None:
            return None
        gdr = "on" if self.account["gdrdma"] else "off"
        return f"gputopo NCCL used {', '.join(self.account['transports']) or 'no transport'} (GPUDirect RDMA {gdr}) [NCCL's own log]"


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
    s = suite(run) if observe else None
    if observe and topology.is_this_host and (len(topology.gpus) >= 2 or s.world_size):
        across = s.world_size is not None  # one GPU per rank, across nodes: pairs are ranks, not GPUs
        result = s.get(keys.NcclTransports(s.world_size or len(topology.gpus)))
        planned = result.origin == PLANNED
        if result.error is None and result.detail:
            log = result.detail["log"]
            account = {"pairs": {} if across else result.detail["pairs"], "transports": log["transports"],
                       "families": log.get("families", []), "gdrdma": log["gdrdma"]}
            origin = "NCCL's own log"
        else:
            origin += (" (NCCL's own run is not made in a plan)" if planned
                       else f" (NCCL's own account failed: {result.error})")
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
