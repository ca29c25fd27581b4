"""The measurement harness shared by every benchmark: warm-up, timing, statistics, data verification.

One function, :func:`measure`, does what nvbandwidth and nccl-tests do by hand:

1. **warm up**: ``warmup`` iterations (the first calls pay allocation, NCCL communicator set-up,
   NVLS registration; ml-engineering saw a cold 4 GB all-reduce read 6.6x slow);
2. **calibrate**: pick ``k`` iterations per sample so that one sample lasts at least
   ``min_sample_s`` (20 ms by default) -- ``run(k)`` runs the ``k`` iterations back to back, as
   nccl-tests does with its ``iters`` launches, so that each sample is a throughput figure like
   nccl-tests' own. Shorter samples read faster than nccl-tests on a skewed machine: the median of
   single calls leaves out the slow tail that a back-to-back mean includes (measured with gloo at
   4 MiB: 12-23% faster with 1 ms samples, 4-9% with 5 ms; docs/performance.md);
3. **sample** until the median is known well enough: the distribution-free 95% confidence
   interval of the median (two order statistics of the samples, no assumption on the noise) has
   bounds within ``target_ci`` of each other (max/min, 1.10 by default), or the time budget is
   spent, or ``max_samples`` were taken. A quiet machine stops after ``min_samples``; a noisy one
   pays for exactly the precision it needs, and every figure carries its interval;
4. **summarise** with the median (nvbandwidth's default statistic) of every sample;
5. **verify** the data *after* timing: a non-None message from ``verify()`` fails the measurement
   whatever its speed (nccl-tests' ``#wrong``, nvbandwidth's pattern check).

The GPU and CPU paths differ only in the timer: :class:`WallTimer` (``time.perf_counter`` around the
work, with a caller-given ``sync`` -- a barrier, ``torch.cuda.synchronize`` -- run before start and
before stop) or :class:`CudaEventTimer` (CUDA events).

Several processes (ranks of a collective) must take *the same* decisions -- the same ``k``, the
same number of samples -- or their collectives stop matching and the benchmark hangs. Every figure
the harness branches on therefore passes through ``agree`` (for a collective: the mean across
ranks, one small all-reduce per sample, outside the timed region). ``agree`` defaults to the
identity for a single process.

No ``torch`` import at module level: :class:`CudaEventTimer` imports it when constructed.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .messages import MeasurementRecord

MIN_SAMPLE_S = 0.02  # the shortest timed sample (see calibrate, above)

__all__ = ["MIN_SAMPLE_S", "Timer", "WallTimer", "CudaEventTimer", "Measurement", "measure", "median_ci", "spread_of"]

Clock = Callable[[], float]
Agree = Callable[[Sequence[float]], Sequence[float]]


class Timer(Protocol):
    """Times one sample: ``start()``, the work, ``stop()`` -> elapsed seconds."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


class WallTimer:
    """Host wall clock (``time.perf_counter``), as nccl-tests times (``std::chrono::steady_clock``).

    ``sync`` runs before the clock starts and again before it stops: a ``dist.barrier`` for a CPU
    collective, ``torch.cuda.synchronize`` for asynchronous GPU work, so that the interval covers the
    work and nothing still queued escapes it. ``sync_at_stop=False`` skips the second call where the
    work is already complete when ``run`` returns (a blocking gloo all-reduce: each rank stops when
    its own part is done, the maximum over ranks is taken afterwards, and no barrier latency is
    added to the timed interval -- nccl-tests likewise stops its clock without a barrier).
    ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        sync: Callable[[], Any] | None = None,
        clock: Clock = time.perf_counter,
        *,
        sync_at_stop: bool = True,
    ) -> None:
        self._sync = sync
        self._clock = clock
        self._sync_at_stop = sync_at_stop
        self._t0: float | None = None

    def start(self) -> None:
        if self._sync is not None:
            self._sync()
        self._t0 = self._clock()

    def stop(self) -> float:
        if self._t0 is None:
            raise RuntimeError("WallTimer.stop() without start()")
        if self._sync is not None and self._sync_at_stop:
            self._sync()
        elapsed = self._clock() - self._t0
        self._t0 = None
        return elapsed


class CudaEventTimer:
    """CUDA events on the current stream of ``device``: ``record`` at start and stop, then
    ``synchronize`` on the end event and ``elapsed_time`` (milliseconds) -> seconds.

    ``sync`` (e.g. a barrier) runs before the start event is recorded, so that every rank starts
    together. Construct it only where CUDA exists: ``torch.cuda.Event`` raises on a CPU build.
    """

    def __init__(self, device: Any = None, sync: Callable[[], Any] | None = None) -> None:
        import torch  # noqa: PLC0415 -- never at module level

        self._torch = torch
        self._device = device
        self._sync = sync
        with torch.cuda.device(device) if device is not None else nullcontext():
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        if self._sync is not None:
            self._sync()
        with self._torch.cuda.device(self._device) if self._device is not None else nullcontext():
            self._start.record()

    def stop(self) -> float:
        with self._torch.cuda.device(self._device) if self._device is not None else nullcontext():
            self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3


@dataclass(frozen=True)
class Measurement:
    """One benchmark figure with the evidence behind it.

    ``samples_s`` holds every sample as seconds *per iteration* (sample time / ``iterations_per_sample``);
    ``median_s``, ``min_s``, ``max_s`` and ``spread`` (= max/min) describe them all. ``ci_low_s`` and
    ``ci_high_s`` bound the median (distribution-free 95% interval, see :func:`median_ci`); ``stable``
    says they came within ``target_ci`` (max/min) of each other before the budget ran out. ``bw_gbps``
    is bytes per iteration / ``median_s`` / 1e9 (GB/s = 1e9 B/s). ``verified`` is True only when a
    verification ran and passed; ``error`` carries a verification failure -- a failed measurement,
    whatever its speed. ``wall_s`` is everything the measurement cost: warm-up, calibration,
    samples, verification; ``verify_s`` the verification alone.
    """

    name: str
    size_bytes: int
    iterations_per_sample: int
    samples_s: tuple[float, ...]
    median_s: float
    min_s: float
    max_s: float
    spread: float
    bw_gbps: float
    verified: bool
    error: str | None
    warmup: int
    wall_s: float
    ci_low_s: float = 0.0
    ci_high_s: float = 0.0
    stable: bool = False
    target_ci: float = 1.10
    bytes_per_iteration: int = 0
    verify_s: float = 0.0

    @property
    def ok(self) -> bool:
        """No verification failure (an unverified measurement is ok but not ``verified``)."""
        return self.error is None

    @property
    def bw_ci_gbps(self) -> tuple[float, float]:
        """The 95% interval of ``bw_gbps`` (from the interval of the median time)."""
        return _gbps(self.bytes_per_iteration, self.ci_high_s), _gbps(self.bytes_per_iteration, self.ci_low_s)

    def to_json(self) -> MeasurementRecord:
        return {
            "name": self.name,
            "size_bytes": self.size_bytes,
            "bytes_per_iteration": self.bytes_per_iteration,
            "iterations_per_sample": self.iterations_per_sample,
            "samples_s": list(self.samples_s),
            "median_s": self.median_s,
            "median_ci95_s": [self.ci_low_s, self.ci_high_s],
            "min_s": self.min_s,
            "max_s": self.max_s,
            "spread": self.spread,
            "target_ci": self.target_ci,
            "stable": self.stable,
            "bw_gbps": self.bw_gbps,
            "bw_ci95_gbps": list(self.bw_ci_gbps),
            "verified": self.verified,
            "error": self.error,
            "warmup_iterations": self.warmup,
            "wall_s": self.wall_s,
            "verify_s": self.verify_s,
        }


def _gbps(size_bytes: int, seconds: float) -> float:
    return size_bytes / seconds / 1e9 if seconds > 0 else math.inf


def spread_of(samples: Sequence[float]) -> float:
    """max/min of the samples (1.0 = perfectly stable); inf when the minimum is 0."""
    lo, hi = min(samples), max(samples)
    if lo <= 0:
        return 1.0 if hi <= 0 else math.inf
    return hi / lo


def median_ci(samples: Sequence[float]) -> tuple[float, float]:
    """Distribution-free 95% confidence interval of the median: ``(x_(j), x_(m+1-j))`` of the ``m``
    sorted samples. It holds whatever the shape of the noise (a scheduler's long tail included).
    ``j`` comes from the normal approximation of the Binomial(m, 1/2) ranks with continuity
    correction: the exact rank, or one wider (17 of the sizes 1..2000), never narrower. Below 6
    samples it is ``(min, max)`` (93.75% for 5).
    """
    xs = sorted(samples)
    m = len(xs)
    if m == 0:
        raise ValueError("median_ci of no samples")
    j = max(1, math.floor((m + 1) / 2 - 1.959964 * math.sqrt(m) / 2))
    return xs[j - 1], xs[m - j]


def _identity(values: Sequence[float]) -> Sequence[float]:
    return values


def measure(
    name: str,
    run: Callable[[int], Any],
    *,
    size_bytes: int,
    timer: Timer,
    warmup: int = 5,
    budget_s: float = 10.0,
    min_samples: int = 5,
    max_samples: int = 1000,
    target_ci: float = 1.10,
    iterations: int | None = None,
    verify: Callable[[], str | None] | None = None,
    min_sample_s: float = MIN_SAMPLE_S,
    max_iterations: int = 1 << 20,
    bytes_per_iteration: int | None = None,
    agree: Agree | None = None,
    clock: Clock = time.perf_counter,
) -> Measurement:
    """Measure ``run`` (``run(k)`` = ``k`` back-to-back iterations) and return a :class:`Measurement`.

    - ``warmup`` iterations first (in one ``run(warmup)`` call, untimed).
    - ``iterations`` fixes the iterations per sample; otherwise they are calibrated so that one sample
      lasts at least ``min_sample_s`` (at most ``max_iterations``).
    - Samples are taken until there are at least ``min_samples`` and the 95% interval of their median
      has max/min <= ``target_ci`` (``stable``), ``max_samples`` were taken, or the next sample would
      overrun ``budget_s`` (counted from the start of the call; at least one sample is always taken).
      The budget covers warm-up, calibration and sampling; verification comes on top.
    - ``verify()`` runs once after timing; a non-None return is the measurement's ``error``.
    - ``agree`` maps per-process figures to figures every process shares (the mean across ranks) so that
      collective benchmarks take identical decisions on every rank; identity by default.
    """
    _check_options(min_samples, max_samples, target_ci, iterations)
    sampler = _Sampler(run, timer, agree or _identity, clock)
    if warmup > 0:
        run(warmup)
    got = _Samples()
    k = iterations if iterations is not None else _calibrate(sampler, got, min_sample_s, max_iterations, budget_s)
    stable, ci = _sample_until_known(
        sampler, got, k, min_samples=min_samples, max_samples=max_samples, target_ci=target_ci, budget_s=budget_s
    )
    samples = got.per_iteration_s
    median = statistics.median(samples)
    per_iter_bytes = size_bytes if bytes_per_iteration is None else bytes_per_iteration
    t_verify = clock()
    error, verified = _verify(verify)

    return Measurement(
        name=name,
        size_bytes=size_bytes,
        iterations_per_sample=k,
        samples_s=tuple(samples),
        median_s=median,
        min_s=min(samples),
        max_s=max(samples),
        spread=spread_of(samples),
        bw_gbps=_gbps(per_iter_bytes, median),
        verified=verified,
        error=error,
        warmup=warmup,
        wall_s=sampler.elapsed(),
        ci_low_s=ci[0],
        ci_high_s=ci[1],
        stable=stable,
        target_ci=target_ci,
        bytes_per_iteration=per_iter_bytes,
        verify_s=clock() - t_verify,
    )


def _check_options(min_samples: int, max_samples: int, target_ci: float, iterations: int | None) -> None:
    if min_samples < 1 or max_samples < min_samples:
        raise ValueError(f"need 1 <= min_samples <= max_samples, got {min_samples}, {max_samples}")
    if target_ci < 1.0:
        raise ValueError(f"target_ci is a max/min ratio >= 1.0, got {target_ci}")
    if iterations is not None and iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")


class _Sampler:
    """Times samples of ``run(k)``; every figure it returns has passed through ``agree``, so that
    every process of a collective takes the same decisions. Its clock starts when it is made."""

    def __init__(self, run: Callable[[int], Any], timer: Timer, agree: Agree, clock: Clock) -> None:
        self._run, self._timer, self._agree, self._clock = run, timer, agree, clock
        self._t_begin = clock()

    def elapsed(self) -> float:
        return self._clock() - self._t_begin

    def timed(self, k: int) -> tuple[float, float, float]:
        """One sample of k iterations -> agreed (sample time, wall cost of the sample, time since start)."""
        before = self._clock()
        self._timer.start()
        self._run(k)
        t = self._timer.stop()
        after = self._clock()
        t_a, cost_a, now_a = self._agree((t, after - before, after - self._t_begin))
        return float(t_a), max(float(cost_a), float(t_a)), float(now_a)


@dataclass
class _Samples:
    """The samples kept (seconds per iteration) and each one's wall cost; ``cost`` (timer overhead
    included) and ``now`` (time since the start) as of the last sample taken, kept or not."""

    per_iteration_s: list = field(default_factory=list)
    costs: list = field(default_factory=list)
    cost: float = 0.0
    now: float = 0.0

    def take(self, sampler: _Sampler, k: int) -> float:
        t, self.cost, self.now = sampler.timed(k)
        return t

    def keep(self, t: float, k: int) -> None:
        self.per_iteration_s.append(t / k)
        self.costs.append(self.cost)


def _calibrate(sampler: _Sampler, got: _Samples, min_sample_s: float, max_iterations: int, budget_s: float) -> int:
    """The iterations per sample that make a sample last ``min_sample_s`` (or as many as the cap or
    the budget allow). The sample taken at the final count is valid: it is kept."""
    k = 1
    while True:
        t = got.take(sampler, k)
        if t >= min_sample_s or k >= max_iterations:
            got.keep(t, k)
            return k
        # Aim 20% above the target; at least double, at most 100x per step (a timer that reads ~0
        # for tiny k must not send k to the cap in one jump).
        want = math.ceil(k * min_sample_s * 1.2 / t) if t > 0 else k * 100
        k_next = int(min(max_iterations, max(2 * k, min(want, 100 * k))))
        if got.now + got.cost * k_next / k > budget_s:  # no room to grow: keep sampling with this k
            got.keep(t, k)
            return k
        k = k_next


def _sample_until_known(
    sampler: _Sampler, got: _Samples, k: int, *, min_samples: int, max_samples: int, target_ci: float, budget_s: float
) -> tuple[bool, tuple[float, float]]:
    """Sample with ``k`` iterations until the median's interval is within ``target_ci`` (-> stable),
    ``max_samples`` are kept, or the next sample would overrun the budget; -> (stable, interval)."""
    samples = got.per_iteration_s
    ci = (0.0, 0.0)
    while True:
        if samples:
            ci = median_ci(samples)
            if len(samples) >= min_samples and spread_of(ci) <= target_ci:
                return True, ci
        if len(samples) >= max_samples:
            return False, ci
        # The next sample would overrun the budget? Predicted as the longest of the recent samples.
        if samples and got.now + max(got.costs[-min_samples:] or [got.cost]) > budget_s:
            return False, ci
        got.keep(got.take(sampler, k), k)


def _verify(verify: Callable[[], str | None] | None) -> tuple[str | None, bool]:
    """(error, verified): a verification that crashes is a failed verification; none ran: unverified."""
    if verify is None:
        return None, False
    try:
        error = verify()
    except Exception as exc:
        error = f"verification raised {type(exc).__name__}: {exc}"
    return error, error is None
