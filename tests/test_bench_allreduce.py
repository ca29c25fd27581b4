"""All-reduce benchmark over real worker processes (torch.distributed, gloo on loopback).

Every run is checked for debris: the worker processes must be gone (not even zombies) and the
private temporary directory removed, whether the run succeeded, hung or lost a rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from allreduce_double import one_size_result
from conftest import launcher_port
from pytest_gputopo.core import keys

pytest.importorskip("torch.distributed")

from pytest_gputopo.bench.allreduce import AllReduceResult, BenchError, run_allreduce  # noqa: E402
from pytest_gputopo.bench.allreduce_worker import apply_sched  # noqa: E402
from pytest_gputopo.core.collectives import allreduce_factor
from pytest_gputopo.core.units import size_text
from pytest_gputopo.parse.nccl_tuning import algo_by_size, parse_nccl_tuning  # noqa: E402

SIZES = [4096, 64 * 1024]


def faults(**plan) -> dict:
    """run_allreduce's arguments that inject ``plan`` into its workers (runtime.environ.test_faults)."""
    return {"env": {"PYTEST_GPUTOPO_TEST_FAULTS": json.dumps(plan)}}


def failed_allreduce(timeout_s: float, **plan) -> BenchError:
    """What a two-rank all-reduce of 4 KiB whose workers carry the fault ``plan`` raises."""
    with pytest.raises(BenchError) as info:
        run_allreduce(2, [4096], timeout_s=timeout_s, budget_s_per_size=0.3, **faults(**plan))
    return info.value


FAST = dict(timeout_s=60, budget_s_per_size=0.3, warmup=2, min_samples=3, min_sample_s=0.005)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Route tempfile.mkdtemp to a directory of our own so that leftovers can be seen."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _children_of_me(me=None):
    me = os.getpid() if me is None else me
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces: split after the last ')'
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me:
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                cmd = b""
            kids.append((int(entry), fields[0], cmd))
    return kids


def assert_no_debris(pids, tmp):
    assert pids, "the run recorded no worker pids"
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:
            continue  # gone
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        assert ppid != os.getpid(), f"worker {pid} still exists: {stat!r}"
    leftovers = [k for k in _children_of_me() if b"pytest_gputopo.bench.allreduce" in k[2]]
    assert leftovers == []
    assert [p.name for p in tmp.iterdir() if p.name.startswith("gputopo-allreduce-")] == []


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.slow
def test_gloo_allreduce_runs_and_verifies(n, private_tmp):
    result = run_allreduce(n, SIZES, backend="gloo", **FAST)
    assert isinstance(result, AllReduceResult)
    assert result.backend == "gloo" and result.world_size == n and result.measured
    assert [r.size_bytes for r in result.rows] == SIZES
    for row in result.rows:
        assert row.wrong == 0 and row.error is None and row.ok
        assert row.time_us > 0 and row.algbw_gbps > 0
        assert row.algbw_gbps == row.size_bytes / (row.time_us / 1e6) / 1e9 or row.algbw_gbps == pytest.approx(
            row.size_bytes / (row.time_us / 1e6) / 1e9, rel=1e-12
        )
        assert row.busbw_gbps == row.algbw_gbps * (2 * (n - 1) / n)
        assert row.iterations >= 1 and row.samples >= 1 and row.spread >= 1.0
        assert row.count == row.size_bytes // 4
    assert result.judged is result.rows[-1]  # default: the largest size
    assert result.nvls is None  # gloo: NCCL's algorithm choice does not apply
    assert result.ok and result.errors == ()
    j = result.to_json()
    assert j["busbw_factor"] == allreduce_factor(n) and j["rows"][0]["busbw_gbps"] == result.rows[0].busbw_gbps
    assert len(result.worker_pids) == n
    assert_no_debris(result.worker_pids, private_tmp)


@pytest.mark.slow
def test_single_rank_has_zero_bus_bandwidth(private_tmp):
    result = run_allreduce(1, [4096], judge_size=16384, **FAST)
    assert [r.size_bytes for r in result.rows] == [4096, 16384]  # judge_size joins the sweep
    assert result.judged.size_bytes == 16384
    for row in result.rows:
        assert row.algbw_gbps > 0 and row.busbw_gbps == 0.0 and row.wrong == 0
    assert_no_debris(result.worker_pids, private_tmp)


@pytest.mark.slow
def test_a_hanging_collective_ends_within_the_timeout(private_tmp):
    err = failed_allreduce(8, hang_rank=1)
    # Ended by its own deadline, which names who waited for whom, not by the process group's timeout
    # (the deadline + 60 s), which would say neither: the event, not the seconds (a loaded machine
    # takes its time).
    assert err.reason.startswith("timed out after 8 s waiting for rank 1 ("), err.reason
    assert "rank 1 in test fault: sleeping instead of all_reduce of 4 KiB" in err.reason
    assert "rank 0 in all_reduce of 4 KiB" in err.reason
    assert_no_debris(err.pids, private_tmp)


@pytest.mark.slow
def test_a_dying_rank_is_named(private_tmp):
    err = failed_allreduce(30, die_rank=1)
    # Detected on exit, not at the deadline (that reason would say "timed out").
    assert err.reason.startswith("rank 1 exited with code 9 during all_reduce of 4 KiB"), err.reason
    assert_no_debris(err.pids, private_tmp)


@pytest.mark.slow
def test_a_corrupted_result_fails_verification(private_tmp):
    result = run_allreduce(2, SIZES, **faults(corrupt=True), **FAST)
    assert not result.ok
    for row in result.rows:
        assert row.wrong == 1 and not row.ok
        assert row.error == f"1 wrong element(s) of {row.count} after all_reduce of {size_text(row.size_bytes)}"
        assert row.busbw_gbps > 0  # the speed was measured, and the row still fails
    assert len(result.errors) == len(SIZES)
    assert result.to_json()["ok"] is False
    assert_no_debris(result.worker_pids, private_tmp)


def test_bad_arguments():
    with pytest.raises(ValueError):
        run_allreduce(0, [4096])
    with pytest.raises(ValueError):
        run_allreduce(2, [4096], backend="mpi")
    with pytest.raises(ValueError):
        run_allreduce(2, [4096], dtype="complex64")
    with pytest.raises(ValueError):
        run_allreduce(2, [4096], sched="rt")


def _fifo_permitted() -> bool:
    probe = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


fifo_only = pytest.mark.skipif(not _fifo_permitted(), reason="SCHED_FIFO needs root or CAP_SYS_NICE here")


@fifo_only
def test_fifo_reaches_the_threads_started_afterwards():
    # gloo and NCCL start their threads after apply_sched: each must run under SCHED_FIFO too
    code = (
        "import os, threading\n"
        "from pytest_gputopo.bench.allreduce_worker import apply_sched\n"
        "apply_sched('fifo')\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))\n"
        "t.start(); t.join()\n"
        "print(seen[0] == os.SCHED_FIFO, os.sched_getscheduler(0) == os.SCHED_FIFO)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


@fifo_only
@pytest.mark.slow
def test_gloo_allreduce_under_fifo(private_tmp):
    result = run_allreduce(2, [4096], backend="gloo", sched="fifo", **FAST)
    assert result.ok and result.sched == "fifo" and result.to_json()["sched"] == "fifo"
    assert_no_debris(result.worker_pids, private_tmp)


def test_fifo_refused_says_what_it_needs(monkeypatch):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    apply_sched("fair")  # the default asks nothing of the kernel
    with pytest.raises(PermissionError, match=r"SCHED_FIFO refused .*CAP_SYS_NICE.*ulimit -r"):
        apply_sched("fifo")


def test_busbw_factor_matches_nccl_tests():
    assert allreduce_factor(1) == 0.0
    assert allreduce_factor(2) == 1.0
    assert allreduce_factor(8) == 2 * 7 / 8


def test_parse_nccl_tuning_lines():
    log = (
        "host:123:456 [0] NCCL INFO AllReduce: 67108864 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}\n"
        "host:123:456 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0} comm 0x5\n"
        "host:123:456 [0] NCCL INFO AllGather: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}\n"
        "host:123:456 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
    )
    assert parse_nccl_tuning(log) == [
        ("AllReduce", 67108864, "NVLS", "Simple"),
        ("AllReduce", 4096, "RING", "LL"),
        ("AllGather", 8, "RING", "LL"),
    ]
    assert parse_nccl_tuning("garbage\n\x00 Bytes -> Algo") == []


def test_parse_nccl_tuning_reads_every_version_that_prints_the_line():
    """NCCL's src/enqueue.cc prints the line on rank 0 in three forms. 2.20.5-1 to 2.22.3-1:
    ``INFO(NCCL_TUNING, "%ld Bytes -> Algo %d proto %d time %f", ...)``, no collective and numbers;
    2.23.4-1: ``"%s: %ld Bytes -> Algo %d proto %d time %f"`` with ncclFuncToString; 2.24.3-1 on:
    names from ncclAlgoToString / ncclProtoToString (src/collectives.cc). The numbers are
    NCCL_ALGO_* / NCCL_PROTO_* of src/include/nccl_common.h (NVLS 4, NVLS_TREE 5, SIMPLE 2). Before
    2.20 the line is commented out: no algorithm, never a guess."""
    pfx = "host:123:456 [0] NCCL INFO "
    log = (
        pfx
        + "67108864 Bytes -> Algo 4 proto 2 time 1234.567890\n"  # 2.20-2.22
        + pfx
        + "AllReduce: 4096 Bytes -> Algo 1 proto 0 time 12.000000\n"  # 2.23
        + pfx
        + "AllReduce: 1024 Bytes -> Algo 5 proto 9 time 8.000000\n"
        + pfx
        + "AllReduce [Symmetric]: 4096 Bytes -> Kernel AllReduce_ST nchannels 8 nthreads 512\n"
    )
    assert parse_nccl_tuning(log) == [
        (None, 67108864, "NVLS", "SIMPLE"),
        ("AllReduce", 4096, "RING", "LL"),
        ("AllReduce", 1024, "NVLS_TREE", "9"),
    ]
    # The workers run nothing but all-reduces: a line without the collective's name is one.
    assert algo_by_size(parse_nccl_tuning(log)) == {67108864: "NVLS", 4096: "RING", 1024: "NVLS_TREE"}
    assert algo_by_size(parse_nccl_tuning(pfx + "AllGather: 8 Bytes -> Algo RING proto LL")) == {}


# Run by every worker before anything else (PYTHONPATH): writes the NCCL settings the worker got.
_RECORD_ENV = """
import json, os
if os.environ.get("GPUTOPO_TEST_ENV_DIR"):
    with open(os.path.join(os.environ["GPUTOPO_TEST_ENV_DIR"], f"{os.getpid()}.json"), "w") as f:
        json.dump({k: v for k, v in os.environ.items() if k.startswith("NCCL_")}, f)
"""


@pytest.mark.parametrize("log_nccl", [False, True], ids=["timed", "logged"])
@pytest.mark.slow
def test_timed_nccl_workers_log_warnings_only(tmp_path, monkeypatch, private_tmp, log_nccl):
    """At NCCL_DEBUG=INFO, NCCL >= 2.20 writes a TUNING line per collective on rank 0 (src/enqueue.cc)
    to NCCL_DEBUG_FILE, a write per line (src/debug.cc ncclDebugInit: ``setbuf(file, nullptr)`` in
    2.24.3-1, ``setlinebuf(file)`` in 2.30.7-1): inside the timed loop. A timed run's workers get
    NCCL_DEBUG=WARN whatever the caller set; only a logged run (for NCCL's account) logs at INFO, to its
    own files. No GPU here: NCCL cannot start, but the workers' environment is what they were given."""
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "sitecustomize.py").write_text(_RECORD_ENV)
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(stub))
    monkeypatch.setenv("GPUTOPO_TEST_ENV_DIR", str(seen))
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # the user's own settings, as in a debugging session
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "ALL")
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "mine.%p.log"))
    with pytest.raises(BenchError):  # no CUDA: the workers cannot run NCCL
        run_allreduce(2, [4096], backend="nccl", log_nccl=log_nccl, **FAST)
    envs = [json.loads(p.read_text()) for p in seen.iterdir()]
    assert len(envs) == 2
    for env in envs:
        if log_nccl:
            assert env["NCCL_DEBUG"] == "INFO" and "TUNING" in env["NCCL_DEBUG_SUBSYS"]
            assert env["NCCL_DEBUG_FILE"].startswith(str(private_tmp))
        else:
            assert env["NCCL_DEBUG"] == "WARN"
            assert not {"NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_TOPO_DUMP_FILE"} & set(env)


def test_size_text_names_exactly_what_was_measured():
    assert size_text(4096) == "4 KiB"
    assert size_text(64 << 20) == "64 MiB"
    assert size_text(3) == "3 B"
    assert size_text(1 << 30) == "1 GiB"
    assert size_text(3 * 2**20 + 4) == "3145732 B"  # never rounded to a unit it does not fill


def _wait_for_hook(tmp, rank, timeout=30.0):
    """Wait until worker ``rank`` sits in its test fault; return its pid."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for d in tmp.glob("gputopo-allreduce-*"):
            try:
                st = json.loads((d / f"status.{rank}.json").read_text())
            except (OSError, ValueError):
                continue
            if st["phase"].startswith("test fault"):
                return st["pid"]
        time.sleep(0.05)
    raise AssertionError("the worker never reached its test fault")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_a_rank_killed_by_a_signal_is_named(private_tmp):
    box = {}

    def bench():
        try:
            run_allreduce(2, [4096], timeout_s=30, budget_s_per_size=0.3, **faults(hang_rank=1))
        except BaseException as exc:  # noqa: BLE001
            box["exc"] = exc

    t = threading.Thread(target=bench)
    t.start()
    victim = _wait_for_hook(private_tmp, 1)
    os.kill(victim, signal.SIGKILL)  # what the OOM killer does
    t.join(30)
    err = box["exc"]
    assert isinstance(err, BenchError)
    assert err.reason.startswith(
        "rank 1 exited with code -9 (SIGKILL) during test fault: sleeping instead of all_reduce of 4 KiB"
    ), err.reason
    assert_no_debris(err.pids, private_tmp)


# The parent as a user's foreground program has it: Ctrl-C raises KeyboardInterrupt. (Python leaves SIGINT
# ignored where it starts with it ignored, as a suite started as a background job does, e.g. `.ci/run &`.)
PARENT = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from pytest_gputopo.bench.allreduce import run_allreduce
try:
    run_allreduce(2, [4096], timeout_s=60, budget_s_per_size=0.3)  # rank 1 hangs: the environment's fault plan
except KeyboardInterrupt:
    sys.exit(3)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
@pytest.mark.slow
def test_workers_do_not_outlive_an_interrupted_or_killed_parent(sig, tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), **faults(hang_rank=1)["env"])
    parent = subprocess.Popen([sys.executable, "-c", PARENT], env=env)
    try:
        _wait_for_hook(tmp_path, 1)
        workers = [pid for pid, _state, cmd in _children_of_me(parent.pid) if b"pytest_gputopo.bench.allreduce" in cmd]
        assert len(workers) == 2
        parent.send_signal(sig)
        code = parent.wait(timeout=15)
        if sig == signal.SIGINT:
            assert code == 3  # KeyboardInterrupt reached the caller after the cleanup
            assert list(tmp_path.glob("gputopo-allreduce-*")) == []
        end = time.monotonic() + 5  # SIGKILL: PR_SET_PDEATHSIG / the watchdog end them
        while time.monotonic() < end and any(_alive(p) for p in workers):
            time.sleep(0.05)
        assert not any(_alive(p) for p in workers)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32"])
@pytest.mark.parametrize("n", [1, 2, 3, 8, 16, 64])
def test_verifiable_inputs_sum_exactly(dtype, n):
    from pytest_gputopo.bench.allreduce_worker import _EXACT_LIMIT, _pattern

    m, offsets = _pattern(n, dtype)
    assert m >= 1 and len(offsets) == n
    # the largest value any rank holds and the largest sum are integers the dtype represents exactly
    assert n * (m - 1) + sum(offsets) <= _EXACT_LIMIT[dtype]
    assert m > 1  # index-dependent values: a shifted or swapped segment shows up as wrong elements


# --------------------------------------------------------------------------------------------------
# Cross-rank mode: pytest-like callers under torchrun, one worker each, one process group.

DRIVER = r"""
import json, os, socket, sys, time
from datetime import timedelta

import torch.distributed as dist

from pytest_gputopo.bench.allreduce import BenchError, run_allreduce

mode, out = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), n, is_master=False,
                      timeout=timedelta(seconds=30))  # torchrun's agent store
if rank == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store.set("gputopo-test-port", str(port))
else:
    port = int(store.get("gputopo-test-port"))
url = f"tcp://127.0.0.1:{port}"
record = {"rank": rank, "url": url}
if mode == "absent" and rank != 0:
    time.sleep(1)
    sys.exit(0)
try:
    res = run_allreduce(n, [2**16], backend="gloo", peer=(rank, url),
                        timeout_s=(5 if mode == "absent" else 60), budget_s_per_size=1)
except BenchError as exc:
    record.update(error=exc.reason, pids=list(exc.pids))
else:
    record.update(world_size=res.world_size, pids=list(res.worker_pids),
                  rows=[{"size_bytes": r.size_bytes, "algbw": r.algbw_gbps, "busbw": r.busbw_gbps,
                         "time_us": r.time_us, "wrong": r.wrong, "ok": r.ok} for r in res.rows])
with open(os.path.join(out, f"result.{rank}.json"), "w") as f:
    json.dump(record, f)
"""


def _free_port():
    return launcher_port()  # below the ephemeral range: no outgoing connection takes it meanwhile


def _torchrun(tmp_path, mode, timeout):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out"
    out.mkdir()
    scratch = tmp_path / "scratch"  # the workers' private directories land here (TMPDIR)
    scratch.mkdir()
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(
        os.environ,
        TMPDIR=str(scratch),
        PYTHONPATH=os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH")) if p),
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        str(driver),
        mode,
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-4000:]
    return out, scratch


def _workers_under(scratch):
    """Processes whose command line is a benchmark worker of a run under ``scratch``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"pytest_gputopo.bench.allreduce\0--worker" in cmd and str(scratch).encode() in cmd:
            found.append((int(entry), cmd))
    return found


@pytest.mark.slow
def test_cross_rank_mode_under_torchrun(tmp_path):
    out, scratch = _torchrun(tmp_path, "both", timeout=120)
    records = [json.loads((out / f"result.{r}.json").read_text()) for r in (0, 1)]
    for rec in records:
        assert "error" not in rec, rec
        assert rec["world_size"] == 2 and len(rec["pids"]) == 1  # one worker per caller
        (row,) = rec["rows"]
        assert row["size_bytes"] == 2**16 and row["wrong"] == 0 and row["ok"]
        assert row["busbw"] > 0
        assert row["busbw"] == row["algbw"] * (2 * (2 - 1) / 2)
    # the figures are agreed across ranks (max over ranks, then the same median)
    assert records[0]["rows"][0]["time_us"] == records[1]["rows"][0]["time_us"]
    assert records[0]["pids"] != records[1]["pids"]
    assert _workers_under(scratch) == []
    assert [p.name for p in scratch.iterdir() if p.name.startswith("gputopo-allreduce-")] == []


@pytest.mark.slow
def test_cross_rank_mode_names_a_peer_that_never_joins(tmp_path):
    out, scratch = _torchrun(tmp_path, "absent", timeout=60)
    assert not (out / "result.1.json").exists()  # rank 1 never called run_allreduce
    rec = json.loads((out / "result.0.json").read_text())
    assert rec.get("error"), rec
    # its own deadline ended it, not the process group's (deadline + 60 s): the reason says which
    assert rec["error"].startswith("timed out after 5 s: rank 1 did not join the process group"), rec["error"]
    assert len(rec["pids"]) == 1
    for pid in rec["pids"]:
        assert not _alive(pid)
    assert _workers_under(scratch) == []
    assert [p.name for p in scratch.iterdir() if p.name.startswith("gputopo-allreduce-")] == []


def test_cross_rank_mode_bad_arguments():
    with pytest.raises(ValueError):
        run_allreduce(2, [4096], peer=(2, "tcp://127.0.0.1:1"))
    with pytest.raises(ValueError):
        run_allreduce(2, [4096], peer=(0, "127.0.0.1:1"))


@pytest.mark.slow
def test_the_all_reduce_figure_is_timed_unlogged_and_nccls_algorithm_read_from_its_own_run(monkeypatch):
    """The figure comes from a run with NCCL's logging off; the algorithm at the same size
    (NVLS or not) from a short logged run apart from it. When that run fails the figure stands and
    the algorithm is unknown, with the reason."""
    from pytest_gputopo.bench import allreduce
    from pytest_gputopo.bench.suite import BenchSettings, BenchSuite
    from pytest_gputopo.core import model

    calls = []

    def fake_run(n, sizes, *, log_nccl=False, **kw):
        calls.append((n, kw["judge_size"], log_nccl))
        if log_nccl and fail_logged:
            raise BenchError("rank 1 died")
        if not log_nccl:
            return one_size_result(n, kw["judge_size"], algbw_gbps=200.0, busbw_gbps=350.0)
        evidence = ("NVLS comm 0x1 headRank 0",)
        return one_size_result(
            n, kw["judge_size"], algbw_gbps=200.0, busbw_gbps=350.0, algo="NVLS", nvls=True, nvls_evidence=evidence
        )

    monkeypatch.setattr(allreduce, "run_allreduce", fake_run)
    host = model.Topology(
        gpus=tuple(model.Gpu(i) for i in range(2)), links=(model.Link(0, 1),), source=model.Source("nvml")
    )
    fail_logged = False
    result = BenchSuite(host, BenchSettings()).get(keys.AllReduce(2, 2**30))
    assert calls == [(2, 2**30, False), (2, 2**30, True)], result
    assert result.gbps == 350.0 and result.detail["nvls"] is True and result.detail["algo"] == "NVLS"
    assert "NVLink SHARP" in result.what

    calls.clear()
    fail_logged = True
    result = BenchSuite(host, BenchSettings()).get(keys.AllReduce(2, 2**30))
    assert result.gbps == 350.0 and result.error is None
    assert result.detail["nvls"] is None and "rank 1 died" in result.detail["algo_error"]


def test_the_next_run_sweeps_folders_a_killed_run_left_but_no_live_one(tmp_path, monkeypatch):
    """What a SIGKILL of pytest mid-benchmark leaves in /tmp/gputopo-allreduce-* (config, logs,
    status files, store) does not stay forever: the next benchmark removes this user's folders whose parent pid
    is dead and that nobody touched for an hour; a live run's folder stays."""
    from pytest_gputopo.bench import allreduce

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    old = time.time() - 2 * allreduce.STALE_AFTER_S
    folders = {}
    for name, pid, mtime in [
        ("killed", dead.pid, old),
        ("live", os.getpid(), old),
        ("recent", dead.pid, time.time()),
        ("legacy", "x", old),
    ]:
        folder = tmp_path / f"{allreduce.WORKDIR_PREFIX}{pid}-{name}"
        folder.mkdir()
        (folder / "status.0.json").write_text("{}")
        for p in (folder / "status.0.json", folder):
            os.utime(p, (mtime, mtime))
        folders[name] = folder
    assert allreduce.sweep_stale_workdirs() == [str(folders["killed"])]
    assert sorted(p.name.split("-")[-1] for p in tmp_path.iterdir()) == ["legacy", "live", "recent"]
