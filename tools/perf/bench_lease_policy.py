"""The lease policy alone (issue 42, "Measured"): the pure function (``core/lease_policy``) run over two
suites' budgets and durations by the simulation (``core/lease_simulation``), no processes, on the
dgx-a100 (eight 80 GB GPUs), with exclusive leases beside memory-packed ones. Prints each suite's
makespan, its lower bound (the machine's memory-time, the workers' time, or the longest test), the ratio, the moments a
GPU's budgets exceeded its memory and the moments an exclusive test shared a GPU (both must be 0),
and the time the simulation took.

- light: 64 one-GPU tests of 1 s, each declaring 1-10 GiB;
- mixed: those 64 and the 43 tests of ``bench_leases.py`` (32 one-GPU, 8 two-GPU P2P, 2 four-GPU,
  one eight-GPU) of 2 s, declaring 40 GiB per GPU.

Tests come in the run's order, largest first (as leases order them under xdist), ``workers`` at a
time (xdist's ``load``).

    .venv/bin/python tools/perf/bench_lease_policy.py [workers ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_gputopo.core import requirements as reqs  # noqa: E402
from pytest_gputopo.core.gpu_requirements import GpuRequirement  # noqa: E402
from pytest_gputopo.core.lease_policy import CONTEXT_RESERVE_GIB  # noqa: E402
from pytest_gputopo.core.lease_simulation import Job, lower_bound, simulate  # noqa: E402
from pytest_gputopo.core.placement import Placer  # noqa: E402
from pytest_gputopo.probe.recorded import load_profile  # noqa: E402

TOPOLOGY = load_profile("dgx-a100").topology
MEMORY = {i: gpu.memory_total_bytes / 2**30 for i, gpu in enumerate(TOPOLOGY.gpus)}


def placer(k: int, p2p: bool = False) -> Placer:
    return Placer(TOPOLOGY, [reqs.P2PRequirement(gpus=k) if p2p else GpuRequirement(gpus=k)], k)


def suites() -> dict[str, list[Job]]:
    one = placer(1)
    light = [Job(f"light{i}", one, float(1 + (i * 7) % 10), 1.0) for i in range(64)]
    shapes = [(1, False)] * 32 + [(2, True)] * 8 + [(4, False)] * 2 + [(8, False)]
    placers = {shape: placer(*shape) for shape in set(shapes)}
    heavy = [Job(f"heavy{i}", placers[shape], 40.0, 2.0) for i, shape in enumerate(shapes)]
    return {"light": light, "mixed": light + heavy}


def largest_first(jobs: list[Job]) -> list[Job]:
    return sorted(jobs, key=lambda job: -job.placer.k)  # stable: equals keep their order


def exclusive(jobs: list[Job]) -> list[Job]:
    return [Job(job.name, job.placer, None, job.seconds) for job in jobs]


def main(workers: list[int]) -> None:
    print(f"dgx-a100, {len(MEMORY)} GPUs of {min(MEMORY.values()):.1f} GiB; context reserve {CONTEXT_RESERVE_GIB} GiB")
    print("suite  workers  leases     makespan  bound   ratio  overcommitted  exclusive-shared  simulated in")
    for name, jobs in suites().items():
        for n in workers:
            for kind, suite in (("exclusive", exclusive(jobs)), ("memory", jobs)):
                ordered = largest_first(suite)
                began = time.perf_counter()
                timeline = simulate(ordered, MEMORY, n, CONTEXT_RESERVE_GIB)
                took = time.perf_counter() - began
                bound = lower_bound(ordered, MEMORY, CONTEXT_RESERVE_GIB, n)
                ratio = timeline.makespan / bound
                print(
                    f"{name:6} {n:7}  {kind:9} {timeline.makespan:8.1f} s {bound:5.1f} s {ratio:6.2f}x"
                    f"  {timeline.overcommitted:13}  {timeline.shared_exclusive:16}  {took * 1000:9.1f} ms"
                )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [8, 16, 64])
