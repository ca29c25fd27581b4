"""Facts beyond the topology in a pytest run: the lazy benchmark suite, the run's view of NCCL,
verdicts of the requirements judged on them, the generated items of ``--gputopo-check`` and the
``gputopo_bench`` fixture. Glue: facts from ``bench`` and ``nccl``, expectations from ``spec``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time

import pytest

from . import options
from ..render import report
from ..core import requirements as reqs
from ..core.model import P2PStatus, Topology

SUITE = pytest.StashKey["object"]()
# Outcomes and a test's own measurements travel in user_properties, so that they reach the
# controller (and JUnit XML) from xdist workers too.
CHECK_PROPERTY = "gputopo_check"
OWN_PROPERTY = "gputopo_test_measurement"
LEVELS = ("quick", "full")
CACHE_PREFIX = "gputopo/bench"


def topology_of(config: pytest.Config) -> Topology:
    from .hooks import TOPOLOGY

    return config.stash[TOPOLOGY]


# ---------------------------------------------------------------------------------------------
# The suite, built on first use


def settings(config: pytest.Config):
    from ..bench.suite import BenchSettings
    from ..runtime import environ as runtime

    engine = options.choice(config, "allreduce-engine", ("torch", "nccl-tests"), "torch")
    return BenchSettings(
        allreduce_backend=options.choice(config, "allreduce-backend", ("nccl", "gloo"), "nccl"),
        allreduce_engine=engine,
        allreduce_sched=options.choice(config, "allreduce-sched", ("fair", "fifo"), "fair"),
        world_size=options.number(config, "allreduce-world-size", None, integer=True),
        size_bytes=options.size(config, "allreduce-size"),
        timeout_s=options.number(config, "bench-timeout", 300.0),
        cache_max_age_s=options.number(config, "cache-max-age", 24.0) * 3600,
        nccl_tests_binary=runtime.find_all_reduce_perf() if engine == "nccl-tests" else None,
    )


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


def suite(config: pytest.Config):
    found = config.stash.get(SUITE, None)
    if found is not None:
        return found
    from ..bench.suite import BenchSuite

    topology = topology_of(config)
    cache_get = cache_set = None
    if options.flag(config, "cache") and getattr(config, "cache", None) is not None:
        prefix = f"{CACHE_PREFIX}/{fingerprint(topology)}/"

        def cache_get(key: str):
            """The entry as stored (``bench.untrusted`` checks it); pytest's cache itself reads a
            file that is not JSON as no entry, and one nested too deeply raises RecursionError."""
            try:
                return config.cache.get(prefix + key, None)
            except RecursionError:
                raise ValueError("nested too deeply to read") from None

        def cache_set(key: str, value: dict) -> None:
            config.cache.set(prefix + key, {**value, "time": time.time()})
    from .hooks import RANKS, SHARED_DIR

    ranks = config.stash.get(RANKS, None)
    across = shared = None
    if ranks is not None:
        from ..runtime.ranks import NodeShare, rendezvous

        across = rendezvous(ranks[0])
        shared = NodeShare(ranks[0], topology)
    elif SHARED_DIR in config.stash:
        from ..bench.suite import SharedFolder

        shared = SharedFolder(config.stash[SHARED_DIR])
    found = config.stash[SUITE] = BenchSuite(topology, settings(config), cache_get, cache_set, shared, across)
    return found


# ---------------------------------------------------------------------------------------------
# Expectations from the documents' table


def expected(config: pytest.Config, key: tuple):
    """What the link should give for a measurement (a ``spec.Figure``, or None), and in words what
    that rests on (the figure's label, or why there is none)."""
    from ..core import spec

    topology = topology_of(config)
    kind = key[0]
    if kind == "allreduce" and suite(config).settings.allreduce_backend == "gloo":
        return None, "gloo on CPUs (no link to judge it by)"
    if kind == "allreduce" and suite(config).world_size is not None:
        return None, "an all-reduce across the ranks of the run (no single link to judge it by)"
    if kind in ("p2p", "p2p_staged", "p2p_bidir"):
        fig = spec.p2p_expected(topology, key[1], key[2])
        if fig is not None and kind == "p2p_bidir":  # both directions at once: twice the per-direction rate
            fig = spec.Figure(2 * fig.gbps, fig.source, f"2 x {fig.label or 'the link'} (both directions)")
        link = topology.link(key[1], key[2])
        return fig, (fig.label if fig else f"{link.label or 'an unknown link'} (no figure for it)")
    if kind in ("h2d", "d2h"):
        fig = spec.h2d_expected(topology.gpus[key[1]], key[2])
        return fig, (fig.label if fig else "an unknown PCIe link")
    fig = spec.allreduce_expected_busbw(topology, key[1])
    return fig, (fig.label if fig else f"links among {key[1]} GPUs (unknown)")


FLOOR_OF = {"p2p": "p2p", "p2p_staged": "p2p", "p2p_bidir": "p2p", "allreduce": "allreduce"}


def floor_name(key: tuple) -> str:
    return FLOOR_OF.get(key[0]) or ("h2d_pinned" if key[2] else "h2d_pageable")


def judge(config: pytest.Config, requirement: reqs.FactRequirement,
          max_items: int | None = reqs.REASON_PAIRS) -> reqs.Verdict:
    """The verdict of a requirement judged on facts beyond the topology, its reason naming the
    source (``max_items=None``: name every failing pair, as a run gate does)."""
    if isinstance(requirement, reqs.BandwidthRequirement):
        return judge_bandwidth(config, requirement, max_items)
    topology = topology_of(config)
    view = nccl_view(config, observe=True)
    # What the verdict rests on: NCCL's run, and for no-fallback the P2P copies measured so far.
    transport = isinstance(requirement, reqs.TransportRequirement)
    wrong = wrong_data(config, ("nccl_transports",) if transport else ("nccl_transports", "p2p"))
    if wrong:  # the facts rest on runs whose data came back wrong: a broken node, never a skip
        reason = f"{requirement}: {'; '.join(wrong)} [{report.source_text(topology)}; {view.origin}]"
        return reqs.Verdict(False, reason, tuple(wrong), broken=True)
    if transport:
        verdict = requirement.judge(topology, view.pairs(), view.account, max_items)
    else:
        verdict = requirement.judge(view.fallbacks(measured_p2p(config)), max_items)
    if verdict.ok:
        return verdict
    return reqs.Verdict(False, f"{verdict.reason} [{report.source_text(topology)}; {view.origin}]", verdict.failures)


# ---------------------------------------------------------------------------------------------
# NCCL: what it should do (settings, NVML) and, on GPUs, what it did (its own log)

NCCL_VIEW = pytest.StashKey["NcclView"]()


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
        from ..nccl.expect import find_fallbacks

        observed = {pair: transports for pair, (transports, _) in self.pairs().items()}
        return find_fallbacks(self.expectations, observed, self.settings, measured_p2p)

    def account_line(self) -> str | None:
        """For the summary: what NCCL itself used (across nodes under torchrun), when it ran."""
        if self.account is None:
            return None
        gdr = "on" if self.account["gdrdma"] else "off"
        return f"gputopo NCCL used {', '.join(self.account['transports']) or 'no transport'} (GPUDirect RDMA {gdr}) [NCCL's own log]"


def wrong_data(config: pytest.Config, kinds: tuple) -> list[str]:
    """The benchmarks of ``kinds`` this run already did whose data came back wrong. Nothing is
    measured for it."""
    found = config.stash.get(SUITE, None)
    out = []
    for result in (found.results if found else []):
        if result.key[0] not in kinds:
            continue
        if result.key[0] == "nccl_transports" and result.detail.get("wrong"):
            out.append(f"{result.what}: {result.detail['wrong']} wrong elements after the all-reduce")
        elif result.gbps is not None and result.error:  # a figure with an error: its data were wrong
            out.append(f"{result.what}: data wrong: {result.error}")
    return out


def measured_p2p(config: pytest.Config) -> dict:
    """P2P copies this run already measured, as (measured, expected) GB/s per pair: a fallback cause
    when far below the link's figure. Nothing is measured for it."""
    found = config.stash.get(SUITE, None)
    out = {}
    for result in (found.results if found else []):
        if result.key[0] == "p2p" and result.gbps is not None and result.origin != "recorded":
            fig, _ = expected(config, result.key)
            if fig is not None:
                out[result.key[1:]] = (result.gbps, fig.gbps)
    return out


def nccl_view(config: pytest.Config, observe: bool = False) -> NcclView:
    """The run's view of NCCL; with ``observe``, on a GPU host, NCCL's own account of a small run
    (once per run, like any benchmark)."""
    view = config.stash.get(NCCL_VIEW, None)
    if view is not None and (view.observed or not observe):
        return view
    from ..runtime import environ as runtime
    from ..nccl.expect import expected_transports, read_settings

    topology = topology_of(config)
    environ, files = runtime.nccl_inputs()
    settings = read_settings(environ, files)
    vendor = runtime.cpu_vendor() if topology.is_this_host else None
    expectations = expected_transports(topology, settings, vendor)
    account, origin = None, "predicted from NCCL's settings and NVML"
    s = suite(config) if observe else None
    if observe and topology.is_this_host and (len(topology.gpus) >= 2 or s.world_size):
        across = s.world_size is not None  # one GPU per rank, across nodes: pairs are ranks, not GPUs
        result = s.get(("nccl_transports", s.world_size or len(topology.gpus)))
        if result.error is None and result.detail:
            log = result.detail["log"]
            account = {"pairs": {} if across else result.detail["pairs"], "transports": log["transports"],
                       "families": log.get("families", []), "gdrdma": log["gdrdma"]}
            origin = "NCCL's own log"
        else:
            origin += f" (NCCL's own account failed: {result.error})"
    elif observe:
        origin += " (NCCL does not run here)" if topology.is_this_host else " (not this host: NCCL cannot run on it)"
    view = config.stash[NCCL_VIEW] = NcclView(topology, settings, expectations, account, origin, observe)
    return view


def predicted_fallback_line(config: pytest.Config) -> str:
    """For the header: the fallback NCCL's settings and NVML predict, and its cause ("" if none)."""
    from ..nccl.expect import fallback_summary

    line = fallback_summary(nccl_view(config).fallbacks())
    return f"gputopo {line} [predicted from NCCL's settings and NVML]" if line else ""


def threshold(config: pytest.Config, key: tuple, size_bytes: int | None = None, gbps: float | None = None,
              floor: float | None = None, nvls: bool | None = None):
    """The one threshold rule for a measured figure, the same for a ``min_*_bw`` marker and a check
    item: the marker's own ``gbps``; else a published per-SKU floor (the all-reduce of a full node,
    taken at ``size_bytes``, unless the user set a floor; a floor that assumes NVLink SHARP does not
    apply when NCCL said it did not take it, ``nvls`` False); else the floor (the marker's, else option /
    ini / env, else the default) x the expected figure. Returns (expected ``spec.Figure`` or None,
    what the expectation rests on, the floor ratio, the absolute ``spec.Figure`` or None): the
    arguments of ``spec.Check``, whose ``needed_gbps`` is the threshold."""
    from ..core import spec

    fig, basis = expected(config, key)
    floors, explicit = options.floors(config)
    name = floor_name(key)
    ratio = floor if floor is not None else floors[name]
    if gbps is not None:
        return fig, basis, ratio, spec.Figure(gbps, "the marker", f"the marker's {gbps:g} GB/s")
    topology = topology_of(config)
    published = None
    if key[0] == "allreduce" and floor is None and name not in explicit and topology.gpus:
        published = spec.sku_allreduce_floor(topology.gpus[0].name, key[1], size_bytes or key[2], nvls)
    return fig, basis, ratio, published


def _taken_at(result) -> int | None:
    """The size an all-reduce figure was taken at (a recorded figure says; else the key's)."""
    return result.detail.get("size_bytes", result.key[2]) if result.key[0] == "allreduce" else None


def judge_bandwidth(config: pytest.Config, requirement: reqs.BandwidthRequirement,
                    max_items: int | None = reqs.REASON_PAIRS) -> reqs.Verdict:
    """The verdict of a ``min_*_bw`` marker, its reason naming the source."""
    topology = topology_of(config)
    s = suite(config)
    figures = []
    for key in requirement.keys(topology, s.allreduce_key):
        result = s.get(key)
        fig, basis, ratio, absolute = threshold(config, key, _taken_at(result), requirement.gbps, requirement.floor,
                                               result.detail.get("nvls"))
        needed = absolute.gbps if absolute is not None else (ratio * fig.gbps if fig is not None else None)
        set_by = f"published {absolute.label or absolute.source}" if absolute and requirement.gbps is None else ""
        figures.append((reqs.Figure(result.gbps, result.origin, result.what, result.source, result.error,
                                    result.interval_gbps),
                        fig.gbps if fig else None, basis, needed, set_by))
    verdict = requirement.judge(topology, figures, max_items)
    if verdict.ok:
        return verdict
    return reqs.Verdict(False, f"{verdict.reason} [{report.source_text(topology)}]", verdict.failures, verdict.broken)


# ---------------------------------------------------------------------------------------------
# --gputopo-check: generated items


class CheckItem(pytest.Item):
    """One health check; passes or fails with measured, expected, floor and ratio in its message."""

    def __init__(self, *, check, **kwargs):
        super().__init__(**kwargs)
        self._check = check

    def runtest(self) -> None:
        outcome, message, props = self._check()
        for key, value in props.items():
            self.user_properties.append((key, value))
        self.user_properties.append((CHECK_PROPERTY, json.dumps({"check": self.name, "outcome": outcome,
                                                                 "message": message})))
        if outcome == "failed":
            pytest.fail(message, pytrace=False)
        if outcome == "skipped":
            pytest.skip(message)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value)

    def reportinfo(self):
        return "gputopo-check", None, f"gputopo-check {self.name}: {self._doc}"

    @property
    def _doc(self) -> str:
        return getattr(self._check, "__doc__", "") or ""


class CheckCollector(pytest.Collector):
    def __init__(self, *, level: str, **kwargs):
        super().__init__(**kwargs)
        self.level = level

    def collect(self):
        topology = topology_of(self.config)
        for name, check in _checks(self.config, topology, self.level):
            yield CheckItem.from_parent(self, name=name, check=check)


def check_items(session: pytest.Session) -> list:
    raw = options.choice(session.config, "check", LEVELS, "quick") if options.value(session.config, "check")[0] else None
    if raw is None:
        return []
    collector = CheckCollector.from_parent(session, name="gputopo-check", nodeid="gputopo-check", level=raw)
    # Collected through pytest's own hooks, so that the items are counted and reported like any others.
    rep = session.ihook.pytest_make_collect_report(collector=collector)
    session.ihook.pytest_collectreport(report=rep)
    return [item for item in rep.result if isinstance(item, pytest.Item)]


def _checks(config, topology: Topology, level: str):
    def problem():
        """the machine was learned"""
        if not topology.gpus:
            return "failed", f"no GPU: {topology.problem or 'NVML lists none'} [{report.source_text(topology)}]", {}
        if topology.warnings:
            return "failed", "; ".join(topology.warnings), {}
        return "passed", report.header_line(topology), {}
    yield "topology", problem

    for gpu in topology.gpus:
        def pcie(gpu=gpu):
            """the PCIe link runs at its full width"""
            if gpu.pcie_width_current is None or gpu.pcie_width_max is None:
                return "skipped", f"GPU{gpu.index}: PCIe width unknown", {}
            # The width, against the maximum for this device and system: the generation is not
            # judged, as an idle GPU drops to Gen1 to save power (a slow link shows in the copies).
            now = f"Gen{gpu.pcie_gen_current or '?'} x{gpu.pcie_width_current} now"
            if gpu.pcie_width_current < gpu.pcie_width_max:
                return ("failed", f"GPU{gpu.index} PCIe link trained down: x{gpu.pcie_width_current} of "
                                  f"x{gpu.pcie_width_max} (current width against the maximum; "
                                  f"Gen{gpu.pcie_gen_current or '?'} of Gen{gpu.pcie_gen_max or '?'})", {})
            return "passed", (f"GPU{gpu.index} PCIe {now}, max Gen{gpu.pcie_gen_max or '?'} "
                              f"x{gpu.pcie_width_max} (current width against the maximum)"), {}
        yield f"pcie[GPU{gpu.index}]", pcie
        if gpu.nvlinks:
            def nvlink(gpu=gpu):
                """every NVLink is up"""
                down = [ln.link for ln in gpu.nvlinks if not ln.active]
                if not gpu.active_nvlinks and not any(g.active_nvlinks for g in topology.gpus):
                    # NVLink-capable PCIe cards without a bridge (A100/H100 PCIe, RTX A6000) report every
                    # link present and down: GPUs without NVLink. A lost link shows against a reference
                    # (--gputopo-expect), or as some up and some down.
                    return "skipped", (f"GPU{gpu.index}: no NVLink up on any GPU: a machine without NVLink "
                                       f"(e.g. PCIe cards without a bridge), not a fault"), {}
                if down:
                    return "failed", f"GPU{gpu.index}: NVLinks {down} are down ({gpu.active_nvlinks}/{len(gpu.nvlinks)} up)", {}
                return "passed", f"GPU{gpu.index}: {len(gpu.nvlinks)}/{len(gpu.nvlinks)} NVLinks up", {}
            yield f"nvlink[GPU{gpu.index}]", nvlink

    for link in topology.pairs():
        def p2p_status(link=link):
            """NVML reports P2P read and write OK"""
            statuses = {link.p2p.read, link.p2p.write}
            label = link.label or "unknown link"
            if statuses == {P2PStatus.OK}:
                return "passed", f"{link.name} ({label}): P2P read and write OK", {}
            refused = sorted(s.description for s in statuses if s not in (P2PStatus.OK, P2PStatus.UNKNOWN))
            if not refused:
                return "skipped", f"{link.name} ({label}): P2P status unknown (the source did not report it)", {}
            # GeForce cards report CNS as often as GNS: both are cards without P2P, not a broken node.
            if statuses <= {P2PStatus.GPU_NOT_SUPPORTED, P2PStatus.CHIPSET_NOT_SUPPORTED, P2PStatus.OK}:
                return "skipped", (f"{link.name} ({label}): P2P not supported by this GPU model or chipset "
                                   f"({', '.join(refused)}; not a fault)"), {}
            return "failed", f"{link.name} ({label}): P2P refused: {', '.join(refused)}", {}
        yield f"p2p_status[{link.name}]", p2p_status

    if level != "full":
        return
    for link in topology.pairs():
        yield f"p2p_bw[GPU{link.a}->GPU{link.b}]", _bandwidth_check(config, topology, ("p2p", link.a, link.b))
        yield f"p2p_bidir_bw[GPU{link.a}<->GPU{link.b}]", _bandwidth_check(config, topology,
                                                                           ("p2p_bidir", link.a, link.b))
    for gpu in topology.gpus:
        for kind, pinned, name in (("h2d", True, "h2d_bw"), ("h2d", False, "h2d_pageable_bw"), ("d2h", True, "d2h_bw")):
            yield f"{name}[GPU{gpu.index}]", _bandwidth_check(config, topology, (kind, gpu.index, pinned))
    s = suite(config)
    if topology.gpus or s.settings.allreduce_backend == "gloo":
        yield "allreduce_bw", _bandwidth_check(config, topology, s.allreduce_key(None, None))


def _bandwidth_check(config, topology: Topology, key: tuple):
    def check():
        """measured bandwidth reaches the floor of the expected"""
        from ..core import spec

        s = suite(config)
        result = s.get(key)
        props = {"gputopo_measurement": json.dumps(result.to_json())}
        if result.gbps is None:  # on a recorded machine, or a pair without P2P: no fault of the node's
            not_p2p = result.detail.get("peer_access") is False  # the p2p_status item judges that
            return ("skipped" if result.origin == "recorded" or not_p2p else "failed"), \
                f"{result.what}: no figure: {result.error}", props
        origin = "measured" if result.origin != "recorded" else f"recorded, not measured: {result.source}"
        if result.interval_gbps:
            origin += f"; {spec.interval_text(result.interval_gbps)} GB/s"
        if result.error:
            return "failed", f"{result.what}: {result.gbps:.2f} GB/s ({origin}); data wrong: {result.error}", props
        fig, basis, ratio, published = threshold(config, key, _taken_at(result), nvls=result.detail.get("nvls"))
        check = spec.Check(result.gbps, fig, ratio, published)
        text = f"{result.what}: {check.describe()} ({origin})"
        if check.passed() is None:
            return "passed", f"{text}; not judged: {basis}", props
        if key[0] == "p2p":
            staged = s.get(("p2p_staged",) + key[1:])
            if staged.gbps is not None and staged.gbps > result.gbps:
                return "failed", f"{text}; P2P is slower than staging through the host ({staged.gbps:.2f} GB/s)", props
        return ("passed" if check.passed() else "failed"), text, props
    return check


# ---------------------------------------------------------------------------------------------
# The gputopo_bench fixture

class BenchFixture:
    """What ``gputopo_bench`` gives a test: the plugin's harness for its own measurements, and the
    run's shared benchmark results (each measured at most once per run)."""

    def __init__(self, config: pytest.Config, node: pytest.Item):
        self._config = config
        self._node = node

    def measure(self, name: str, run, *, size_bytes: int, device=None, verify=None, **options):
        """Time ``run(k)`` (k back-to-back iterations) with warm-up, a stable median and verification
        after timing (see ``pytest_gputopo.bench.harness.measure``). ``device``: a CUDA device to time
        with CUDA events; None times with the wall clock."""
        from ..bench.harness import CudaEventTimer, WallTimer, measure

        timer = CudaEventTimer(device) if device is not None else WallTimer()
        result = measure(name, run, size_bytes=size_bytes, timer=timer, verify=verify, **options)
        self._node.user_properties.append(
            (OWN_PROPERTY, json.dumps({"test": self._node.nodeid, "origin": "measured", **result.to_json()})))
        return result

    def allreduce(self, gpus: int | None = None, size: int | None = None):
        s = suite(self._config)
        return s.get(s.allreduce_key(gpus, size))

    def p2p(self, a: int, b: int, *, peer: bool = True):
        return suite(self._config).get(("p2p" if peer else "p2p_staged", a, b))

    def h2d(self, gpu: int, *, pinned: bool = True):
        return suite(self._config).get(("h2d", gpu, pinned))
