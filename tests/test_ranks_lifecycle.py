"""A ``ranks(n)`` test's processes end with the test and with the run, whatever ends them (issue 41):
each rank's body and what it started -- a helper in its process group and a ``setsid`` one -- for
real on the CPUs (gloo), in runs ended as CI ends them (``ci_endings``) and with a rank killed outright.

Before: SIGTERM or SIGKILL to pytest killed the ranks (their parent-death signal) and left what they
started running with parent 1, and the test's ``pytest-gputopo-ranks-*`` folder; a rank killed outright
(the OOM killer) left its ``setsid`` helper. Now each rank's process keeps its body in a process below
itself (``reaper.keep_a_fork``): a child subreaper (prctl(2) ``PR_SET_CHILD_SUBREAPER``: orphans below
come to it) that dies with pytest (``PR_SET_PDEATHSIG``, SIGTERM) and ends everything below first.
"""

from __future__ import annotations

import os
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
    signal_run,
    until,
    workers,
)

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SUITE = """
import os, signal, subprocess, sys, time
from pathlib import Path

import pytest

NOTES = Path(os.environ["SUITE_NOTES"])
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
{warm_up}

@pytest.mark.ranks(2, timeout=300{pool})
def test_ranks_start_helpers_and_{name}(gputopo_rank):
    helpers = [subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER, start_new_session=True)]
    pids = [os.getppid(), os.getpid(), *(helper.pid for helper in helpers)]  # the rank's, its body's, ...
    (NOTES / "tmp").mkdir(exist_ok=True)
    (NOTES / "tmp" / str(gputopo_rank.rank)).write_text(" ".join(map(str, pids)))
    os.replace(NOTES / "tmp" / str(gputopo_rank.rank), NOTES / f"rank{{gputopo_rank.rank}}")
    {ending}
"""

ENDINGS = {
    "hang": "time.sleep(600)",
    "one_is_killed": "if gputopo_rank.rank == 1:\n        os.kill(os.getpid(), signal.SIGKILL)",
}


# A warm pool's ranks: one test passes in the pool first, and the pool lives on into the next.
WARM_UP = """
@pytest.mark.ranks(2, timeout=300, pool=True)
def test_a_warm_up(gputopo_rank):
    pass
"""


def _suite(tmp_path: Path, name: str, pool: bool = False) -> tuple[Path, Path]:
    folder, notes = tmp_path / "suite", tmp_path / "notes"
    for made in (folder, notes):
        made.mkdir(exist_ok=True)
    pooled = {"warm_up": WARM_UP, "pool": ", pool=True"} if pool else {"warm_up": "", "pool": ""}
    text = SUITE.format(name=name, ending=ENDINGS[name], **pooled)
    (folder / "test_it.py").write_text(text)
    return folder, notes


def _started(notes: Path) -> list[int]:
    """Every process the two ranks noted: each rank's, its body's and its two helpers."""
    return [int(pid) for rank in (0, 1) for pid in (notes / f"rank{rank}").read_text().split()]


def _start(folder: Path, notes: Path, temp: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-rA", *args],
        cwd=folder,
        env=os.environ | {"SUITE_NOTES": str(notes), "TMPDIR": str(temp)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # as a CI runner's step: a group of its own, signalled here alone
        preexec_fn=as_a_runner_starts_it,
    )


@pytest.mark.parametrize("pool", [False, True], ids=["own ranks", "warm pool"])
@pytest.mark.parametrize("how", ENDS)
def test_a_run_killed_leaves_no_rank_no_helper_and_no_folder_of_its_ranks(tmp_path, how, pool):
    """Both ranks hang, each with a helper in its group and a ``setsid`` one, when the run is ended as
    CI ends it: once the run has gone nothing of the ranks is alive, and no folder of the plugin's own
    is left (or a later run removes it). A warm pool's ranks, which outlive a test, alike."""
    folder, notes = _suite(tmp_path, "hang", pool)
    temp = tmp_path / "temp"
    temp.mkdir()
    run = _start(folder, notes, temp, *workers(how))
    try:
        until(lambda: (notes / "rank0").exists() and (notes / "rank1").exists(), "the ranks began")
        started = _started(notes)
        signal_run(run, *ENDS[how])
        run.wait(GUARD_S)
        until(lambda: not any(alive(pid) for pid in started), lambda: [p for p in started if alive(p)])
    finally:
        kill_group(run)
    assert folders_left_after_a_later_run(temp) == []


@pytest.mark.parametrize("pool", [False, True], ids=["own ranks", "warm pool"])
def test_a_rank_killed_outright_leaves_nothing_it_started(tmp_path, pool):
    """A rank's body killed by SIGKILL (as the OOM killer ends it) fails the test naming the signal, and
    its helpers end with it: the one in its group and the ``setsid`` one."""
    folder, notes = _suite(tmp_path, "one_is_killed", pool)
    temp = tmp_path / "temp"
    temp.mkdir()
    run = _start(folder, notes, temp, "-n", "0")
    try:
        output, _ = run.communicate(timeout=240)
    finally:
        kill_group(run)
    assert "FAILED" in output and "SIGKILL" in output, output[-3000:]
    started = _started(notes)
    until(lambda: not any(alive(pid) for pid in started), lambda: [p for p in started if alive(p)])
    assert list(temp.glob("pytest-gputopo-*")) == []
