"""Where a ``@pytest.mark.ranks(n)`` test's ranks run on GPUs: which GPU each rank gets, its ``device``,
its ``CUDA_VISIBLE_DEVICES``, and what CUDA shows it, on the emulated GPU host (``tests/emulated.py``:
NVML serving a recorded machine, the emulated ``libcuda.so.1`` applying ``CUDA_VISIBLE_DEVICES`` as
CUDA does and logging each call with its pid) with the environment's own torch, so that the ranks are
spawned for real. Their backend is ``"cpu:gloo,cuda:gloo"``: a backend other than ``"nccl"`` or
``"gloo"`` takes GPUs as no backend does (docs/markers.md), and gloo runs the collective on the CPUs
of this machine, loopback only (GLOO_SOCKET_IFNAME=lo, which each rank gets unless set).

Sources of the behaviours reproduced:
- CUDA reads ``CUDA_VISIBLE_DEVICES`` at ``cuInit`` and numbers what it leaves ``0..k-1`` (CUDA
  C++ Programming Guide, "CUDA Environment Variables"): a rank's ``cuda:<i>`` is the i-th GPU of its
  own ``CUDA_VISIBLE_DEVICES``, so the GPU must be read through CUDA, not NVML.
- ``cuDeviceGetUuid`` (cuda.h) gives a device's UUID, the bytes of nvidia-smi -L's ``GPU-<uuid>``.
"""

from __future__ import annotations

import json
import os

import pytest

from emulated import CUDA_SEES, INSTALLED_TORCH, emulated_host, emulated_libs  # noqa: F401  (fixtures)

pytest.importorskip("torch")

# Each rank writes what it was given and what the emulated CUDA shows it (UUIDs as hex, CUDA's order).
PLACED = (
    """
import json, os
import pytest
"""
    + CUDA_SEES
    + """

def locks_held():  # the GPU lock files this rank holds open (a lease's: {uuid}.lock)
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed since
            continue
        if target.endswith(".lock"):
            held.append(os.path.basename(target))
    return sorted(held)


def note(info, test):
    import torch  # in the ranks: a run that spawns none (skipped) never imports it
    import torch.distributed as dist

    t = torch.tensor([float(info.rank + 1)])
    dist.all_reduce(t)  # the group works: gloo, on the CPUs
    assert t.item() == info.world_size * (info.world_size + 1) / 2
    with open(os.environ["PLACED_LOG"], "a") as log:
        log.write(json.dumps({"test": test, "rank": info.rank, "pid": os.getpid(), "device": info.device,
                              "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                              "gpu": [g.uuid for g in info.gpus], "index": [g.index for g in info.gpus],
                              "cuda": cuda_sees(), "backend": dist.get_backend(), "locks": locks_held()}) + "\\n")


@pytest.mark.ranks(2, backend="cpu:gloo,cuda:gloo")
def test_two(gputopo_rank):
    note(gputopo_rank, "two")


@pytest.mark.ranks(3, backend="cpu:gloo,cuda:gloo")
def test_three(gputopo_rank):
    note(gputopo_rank, "three")
"""
)

# The pytest process says who it is, so that the test can see it never started CUDA itself.
CONFTEST = """
import os
def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        with open(os.environ["PYTEST_PID"], "w") as f:
            f.write(str(os.getpid()))
"""


def hexed(uuid: str) -> str:
    return uuid[4:].replace("-", "").lower()


@pytest.mark.slow
@pytest.mark.parametrize(
    "lease, outer",
    [(False, None), (False, "5,2,7"), (True, None), (True, "5,2,7")],
    ids=["no-lease", "no-lease-outer", "lease", "lease-outer"],
)
def test_each_rank_gets_one_gpu_of_its_own_as_cuda_shows_it(
    pytester, emulated_host, monkeypatch, tmp_path, lease, outer
):
    host = emulated_host("dgx-a100", torch=INSTALLED_TORCH)
    from pytest_gputopo.probe.recorded import load_profile

    every = [g.uuid for g in sorted(load_profile("dgx-a100").topology.gpus, key=lambda g: g.pci_bus_id)]
    visible = every if outer is None else [every[int(i)] for i in outer.split(",")]  # what this run may use
    if outer is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", outer)
    monkeypatch.setenv("PLACED_LOG", str(tmp_path / "placed.log"))
    monkeypatch.setenv("PYTEST_PID", str(tmp_path / "pytest.pid"))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_placed=PLACED)
    args = ["--gputopo-lease", f"--gputopo-lease-dir={tmp_path / 'locks'}"] if lease else []
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "0", "-rs", *args)
    result.assert_outcomes(passed=2)
    entries = [json.loads(line) for line in (tmp_path / "placed.log").read_text().splitlines()]
    assert sorted((e["test"], e["rank"]) for e in entries) == [
        ("three", 0),
        ("three", 1),
        ("three", 2),
        ("two", 0),
        ("two", 1),
    ]
    for test, n in (("two", 2), ("three", 3)):
        ranks = sorted((e for e in entries if e["test"] == test), key=lambda e: e["rank"])
        gpus = [e["gpu"][0] for e in ranks]
        assert len(set(gpus)) == n and set(gpus) <= set(visible)  # one GPU each, never one the run may not use
        for e in ranks:
            assert e["device"] == f"cuda:{e['rank']}" and e["index"] == [e["rank"]]
            assert e["backend"] == "cpu:gloo,cuda:gloo"
            # The GPU the rank is told it has is the one CUDA shows it at its device's number.
            assert e["cuda"][e["rank"]] == hexed(e["gpu"][0])
            if lease:  # the ranks see the lease alone, named by UUID, in rank order
                assert e["visible"] == ",".join(gpus)
                assert e["locks"] == sorted(f"{u}.lock" for u in gpus)  # and hold its locks too (issue 41)
                assert e["cuda"] == [hexed(u) for u in gpus]
            else:  # visibility left as the user set it; rank r takes the r-th GPU it leaves
                assert e["visible"] == outer and e["locks"] == []
                assert e["cuda"] == [hexed(u) for u in visible]
                assert gpus == visible[:n]
    pytest_pid = int((tmp_path / "pytest.pid").read_text())
    started_cuda = {pid for pid, call in host.calls() if call == "cuInit"}
    assert {e["pid"] for e in entries} <= started_cuda and pytest_pid not in started_cuda  # the user's process: never


@pytest.mark.slow
def test_a_ranks_test_needing_more_gpus_than_the_outer_view_leaves_skips_and_spawns_nothing(
    pytester, emulated_host, monkeypatch, tmp_path
):
    emulated_host("dgx-a100", torch=INSTALLED_TORCH)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,1")
    monkeypatch.setenv("PLACED_LOG", str(tmp_path / "placed.log"))
    pytester.makepyfile(test_placed=PLACED)
    for args in ([], ["--gputopo-lease", f"--gputopo-lease-dir={tmp_path / 'locks'}"]):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "0", "-rs", *args, "-k", "three")
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*ranks(3, backend='cpu:gloo,cuda:gloo')*needs 3 GPUs, 2 *"])
        assert not os.path.exists(tmp_path / "placed.log")


# Two ranks(2) tests that meet while both run: rank 0 of each says it started, then waits for the
# other's word (a test that could not run beside the other fails at its wait: they ran one by one).
TOGETHER = """
import json, os, time
import pytest
from test_placed import note


def meet(info, me, other):
    if info.rank == 0:
        folder = os.environ["MEET_DIR"]
        open(os.path.join(folder, me), "w").close()
        deadline = time.monotonic() + 240
        while not os.path.exists(os.path.join(folder, other)):
            assert time.monotonic() < deadline, f"{other} never ran while {me} held its GPUs"
            time.sleep(0.05)
    note(info, me)


@pytest.mark.ranks(2, backend="cpu:gloo,cuda:gloo")
def test_a(gputopo_rank):
    meet(gputopo_rank, "a", "b")


@pytest.mark.ranks(2, backend="cpu:gloo,cuda:gloo")
def test_b(gputopo_rank):
    meet(gputopo_rank, "b", "a")
"""


@pytest.mark.slow
@pytest.mark.parametrize("machine", ["hgx-h100"])
def test_two_ranks_tests_under_xdist_run_at_once_on_different_nvlink_pairs(
    pytester, emulated_host, monkeypatch, tmp_path, machine
):
    emulated_host(machine, torch=INSTALLED_TORCH)
    from pytest_gputopo.probe.recorded import load_profile

    topology = load_profile(machine).topology
    monkeypatch.setenv("PLACED_LOG", str(tmp_path / "placed.log"))
    monkeypatch.setenv("MEET_DIR", str(pytester.mkdir("meet")))
    pytester.makepyfile(test_placed=PLACED, test_together=TOGETHER)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "--dist",
        "load",
        "--gputopo-lease",
        f"--gputopo-lease-dir={tmp_path / 'locks'}",
        "test_together.py",
    )
    result.assert_outcomes(passed=2)
    entries = [json.loads(line) for line in (tmp_path / "placed.log").read_text().splitlines()]
    held = {test: sorted((e for e in entries if e["test"] == test), key=lambda e: e["rank"]) for test in "ab"}
    assert [len(held["a"]), len(held["b"])] == [2, 2]
    pairs = {test: [e["gpu"][0] for e in ranks] for test, ranks in held.items()}
    assert not set(pairs["a"]) & set(pairs["b"])  # they met while both held their GPUs: none shared
    index = {g.uuid: g.index for g in topology.gpus}
    for test, ranks in held.items():
        assert all(e["visible"] == ",".join(pairs[test]) for e in ranks)  # each sees its own pair alone
        assert topology.link(*(index[u] for u in pairs[test])).nvlinks  # an NVLink pair


SHARING = """
import time
import emulated_gpu
import pytest


@pytest.mark.lease_memory(10)
@pytest.mark.ranks(2, backend="cpu:gloo,cuda:gloo")
def test_two(gputopo_rank):
    emulated_gpu.use(3, gputopo_rank.rank)  # on its own GPU, cuda:<rank>
    import torch.distributed as dist

    dist.barrier()  # both use theirs at once
    time.sleep(0.5)  # for a few of the run's looks (every 0.1 s)
"""


@pytest.mark.slow
def test_a_ranks_test_with_a_budget_shares_its_gpus_and_its_ranks_peak_is_measured(
    pytester, emulated_host, monkeypatch, tmp_path
):
    """Leases x ranks(n) x memory: the ranks' GPUs are held as shares of the test's budget, each rank
    uses its own, and the run measures the ranks' use (they are the pytest process's descendants, under
    their keepers): the peak is per GPU, 3 GiB, not the 6 the two ranks use together."""
    emulated_host("dgx-a100", torch=INSTALLED_TORCH)
    pytester.makepyfile(test_sharing=SHARING)
    report = tmp_path / "report.json"
    args = ["--gputopo-lease", f"--gputopo-lease-dir={tmp_path / 'locks'}", f"--gputopo-json={report}"]
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "0", *args)
    result.assert_outcomes(passed=1)
    (leased,) = json.loads(report.read_text())["leased"]
    assert (leased["budget_gib"], leased["peak_gib"], leased["peak_unknown"]) == (10, 3.0, None)
