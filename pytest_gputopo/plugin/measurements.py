"""The run's measurements: the benchmark suite, made on first use and kept in the run's state
(cached across runs in pytest's cache, shared between xdist workers or across the ranks of a
launch), what a measurement should reach by the documents' table, and what the run already
measured (nothing is measured for those). Glue: figures from ``bench``, expectations from
``core.spec`` and ``core.collectives``."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from ..bench.shared_folder import SharedFolder
from ..bench.suite import BenchSuite
from ..core import faults, keys, spec
from ..core.model import Topology
from ..core.units import counted
from .run import GputopoRun

CACHE_PREFIX = "gputopo/bench"


# ---------------------------------------------------------------------------------------------
# The suite, built on first use


def fingerprint(topology: Topology) -> str:
    """Host, GPUs, driver and library versions: cached results are reused only on the same setup."""
    from ..runtime.software import installed

    facts = [
        topology.hostname,
        [g.uuid for g in topology.gpus],
        topology.driver_version,
        topology.cuda_driver_version,
        installed("torch"),
        installed("pytest-gputopo"),
    ]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def suite(run: GputopoRun) -> BenchSuite:
    found = run.state.suite
    if found is not None:
        return found
    shared: Any  # a NodeShare or a SharedFolder: anything with get_figure and put_figure
    across = shared = None
    if run.ranks is not None:
        from ..runtime.ranks import NodeShare, rendezvous

        across = rendezvous(run.ranks.exchange)
        shared = NodeShare(run.ranks.exchange, run.topology)
    elif run.shared_dir is not None:
        shared = SharedFolder(run.shared_dir)
    found = run.state.suite = BenchSuite(run.topology, run.settings.bench, *_cache(run), shared, across)
    from .progress import Progress

    found.progress = Progress(run)
    if run.settings.plan:  # a dry run: what would be measured is listed, never measured
        found.planned, found.unrecorded = [], []
    return found


def _cache(run: GputopoRun) -> tuple[Callable[[str], Any] | None, Callable[[str, Any], None] | None]:
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
    found = run.state.suite
    return found.results if found else []


# ---------------------------------------------------------------------------------------------
# Expectations from the documents' table


def expected(run: GputopoRun, key: keys.Key) -> tuple[spec.Figure | None, str]:
    """What the link should give for a measurement (a ``spec.Figure``, or None), and in words what
    that rests on (the figure's label, or why there is none): the figure ``core.faults.expected``
    looks up for the health check's judgement too, so that a figure gets one verdict everywhere."""
    topology = run.topology
    if not isinstance(key, (keys.Copy, keys.HostCopy)):  # an all-reduce
        if run.settings.bench.allreduce_backend == "gloo":
            return None, "gloo on CPUs (no link to judge it by)"
        if run.ranks is not None:  # under a launcher the suite's all-reduce spans the ranks (``suite``'s ``across``)
            return None, "an all-reduce across the ranks of the run (no single link to judge it by)"
    fig, _ = faults.expected(topology, key)
    if fig is not None:
        return fig, fig.label
    if isinstance(key, keys.Copy):
        return None, f"{topology.link(key.src, key.dst).label or 'an unknown link'} (no figure for it)"
    if isinstance(key, keys.HostCopy):
        return None, "an unknown PCIe link"
    if isinstance(key, keys.AllReduce):
        among = ", ".join(f"GPU{d}" for d in key.devices) if key.devices else counted(key.ranks, "GPU")
        return None, f"links among {among} (unknown)"
    return None, "no link to judge it by"  # NCCL's transports: no figure is expected of them


def expectations(run: GputopoRun, wanted: list) -> dict:
    """``expected`` of each key of ``wanted``, by key."""
    return {key: expected(run, key) for key in wanted}


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
