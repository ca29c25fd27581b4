"""Benchmarks on demand: each runs at most once per run, only when something selected needs it.

``BenchSuite.get(key)`` returns a ``BenchResult``; keys name the measurement (``core.keys``:
``Copy``, ``HostCopy``, ``AllReduce``, ``NcclTransports``). On a recorded machine the
figures published for it are served instead, labelled ``recorded`` with their source: nothing can
be measured on a machine that is not this host (a recorded profile or ``nvidia-smi`` text), and
this host's figures (gloo's CPU all-reduce included) are never served as that machine's. Measurements
take the host's benchmark lock (``bench.host_lock``) so that two pytest processes (xdist workers,
parallel jobs) never benchmark the same host at once, and may be kept in pytest's cache across runs
(``--gputopo-cache``). torch is imported only by the benchmarks.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ..core import keys, model
from ..core.requirements import MIG_INSTANCE, mig_enabled
from . import untrusted
from .bench_result import BenchResult
from .bench_settings import BenchSettings
from .host_lock import LockRefused, host_lock
from .subproc import CopyWorker

# Benchmarks every rank of a distributed run takes part in at once.
ACROSS_RANKS = (keys.AllReduce, keys.NcclTransports)
# The origin of a result a plan (--gputopo-plan) stands in for a measurement: never a figure, never kept.
PLANNED = "planned"


def _shared_result(data, key: keys.Key) -> BenchResult:
    """A result another process of this run left for ``key``: whole, and the figure of that very
    benchmark (a valid figure of another pair is no figure of this one); ValueError says why not."""
    result = BenchResult.from_json(data)
    if result.key != key:
        raise ValueError(f"it is the figure of {result.key.describe()}, not of {key.describe()}")
    return result


class BenchSuite:
    def __init__(
        self,
        topology: model.Topology,
        settings: BenchSettings,
        cache_get: Callable[[str], Any] | None = None,
        cache_set: Callable[[str, Any], None] | None = None,
        shared: Any = None,
        across_ranks: Callable[[tuple], tuple] | None = None,
    ):
        self.topology = topology
        self.settings = settings
        self._results: dict[keys.Key, BenchResult] = {}
        self._cache_get, self._cache_set = cache_get, cache_set
        # Where the processes of this run on this host share results: a SharedFolder (xdist workers)
        # or a ranks.NodeShare (torchrun ranks on one node); anything with get(name) and put(name, dict).
        self._shared = shared
        # Under torchrun: key -> (rank, world size, init URL, this rank's GPU or None); the
        # all-reduce then spans every rank of the run, one process (one GPU) each, across nodes.
        self._across_ranks = across_ranks
        self.world_size = across_ranks(("world",))[1] if across_ranks else None
        self._copies = CopyWorker()  # one child for a burst of copies (bench.subproc)
        # Told when a measurement starts (``progress(what, None, 0)``) and ends (with its result and
        # seconds): only measurements, never a cached, shared or recorded figure.
        self.progress: Callable[[str, BenchResult | None, float], None] | None = None
        # A plan (--gputopo-plan): a list, where each measurement the run would make is appended instead
        # of made; figures at hand (recorded, cached) are still taken. None: measure.
        self.planned: list[keys.Key] | None = None
        # A plan of a machine that is not this host (a CI pool's recorded node): each figure asked for
        # that the machine records none of, appended as it is asked (the node itself would measure it).
        self.unrecorded: list[keys.Key] | None = None
        self._unrecorded: set[keys.Key] = set()

    def close(self) -> None:
        """End what the suite keeps running between benchmarks (the copy child, if it lives)."""
        self._copies.close()

    @property
    def results(self) -> list[BenchResult]:
        return list(self._results.values())

    def allreduce_key(self, gpus: int | tuple[int, ...] | None, size: int | None) -> keys.AllReduce:
        """The all-reduce a test names: across the ranks of the run under a launcher; among gloo's CPU
        processes; else among ``gpus`` (a number: cuda:0..n-1; a list: those GPUs; None: all)."""
        size = self.settings.judge_size(size)
        if self.world_size is not None:
            return keys.AllReduce(self.world_size, size)
        if self.settings.allreduce_backend == "gloo":
            return keys.AllReduce(self.settings.world_size or 2, size)
        if isinstance(gpus, (tuple, list)):
            return keys.AllReduce(len(gpus), size, tuple(sorted(gpus)))
        return keys.AllReduce(gpus or len(self.topology.gpus), size)

    def get(self, key: keys.Key) -> BenchResult:
        result = self._results.get(key)
        if result is None:
            result = self._obtain(key)
            if result.origin != PLANNED:  # a plan's stand-in is asked again, so each asker lists the key
                self._results[key] = result
        if self.unrecorded is not None and key in self._unrecorded:
            self.unrecorded.append(key)
        return result

    # -- where a figure comes from ----------------------------------------------------------------

    def _obtain(self, key: keys.Key) -> BenchResult:
        name = keys.name_of(key)
        refused = self._refused(key)
        if refused:
            return BenchResult(
                key, key.describe(), None, "measured" if self.topology.is_this_host else "recorded", error=refused
            )
        if not self.topology.is_this_host:  # a recorded or text machine: only its own figures
            result = self._recorded(key)
            if result.gbps is None:
                self._unrecorded.add(key)
            if self._shared is not None:  # for the controller's report, as a measurement would be
                self._shared.put_figure(key, name, self._uuids(key), result.to_json())
            return result
        if isinstance(key, keys.AllReduce):  # the cache outlives the run: name what else makes the figure
            s = self.settings
            name += f"-{s.allreduce_backend}-{s.allreduce_engine}-{s.allreduce_sched}"
        if self.planned is not None:  # nothing is measured: no lock to wait for; a cached figure is still taken
            return self._cached_or_measured(key, name)
        if self._across_ranks is not None and isinstance(key, ACROSS_RANKS):
            # Every rank takes part at once: a host lock would deadlock the ranks of one node.
            return self._cached_or_measured(key, name)
        try:
            # One benchmark at a time on this host; and under the lock, a result another process of
            # this run already measured is taken instead of measuring again.
            with host_lock(self.settings.timeout_s):
                distrust = None
                if self._shared is not None:
                    try:
                        found = self._shared.get_figure(key, name, self._uuids(key))
                        if found is not None:
                            return _shared_result(found, key)
                    except ValueError as exc:
                        distrust = f"the figure another process of this run left was not trusted: {exc}"
                result = self._cached_or_measured(key, name, distrust)
                if self._shared is not None:
                    self._shared.put_figure(key, name, self._uuids(key), result.to_json())
                return result
        except LockRefused:
            raise  # a folder planted by another user: the test errors, naming it (never a quiet skip)
        except OSError as exc:  # TimeoutError: another process held the lock past the timeout
            return BenchResult(key, key.describe(), None, "measured", error=str(exc))

    def _cached_or_measured(self, key: keys.Key, name: str, distrust: str | None = None) -> BenchResult:
        if self._cache_get is not None and distrust is None:
            now = time.time()
            try:
                entry = self._cache_get(name)
                problem = None if entry is None else untrusted.cache_entry_problem(entry, now)
            except ValueError as exc:  # pytest's cache could not read it
                entry, problem = None, str(exc)
            if problem:
                distrust = f"the cached figure was not trusted: {problem}"
            elif entry is not None and now - entry["time"] <= self.settings.cache_max_age_s:
                return BenchResult(key, key.describe(), float(entry["gbps"]), "cached", detail=entry.get("detail", {}))
        result = self._measure(key)
        if distrust:  # said wherever the figure appears: a reason, the JSON report
            result = dataclasses.replace(result, what=f"{result.what} (measured again: {distrust})")
        if self._cache_set is not None and result.gbps is not None and result.error is None:
            self._cache_set(name, {"gbps": result.gbps, "detail": result.detail})
        return result

    def _gpus_of(self, key: keys.Key) -> tuple[int, ...]:
        """The GPUs (indices here) a measurement runs on; none known for gloo or across ranks."""
        gpus: tuple[int, ...]
        if isinstance(key, keys.Copy):
            gpus = (key.src, key.dst)
        elif isinstance(key, keys.HostCopy):
            gpus = (key.gpu,)
        elif self._across_ranks is not None or (
            isinstance(key, keys.AllReduce) and self.settings.allreduce_backend == "gloo"
        ):
            gpus = ()
        else:
            gpus = getattr(key, "devices", None) or tuple(range(key.ranks))
        return tuple(g for g in gpus if g < len(self.topology.gpus))

    def _uuids(self, key: keys.Key) -> list[str] | None:
        """The UUIDs of the GPUs a measurement runs on, in the key's order: what its figure is shared
        under (a leased test's process numbers its GPUs from cuda:0); None where one is not known."""
        gpus = self._gpus_of(key)
        uuids = [self.topology.gpus[g].uuid for g in gpus]
        if not gpus or len(gpus) != len(keys.gpus_of(key)) or not all(uuids):
            return None
        return uuids  # type: ignore[return-value]  # all known: strings

    def _refused(self, key: keys.Key) -> str | None:
        """Why no figure can be had for ``key`` whatever is measured or published: its GPUs have MIG
        enabled (a figure of the whole GPU is not an instance's), or, on this host, a GPU's compute
        mode lets no process create a CUDA context on it."""
        gpus = self._gpus_of(key)
        mig = mig_enabled(self.topology, gpus)
        if mig:
            return f"unknown: {mig} ({MIG_INSTANCE}), so the GPU's figures are not what a process gets"
        prohibited = [f"GPU{g}" for g in gpus if self.topology.gpus[g].compute_mode == "Prohibited"]
        if prohibited and self.topology.is_this_host:
            return (
                f"cannot measure: {' and '.join(prohibited)} {'is' if len(prohibited) == 1 else 'are'} in "
                f"compute mode Prohibited (NVML_COMPUTEMODE_PROHIBITED): no process may create a CUDA context"
            )
        return None

    def _recorded(self, key: keys.Key) -> BenchResult:
        """The figure published for a machine that is not this host, or why there is none."""
        name = str(self.topology.source)
        if isinstance(key, keys.AllReduce) and self.settings.allreduce_backend == "gloo":
            return BenchResult(
                key,
                key.describe(),
                None,
                "recorded",
                error=(f"gloo measures this host's CPUs, and {name} is not this host"),
            )
        # A figure measured on this pair (this GPU) first, then one that stands for every pair.
        for fig in sorted(self.topology.published, key=lambda f: "src" not in f and "gpu" not in f):
            if fig["kind"] != key.kind:
                continue
            if isinstance(key, keys.Copy) and "src" in fig and (fig["src"], fig["dst"]) != (key.src, key.dst):
                continue
            if isinstance(key, keys.HostCopy) and "gpu" in fig and fig["gpu"] != key.gpu:
                continue
            if isinstance(key, keys.AllReduce) and (key.devices or fig.get("gpus") not in (None, key.ranks)):
                continue  # a published figure names how many GPUs, never which ones
            if isinstance(key, keys.HostCopy) and fig.get("pinned", True) != key.pinned:
                continue
            note = f"; {fig['note']}" if fig.get("note") else ""
            taken_at = key
            if isinstance(key, keys.AllReduce) and fig.get("size_bytes"):
                taken_at = keys.AllReduce(key.ranks, fig["size_bytes"])
            return BenchResult(
                key, taken_at.describe(), float(fig["gbps"]), "recorded", source=fig["source"] + note, detail=dict(fig)
            )
        if isinstance(key, keys.NcclTransports):
            return BenchResult(
                key, key.describe(), None, "recorded", error=f"NCCL cannot run on {name}, which is not this host"
            )
        return BenchResult(
            key,
            key.describe(),
            None,
            "recorded",
            error=f"none published for {name}, which is not this host and cannot be measured",
        )

    def _measure(self, key: keys.Key) -> BenchResult:
        gloo = isinstance(key, keys.AllReduce) and self.settings.allreduce_backend == "gloo"
        if not gloo and not self.topology.gpus:
            why = self.topology.problem or "no GPU visible"
            return BenchResult(key, key.describe(), None, "measured", error=f"cannot measure on this host: {why}")
        if self.planned is not None:
            self.planned.append(key)
            return BenchResult(key, key.describe(), None, PLANNED, error="a plan (--gputopo-plan) measures nothing")
        if self.progress is None:
            return self._measure_now(key)
        self.progress(key.describe(), None, 0.0)
        start = time.monotonic()
        result = self._measure_now(key)
        self.progress(result.what, result, time.monotonic() - start)
        return result

    def _measure_now(self, key: keys.Key) -> BenchResult:
        try:
            gbps, detail, error = self._run(key)
        except Exception as exc:  # BenchError, timeouts, CUDA errors: a reason, never a crashed run
            return BenchResult(key, key.describe(), None, "measured", error=f"{type(exc).__name__}: {exc}")
        what = key.describe()
        if detail.get("nvls"):  # NCCL said it used NVLink SHARP: the switch reduced, busbw is no link's rate
            what += " with NVLink SHARP (NVLS: busbw does not describe a link)"
        return BenchResult(key, what, gbps, "measured", error=error, detail=detail)

    def _run(self, key: keys.Key) -> tuple[float | None, dict, str | None]:
        s = self.settings
        peer, devices = None, None
        if self._across_ranks is not None and isinstance(key, ACROSS_RANKS):
            rank, _, url, device = self._across_ranks(tuple(key.to_list()))
            peer, devices = (rank, url), (None if device is None else [device])
        elif isinstance(key, keys.AllReduce) and key.devices:
            devices = list(key.devices)  # rank r on key.devices[r]
        if isinstance(key, keys.NcclTransports):
            return None, nccl_account(key.ranks, s.timeout_s, peer=peer, devices=devices), None
        if isinstance(key, keys.AllReduce):
            if s.allreduce_engine == "nccl-tests":
                from .nccl_tests import run_all_reduce_perf

                if not s.nccl_tests_binary:
                    raise FileNotFoundError("all_reduce_perf (nccl-tests) is not installed or not on PATH")
                if key.devices:
                    raise ValueError(
                        "nccl-tests runs on cuda:0..n-1; an all-reduce on named GPUs is measured "
                        "by the torch.distributed engine"
                    )
                res = run_all_reduce_perf(s.nccl_tests_binary, key.ranks, key.size_bytes, timeout_s=s.timeout_s)
                # The figure nccl-tests itself reports ("# Avg bus bandwidth", over both placements),
                # and its own verdict on the data (either placement, and the out-of-bounds line).
                error = res.wrong_data()
                if res.avg_busbw_gbps is None and error is None:
                    error = "nccl-tests printed no '# Avg bus bandwidth' line"
                return res.avg_busbw_gbps, {"engine": "nccl-tests", **res.to_json()}, error
            from .allreduce import run_allreduce

            ran = run_allreduce(
                key.ranks,
                [key.size_bytes],
                backend=s.allreduce_backend,
                judge_size=key.size_bytes,
                timeout_s=s.timeout_s,
                budget_s_per_size=s.budget_s,
                peer=peer,
                devices=devices,
                sched=s.allreduce_sched,
            )
            row = ran.judged
            error = f"{row.wrong} wrong elements after the all-reduce" if row.wrong else None
            detail = {"engine": "torch.distributed", **ran.to_json()}
            if s.allreduce_backend == "nccl":  # the timed run logged nothing: NCCL's choice from its own run
                if peer is not None:
                    peer = (peer[0], self._across_ranks(("nccl_algorithm", key.ranks, key.size_bytes))[2])  # type: ignore[misc]  # a peer: across ranks
                detail.update(nccl_algorithm(key.ranks, row.size_bytes, s.timeout_s, peer=peer, devices=devices))
            return row.busbw_gbps, detail, error
        answer = self._copies.measure(key, self.topology, budget_s=s.budget_s, timeout_s=s.timeout_s)
        if answer.peer_access is False:
            return (
                None,
                answer.detail(),
                (
                    f"no CUDA peer access between GPU{key.src} and GPU{key.dst}: a copy goes "  # type: ignore[union-attr]  # a Copy
                    f"through the host (staged), not P2P"
                ),
            )
        return answer.bw_gbps, answer.detail(), answer.error


# A logged run is for NCCL's account, not a figure: one verified sample, no more collectives than that.
_ONE_SAMPLE = {"budget_s_per_size": 0.0, "warmup": 1, "min_samples": 1, "max_samples": 1, "min_sample_s": 0.0}


def nccl_algorithm(
    n: int, size_bytes: int, timeout_s: float, peer: tuple | None = None, devices: list | None = None
) -> dict:
    """The algorithm NCCL takes for an all-reduce of ``size_bytes`` among ``n`` ranks, and whether it
    is NVLink SHARP (``nvls``), read from NCCL's log of a short run at that size apart from the timed
    one. It may fail without taking the figure with it: the algorithm is then unknown, and says why."""
    from .allreduce import run_allreduce

    try:
        res = run_allreduce(
            n,
            [size_bytes],
            backend="nccl",
            judge_size=size_bytes,
            timeout_s=timeout_s,
            peer=peer,
            devices=devices,
            log_nccl=True,
            **_ONE_SAMPLE,
        )
    except Exception as exc:  # BenchError, a timeout: the figure stands, the algorithm is unknown
        return {
            "algo": None,
            "nvls": None,
            "nvls_evidence": [],
            "algo_error": f"NCCL's logged run failed: {type(exc).__name__}: {exc}",
        }
    algo = res.judged.algo
    return {
        "algo": algo,
        "nvls": res.nvls,
        "nvls_evidence": list(res.nvls_evidence),
        "algo_error": None if algo else "NCCL's log names no algorithm (NCCL before 2.20 does not print it)",
    }


def nccl_account(n: int, timeout_s: float, peer: tuple | None = None, devices: list | None = None) -> dict:
    """NCCL's own account of a small all-reduce among ``cuda:0..n-1`` (or, with ``peer``, among the
    ranks of a distributed run, across nodes): per pair of ranks the transports it took -- P2P, SHM,
    or NET/IB and NET/Socket between nodes, with GPUDirect RDMA or not -- and its log as parsed."""
    from ..parse.nccl_log import parse_nccl_log
    from .allreduce import run_allreduce

    res = run_allreduce(
        n,
        [2**20],
        backend="nccl",
        judge_size=2**20,
        timeout_s=timeout_s,
        peer=peer,
        devices=devices,
        log_nccl=True,
        **_ONE_SAMPLE,
    )
    log = parse_nccl_log(res.nccl_log)
    pairs: dict[str, set] = {}
    for c in log.connections:
        if c.dst_rank >= 0 and c.src_rank != c.dst_rank:
            a, b = sorted((c.src_rank, c.dst_rank))
            pairs.setdefault(f"{a}-{b}", set()).add(c.transport)
    return {
        "pairs": {k: sorted(v) for k, v in pairs.items()},
        "log": log.to_json(),
        "topo_xml": res.nccl_topo_xml,
        "wrong": res.judged.wrong,
    }
