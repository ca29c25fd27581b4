"""Facts beyond the topology in a pytest run, made on first use and kept with the run object: the
lazy benchmark suite (cached across runs in pytest's cache), what a measurement should reach by
the documents' table, and the run's view of NCCL (predicted from its settings and NVML, or its own
log of a small run). Glue: figures from ``bench``, expectations from ``core.spec``, rules from
``nccl``."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time

from ..bench.suite import PLANNED, BenchSuite, SharedFolder
from ..core import collectives, keys, spec
from ..core.model import Topology
from ..core.units import counted
from ..nccl.expect import expected_transports, fallback_summary, find_fallbacks
from ..nccl.settings import read_settings
from ..runtime import environ
from .run import GputopoRun

CACHE_PREFIX = "gputopo/bench"


# ---------------------------------------------------------------------------------------------
# The suite, built on first use


def fingerprint(topology: Topology) -> str:
    """Host, GPUs, driver and library versions: cached results are reused only on the same setup."""
    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None
    facts = [topology.hostname, [g.uuid for g in topology.gpus], topology.driver_version,
             topology.cuda_driver_version, version("torch"), version("pytest-gputopo")]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def suite(run: GputopoRun) -> BenchSuite:
    found = run.derived.get("suite")
    if found is not None:
        return found
    across = shared = None
    if run.ranks is not None:
        from ..runtime.ranks import NodeShare, rendezvous

        across = rendezvous(run.ranks.exchange)
        shared = NodeShare(run.ranks.exchange, run.topology)
    elif run.shared_dir is not None:
        shared = SharedFolder(run.shared_dir)
    found = run.derived["suite"] = BenchSuite(run.topology, run.settings.bench, *_cache(run), shared, across)
    from .progress import Progress

    found.progress = Progress(run)
    if run.settings.plan:  # a dry run: what would be measured is listed, never measured
        found.planned = []
    return found


def _cache(run: GputopoRun) -> tuple:
    """(get, set) of benchmark results in pytest's cache under this setup's fingerprint, or (None,
    None) without ``--gputopo-cache``."""
    config = run.config
    if not run.settings.cache or getattr(config, "cache", None) is None:
        return None, None
    prefix = f"{CACHE_PREFIX}/{fingerprint(run.topology)}/"

    def get(key: str):
        """The entry as stored (``bench.untrusted`` checks it); pytest's cache itself reads a file
        that is not JSON as no entry, and one nested too deeply raises RecursionError."""
        try:
            return config.cache.get(prefix + key, None)
        except RecursionError:
            raise ValueError("nested too deeply to read") from None

    def put(key: str, value: dict) -> None:
        config.cache.set(prefix + key, {**value, "time": time.time()})
    return get, put


def results(run: GputopoRun) -> list:
    """The benchmark results this process has so far (nothing is measured for it)."""
    found = run.derived.get("suite")
    return found.results if found else []


# ---------------------------------------------------------------------------------------------
# Expectations from the documents' table


def expected(run: GputopoRun, key: keys.Key):
    """What the link should give for a measurement (a ``spec.Figure``, or None), and in words what
    that rests on (the figure's label, or why there is none)."""
    topology = run.topology
    if isinstance(key, keys.Copy):
        fig = spec.p2p_expected(topology, key.src, key.dst)
        if fig is not None and key.kind == "p2p_bidir":  # both directions at once: twice the per-direction rate
            fig = spec.Figure(2 * fig.gbps, fig.source, f"2 x {fig.label or 'the link'} (both directions)")
        link = topology.link(key.src, key.dst)
        return fig, (fig.label if fig else f"{link.label or 'an unknown link'} (no figure for it)")
    if isinstance(key, keys.HostCopy):
        fig = spec.h2d_expected(topology.gpus[key.gpu], key.pinned)
        return fig, (fig.label if fig else "an unknown PCIe link")
    if run.settings.bench.allreduce_backend == "gloo":
        return None, "gloo on CPUs (no link to judge it by)"
    if suite(run).world_size is not None:
        return None, "an all-reduce across the ranks of the run (no single link to judge it by)"
    fig = collectives.allreduce_expected_busbw(topology, key.ranks, key.devices)
    among = ", ".join(f"GPU{d}" for d in key.devices) if key.devices else counted(key.ranks, "GPU")
    return fig, (fig.label if fig else f"links among {among} (unknown)")


def wrong_data(run: GputopoRun, kinds: tuple) -> list[str]:
    """The benchmarks of ``kinds`` this run already did whose data came back wrong. Nothing is
    measured for it."""
    out = []
    for result in results(run):
        if result.key.kind not in kinds:
            continue
        if isinstance(result.key, keys.NcclTransports) and result.detail.get("wrong"):
            out.append(f"{result.what}: {result.detail['wrong']} wrong elements after the all-reduce")
        elif result.gbps is not None and result.error:  # a figure with an error: its data were wrong
            out.append(f"{result.what}: data wrong: {result.error}")
    return out


def measured_p2p(run: GputopoRun) -> dict:
    """P2P copies this run already measured, as (measured, expected) GB/s per pair: a fallback cause
    when far below the link's figure. Nothing is measured for it."""
    out = {}
    for result in results(run):
        key = result.key
        if key.kind == "p2p" and result.gbps is not None and result.origin != "recorded":
            fig, _ = expected(run, key)
            if fig is not None:
                out[(key.src, key.dst)] = (result.gbps, fig.gbps)
    return out


# ---------------------------------------------------------------------------------------------
# NCCL: what it should do (settings, NVML) and, on GPUs, what it did (its own log)


class NcclView:
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
    view = run.derived.get("nccl_view")
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
        run.derived["nccl_view"] = view
    return view


def predicted_fallback_line(run: GputopoRun) -> str:
    """For the header: the fallback NCCL's settings and NVML predict, and its cause ("" if none)."""
    line = fallback_summary(nccl_view(run).fallbacks())
    return f"gputopo {line} [predicted from NCCL's settings and NVML]" if line else ""
