"""GPU leases on the emulated 8-GPU host (issue 31, "Measured"): a suite of 32 one-GPU tests, 8 two-GPU
P2P tests, 2 four-GPU tests and 1 eight-GPU test, each sleeping SLEEP seconds and recording the GPUs
it held, run with ``pytest -n auto --gputopo-lease``; beside it the same suite under a round-robin
conftest like Triton's (worker w on GPU w % 8, a k-GPU test on the next k). Prints, for each: GPUs
shared between tests running at once, two-GPU tests on an NVLink pair, wall time against the ideal
packing of the sleeps on 8 GPUs (and how much of it came before the first test began, and how long
the tests ran from the first start to the last end), and the CPU time the run took (every process of it).

    .venv/bin/python tools/perf/bench_leases.py [dgx-a100|hgx-h100|dgx1-v100] [SLEEP] [--timeline]
        [--leased-only] [--no-hypothesis] [--mixed [WORKERS]]

``--timeline``: each leased test's start and end (seconds from the first start), its worker and the
GPUs it held, which is where the time between tests shows. ``--leased-only``: no round robin.
``--no-hypothesis``: every pytest process of the runs without hypothesis's pytest plugin, which
this project's development environment has and a user's may not (it imports hypothesis when each
pytest process ends); the venv then has the plugins a user of this one has: pytest-xdist's.

``--mixed [WORKERS]`` (issue 42): those 43 tests declaring 40 GiB per GPU (the eight-GPU one
exclusive) and 64 one-GPU tests of 1 s declaring 1-10 GiB, each using what it declared on the emulated
NVML (``emulated_gpu.use``); run three ways side by side -- exclusive leases (``-n 8``), memory-packed
leases (``-n WORKERS``, default 16) and the round robin (``-n 8``) -- with the two counts that must
stay 0 in the leased runs: moments where the budgets on a GPU (each with a CUDA context's 1 GiB)
exceeded its memory, and exclusive tests sharing a GPU.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from emulated import build_libs, make_host  # noqa: E402
from pytest_gputopo.core.lease_simulation import Job, lower_bound  # noqa: E402
from pytest_gputopo.core.placement import Placer  # noqa: E402
from pytest_gputopo.probe.recorded import load_profile  # noqa: E402

SUITE = """
import json, os, time, pytest
SLEEP = {sleep}

def record(gpus, k):
    start = time.time()
    time.sleep(SLEEP)
    with open(os.environ["LEASE_LOG"], "a") as log:
        log.write(json.dumps({{"uuid": gpus, "start": start, "end": time.time(), "k": k,
                              "worker": os.environ.get("PYTEST_XDIST_WORKER"), "pid": os.getpid()}}) + "\\n")

def held(request, k):
    if os.environ.get("CUDA_VISIBLE_DEVICES"):  # leased: the GPUs this test's own process sees
        return [g.uuid for g in request.getfixturevalue("gputopo_gpus")]
    w = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])  # round robin: worker w on GPU w % 8 on
    return [os.environ["UUIDS"].split(",")[(w + i) % 8] for i in range(k)]

@pytest.mark.parametrize("n", range(32))
@pytest.mark.requires_gpus(1)
def test_one(request, gputopo_gpus, n):
    record(held(request, 1), 1)

@pytest.mark.parametrize("n", range(8))
@pytest.mark.requires_p2p(gpus=2)
def test_two(request, gputopo_gpus, n):
    record(held(request, 2), 2)

@pytest.mark.parametrize("n", range(2))
@pytest.mark.requires_gpus(4)
def test_four(request, gputopo_gpus, n):
    record(held(request, 4), 4)

@pytest.mark.requires_gpus(8)
def test_eight(request, gputopo_gpus):
    record(held(request, 8), 8)
"""

# --mixed: each test declares its budget (where BENCH_MEMORY is set) and uses it on the emulated NVML.
MIXED = """
import json, os, time, pytest
import emulated_gpu
MEMORY = os.environ.get("BENCH_MEMORY") == "1"
SLEEP = {sleep}

def budget(gib):
    return [pytest.mark.lease_memory(gib)] if MEMORY and gib else []

def record(request, k, gib, sleep):
    if os.environ.get("CUDA_VISIBLE_DEVICES"):  # leased: the GPUs this test's own process sees
        gpus = [g.uuid for g in request.getfixturevalue("gputopo_gpus")]
    else:  # round robin: worker w on GPU w % 8 on
        w = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
        gpus = [os.environ["UUIDS"].split(",")[(w + i) % 8] for i in range(k)]
    start = time.time()
    emulated_gpu.use(gib or 70)
    time.sleep(sleep)
    emulated_gpu.use(0)
    with open(os.environ["LEASE_LOG"], "a") as log:
        log.write(json.dumps({{"uuid": gpus, "start": start, "end": time.time(), "k": k, "gib": gib if MEMORY else None,
                              "worker": os.environ.get("PYTEST_XDIST_WORKER"), "pid": os.getpid()}}) + "\\n")

@pytest.mark.parametrize("n", [pytest.param(i, marks=budget(1 + (i * 7) % 10)) for i in range(64)])
@pytest.mark.requires_gpus(1)
def test_light(request, gputopo_gpus, n):
    record(request, 1, 1 + (n * 7) % 10, 1.0)

@pytest.mark.parametrize("n", [pytest.param(i, marks=budget(40)) for i in range(32)])
@pytest.mark.requires_gpus(1)
def test_one(request, gputopo_gpus, n):
    record(request, 1, 40, SLEEP)

@pytest.mark.parametrize("n", [pytest.param(i, marks=budget(40)) for i in range(8)])
@pytest.mark.requires_p2p(gpus=2)
def test_two(request, gputopo_gpus, n):
    record(request, 2, 40, SLEEP)

@pytest.mark.parametrize("n", [pytest.param(i, marks=budget(40)) for i in range(2)])
@pytest.mark.requires_gpus(4)
def test_four(request, gputopo_gpus, n):
    record(request, 4, 40, SLEEP)

@pytest.mark.requires_gpus(8)
def test_eight(request, gputopo_gpus):
    record(request, 8, None, SLEEP)
"""


def run(
    folder: Path, env: dict, leased: bool, plugins: list[str], workers: str = "auto", name: str = ""
) -> tuple[float, float, float, list[dict]]:
    log = folder / f"{name or ('leased' if leased else 'robin')}.log"
    env = {**env, "LEASE_LOG": str(log)}
    args = ["--gputopo-lease", f"--gputopo-lease-dir={folder / 'locks'}"] if leased else ["-n", "8"]
    args += plugins  # on the command line: a leased test's process gets the run's arguments
    args += ["-n", workers] if leased else []
    start, used, launched = time.monotonic(), _children_cpu(), time.time()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_suite.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    wall, cpu = time.monotonic() - start, _children_cpu() - used
    if out.returncode != 0:
        sys.exit(out.stdout[-3000:] + out.stderr[-2000:])
    return wall, cpu, launched, [json.loads(line) for line in log.read_text().splitlines()]


def _children_cpu() -> float:
    """CPU seconds (user and system) of this script's ended children and theirs (pytest, its workers,
    the leased tests' processes): each run's share is the difference."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def shared(entries: list[dict]) -> int:
    """Tests that held a GPU another test held at the same time."""
    return sum(
        1
        for i, a in enumerate(entries)
        if any(
            set(a["uuid"]) & set(b["uuid"]) and a["start"] < b["end"] and b["start"] < a["end"]
            for j, b in enumerate(entries)
            if j != i
        )
    )


def over_memory(entries: list[dict], memory_gib: float, reserve_gib: float = 1.0) -> tuple[int, int]:
    """(moments a test began where the budgets on one of its GPUs, each with a context's reserve,
    exceeded its memory; exclusive tests that shared a GPU with a running test)."""
    over = exclusive_shared = 0
    for a in entries:
        running = [b for b in entries if b["start"] <= a["start"] < b["end"]]
        for uuid in a["uuid"]:
            on = [b for b in running if uuid in b["uuid"]]
            if all(b["gib"] is not None for b in on):
                over += sum(b["gib"] + reserve_gib for b in on) > memory_gib
        if a["gib"] is None:
            exclusive_shared += any(
                set(a["uuid"]) & set(b["uuid"]) and a["start"] < b["end"] and b["start"] < a["end"]
                for b in entries
                if b is not a
            )
    return over, exclusive_shared


def mixed(machine: str, sleep: float, workers: str, plugins: list[str]) -> None:
    """The mixed suite three ways, side by side (``--mixed``)."""
    topology = load_profile(machine).topology
    memory = min(g.memory_total_bytes for g in topology.gpus) / 2**30
    tests = [(1, 1 + (i * 7) % 10, 1.0) for i in range(64)] + [(1, 40, sleep)] * 32 + [(2, 40, sleep)] * 8
    tests += [(4, 40, sleep)] * 2 + [(8, None, sleep)]
    jobs = [Job(str(i), Placer(topology, [], k), gib, s) for i, (k, gib, s) in enumerate(tests)]
    bound = lower_bound(jobs, dict.fromkeys(range(len(topology.gpus)), memory), 1.0, int(workers))
    exclusive_ideal = sum(k * s for k, _, s in tests) / len(topology.gpus)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _, env = make_host(folder / "host", build_libs(folder / "libs"), machine)
        env = {**os.environ, **env, "UUIDS": ",".join(g.uuid for g in topology.gpus)}
        (folder / "test_suite.py").write_text(MIXED.format(sleep=sleep))
        print(
            f"{machine}, emulated; {len(tests)} tests (64 light of 1 s, 43 of {sleep:g} s at 40 GiB, one exclusive): "
            f"exclusive packing {exclusive_ideal:.1f} s, memory-time bound with -n {workers} {bound:.1f} s"
        )
        ways = (
            ("exclusive leases (-n 8)", True, "8", "0"),
            (f"memory-packed leases (-n {workers})", True, workers, "1"),
            ("round robin (-n 8)", False, "8", "0"),
        )
        only = os.environ.get("BENCH_WAYS")  # e.g. "memory-packed": one way alone
        for name, leased, n, budgets in (w for w in ways if not only or w[0].startswith(only)):
            wall, cpu, launched, entries = run(
                folder, {**env, "BENCH_MEMORY": budgets}, leased, plugins, n, name.split()[0]
            )
            over, exclusive_shared = over_memory(entries, memory)  # (every test exclusive without budgets)
            first, last = min(e["start"] for e in entries), max(e["end"] for e in entries)
            processes = len({e["pid"] for e in entries})
            print(
                f"{name:30}: wall {wall:5.1f} s (tests ran {last - first:4.1f} s, in {processes} processes), "
                f"{cpu:5.1f} s of CPU, {shared(entries)} tests shared a GPU with a running test; {over} moments "
                f"over a GPU's memory, {exclusive_shared} exclusive tests sharing"
            )


def main() -> None:
    plugins = ["-p", "no:hypothesispytest"] if "--no-hypothesis" in sys.argv else []
    if "--mixed" in sys.argv:
        after = sys.argv[sys.argv.index("--mixed") + 1 :]
        workers = after[0] if after and after[0].isdigit() else "16"
        rest = [a for a in sys.argv[1:] if not a.startswith("--") and a != workers]
        return mixed(rest[0] if rest else "dgx-a100", float(rest[1]) if len(rest) > 1 else 2.0, workers, plugins)
    timeline, leased_only = "--timeline" in sys.argv, "--leased-only" in sys.argv
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    machine = argv[0] if argv else "dgx-a100"
    sleep = float(argv[1]) if len(argv) > 1 else 2.0
    topology = load_profile(machine).topology
    by_uuid = {g.uuid: g.index for g in topology.gpus}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _, env = make_host(folder / "host", build_libs(folder / "libs"), machine)
        env = {**os.environ, **env, "UUIDS": ",".join(g.uuid for g in topology.gpus)}
        (folder / "test_suite.py").write_text(SUITE.format(sleep=sleep))
        ideal = max(sleep * (32 + 8 * 2 + 2 * 4 + 8) / 8, sleep)
        without = " (without hypothesis's pytest plugin)" if plugins else ""
        print(f"{machine}, emulated; 43 tests sleeping {sleep:g} s: ideal packing on 8 GPUs {ideal:.1f} s{without}")
        for leased in (True,) if leased_only else (True, False):
            # The round robin runs with leases off: its conftest is the whole assignment.
            wall, cpu, launched, entries = run(folder, env, leased, plugins)
            first, last = min(e["start"] for e in entries), max(e["end"] for e in entries)
            pairs = [e for e in entries if e["k"] == 2]
            nvlink = sum(1 for e in pairs if topology.link(*(by_uuid[u] for u in e["uuid"])).nvlinks)
            name = "gputopo leases (-n auto)" if leased else "round robin (-n 8)    "
            processes = f", in {len({e['pid'] for e in entries})} processes" if leased else ""
            if leased and timeline:
                for e in sorted(entries, key=lambda e: e["start"]):
                    gpus = [by_uuid[u] for u in e["uuid"]]
                    start, end = e["start"] - first, e["end"] - first
                    print(f"  {e['worker']} {e['k']}-GPU test {start:6.2f} -> {end:6.2f} s on GPUs {gpus}")
            print(
                f"{name}: {len(entries)} tests{processes}, {shared(entries)} shared a GPU with a running test, "
                f"{nvlink}/{len(pairs)} two-GPU tests on an NVLink pair, "
                f"wall {wall:.1f} s = {wall / ideal:.2f}x ideal (the first test began {first - launched:.1f} s after "
                f"the start, the tests ran {last - first:.1f} s), {cpu:.1f} s of CPU"
            )


if __name__ == "__main__":
    main()
