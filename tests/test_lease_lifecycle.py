"""Every process of a lease ends with its test and with the run, and no GPU is ever shared, whatever
ends them (issue 41), on the emulated host as a user's run enters it.

Before: a leased test that started a helper (``subprocess.Popen``, ``setsid``, ``os.system("... &")``)
and died had its lease released at once, and the next test got the GPU while the helper still ran on
it; the lock descriptors were inheritable, so an ``os.system`` helper kept the GPU locked after the
run; SIGKILL or SIGTERM to pytest alone left the test's process running with parent 1, holding the
GPUs, its lock naming the dead run; SIGINT to pytest alone under ``-n`` left the lease processes behind.

Sources: prctl(2) (``PR_SET_CHILD_SUBREAPER``: orphans below a subreaper are re-parented to it;
``PR_SET_PDEATHSIG``: a signal when the parent thread ends, not sent if it has already ended, hence
the check of ``getppid``); flock(2) (a lock goes with the last descriptor of its open file);
recvmsg(2) (``MSG_CMSG_CLOEXEC`` sets close-on-exec on descriptors received with SCM_RIGHTS).
Each deadline below is a hang guard, never a timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ci_endings import (
    ENDS,
    GUARD_S,
    alive,
    as_a_runner_starts_it,
    folders_left_after_a_later_run,
    kill_group,
    left,
    signal_run,
    until,
    workers,
)
from emulated import emulated_libs, needs_compiler  # noqa: F401  (a fixture)
from lease_comparison import host_env, lease_args
from pytest_gputopo.probe.recorded import load_profile
from pytest_gputopo.runtime import gpu_locks

pytestmark = [pytest.mark.slow, needs_compiler]

HELPERS = {
    "a child": "subprocess.Popen(SLEEPER)",
    "a setsid child": "subprocess.Popen(SLEEPER, start_new_session=True)",
    "os.system &": "os.system(shlex.join(SLEEPER) + ' &')",
}

SUITE = """
import os, shlex, subprocess, sys, time
from pathlib import Path

import pytest

NOTES = Path(os.environ["SUITE_NOTES"])
# The pid written whole, then named (a helper ended between the file's creation and its write left it
# empty, and the next test read "": seen once in CI).
SLEEP = ("import os, sys, time; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
         "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(120)")
SLEEPER = [sys.executable, "-c", SLEEP, str(NOTES / "helper.pid")]


def started_helper():
    {helper}
    deadline = time.monotonic() + 30
    while not (NOTES / "helper.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    (NOTES / "test.pid").write_text(str(os.getpid()))


@pytest.mark.requires_gpus(1)
def test_starts_a_helper_and_{end}():
    started_helper()
    {ending}

"""

# In a module of its own: the GPU goes to another process of the run (a test of the same module
# after a passing one keeps the lease and its process, and the helpers with it, as in place).
NEXT = """
import os
from pathlib import Path

import pytest


@pytest.mark.requires_gpus(1)
def test_next_on_that_gpu():
    pid = int(Path(os.environ["SUITE_NOTES"], "helper.pid").read_text())
    state = Path(f"/proc/{pid}/stat")
    assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] == "Z", "the helper runs on"
"""

ENDINGS = {"dies": "os._exit(3)", "passes": "pass", "hangs": "time.sleep(120)"}


def _suite(folder: Path, helper: str, end: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes").mkdir(exist_ok=True)
    text = SUITE.format(helper=HELPERS[helper], end=end, ending=ENDINGS[end])
    (folder / "test_it.py").write_text(text)
    (folder / "test_next.py").write_text(NEXT)


def _free(locks: Path, machine: str) -> bool:
    return all(gpu_locks.holder(str(locks), g.uuid) is None for g in load_profile(machine).topology.gpus)


@pytest.mark.parametrize("helper", HELPERS)
@pytest.mark.parametrize("end", ["dies", "passes"])
def test_a_leased_tests_helpers_end_with_it_before_its_gpu_goes_to_the_next_test(emulated_libs, tmp_path, helper, end):
    """On a one-GPU host the next test waits for the same GPU: it finds the helper gone, and after
    the run nothing of it is alive, the GPU is free and no folder of the plugin's own is left."""
    env = host_env(tmp_path, emulated_libs, "single-gpu")
    folder = tmp_path / "suite"
    _suite(folder, helper, end)
    locks = tmp_path / "locks"
    temp = tmp_path / "temp"
    temp.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-rA", *lease_args(locks)],
        cwd=folder,
        env=env | {"SUITE_NOTES": str(folder / "notes"), "TMPDIR": str(temp)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert "PASSED test_next.py::test_next_on_that_gpu" in done.stdout, done.stdout[-3000:]
    helper_pid = int((folder / "notes" / "helper.pid").read_text())
    assert not alive(helper_pid) and _free(locks, "single-gpu")
    assert not list(temp.glob("pytest-gputopo-*")), left(temp)  # (the tests' tmp_path: pytest's own)


@pytest.mark.parametrize("how", ENDS)
def test_a_run_killed_leaves_no_process_no_lock_and_no_folder_of_its_leases(emulated_libs, tmp_path, how):
    """A leased test hangs (with a helper of its own) when the run is ended as CI ends it: once the
    run has gone, the test's process and its helper end, its GPUs are free, and its lease's folder is
    gone, or a later run removes it (the run's temporary folders: ``TMPDIR``)."""
    env = host_env(tmp_path, emulated_libs, "single-gpu")
    folder = tmp_path / "suite"
    _suite(folder, "a setsid child", "hangs")
    temp = tmp_path / "temp"
    temp.mkdir(exist_ok=True)
    locks = tmp_path / "locks"
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            *workers(how),
            *lease_args(locks),
        ],
        cwd=folder,
        env=env | {"SUITE_NOTES": str(folder / "notes"), "TMPDIR": str(temp)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # as a CI runner's step: a group of its own, signalled here alone
        preexec_fn=as_a_runner_starts_it,
    )
    try:
        notes = folder / "notes"
        until(lambda: (notes / "test.pid").exists() and (notes / "helper.pid").exists(), "the test began")
        test_pid, helper_pid = (int((notes / f"{n}.pid").read_text()) for n in ("test", "helper"))
        signal_run(run, *ENDS[how])
        run.wait(GUARD_S)
        until(lambda: not alive(test_pid) and not alive(helper_pid), "the test's process and its helper ended")
        until(lambda: _free(locks, "single-gpu"), "the GPU is free")
    finally:
        kill_group(run)
    # The folders of the run's own: removed by the keeper where it outlived the run, and what a
    # signal left (one at a keeper before its handler was set) by a later run.
    assert folders_left_after_a_later_run(temp) == []


def test_lock_records_name_the_process_that_holds_them(emulated_libs, tmp_path):
    """The lock of a running leased test names its keeper, alive, not the run's process."""
    env = host_env(tmp_path, emulated_libs, "single-gpu")
    folder = tmp_path / "suite"
    _suite(folder, "a child", "hangs")
    locks = tmp_path / "locks"
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", *lease_args(locks)],
        cwd=folder,
        env=env | {"SUITE_NOTES": str(folder / "notes")},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        until(lambda: (folder / "notes" / "test.pid").exists(), "the test began")
        (gpu,) = load_profile("single-gpu").topology.gpus
        holder = gpu_locks.holder(str(locks), gpu.uuid)
        assert isinstance(holder, gpu_locks.Holder) and holder.pid != run.pid and alive(holder.pid), holder
        assert holder.test.endswith("test_starts_a_helper_and_hangs"), json.dumps(holder._asdict())
    finally:
        kill_group(run)
