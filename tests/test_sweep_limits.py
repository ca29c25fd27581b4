"""``gputopo bench allreduce`` is bounded by the machine and ends cleanly when
stopped. More gloo ranks than the CPUs run (two per usable CPU) or than the memory holds for the
largest size are refused before anything runs, naming the option and why. Ctrl-C (SIGINT to the
foreground process group, as a terminal sends it) and SIGTERM (to the command, as a supervisor sends
it) during a sweep end it with one line, exit status 130 or 143, no worker process left and no
``gputopo-allreduce-<pid>-*`` folder left; the handlers live in the CLI's ``main`` only."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import needs_torch
from pytest_gputopo.bench.sweep import RANK_BASE_BYTES, RANKS_PER_CPU, gloo_rank_limit, rank_memory, usable_cpus
from pytest_gputopo.runtime.environ import TEST_FAULTS

GPUTOPO = [sys.executable, "-m", "pytest_gputopo.cli"]


def gputopo(*args):
    return subprocess.run([*GPUTOPO, *args], capture_output=True, text=True, timeout=120)


# -- 20.9: ranks bounded by the machine ------------------------------------------------------------


def test_the_rank_limit_is_two_per_cpu_and_what_the_memory_holds():
    assert gloo_rank_limit(8, cpus=2, available=None)[0] == 4  # 3 ranks on a 2-core CI machine still run
    assert gloo_rank_limit(8, cpus=1, available=None)[0] == 2  # the default 2 ranks run anywhere
    limit, why = gloo_rank_limit(8, cpus=64, available=None)
    assert limit == 128 and "64 usable CPUs x 2 ranks each" in why
    need = rank_memory(2**30)
    assert need == RANK_BASE_BYTES + 6 * 2**30
    limit, why = gloo_rank_limit(2**30, cpus=64, available=3 * need + 1)
    assert limit == 3 and "GB of memory available" in why and "6 x 1 GiB, the largest size" in why
    assert gloo_rank_limit(2**30, cpus=1, available=10 * need)[0] == 2  # the CPUs bound first


def test_more_ranks_than_the_cpus_run_are_refused_before_anything_runs():
    ranks = RANKS_PER_CPU * usable_cpus() + 1
    out = gputopo("bench", "allreduce", "--backend", "gloo", "--ranks", str(ranks), "-b", "8", "-e", "8")
    assert out.returncode == 2 and "measuring" not in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert f"--ranks {ranks}: at most {ranks - 1} gloo ranks on this host" in out.stderr
    assert f"{usable_cpus()} usable CPU" in out.stderr and "the scheduler" in out.stderr


def test_ranks_the_memory_cannot_hold_are_refused_naming_the_largest_size():
    out = gputopo("bench", "allreduce", "--backend", "gloo", "-b", "512G", "-e", "512G")
    assert out.returncode == 2 and "measuring" not in out.stderr, out.stderr
    assert "-e 512G: the default 2 gloo ranks do not fit this host at 512 GiB" in out.stderr
    assert "GB of memory available" in out.stderr
    out = gputopo("bench", "allreduce", "--backend", "gloo", "--ranks", "2", "-b", "512G", "-e", "512G")
    assert out.returncode == 2 and "--ranks 2: at most" in out.stderr and "memory available" in out.stderr


# -- 20.10: SIGINT and SIGTERM during a sweep --------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.split("/")[2]))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _workdirs(pid: int) -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), f"gputopo-allreduce-{pid}-*"))


def _start_stuck_sweep():
    """A 2-rank gloo sweep whose rank 1 sleeps (a test fault) while rank 0 waits inside the
    all-reduce: the workers have started and the sweep is under way when the test signals it."""
    env = {**os.environ, TEST_FAULTS: json.dumps({"hang_rank": 1})}
    proc = subprocess.Popen(
        [
            *GPUTOPO,
            "bench",
            "allreduce",
            "--backend",
            "gloo",
            "--ranks",
            "2",
            "-b",
            "8",
            "-e",
            "8",
            "--budget",
            "0.05",
            "--timeout",
            "120",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )  # its own group: the terminal's Ctrl-C reaches it alone
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        phases = {}
        for folder in _workdirs(proc.pid):
            for rank in (0, 1):
                try:
                    phases[rank] = json.loads(Path(folder, f"status.{rank}.json").read_text())["phase"]
                except (OSError, ValueError, KeyError):
                    pass
        if phases.get(0, "").startswith("all_reduce") and phases.get(1, "").startswith("test fault"):
            workers = _children(proc.pid)
            assert len(workers) == 2 and all(_alive(w) for w in workers)
            return proc, workers
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"the workers never reached the all-reduce: {proc.communicate()}")


def _assert_ended_cleanly(proc, workers, code: int, name: str) -> None:
    out, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert proc.returncode == code, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert lines[0].startswith("gputopo: measuring") and len(lines) == 2, err
    assert lines[1].startswith(f"gputopo: interrupted by {name}") and out == ""
    assert _workdirs(proc.pid) == []
    end = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < end:
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)], "worker processes outlived the sweep"


@needs_torch
@pytest.mark.slow
def test_ctrl_c_ends_the_sweep_with_one_line_and_status_130():
    proc, workers = _start_stuck_sweep()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the foreground group
    _assert_ended_cleanly(proc, workers, 130, "SIGINT")


@needs_torch
@pytest.mark.slow
def test_sigterm_ends_the_sweep_removing_its_folder_with_status_143():
    proc, workers = _start_stuck_sweep()
    os.kill(proc.pid, signal.SIGTERM)
    _assert_ended_cleanly(proc, workers, 143, "SIGTERM")


def test_main_leaves_the_callers_signal_handlers_as_they_were(capsys):
    """``main`` called in-process (a test, a script) restores the handlers it installs."""
    from pytest_gputopo.cli import main

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert main(["spec", "--json"]) == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
