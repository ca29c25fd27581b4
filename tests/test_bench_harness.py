"""The measurement harness: statistics, calibration, early stop, budget, verification, agreement.

Timing is driven by a fake clock that ``run(k)`` advances by ``k`` times a scripted per-iteration
duration, so every figure below is exact and the code path is the real one (``WallTimer`` reading
a clock)."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time

import pytest

from pytest_gputopo.bench.harness import Measurement, WallTimer, measure, median_ci, spread_of


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ScriptedOp:
    """``run(k)``: k iterations whose duration is the next scripted per-iteration time (cycled)."""

    def __init__(self, clock: FakeClock, per_iteration_s, *, overhead_s: float = 0.0) -> None:
        self.clock = clock
        self.script = list(per_iteration_s)
        self.calls: list = []
        self.overhead_s = overhead_s

    def __call__(self, k: int) -> None:
        d = self.script[len(self.calls) % len(self.script)]
        self.calls.append(k)
        self.clock.now += k * d + self.overhead_s


def measure_on(clock: FakeClock, op, *, name: str = "op", size_bytes: int = 1, **settings) -> Measurement:
    """``measure`` with ``clock`` both timing the samples and spending the budget."""
    return measure(name, op, size_bytes=size_bytes, timer=WallTimer(clock=clock), clock=clock, **settings)


def test_stops_when_the_interval_of_the_median_is_within_target():
    clock = FakeClock()
    ms = 1e-3
    op = ScriptedOp(clock, [1.0 * ms, 1.04 * ms, 1.08 * ms, 1.02 * ms, 1.06 * ms, 5 * ms])
    m = measure_on(clock, op, size_bytes=1_000_000, warmup=0, iterations=4, min_samples=5, target_ci=1.10, budget_s=100)
    # 5 samples: the interval is (min, max) = (1.0, 1.08) ms, within 10%: stop before the 5 ms one
    assert op.calls == [4] * 5
    assert m.stable and (m.ci_low_s, m.ci_high_s) == pytest.approx((1.0e-3, 1.08e-3))
    assert m.median_s == pytest.approx(1.04e-3)
    assert m.min_s == pytest.approx(1.0e-3) and m.max_s == pytest.approx(1.08e-3)
    assert m.spread == pytest.approx(1.08)
    assert m.bw_gbps == pytest.approx(1_000_000 / 1.04e-3 / 1e9)
    assert m.bw_ci_gbps == pytest.approx((1_000_000 / 1.08e-3 / 1e9, 1_000_000 / 1.0e-3 / 1e9))
    assert m.iterations_per_sample == 4
    assert m.verified is False and m.error is None and m.ok
    assert m.wall_s == pytest.approx(4 * (1.0 + 1.04 + 1.08 + 1.02 + 1.06) * ms)


def test_one_outlier_costs_samples_not_accuracy():
    clock = FakeClock()
    ms = 1e-3
    # a 2x outlier first: up to 8 samples the interval is (min, max) and spans it; from 9 samples the
    # interval is (2nd, 8th) of the sorted samples, which leaves it out
    op = ScriptedOp(
        clock, [2.0 * ms, 1.0 * ms, 1.04 * ms, 1.08 * ms, 1.02 * ms, 1.06 * ms, 1.03 * ms, 1.05 * ms, 1.01 * ms, 9 * ms]
    )
    m = measure_on(clock, op, warmup=0, iterations=1, min_samples=5, target_ci=1.10, budget_s=100)
    assert len(m.samples_s) == 9 and m.stable
    assert (m.ci_low_s, m.ci_high_s) == pytest.approx((1.01e-3, 1.08e-3))
    assert m.median_s == pytest.approx(1.04e-3)
    assert m.spread == pytest.approx(2.0)  # the spread describes every sample, the outlier included


def test_verification_time_is_counted_apart():
    clock = FakeClock()

    def verify():
        clock.now += 0.5
        return None

    m = measure_on(clock, ScriptedOp(clock, [1e-3]), warmup=0, iterations=1, verify=verify)
    assert m.verified and m.verify_s == pytest.approx(0.5)
    assert m.wall_s == pytest.approx(5e-3 + 0.5)


@pytest.mark.parametrize(
    "m, ranks",
    [(1, (1, 1)), (5, (1, 5)), (6, (1, 6)), (9, (2, 8)), (10, (2, 9)), (20, (6, 15)), (50, (18, 33)), (100, (40, 61))],
)
def test_median_ci_ranks(m, ranks):
    # the textbook ranks of the 95% distribution-free interval (exact binomial, at least 95%)
    assert median_ci([float(i) for i in range(m, 0, -1)]) == ranks


def test_median_ci_covers_95_percent_and_is_never_narrower_than_exact():
    def coverage(m, j):  # P(x_(j) <= median <= x_(m+1-j)) = 1 - 2 P(B <= j-1), B ~ Binomial(m, 1/2)
        return 1 - 2 * sum(math.comb(m, i) for i in range(j)) / 2**m

    for m in range(6, 400):
        j = int(median_ci(list(range(1, m + 1)))[0])
        assert coverage(m, j) >= 0.95, m
        assert j == 1 or coverage(m, j + 1) < 0.95 or coverage(m, j + 2) < 0.95, m  # at most one rank wide


def test_bytes_per_iteration_overrides_size():
    clock = FakeClock()
    op = ScriptedOp(clock, [1e-3])
    m = measure_on(clock, op, name="bidir", size_bytes=1000, bytes_per_iteration=2000, warmup=0, iterations=1)
    assert m.bw_gbps == pytest.approx(2000 / 1e-3 / 1e9)
    assert m.size_bytes == 1000 and m.bytes_per_iteration == 2000


def test_calibration_and_early_stop_on_stable_samples():
    clock = FakeClock()
    op = ScriptedOp(clock, [1e-3])  # 1 ms per iteration, perfectly stable
    m = measure_on(clock, op, size_bytes=4096, warmup=3, min_samples=5, min_sample_s=0.02, budget_s=100)
    # warm-up 3; calibration: k=1 reads 1 ms < 20 ms -> k = ceil(1 * 0.02 * 1.2 / 1e-3) = 24, which
    # reads 24 ms >= 20 ms and counts as the first sample; 4 more make the median's interval (1, 1) ms.
    assert op.calls == [3, 1, 24, 24, 24, 24, 24]
    assert m.iterations_per_sample == 24
    assert len(m.samples_s) == 5 and m.stable
    assert m.spread == pytest.approx(1.0)
    assert m.median_s == pytest.approx(1e-3)


def test_calibration_grows_at_most_100x_per_step_and_honours_max_iterations():
    clock = FakeClock()
    op = ScriptedOp(clock, [1e-9])
    m = measure_on(
        clock, op, name="tiny", warmup=0, min_samples=2, max_iterations=50_000, min_sample_s=0.02, budget_s=100
    )
    assert op.calls[:4] == [1, 100, 10_000, 50_000]
    assert m.iterations_per_sample == 50_000


def test_budget_is_respected_when_samples_never_agree():
    clock = FakeClock()
    op = ScriptedOp(clock, [1e-3, 2e-3])  # alternating: spread 2.0, never stable
    m = measure_on(clock, op, name="noisy", warmup=0, iterations=10, min_samples=5, max_samples=10_000, budget_s=0.2)
    assert not m.stable
    assert m.wall_s <= 0.2
    assert m.wall_s > 0.2 - 0.02 - 1e-9  # it used the budget, stopping one (<= 20 ms) sample short
    assert m.spread == pytest.approx(2.0)
    assert len(m.samples_s) == 13 and (m.ci_low_s, m.ci_high_s) == pytest.approx((1e-3, 2e-3))
    assert m.median_s == pytest.approx(1e-3)  # 7 samples of 1 ms, 6 of 2 ms


def test_budget_is_respected_on_the_real_clock():
    state = {"i": 0}

    def run(k: int) -> None:
        for _ in range(k):
            state["i"] += 1
            time.sleep(0.001 if state["i"] % 2 else 0.003)

    m = measure(
        "sleepy",
        run,
        size_bytes=1,
        timer=WallTimer(),
        warmup=1,
        iterations=3,
        min_samples=5,
        max_samples=10_000,
        target_ci=1.0001,
        budget_s=0.3,
    )
    # The budget ended it, not max_samples: a sample sleeps 5 ms at least (1 + 3 + 1 or 3 + 1 + 3), so
    # 0.3 s holds 60 at most. Counted, not timed: a loaded machine stretches the sleeps, never shortens them.
    assert not m.stable
    assert 1 <= len(m.samples_s) <= 0.3 / 0.005


def test_max_samples_bounds_the_run():
    clock = FakeClock()
    op = ScriptedOp(clock, [1e-3, 2e-3])
    m = measure_on(clock, op, name="noisy", warmup=0, iterations=1, min_samples=3, max_samples=7, budget_s=100)
    assert len(m.samples_s) == 7 and not m.stable
    assert m.median_s == pytest.approx(1e-3) and m.spread == pytest.approx(2.0)


def test_at_least_one_sample_even_when_the_budget_is_gone():
    clock = FakeClock()
    op = ScriptedOp(clock, [1.0])  # 1 s per iteration, budget 0.1 s
    m = measure_on(clock, op, name="slow", size_bytes=10, warmup=1, iterations=1, budget_s=0.1)
    assert len(m.samples_s) == 1 and m.median_s == pytest.approx(1.0) and m.spread == 1.0


def _copy_benchmark(corrupt: bool):
    src = bytes(range(256)) * 4096  # 1 MiB, every byte value
    dst = bytearray(len(src))

    def run(k: int) -> None:
        for _ in range(k):
            dst[:] = src
        if corrupt:
            dst[123_457] ^= 0x01  # one flipped bit, on purpose

    def verify():
        bad = sum(1 for a, b in zip(src, dst, strict=True) if a != b)
        return f"{bad} byte(s) differ after the copy" if bad else None

    return src, run, verify


def test_a_correct_copy_verifies():
    src, run, verify = _copy_benchmark(corrupt=False)
    m = measure("host copy", run, size_bytes=len(src), timer=WallTimer(), warmup=2, budget_s=1.0, verify=verify)
    assert m.verified and m.error is None and m.ok
    assert m.bw_gbps > 0


def test_a_corrupted_copy_fails_whatever_its_speed():
    src, run, verify = _copy_benchmark(corrupt=True)
    m = measure("host copy", run, size_bytes=len(src), timer=WallTimer(), warmup=2, budget_s=1.0, verify=verify)
    assert not m.verified and not m.ok
    assert m.error == "1 byte(s) differ after the copy"
    assert m.bw_gbps > 0  # it was fast, and it still failed
    assert m.to_json()["error"] == m.error and m.to_json()["verified"] is False


def test_verification_runs_after_timing_and_a_crash_is_a_failure():
    clock = FakeClock()
    events = []
    op = ScriptedOp(clock, [1e-3])

    def run(k):
        events.append("run")
        op(k)

    def verify():
        events.append("verify")
        raise ValueError("buffer vanished")

    m = measure_on(clock, run, warmup=0, iterations=1, verify=verify)
    assert events[-1] == "verify" and events.count("verify") == 1
    assert m.error == "verification raised ValueError: buffer vanished" and not m.verified


def test_wall_timer_syncs_before_start_and_before_stop():
    clock = FakeClock()
    log = []

    def sync():
        log.append(("sync", clock.now))

    timer = WallTimer(sync=sync, clock=clock)
    timer.start()
    clock.now += 0.5
    log.append(("work", clock.now))
    assert timer.stop() == pytest.approx(0.5)
    assert [e[0] for e in log] == ["sync", "work", "sync"]
    with pytest.raises(RuntimeError):
        timer.stop()

    log.clear()
    timer = WallTimer(sync=sync, clock=clock, sync_at_stop=False)
    timer.start()
    clock.now += 0.25
    assert timer.stop() == pytest.approx(0.25)
    assert [e[0] for e in log] == ["sync"]


def test_agree_makes_every_rank_take_the_same_decisions():
    """Two "ranks" (threads) with different speeds: agree = max across them, so both pick the same
    iterations per sample and the same number of samples -- their collectives would stay matched."""
    barrier = threading.Barrier(2)
    slots: list = [None, None]
    results: list = [None, None]

    def make_agree(rank):
        def agree(values):
            slots[rank] = tuple(values)
            barrier.wait()
            out = tuple(max(a, b) for a, b in zip(slots[0], slots[1], strict=True))
            barrier.wait()
            return out

        return agree

    def rank_main(rank):
        clock = FakeClock()
        op = ScriptedOp(clock, [1e-3 * (1 + rank), 1.1e-3 * (1 + rank), 0.9e-3 * (1 + rank)])
        results[rank] = measure_on(
            clock, op, name="coll", warmup=1, min_samples=4, target_ci=1.05, budget_s=0.5, agree=make_agree(rank)
        )

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    a, b = results
    assert a.iterations_per_sample == b.iterations_per_sample
    assert a.samples_s == b.samples_s  # the max over ranks: the slower rank's times
    assert a.median_s == b.median_s and a.median_s >= 1.8e-3


def test_measurement_json_names_its_units():
    clock = FakeClock()
    m = measure_on(clock, ScriptedOp(clock, [1e-3]), size_bytes=8, warmup=0, iterations=1)
    j = m.to_json()
    for key in (
        "size_bytes",
        "samples_s",
        "median_s",
        "median_ci95_s",
        "min_s",
        "max_s",
        "bw_gbps",
        "bw_ci95_gbps",
        "wall_s",
        "verify_s",
        "warmup_iterations",
    ):
        assert key in j
    assert isinstance(m, Measurement)


@pytest.mark.parametrize(
    "kwargs", [{"min_samples": 0}, {"min_samples": 5, "max_samples": 4}, {"target_ci": 0.9}, {"iterations": 0}]
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        measure("x", lambda k: None, size_bytes=1, timer=WallTimer(), **kwargs)


def test_spread_of():
    assert spread_of([2.0, 1.0, 1.5]) == 2.0
    assert spread_of([0.0, 0.0]) == 1.0
    assert spread_of([0.0, 1.0]) == float("inf")


def test_bench_modules_do_not_import_torch():
    code = (
        "import sys; import pytest_gputopo.bench.harness, pytest_gputopo.bench.allreduce; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
