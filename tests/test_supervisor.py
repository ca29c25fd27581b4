"""The one supervisor of the plugin's children (``runtime.procs``) and the keeper a rank's process
becomes (``runtime.reaper.keep_a_fork``), for real on this host (issue 41).

Sources: prctl(2) (``PR_SET_PDEATHSIG``: the signal comes when the parent *thread* ends, and not at all
if it has already; ``PR_SET_CHILD_SUBREAPER``); setpgid(2), kill(2) (a process group outlives its
leader while members live, and a zombie keeps its pid and group id until reaped); waitid(2) (``WNOWAIT``
leaves the child reapable)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

import pytest

from ci_endings import alive, kill_group, until
from pytest_gputopo.runtime import lineage, procs, rank_procs

SLEEP = [sys.executable, "-S", "-c", "import time; time.sleep(120)"]

# A process that starts one child through the supervisor, says its pid, and waits to be killed.
STARTER = """
import subprocess, sys, time
from pytest_gputopo.runtime import procs

child = procs.start({argv!r}, output=subprocess.DEVNULL)
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not lineage.LINUX, reason="a parent-death signal is Linux's (prctl(2))")
def test_a_child_dies_with_the_process_that_started_it_however_that_one_ends():
    """Before: the probe's child, a copy benchmark's worker, the all-reduce ranks lived on with parent
    1 after the run was killed outright (only their deadline's SIGTERM ended them)."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER.format(argv=SLEEP)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(starter.stdout.readline())
        assert alive(child)
        starter.kill()
        starter.wait()
        until(lambda: not alive(child), f"the child {child} outlived its starter")
    finally:
        starter.kill()
        starter.wait()


def test_the_parent_death_signal_is_asked_for_only_from_the_main_thread():
    """prctl(2): it comes when the starting *thread* ends: a child started from another thread would be
    killed when that thread ends, so none is asked for there."""
    found = []
    thread = threading.Thread(target=lambda: found.append(lineage.dies_with_this_process()))
    thread.start()
    thread.join()
    assert found == [None]
    assert (lineage.dies_with_this_process() is not None) == lineage.LINUX


def test_ending_a_child_ends_what_it_left_in_its_group_after_giving_it_time():
    """``end``: patience for the child to end on its own (it does: exit 0, not a signal), then SIGTERM
    and SIGKILL to its group, which its grandchild still is in after it exited."""
    leaves = "import subprocess, sys; print(subprocess.Popen(sys.argv[1:]).pid, flush=True)"
    child = procs.start([sys.executable, "-S", "-c", leaves, *SLEEP], output=subprocess.PIPE)
    grandchild = int(child.stdout.readline())
    procs.end([child], grace_s=5, patience_s=30)
    child.stdout.close()
    assert child.returncode == 0
    until(lambda: not alive(grandchild), "the grandchild left in the group lives on")


# A rank's process, as rank_body makes it: ``keep_a_fork`` returns in the body, which ends as told.
KEPT = """
import os, signal, subprocess, sys, time
from pytest_gputopo.runtime import reaper

reaper.keep_a_fork(os.getppid(), None, 1.0)
helper = subprocess.Popen({sleep!r}, start_new_session=True)
print(os.getpid(), helper.pid, flush=True)
{end}
"""


def _kept(end: str) -> list[str]:
    return [sys.executable, "-c", KEPT.format(sleep=SLEEP, end=end)]


@pytest.mark.skipif(not lineage.LINUX, reason="a child subreaper is Linux's (prctl(2))")
@pytest.mark.parametrize(
    ("end", "status"),
    [("sys.exit(3)", 3), ("os.kill(os.getpid(), signal.SIGKILL)", -9), ("os.kill(os.getpid(), signal.SIGSEGV)", -11)],
)
def test_a_kept_body_ends_and_its_keeper_exits_as_it_did_with_nothing_left_below(end, status):
    """The keeper's exit status is its body's (a rank's report names the body's signal), and the body's
    ``setsid`` helper, out of every group's reach, is ended by the keeper."""
    keeper = subprocess.Popen(_kept(end), stdout=subprocess.PIPE, text=True, start_new_session=True)
    body, helper = (int(pid) for pid in keeper.stdout.readline().split())
    assert keeper.wait(60) == status
    keeper.stdout.close()
    assert body != keeper.pid and not alive(body) and not alive(helper)


DEAF = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(120)"
# The run: starts a rank's process (the keeper), passes on what it says, and waits to be killed.
RUN = "import subprocess, sys, time\nsubprocess.Popen(sys.argv[1:])\ntime.sleep(120)"


@pytest.mark.skipif(not lineage.LINUX, reason="a parent-death signal is Linux's (prctl(2))")
def test_a_keeper_whose_parent_is_killed_ends_its_body_and_everything_below():
    """pytest killed outright: the rank's process (the keeper) gets SIGTERM and ends its body (even one
    deaf to SIGTERM and SIGINT, as a rank inside CUDA is) and the body's helpers."""
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, *_kept(DEAF)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        body, helper = (int(pid) for pid in run.stdout.readline().split())
        run.kill()
        run.wait()
        until(lambda: not alive(body) and not alive(helper), "the body or its helper outlived the run")
    finally:
        kill_group(run)
        run.stdout.close()


def hold_until_told(rank: int, fd: int, folder: str) -> None:
    """A rank that holds ``fd`` (unpickled from ``rank_procs.Inherited``) until the test tells it to end."""
    assert not os.get_inheritable(fd)  # what the rank executes does not hold the GPU
    with open(os.path.join(folder, "holding"), "w") as note:
        note.write(str(os.fstat(fd).st_ino))
    while not os.path.exists(os.path.join(folder, "end")):
        time.sleep(0.02)


@pytest.mark.slow  # (torch's spawn: seconds)
def test_a_ranks_lease_lock_is_held_by_the_ranks_too_until_the_last_has_gone(tmp_path):
    """Issue 41: a lease's locks were held by the pytest process alone: killed, its GPUs were free while
    its ranks (SIGKILLed by their keepers, or stuck inside CUDA) still ran on them. Each rank now holds
    the same open files (``rank_procs.Inherited``: passed by torch's spawn at their own numbers)."""
    torch_mp = pytest.importorskip("torch.multiprocessing")
    lock = tmp_path / "gpu.lock"
    lock.write_text("")
    fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    context = torch_mp.start_processes(
        hold_until_told, args=(rank_procs.Inherited(fd), str(tmp_path)), nprocs=1, join=False, start_method="spawn"
    )
    try:
        until(lambda: (tmp_path / "holding").exists(), "the rank began")
        assert int((tmp_path / "holding").read_text()) == os.fstat(fd).st_ino
        os.close(fd)  # the run's own descriptor gone (the run killed): the rank's holds the lock
        other = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (tmp_path / "end").write_text("")
        context.join(60)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the rank gone: free
        os.close(other)
    finally:
        (tmp_path / "end").write_text("")
        for process in context.processes:
            process.join(60)
