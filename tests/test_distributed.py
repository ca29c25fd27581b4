"""pytest inside torchrun, or started by srun (gloo, loopback): one decision across ranks, rank 0
speaks, no hang.

Each rank is given a different recorded machine (as if the nodes differed) by a conftest that
implements the plugin's probe hook.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import launcher_port, srun_ranks
from pytest_gputopo.core import keys

pytest.importorskip("torch")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]

CONFTEST = """
import json, os
import pytest

MACHINES = os.environ.get("GPUTOPO_TEST_MACHINES", "dgx-a100,4x-rtx4090").split(",")
RANK = os.environ.get("RANK") or os.environ["SLURM_PROCID"]  # torchrun's, else srun's

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    from pytest_gputopo.probe import probe_recorded
    if os.environ.get("GPUTOPO_TEST_HANG_RANK") == RANK:
        import time
        time.sleep(600)  # a rank that never reports
    machine = MACHINES[int(RANK) % len(MACHINES)]
    if machine == "host":
        return None  # this host itself, probed by the plugin
    return probe_recorded(machine)

def pytest_sessionfinish(session):
    rep = session.config.pluginmanager.get_plugin("terminalreporter")
    outcomes = {k: sorted(r.nodeid for r in v if hasattr(r, "nodeid"))
                for k, v in rep.stats.items() if k in ("passed", "skipped", "failed", "error")}
    with open(f"outcomes.{RANK}.json", "w") as f:
        json.dump(outcomes, f)
"""

TESTS = """
import os
import pytest
import torch
import torch.distributed as dist

def all_reduce_ones():
    if not dist.is_initialized():  # env:// (MASTER_ADDR, MASTER_PORT); the rank from torchrun or srun
        rank = int(os.environ.get("RANK") or os.environ["SLURM_PROCID"])
        world = int(os.environ.get("WORLD_SIZE") or os.environ["SLURM_STEP_NUM_TASKS"])
        dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.ones(1)
    dist.all_reduce(t)  # would hang if another rank skipped this test
    assert t.item() == dist.get_world_size()

@pytest.mark.requires_p2p
def test_p2p_collective():
    all_reduce_ones()

@pytest.mark.requires_gpus(4)
def test_four_gpus_collective():
    all_reduce_ones()

@pytest.mark.requires_link("NV12")
def test_nvlink_collective():
    all_reduce_ones()
"""


CUSTOM_TESTS = """
import pytest
import torch
import torch.distributed as dist
from test_dist import all_reduce_ones

def ampere(topology):
    return all(g.compute_capability == "8.0" for g in topology.gpus)

def test_every_rank_ampere(gputopo_ranks):
    gputopo_ranks.require(ampere, "every GPU is an A100 (compute capability 8.0)")
    all_reduce_ones()  # would hang if only the A100 rank ran it

def test_every_rank_has_gpus(gputopo_ranks):
    gputopo_ranks.require(lambda t: len(t.gpus) >= 4, "at least 4 GPUs")
    all_reduce_ones()

def test_this_rank_alone_would_disagree(gputopo):
    # The hazard: each rank deciding from its own facts. Kept out of collectives.
    if gputopo.gpus[0].compute_capability != "8.0":
        pytest.skip("this rank's GPU is not an A100")

def test_the_combined_view(gputopo_ranks):
    assert [v.rank for v in gputopo_ranks.views] == [0, 1]
    assert [len(v.topology.gpus) for v in gputopo_ranks.nodes] == [8, 4]
"""


@pytest.fixture
def suite_dir(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_dist.py").write_text(TESTS)
    return tmp_path


def torchrun(cwd: Path, *args: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    # gloo's pairs on loopback: by default gloo takes the address the host name resolves to, which
    # may be an interface beyond loopback (tests send traffic to loopback only: docs/testing.md).
    full_env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", **(env or {}), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(TORCHRUN + list(args), cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def pytest_as_two_ranks(cwd: Path, *pytest_args: str, env=None) -> subprocess.CompletedProcess:
    """pytest under torchrun as two ranks on this host, the launcher on a port of its own (loopback)."""
    port = launcher_port()
    return torchrun(
        cwd,
        *("--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)),
        *("-m", "pytest", "-p", "no:cacheprovider", *pytest_args),
        env=env,
    )


def outcomes(cwd: Path, ranks: int) -> list[dict]:
    return [json.loads((cwd / f"outcomes.{r}.json").read_text()) for r in range(ranks)]


def only(outcome: dict, module: str) -> dict:
    """A rank's outcomes of one test module of the run."""
    return {k: [t for t in v if t.startswith(module + "::")] for k, v in outcome.items()}


@pytest.mark.slow
def test_every_rank_takes_the_same_decisions(suite_dir):
    """One torchrun of two ranks (rank 0 on dgx-a100, rank 1 on 4x-rtx4090) for two suites, each
    asserted on its own: the markers' decisions (test_dist.py), and a custom condition (test_custom.py).
    Rank 0 meets a custom condition, rank 1 does not; both ranks skip the test, the reason names rank 1,
    and the collectives of the tests that run do not hang. Deciding from this rank's own ``gputopo``
    alone gives different outcomes per rank. (One run for both: each torchrun starts two pytest
    processes that import torch.)"""
    (suite_dir / "test_custom.py").write_text(CUSTOM_TESTS)
    out = pytest_as_two_ranks(
        suite_dir,
        "-rs",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    both = outcomes(suite_dir, 2)
    rank0, rank1 = (only(o, "test_dist.py") for o in both)
    assert rank0 == rank1
    assert rank0["passed"] == ["test_dist.py::test_four_gpus_collective"]
    assert sorted(rank0["skipped"]) == ["test_dist.py::test_nvlink_collective", "test_dist.py::test_p2p_collective"]
    # Rank 0 prints one line per node, flagging the one unlike its own; the other rank prints none.
    assert "(rank 0): 8x NVIDIA A100-SXM4-80GB" in out.stdout
    assert "(rank 1): 4x NVIDIA GeForce RTX 4090" in out.stdout and "[DIFFERS from rank 0's]" in out.stdout
    assert out.stdout.count("[DIFFERS from rank 0's]") == 1
    # the skip reason of a marker names the rank whose node lacks it
    assert any("test_dist.py" in ln and "on rank 1 (" in ln for ln in out.stdout.splitlines()), out.stdout[-3000:]

    rank0, rank1 = (only(o, "test_custom.py") for o in both)
    custom = [
        f"test_custom.py::{name}"
        for name in ("test_every_rank_ampere", "test_every_rank_has_gpus", "test_the_combined_view")
    ]
    for ranked in (rank0, rank1):
        assert "test_custom.py::test_every_rank_ampere" in ranked["skipped"]
        assert {"test_custom.py::test_every_rank_has_gpus", "test_custom.py::test_the_combined_view"} <= set(
            ranked["passed"]
        )
    assert [t for t in rank0["passed"] if t in custom] == [t for t in rank1["passed"] if t in custom]
    lone = "test_custom.py::test_this_rank_alone_would_disagree"
    assert lone in rank0["passed"] and lone in rank1["skipped"]
    assert (
        "every GPU is an A100 (compute capability 8.0): unmet on rank 1 (" in out.stdout
        and "[recorded:4x-rtx4090" in out.stdout
    )


@pytest.mark.slow
def test_srun_starting_every_rank_takes_one_decision(suite_dir):
    """srun sets SLURM_PROCID and its step's task count, not RANK/WORLD_SIZE. Two pytest
    processes given srun's variables (and MASTER_ADDR/MASTER_PORT, as torch's env:// reads them) and
    different recorded machines take the same decisions, and their collectives do not hang."""
    port = launcher_port()
    # A rank-timeout well inside the test's own: a rank that cannot reach the other ends with its
    # reason in the output, not in a TimeoutExpired that shows nothing.
    procs = srun_ranks(suite_dir, port, 60)
    try:
        out = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], out[0][-3000:] + out[1][-3000:]
    rank0, rank1 = outcomes(suite_dir, 2)
    assert rank0 == rank1
    assert rank0["passed"] == ["test_dist.py::test_four_gpus_collective"]
    assert "(rank 1): 4x NVIDIA GeForce RTX 4090" in out[0] and "on rank 1 (" in out[0]


@pytest.mark.slow
def test_a_rank_that_never_reports_ends_the_run_with_a_reason(suite_dir):
    out = pytest_as_two_ranks(
        suite_dir,
        "--gputopo-rank-timeout",
        "5",
        env={"GPUTOPO_TEST_HANG_RANK": "1"},
    )
    # The rank timeout ended it (the reason names it), not the seconds a loaded machine takes
    assert out.returncode != 0
    assert "the ranks cannot agree: rank(s) 1 did not report 'topology' within 5 s" in out.stdout + out.stderr
    assert processes_in(suite_dir) == []  # no rank outlived the run


def processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(directory) and "Z" not in (entry / "stat").read_text().split()[2]:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_two_nodes_on_loopback_show_a_header_per_node(suite_dir):
    port = launcher_port()
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "GPUTOPO_TEST_MACHINES": "hgx-h100,hgx-h100-nvlink-down"}
    procs = [
        subprocess.Popen(
            TORCHRUN + common + ["--node-rank", str(n), "-m", "pytest", "-p", "no:cacheprovider"],
            cwd=suite_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in (0, 1)
    ]
    try:
        texts = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], texts
    node0 = texts[0]
    assert "node 0 (rank 0): 8x NVIDIA H100 80GB HBM3" in node0
    assert "node 1 (rank 1): 8x NVIDIA H100 80GB HBM3" in node0 and "[DIFFERS from rank 0's]" in node0
    assert "node 0 (rank 0)" not in texts[1]  # only rank 0 prints the header
    rank0, rank1 = outcomes(suite_dir, 2)
    assert rank0 == rank1 and "test_dist.py::test_nvlink_collective" in rank0["skipped"]


@pytest.mark.slow
def test_an_unmet_gate_on_one_node_is_the_same_failed_cause_on_every_rank(suite_dir):
    """The gate is judged on every node, once: each rank fails the same gate test, named by the node
    and GPU at fault, and ends with exit status 8; rank 0 alone prints the causes."""
    out = pytest_as_two_ranks(
        suite_dir,
        "--gputopo-require",
        "link>=NV12",
        env={"GPUTOPO_TEST_MACHINES": "hgx-h100,hgx-h100-nvlink-down"},
    )
    assert out.returncode != 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "exitcode: 8" in out.stderr or "exitcode  : 8" in out.stderr, out.stderr[-3000:]
    rank0, rank1 = outcomes(suite_dir, 2)
    assert rank0 == rank1 and "passed" not in rank0
    (failed,) = rank0["failed"]
    assert failed.startswith("gputopo-gate::rank 1 (") and failed.endswith("):GPU5")
    assert out.stdout.count("this machine does not meet the run's requirements") == 1
    assert "  - rank 1 (" in out.stdout and "): GPU5: all 7 of its pairs fail requires_link('NV12')" in out.stdout


@pytest.mark.slow
def test_an_allreduce_marker_measures_across_the_ranks(suite_dir):
    """Under torchrun the all-reduce spans every rank (one worker each); every rank gets the same
    figure and the same verdict."""
    (suite_dir / "test_dist.py").write_text(
        "import pytest\n"
        "@pytest.mark.min_allreduce_bw(0.0001)\ndef test_reachable(gputopo_bench):\n"
        "    r = gputopo_bench.allreduce()\n"
        "    open(f'busbw.{__import__(\"os\").environ[\"RANK\"]}', 'w').write(repr((r.gbps, r.detail['world_size'])))\n"
        "@pytest.mark.min_allreduce_bw(100000)\ndef test_too_fast(): pass\n"
    )
    out = pytest_as_two_ranks(
        suite_dir,
        "-rs",
        "--gputopo-allreduce-backend",
        "gloo",
        "--gputopo-allreduce-size",
        "64K",
        "--gputopo-bench-budget",  # 1 s per size: the test asserts who measures and says what, not precision
        "1",
        env={"GPUTOPO_TEST_MACHINES": "host"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rank0, rank1 = outcomes(suite_dir, 2)
    assert rank0 == rank1 and rank0["passed"] == ["test_dist.py::test_reachable"]
    figures = {(suite_dir / f"busbw.{r}").read_text() for r in (0, 1)}
    assert len(figures) == 1 and figures.pop().endswith(", 2)")  # one figure, from a 2-rank all-reduce
    assert "min_allreduce_bw(100000): all-reduce busbw, 2 ranks, 64 KiB: measured" in out.stdout
    # Progress is said once, by rank 0, though both ranks took part in the measurement.
    assert out.stdout.count("gputopo: measuring all-reduce busbw, 2 ranks, 64 KiB ...") == 1
    said = [ln for ln in out.stdout.splitlines() if ln.startswith("gputopo: all-reduce busbw, 2 ranks, 64 KiB: ")]
    assert len(said) == 1


@pytest.mark.slow
def test_rank_zero_names_each_nodes_fallback(suite_dir):
    out = pytest_as_two_ranks(
        suite_dir,
        env={"GPUTOPO_TEST_MACHINES": "dgx-a100", "NCCL_P2P_DISABLE": "1"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "(rank 0,1): 8x NVIDIA A100-SXM4-80GB" in out.stdout
    assert (
        out.stdout.count("  fallback: GPU0-GPU1 NV12 uses SHM instead of P2P (NCCL_P2P_DISABLE=1 from environment)")
        == 1
    )


def test_ranks_on_one_node_share_a_copy_benchmark_and_other_gpus_do_not(monkeypatch):
    """Two ranks of one node measure a copy once between them (through the launcher's store, under
    the host lock); a rank that sees other GPUs, or another host, measures its own."""
    import dataclasses

    from pytest_gputopo.bench.bench_result import BenchResult
    from pytest_gputopo.bench.suite import BenchSettings, BenchSuite
    from pytest_gputopo.core import model
    from pytest_gputopo.probe import probe
    from pytest_gputopo.runtime import environ as runtime
    from pytest_gputopo.runtime.ranks import Exchange, NodeShare

    dist = pytest.importorskip("torch.distributed")
    port = launcher_port()
    store = dist.TCPStore("127.0.0.1", port, 1, True, wait_for_workers=False)
    launch = runtime.Launch(0, 4, 0, 0, "127.0.0.1", port, False, "run-1")
    here = dataclasses.replace(probe("dgx-a100"), source=model.Source("nvml"), hostname="node-a")
    measured = []

    def measure(self, key):
        measured.append((self.topology.hostname, key))
        return BenchResult(key, "copy", 100.0 + len(measured), "measured")

    monkeypatch.setattr(BenchSuite, "_measure", measure)

    def rank(topology):
        return BenchSuite(topology, BenchSettings(), shared=NodeShare(Exchange(launch, store, 10), topology))

    key = keys.Copy("p2p", 0, 1)
    first, second = rank(here).get(key), rank(here).get(key)
    assert measured == [("node-a", key)] and first == second
    other_gpus = dataclasses.replace(here, gpus=here.gpus[4:])
    other_host = dataclasses.replace(here, hostname="node-b")
    assert rank(other_gpus).get(key).gbps == 102.0 and rank(other_host).get(key).gbps == 103.0
